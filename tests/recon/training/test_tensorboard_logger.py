"""`--logger tensorboard` (recon.training.tensorboard): event files under OUT/tensorboard/, read back with
TensorBoard's own EventAccumulator."""

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorboard", reason="tensorboard is a dependency of splatforge: pip install -e .")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from recon.outputs import files as rf  # noqa: E402
from recon.cli import main  # noqa: E402
from recon.training.tensorboard import TensorBoardLogger  # noqa: E402
from recon.training.trainer import TrainConfig, Trainer  # noqa: E402
from recon.training.train_run import train_model

STEPS = 20


def read_events(out: Path) -> EventAccumulator:
    acc = EventAccumulator(str(out / rf.TENSORBOARD_DIR), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    return acc


def scalar_steps(acc: EventAccumulator, tag: str) -> list[int]:
    return [e.step for e in acc.Scalars(tag)]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tb")
    main(["train", "--data", "procedural", "--out", str(out), "--steps", str(STEPS), "--data-factor", "4",
          "--save-every", "10", "--eval-every", "10", "--no-progress",
          "--logger", "tensorboard", "--logger-every", "5"])
    return out


def test_training_scalars_every_n_steps(cli_run):
    acc = read_events(cli_run)
    history = rf.read_history(cli_run)
    for tag in ("train/loss", "train/psnr", "train/num_gaussians", "train/ms_per_step", "train/sh_degree"):
        assert scalar_steps(acc, tag) == [5, 10, 15, 20], tag
    losses = [e.value for e in acc.Scalars("train/loss")]
    expected = [np.mean(history.loss[i:i + 5]) for i in range(0, STEPS, 5)]
    np.testing.assert_allclose(losses, expected, rtol=1e-6)  # the mean since the previous write
    assert acc.Scalars("train/num_gaussians")[-1].value == history.num_gaussians[-1]
    ms = [e.value for e in acc.Scalars("train/ms_per_step")]
    np.testing.assert_allclose(ms[-1], 1000 * np.mean(history.step_seconds[15:20]), rtol=1e-5)


def test_test_metrics_and_renders_at_evaluations(cli_run):
    acc = read_events(cli_run)
    metrics = json.loads((cli_run / rf.METRICS_FILE).read_text())
    assert scalar_steps(acc, "test/psnr") == [10, 20]  # the final evaluation repeats step 20: written once
    assert acc.Scalars("test/psnr")[-1].value == pytest.approx(metrics["test"]["psnr"], rel=1e-6)
    assert scalar_steps(acc, "test/ssim") == [10, 20]
    images = sorted(t for t in acc.Tags()["images"])
    assert images == ["test_renders/000", "test_renders/001", "test_renders/002"]
    shots = acc.Images("test_renders/000")
    assert [s.step for s in shots] == [10, 20]
    assert shots[0].width == 3 * shots[0].height  # ground truth | render | error


def test_no_event_files_without_the_flag(tmp_path):
    train_model(TrainConfig(data=Path("procedural"), out=tmp_path, steps=2, data_factor=4, save_every=0,
                            progress=False), log=lambda *a: None)
    assert not (tmp_path / rf.TENSORBOARD_DIR).exists()


def test_resume_hides_what_a_crashed_run_logged_past_its_checkpoint(tmp_path, monkeypatch):
    cfg = TrainConfig(data=Path("procedural"), out=tmp_path, steps=STEPS, data_factor=4, save_every=10,
                      progress=False)
    original = Trainer.train_step

    def crash_at_13(self, step):
        if step == 13:
            raise RuntimeError("crash")
        return original(self, step)

    monkeypatch.setattr(Trainer, "train_step", crash_at_13)
    with pytest.raises(RuntimeError):
        train_model(cfg, log=lambda *a: None, hooks=[TensorBoardLogger(tmp_path / rf.TENSORBOARD_DIR, every=5)])
    assert scalar_steps(read_events(tmp_path), "train/loss") == [5, 10, 13]  # the last, at the crash
    monkeypatch.setattr(Trainer, "train_step", original)
    train_model(cfg, log=lambda *a: None, hooks=[TensorBoardLogger(tmp_path / rf.TENSORBOARD_DIR, every=5)])
    assert scalar_steps(read_events(tmp_path), "train/loss") == [5, 10, 15, 20]


def test_bad_logger_every_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", "procedural", "--out", str(tmp_path), "--steps", "2", "--no-progress",
              "--logger", "tensorboard", "--logger-every", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == "splatforge train: error: --logger-every must be >= 1, got 0"
