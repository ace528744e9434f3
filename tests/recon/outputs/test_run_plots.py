"""Figures of a run's history (recon.outputs.plots): panels by the data a run has, smoothing, saving."""

import math

import numpy as np
import pytest

from recon.outputs.history import RunHistory
from recon.outputs.plots import (draw_loss, plot_compare, plot_run, rolling_median, run_panels, save_figure,
                             smooth)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fake_history(steps: int = 300, eval_every: int = 100, scale: float = 1.0) -> RunHistory:
    """A plausible run: falling loss, growing Gaussians, a slow first step (kernel compilation)."""
    h = RunHistory()
    rng = np.random.default_rng(0)
    for i in range(1, steps + 1):
        h.record_step(0.2 * scale * math.exp(-i / 100) + 0.02 + 0.01 * rng.random(), 1000 + 3 * i,
                      2.0 if i == 1 else 0.03 + 0.005 * rng.random())
        if eval_every and i % eval_every == 0:
            h.record_eval(i, 20.0 + i / 50, 0.8)
    return h


def titles_and_labels(fig) -> list[tuple[str, str, str]]:
    return [(ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes]


def test_run_figure_has_four_panels_against_step(tmp_path):
    fig = plot_run(fake_history())
    assert titles_and_labels(fig) == [
        ("training loss", "step", "loss (log scale)"),
        ("test PSNR", "step", "PSNR (dB)"),
        ("Gaussians", "step", "count"),
        ("time per step", "step", "ms per step (log scale)"),
    ]
    loss_ax, psnr_ax, count_ax, time_ax = fig.axes
    assert loss_ax.get_yscale() == "log" and time_ax.get_yscale() == "log"
    assert list(psnr_ax.lines[0].get_xdata()) == [100, 200, 300]
    assert count_ax.lines[0].get_ydata()[-1] == 1900
    assert "300 steps" in fig.get_suptitle() and "26.00 dB" in fig.get_suptitle()
    path = save_figure(fig, tmp_path / "loss.png")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_psnr_panel_needs_two_evaluations():
    one_eval = fake_history(eval_every=0)
    one_eval.record_eval(300, 25.0, 0.9)  # only the final evaluation (eval_every = 0)
    assert [ax.get_title() for ax in plot_run(one_eval).axes] == ["training loss", "Gaussians", "time per step"]


def test_history_from_before_histories_plots_its_losses_only():
    old = RunHistory.from_losses([0.3, 0.2, 0.1])
    assert run_panels(old) == [draw_loss]
    fig = plot_run(old)
    assert len(fig.axes) == 1 and list(fig.axes[0].lines[-1].get_xdata()) == [1, 2, 3]


def test_empty_history_still_makes_a_figure(tmp_path):
    fig = plot_run(RunHistory())
    assert len(fig.axes) == 1 and "no steps recorded" in [t.get_text() for t in fig.axes[0].texts]
    save_figure(fig, tmp_path / "empty.png")


def test_compare_figure_overlays_runs_with_legend():
    fig = plot_compare({"runs/a": fake_history(), "runs/b": fake_history(200, scale=1.5),
                        "old": RunHistory.from_losses([0.3, 0.2])})
    assert [ax.get_title() for ax in fig.axes] == ["training loss", "test PSNR", "Gaussians", "time per step"]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["runs/a", "runs/b", "old"]
    assert len(fig.axes[0].lines) == 3  # moving averages only (no raw lines) in a comparison
    colors = [line.get_color() for line in fig.axes[0].lines]
    assert len(set(colors)) == 3


def test_save_figure_by_suffix(tmp_path):
    fig = plot_run(fake_history(50))
    assert save_figure(fig, tmp_path / "a.svg").read_text().lstrip().startswith("<?xml")
    with pytest.raises(ValueError, match=r"c\.jpg.*\.png"):
        save_figure(fig, tmp_path / "c.jpg")


def test_smooth_skips_missing_values():
    out = smooth([1.0, math.nan, 3.0, 5.0], 2)
    assert out[0] == 1.0 and out[1] == 1.0 and out[2] == 3.0 and out[3] == 4.0


def test_rolling_median_ignores_one_slow_step():
    values = [2000.0] + [30.0] * 99
    idx, med = rolling_median(values, 10, points=100)
    assert list(idx) == list(range(100))
    assert med[0] == 2000.0 and np.all(med[2:] == 30.0)  # a mean would stay above 200 for 10 steps


def test_log_axes_are_labelled_plainly():
    fig = plot_run(fake_history())
    fig.canvas.draw()
    labels = {t.get_text() for ax in (fig.axes[0], fig.axes[3])
              for t in ax.yaxis.get_ticklabels(which="both") if t.get_text()}
    assert {"0.1", "30"} <= labels and not any("e-" in t or "10^" in t for t in labels), labels


def test_run_figure_names_what_the_model_counts():
    """A NeRF/NeuS run counts occupied grid cells: the count panel and the title say so."""
    fig = plot_run(fake_history(), count_name="occupied grid cells")
    assert [ax.get_title() for ax in fig.axes][2] == "occupied grid cells"
    assert "1,900 occupied grid cells" in fig.get_suptitle()
