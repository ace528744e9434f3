"""End-to-end training on the procedural scene: PSNR, outputs, metrics schema, config reload, resume,
evaluation and rendering commands.

Measured (2 shared CPU cores): 300 steps at 64 x 64 (data_factor 2) reach test PSNR 27.97 dB in about
13 s; the test asserts MIN_PSNR = 25 dB (3 dB margin) and < 60 s.
"""

import json
import time
from pathlib import Path

import pytest

from recon.outputs import files as rf
from recon.export import read_splats
from recon.training.trainer import ConfigMismatchError, TrainConfig, Trainer
from recon.training.train_run import train_model

MIN_PSNR = 25.0
STEPS = 300


def small_cfg(out: Path, **kw) -> TrainConfig:
    base = dict(data=Path("procedural"), out=out, steps=STEPS, data_factor=2, save_every=150, progress=False)
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    # warm-up: compile the Numba kernels (cached on disk afterwards) so the timing below is training only
    train_model(small_cfg(tmp_path_factory.mktemp("warmup"), steps=2, save_every=0), log=lambda *a: None)
    out = tmp_path_factory.mktemp("run")
    cfg = small_cfg(out)
    t0 = time.perf_counter()
    metrics = train_model(cfg, log=lambda *a: None)
    return cfg, metrics, time.perf_counter() - t0


def test_reaches_psnr_quickly(trained):
    cfg, metrics, seconds = trained
    assert metrics["test"]["psnr"] > MIN_PSNR, metrics
    assert seconds < 60.0


def test_outputs_and_metrics_schema(trained):
    cfg, metrics, _ = trained
    out = Path(cfg.out)
    saved = json.loads((out / "metrics.json").read_text())
    assert saved == json.loads(json.dumps(metrics))
    assert set(saved) == {"test", "steps", "num_gaussians", "train_seconds", "seconds_per_step"}
    assert set(saved["test"]) == {"psnr", "ssim", "lpips", "num_views"}
    assert saved["test"]["lpips"] is None and saved["test"]["num_views"] == 8
    assert 0 < saved["test"]["ssim"] <= 1 and saved["steps"] == STEPS
    assert saved["seconds_per_step"] > 0 and saved["train_seconds"] > 0
    splats = read_splats(out / "splats.ply")
    assert len(splats) == saved["num_gaussians"] and splats.sh_degree == 3
    assert (out / "loss.png").stat().st_size > 0
    assert len(list((out / "renders").glob("test_*.png"))) == 8
    assert [s for s, _ in rf.list_checkpoints(out)] == [150, 300]
    assert not list(out.rglob(".*.tmp"))  # no leftovers of atomic writes


def test_config_yaml_reload(trained):
    cfg, _, _ = trained
    loaded = rf.config_from_dict(TrainConfig, rf.read_config_dict(Path(cfg.out) / "config.yaml"))
    assert loaded == cfg


def test_resume_continues_from_checkpoint(tmp_path):
    logs = []
    first = train_model(small_cfg(tmp_path, steps=100, save_every=50), log=logs.append)
    assert first["steps"] == 100
    losses_first = rf.load_latest_checkpoint(tmp_path)[1]["history"]["loss"]
    second = train_model(small_cfg(tmp_path, steps=160, save_every=50), log=logs.append)
    assert any("from step 100" in str(m) for m in logs), logs
    ckpt_step, payload = rf.load_latest_checkpoint(tmp_path)
    assert ckpt_step == 160 and len(payload["history"]["loss"]) == 160
    assert payload["history"]["loss"][:100] == losses_first  # continued, not restarted
    assert second["steps"] == 160 and second["test"]["psnr"] > 18.0


def test_resume_after_interrupt(tmp_path, monkeypatch):
    original = Trainer.train_step

    def interrupted(self, step):
        if step == 70:
            raise KeyboardInterrupt
        return original(self, step)

    monkeypatch.setattr(Trainer, "train_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_model(small_cfg(tmp_path, steps=120, save_every=50), log=lambda *a: None)
    assert rf.list_checkpoints(tmp_path)[-1][0] == 70
    assert not (tmp_path / "metrics.json").exists()  # an interrupted run does not look complete
    monkeypatch.setattr(Trainer, "train_step", original)
    logs = []
    metrics = train_model(small_cfg(tmp_path, steps=120, save_every=50), log=logs.append)
    assert any("from step 70" in str(m) for m in logs)
    assert metrics["steps"] == 120 and len(rf.load_latest_checkpoint(tmp_path)[1]["history"]["loss"]) == 120


def test_resume_refuses_other_config(trained):
    cfg, _, _ = trained
    with pytest.raises(ConfigMismatchError, match="strategy"):
        train_model(small_cfg(Path(cfg.out), strategy="mcmc"), log=lambda *a: None)


def test_eval_and_render_commands(trained, tmp_path, capsys):
    from recon.commands.evaluate import evaluate
    from recon.commands.render import render_video

    cfg, metrics, _ = trained
    evaluate(splats=Path(cfg.out) / "splats.ply", data=Path("procedural"), data_factor=2, out=tmp_path / "ev")
    saved = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert abs(saved["test"]["psnr"] - metrics["test"]["psnr"]) < 0.05  # PLY round trip, same views
    assert {"test", "num_gaussians", "steps", "train_seconds", "seconds_per_step"} <= set(saved)
    assert saved["steps"] is None  # a bare splat file has no training facts
    evaluate(run=Path(cfg.out), out=tmp_path / "ev_run")
    from_run = json.loads((tmp_path / "ev_run" / "metrics.json").read_text())
    assert from_run["steps"] == STEPS and from_run["train_seconds"] == metrics["train_seconds"]
    assert abs(from_run["test"]["psnr"] - metrics["test"]["psnr"]) < 0.05
    assert "PSNR" in capsys.readouterr().out
    video = render_video(Path(cfg.out), "spiral", tmp_path / "v.mp4", frames=6, progress=False)
    import imageio.v2 as imageio
    import imageio_ffmpeg

    assert imageio_ffmpeg.count_frames_and_secs(str(video))[0] == 6
    with imageio.get_reader(video) as reader:
        assert reader.get_data(0).shape == (64, 64, 3)


def test_mcmc_short_run(tmp_path):
    metrics = train_model(small_cfg(tmp_path, steps=120, strategy="mcmc", max_gaussians=3000, save_every=0),
                          log=lambda *a: None)
    assert metrics["num_gaussians"] <= 3000 and metrics["test"]["psnr"] > 15.0


def test_cli_run_killed_with_sigkill_resumes(tmp_path, capsys):
    """A `splatforge train` process killed hard (SIGKILL: no handler runs) leaves only complete
    checkpoints and no splats.ply / metrics.json; the same command resumes from the last checkpoint."""
    import os
    import signal
    import subprocess
    import sys

    from recon.cli import main

    out = tmp_path / "run"
    args = ["train", "--data", "procedural", "--data-factor", "2", "--steps", "400", "--save-every", "50",
            "--out", str(out), "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "recon.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=os.environ.copy())
    deadline = time.time() + 120
    try:
        while time.time() < deadline and proc.poll() is None:
            if rf.list_checkpoints(out) and rf.list_checkpoints(out)[-1][0] >= 100:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"training ended before it could be killed: {proc.stderr.read()!r}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_at = rf.list_checkpoints(out)[-1][0]
    assert 100 <= killed_at < 400
    assert not (out / "splats.ply").exists() and not (out / "metrics.json").exists()
    for _, path in rf.list_checkpoints(out):  # every checkpoint left behind is complete and loadable
        assert rf.load_latest_checkpoint(out) is not None and path.stat().st_size > 0
    main(args)
    printed = capsys.readouterr().out
    assert f"from step {killed_at}" in printed, printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 400
    assert len(rf.load_latest_checkpoint(out)[1]["history"]["loss"]) == 400


def test_export_report_psnr_before_and_after_real_path(trained, tmp_path):
    """`splatforge export RUN --max-splats` evaluates the run's test views itself (no stub): PSNR before
    equals the run's own metrics, and keeping a third of the splats costs PSNR."""
    from recon.commands.export import ExportConfig, run_export

    cfg, metrics, _ = trained
    keep = max(1, metrics["num_gaussians"] // 3)
    report = run_export(ExportConfig(input=Path(cfg.out), out=tmp_path / "small.spz", max_splats=keep, quiet=True))
    assert report.psnr_before is not None and report.psnr_after is not None
    assert abs(report.psnr_before - metrics["test"]["psnr"]) < 0.05
    assert report.psnr_after < report.psnr_before - 0.5
