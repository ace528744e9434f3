"""The per-step history of a run (recon.outputs.history): recorded by the trainer, kept whole across resume,
written as OUT/history.json and drawn as OUT/loss.png."""

import json
from pathlib import Path

import pytest
import torch

from recon.outputs import files as rf
from recon.outputs.history import RunHistory
from recon.training.trainer import TrainConfig, Trainer
from recon.training.train_run import train_model

STEPS = 20


def tiny_cfg(out: Path, **kw) -> TrainConfig:
    base = dict(data=Path("procedural"), out=out, steps=STEPS, data_factor=4, save_every=10, eval_every=5,
                progress=False)
    base.update(kw)
    return TrainConfig(**base)


def quiet(*_):
    pass


# ------------------------------------------------------------------------------------------ the type


def test_history_round_trips_through_plain_dicts_and_json(tmp_path):
    h = RunHistory()
    h.record_step(0.5, 100, 0.0123456789)
    h.record_step(0.25, 120, 0.02)
    h.record_eval(2, 21.5, 0.8)
    assert h.step_seconds == [0.012346, 0.02] and h.steps == [1, 2]
    assert RunHistory.from_dict(json.loads(json.dumps(h.to_dict()))) == h
    rf.write_history(tmp_path, h)
    assert rf.read_history(tmp_path) == h
    assert len((tmp_path / rf.HISTORY_FILE).read_text().splitlines()) == 10  # one line per list


def test_step_psnr_is_stored_finite_and_old_histories_load():
    h = RunHistory()
    h.record_step(0.5, 100, 0.01, psnr=float("inf"), masked_psnr=float("nan"))
    h.record_step(0.4, 100, 0.01, psnr=21.123456, masked_psnr=None)
    assert h.psnr == [99.0, 21.1235] and h.masked_psnr == [None, None]  # JSON has no inf / nan
    old = {k: v for k, v in h.to_dict().items() if k not in ("psnr", "masked_psnr")}  # before step PSNRs
    loaded = RunHistory.from_dict(old)
    assert loaded.loss == h.loss and loaded.psnr == [None, None] and loaded.masked_psnr == [None, None]


def test_evaluation_at_the_same_step_replaces_the_last():
    h = RunHistory()
    h.record_eval(10, 20.0, 0.7)
    h.record_eval(10, 21.0, 0.75)  # a finished run finished again
    h.record_eval(20, None, None)  # a scene without test views
    assert (h.eval_step, h.eval_psnr, h.eval_ssim) == ([10, 20], [21.0, None], [0.75, None])


def test_bad_history_is_named(tmp_path):
    with pytest.raises(ValueError, match="different lengths"):
        RunHistory.from_dict({**RunHistory().to_dict(), "loss": [1.0]}, "x")
    (tmp_path / rf.HISTORY_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=r"history\.json: not valid JSON"):
        rf.read_history(tmp_path)
    assert rf.read_history(tmp_path / "nowhere") is None


# ------------------------------------------------------------------------------------------ training


def test_history_is_recorded_and_written(tmp_path):
    metrics = train_model(tiny_cfg(tmp_path), log=quiet)
    h = rf.read_history(tmp_path)
    assert h.num_steps == STEPS and len(h.num_gaussians) == len(h.step_seconds) == STEPS
    assert h.num_gaussians[-1] == metrics["num_gaussians"]
    assert all(isinstance(n, int) and n > 0 for n in h.num_gaussians)
    assert all(s > 0 for s in h.step_seconds)
    assert len(h.psnr) == STEPS and all(0 < p < 99 for p in h.psnr)  # full-image PSNR of every step
    assert h.masked_psnr == [None] * STEPS  # the procedural scene has no loss masks
    assert h.eval_step == [5, 10, 15, 20] and h.eval_psnr[-1] == pytest.approx(metrics["test"]["psnr"])
    ckpt = rf.load_latest_checkpoint(tmp_path)[1]
    assert ckpt["history"]["loss"] == h.loss
    json.dumps(ckpt["history"])  # plain Python types only (torch.load(weights_only=True) safe)
    torch.load(rf.list_checkpoints(tmp_path)[-1][1], weights_only=True)
    from recon.outputs.plots import plot_run  # loss.png is this figure

    assert [ax.get_title() for ax in plot_run(h).axes] == ["training loss", "test PSNR", "Gaussians",
                                                             "time per step"]
    assert (tmp_path / rf.LOSS_PLOT_FILE).read_bytes()[:4] == b"\x89PNG"


def test_resume_keeps_the_whole_history(tmp_path, monkeypatch):
    original = Trainer.train_step

    def crash_at_12(self, step):
        if step == 12:
            raise RuntimeError("crash")  # no checkpoint on a crash: the run resumes from step 10
        return original(self, step)

    monkeypatch.setattr(Trainer, "train_step", crash_at_12)
    with pytest.raises(RuntimeError, match="crash"):
        train_model(tiny_cfg(tmp_path), log=quiet)
    assert rf.list_checkpoints(tmp_path)[-1][0] == 10 and not (tmp_path / rf.HISTORY_FILE).exists()
    first = RunHistory.from_dict(rf.load_latest_checkpoint(tmp_path)[1]["history"])
    assert first.num_steps == 10 and first.eval_step == [5, 10]  # evaluated before the save of step 10
    monkeypatch.setattr(Trainer, "train_step", original)
    logs = []
    train_model(tiny_cfg(tmp_path), log=logs.append)
    assert "resuming" in logs[0] and "from step 10" in logs[0]
    h = rf.read_history(tmp_path)
    assert h.num_steps == STEPS and h.loss[:10] == first.loss and h.num_gaussians[:10] == first.num_gaussians
    assert None not in h.num_gaussians and None not in h.step_seconds
    assert h.eval_step == [5, 10, 15, 20]


def test_extending_a_finished_run_keeps_its_final_evaluation(tmp_path):
    train_model(tiny_cfg(tmp_path, steps=10, eval_every=0), log=quiet)
    assert rf.read_history(tmp_path).eval_step == [10]  # the final one, made after the last checkpoint
    train_model(tiny_cfg(tmp_path, steps=STEPS, eval_every=0), log=quiet)
    h = rf.read_history(tmp_path)
    assert h.num_steps == STEPS and h.eval_step == [10, STEPS]


def test_resume_from_a_checkpoint_without_history(tmp_path):
    train_model(tiny_cfg(tmp_path, steps=10, eval_every=0), log=quiet)
    step, payload = rf.load_latest_checkpoint(tmp_path)
    losses = payload.pop("history")["loss"]
    payload["losses"] = losses  # as written before histories
    rf.save_checkpoint(tmp_path, step, payload)
    (tmp_path / rf.HISTORY_FILE).unlink()
    train_model(tiny_cfg(tmp_path, eval_every=0), log=quiet)
    h = rf.read_history(tmp_path)
    assert h.num_steps == STEPS and h.loss[:10] == losses
    assert h.num_gaussians[:10] == [None] * 10 and None not in h.num_gaussians[10:]
