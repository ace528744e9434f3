"""Figures of training runs with matplotlib: ``OUT/loss.png`` (:func:`plot_run`) and the overlaid curves
of ``splatforge compare`` (:func:`plot_compare`).

Figures are made with matplotlib's object-oriented API on the Agg canvas (no pyplot: no global figure
state, no GUI backend, safe in a training process). Each panel is a ``draw_*`` function on one Axes,
all against step: training loss (log scale; raw in a light line, a moving average over 1/50 of the run on
top), test PSNR at the evaluations, Gaussian count, and milliseconds per optimisation step (log scale, a
rolling median on top: the first step of a process also compiles kernels). Panels whose data a run does
not have are left out (test PSNR needs two evaluations, i.e. ``eval_every``; a checkpoint from before
histories has only losses).
"""

from __future__ import annotations

import io
import math
from functools import partial
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, LogFormatter, MaxNLocator

from recon.core.atomic import atomic_write_bytes
from recon.core.errors import UsageError
from recon.outputs.history import RunHistory

SMOOTHING_PARTS = 50  # moving-average window = run length / this
PANEL_SIZE = (5.6, 3.2)  # inches per panel (width, height)
DPI = 110
RAW_ALPHA = 0.25  # raw per-step values under their moving average
COLUMNS = 2
MEDIAN_POINTS = 400  # points of a rolling-median line (a line across a panel needs no more)


# ------------------------------------------------------------------------------------------ data


def as_float_array(values: Sequence) -> np.ndarray:
    """float64 [N]; None and non-finite values become NaN (gaps in a line)."""
    return np.array([v if v is not None and math.isfinite(v) else math.nan for v in values], dtype=np.float64)


def smooth(values: Sequence[float], window: int) -> np.ndarray:
    """Trailing moving average (same length) that skips NaN; NaN where the window holds no value."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0 or window <= 1:
        return v
    ok = np.isfinite(v)
    sums = np.cumsum(np.insert(np.where(ok, v, 0.0), 0, 0.0))
    counts = np.cumsum(np.insert(ok.astype(np.int64), 0, 0))
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(0, idx - window)
    n = counts[idx] - counts[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (sums[idx] - sums[lo]) / np.maximum(n, 1), np.nan)


def rolling_median(values: Sequence[float], window: int, points: int = MEDIAN_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(indices, medians): the median of the ``window`` values up to each of about ``points`` evenly spaced
    indices (NaN skipped). Unlike a mean, one slow step (the first of a process compiles kernels) does not
    lift a whole window."""
    v = np.asarray(values, dtype=np.float64)
    idx = np.unique(np.linspace(0, len(v) - 1, min(points, len(v))).round().astype(np.int64))
    med = np.full(len(idx), np.nan)
    for j, i in enumerate(idx):
        part = v[max(0, i + 1 - window): i + 1]
        part = part[np.isfinite(part)]
        if len(part):
            med[j] = np.median(part)
    return idx, med


def smoothing_window(num_steps: int) -> int:
    return max(1, num_steps // SMOOTHING_PARTS)


def has_values(values: Sequence) -> bool:
    return bool(np.isfinite(as_float_array(values)).any())


# ------------------------------------------------------------------------------------------ panels


def _noisy_curve(ax, steps: np.ndarray, values: np.ndarray, label: str | None, color: str, raw: bool) -> None:
    """Raw values as a light line (when ``raw``) under their moving average."""
    if raw:
        ax.plot(steps, values, color=color, alpha=RAW_ALPHA, linewidth=0.8)
    ax.plot(steps, smooth(values, smoothing_window(len(values))), color=color, label=label, linewidth=1.6)


class PlainLogFormatter(LogFormatter):
    """LogFormatter's choice of which ticks to label, written plainly: 0.2, 0.03, 30, 1,000."""

    def __call__(self, x, pos=None) -> str:
        if not super().__call__(x, pos):
            return ""
        return f"{x:,.0f}" if x >= 1 else f"{x:.2g}"


def _plain_log_axis(ax) -> None:
    """Log y axis with plain labels; minor ticks labelled too when under about two decades show."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(PlainLogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def draw_loss(ax, history: RunHistory, label: str | None = None, color: str | None = None, raw: bool = True) -> None:
    """Training loss per step (log y)."""
    values = as_float_array(history.loss)
    values[values <= 0] = math.nan  # log scale
    _noisy_curve(ax, np.asarray(history.steps), values, label, color or "C0", raw)
    _plain_log_axis(ax)
    ax.set_title("training loss")
    ax.set_ylabel("loss (log scale)")


def draw_test_psnr(ax, history: RunHistory, label: str | None = None, color: str | None = None) -> None:
    """Test PSNR at each evaluation (dots joined by a line)."""
    ax.plot(history.eval_step, as_float_array(history.eval_psnr), marker="o", markersize=3.5, color=color or "C2",
            label=label, linewidth=1.4)
    ax.set_title("test PSNR")
    ax.set_ylabel("PSNR (dB)")


def draw_gaussians(ax, history: RunHistory, label: str | None = None, color: str | None = None,
                   count_name: str = "Gaussians") -> None:
    """The model's count after each step (``count_name``: what it counts; a NeRF/NeuS run's occupied grid cells)."""
    ax.plot(history.steps, as_float_array(history.num_gaussians), color=color or "C3", label=label, linewidth=1.4)
    ax.yaxis.set_major_formatter(EngFormatter(sep=""))  # 120k, 1.2M
    ax.set_title(count_name)
    ax.set_ylabel("count")


def draw_step_time(ax, history: RunHistory, label: str | None = None, color: str | None = None,
                   raw: bool = True) -> None:
    """Milliseconds per optimisation step (log y): raw values light, a rolling median on top."""
    color = color or "C1"
    steps = np.asarray(history.steps)
    values = as_float_array(history.step_seconds) * 1000.0
    values[values <= 0] = math.nan
    if raw:
        ax.plot(steps, values, color=color, alpha=RAW_ALPHA, linewidth=0.8)
    idx, med = rolling_median(values, smoothing_window(len(values)))
    ax.plot(steps[idx] if len(idx) else idx, med, color=color, label=label, linewidth=1.6)
    _plain_log_axis(ax)
    ax.set_title("time per step")
    ax.set_ylabel("ms per step (log scale)")


# ------------------------------------------------------------------------------------------ figures


def _panel_figure(count: int) -> tuple[Figure, list]:
    """A Figure on the Agg canvas with ``count`` axes in rows of :data:`COLUMNS` (no empty axes)."""
    cols = min(COLUMNS, max(1, count))
    rows = max(1, math.ceil(count / cols))
    fig = Figure(figsize=(PANEL_SIZE[0] * cols, PANEL_SIZE[1] * rows + 0.5), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(rows, cols, i + 1) for i in range(max(1, count))]
    for ax in axes:
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, which="major", alpha=0.3)
    return fig, axes


def run_panels(history: RunHistory, count_name: str = "Gaussians") -> list[Callable]:
    """The ``draw_*`` functions that have data in ``history`` (the loss always)."""
    panels: list[Callable] = [draw_loss]
    if len([p for p in history.eval_psnr if p is not None]) >= 2:
        panels.append(draw_test_psnr)
    if has_values(history.num_gaussians):
        panels.append(partial(draw_gaussians, count_name=count_name))
    if has_values(history.step_seconds):
        panels.append(draw_step_time)
    return panels


def plot_run(history: RunHistory, title: str | None = None, count_name: str = "Gaussians") -> Figure:
    """One run's curves (``OUT/loss.png``): loss, test PSNR (with two or more evaluations), the model's count
    (``count_name``: the model class's ``COUNT_NAME``, Gaussians by default), time per step, against step.
    Returns the Figure (save it with :func:`save_figure`)."""
    panels = run_panels(history, count_name)
    fig, axes = _panel_figure(len(panels))
    for ax, draw in zip(axes, panels):
        draw(ax, history)
    if history.num_steps == 0:
        axes[0].text(0.5, 0.5, "no steps recorded", ha="center", va="center", transform=axes[0].transAxes)
    fig.suptitle(title or _run_summary(history, count_name))
    return fig


def _run_summary(history: RunHistory, count_name: str = "Gaussians") -> str:
    text = f"{history.num_steps:,} steps"
    psnrs = [(s, p) for s, p in zip(history.eval_step, history.eval_psnr) if p is not None]
    if psnrs:
        text += f", test PSNR {psnrs[-1][1]:.2f} dB at step {psnrs[-1][0]:,}"
    n = [c for c in history.num_gaussians if c is not None]
    if n:
        text += f", {n[-1]:,} {count_name}"
    return text


def plot_compare(histories: Mapping[str, RunHistory]) -> Figure:
    """Overlaid curves of several runs (``splatforge compare --out``): moving-average loss, test PSNR (any
    evaluation), Gaussian count and time per step, one colour per run, named in the legend."""
    runs = list(histories.items())
    panels: list[Callable] = [partial(draw_loss, raw=False)]
    if any(any(p is not None for p in h.eval_psnr) for _, h in runs):
        panels.append(draw_test_psnr)
    if any(has_values(h.num_gaussians) for _, h in runs):
        panels.append(draw_gaussians)
    if any(has_values(h.step_seconds) for _, h in runs):
        panels.append(partial(draw_step_time, raw=False))
    fig, axes = _panel_figure(len(panels))
    for i, (name, history) in enumerate(runs):
        for ax, draw in zip(axes, panels):
            draw(ax, history, label=name, color=f"C{i % 10}")
    axes[0].legend(fontsize="small")
    fig.suptitle(f"{len(runs)} runs (curves smoothed over 1/{SMOOTHING_PARTS} of each run)")
    return fig


FIGURE_FORMATS = ("png", "svg", "pdf")  # by the file's suffix


def save_figure(fig: Figure, path: Path) -> Path:
    """Write ``fig`` atomically (temporary file + rename) as PNG, SVG or PDF by ``path``'s suffix."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FIGURE_FORMATS:
        raise UsageError(f"{path}: a figure is saved as {', '.join('.' + f for f in FIGURE_FORMATS)}; "
                         f"give a file name with one of these suffixes")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=DPI)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buf.getvalue(), force=True)
    return path
