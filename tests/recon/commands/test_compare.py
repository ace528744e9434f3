"""`splatforge compare RUN_A RUN_B ...` (recon.commands.compare): metrics table, config differences,
overlaid curves; runs from before history.json; folders that are not runs."""

import json
import shutil
from pathlib import Path

import pytest

from recon.outputs import files as rf
from recon.cli import main
from recon.commands.compare import config_differences, metric_values, read_run
from recon.training.trainer import TrainConfig
from recon.training.train_run import train_model

STEPS = 10


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny runs that differ in seed and strategy, and an old-style copy of the first: no history.json,
    a config.yaml without the fields added since (logger, logger_every)."""
    root = tmp_path_factory.mktemp("compare")
    for name, kw in (("a", {}), ("b", dict(seed=1, strategy="mcmc"))):
        train_model(TrainConfig(data=Path("procedural"), out=root / name, steps=STEPS, data_factor=4,
                                save_every=0, eval_every=5, progress=False, **kw), log=lambda *a: None)
    old = root / "old"
    shutil.copytree(root / "a", old)
    (old / rf.HISTORY_FILE).unlink()
    config = rf.read_config_dict(old / rf.CONFIG_FILE)
    del config["logger"], config["logger_every"]
    (old / rf.CONFIG_FILE).write_text("\n".join(f"{k}: {json.dumps(v)}" for k, v in config.items()) + "\n")
    return root


def run_cli(args, capsys, monkeypatch, cwd):
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("COLUMNS", "200")  # rich's width when not on a terminal
    main(["compare", *args])
    return capsys.readouterr().out


def psnr_of(run: Path) -> str:
    return f"{json.loads((run / rf.METRICS_FILE).read_text())['test']['psnr']:.2f}"


def test_table_of_two_runs_and_curves(runs, capsys, monkeypatch):
    out = run_cli(["a", "b", "--out", "compare.png"], capsys, monkeypatch, runs)
    lines = out.splitlines()
    row_a = next(line for line in lines if line.strip("│ ").startswith("a "))
    row_b = next(line for line in lines if line.strip("│ ").startswith("b "))
    assert psnr_of(runs / "a") in row_a and psnr_of(runs / "b") in row_b
    assert f"{STEPS}" in row_a.split() or f"{STEPS}" in row_a  # steps column
    assert "config differences" in out
    strategy_row = next(line for line in lines if "strategy" in line)
    assert "adc" in strategy_row and "mcmc" in strategy_row
    assert next(line for line in lines if " seed " in line)
    assert not any(line.strip("│ ").startswith("out ") for line in lines)  # out always differs: left out
    assert (runs / "compare.png").read_bytes()[:4] == b"\x89PNG"
    assert "curves written to compare.png" in out


def test_metric_values_come_from_metrics_json(runs):
    records = [read_run(runs / "a"), read_run(runs / "b")]
    metrics = json.loads((runs / "a" / rf.METRICS_FILE).read_text())
    psnr, ssim, lpips, gaussians, steps, seconds = metric_values(records)[0]
    assert (psnr, ssim, lpips) == (metrics["test"]["psnr"], metrics["test"]["ssim"], metrics["test"]["lpips"])
    assert (gaussians, steps, seconds) == (metrics["num_gaussians"], STEPS, metrics["train_seconds"])
    assert [k for k, _ in config_differences(records)] == ["strategy", "seed"]


def test_old_style_run_without_history(runs, capsys, monkeypatch):
    out = run_cli(["a", "old", "--out", "with_old.png"], capsys, monkeypatch, runs)
    row_old = next(line for line in out.splitlines() if line.strip("│ ").startswith("old "))
    assert psnr_of(runs / "old") in row_old
    assert "old: no history.json" in out and "not in the curves" in out
    logger_row = next(line for line in out.splitlines() if line.strip("│ ").startswith("logger "))
    assert "none" in logger_row and " - " in logger_row  # a field the old config.yaml lacks
    assert (runs / "with_old.png").is_file()
    assert read_run(runs / "old").history is None


def test_only_runs_without_history_cannot_draw_curves(runs, capsys, monkeypatch):
    with pytest.raises(SystemExit) as exc:
        run_cli(["old", "--out", "none.png"], capsys, monkeypatch, runs)
    assert exc.value.code == 2
    assert "--out none.png: none of the runs has a history.json" in capsys.readouterr().err


@pytest.mark.parametrize("make, message", [
    (lambda root: root / "missing", "missing: no such folder"),
    (lambda root: (root / "a" / "renders"), "renders: not a training run (no config.yaml)"),
])
def test_a_folder_that_is_not_a_run_is_a_one_line_error(runs, capsys, monkeypatch, make, message):
    folder = make(runs)
    with pytest.raises(SystemExit) as exc:
        run_cli(["a", str(folder)], capsys, monkeypatch, runs)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("splatforge compare: error: ") and message in err and len(err.splitlines()) == 1


def test_bad_out_suffix(runs, capsys, monkeypatch):
    with pytest.raises(SystemExit):
        run_cli(["a", "b", "--out", "curves.jpg"], capsys, monkeypatch, runs)
    assert "--out curves.jpg: give a .png, .svg or .pdf file name" in capsys.readouterr().err


def test_damaged_metrics_json_is_named(runs, tmp_path, capsys, monkeypatch):
    shutil.copytree(runs / "a", tmp_path / "broken")
    (tmp_path / "broken" / rf.METRICS_FILE).write_text("{")
    with pytest.raises(SystemExit):
        run_cli(["broken"], capsys, monkeypatch, tmp_path)
    assert "broken/metrics.json: not valid JSON" in capsys.readouterr().err
