"""Training on a CUDA GPU (gsplat kernels): the same command and outputs as on the CPU.

Skipped without CUDA (conftest). The procedural scene of test_train_end_to_end, so the thresholds are
comparable: the CPU run reaches ~28 dB in 300 steps.
"""

from pathlib import Path

import pytest
import torch

from recon.outputs import files as rf
from recon.export import read_splats
from recon.training.trainer import Trainer
from recon.training.train_run import train_model

from .test_train_end_to_end import MIN_PSNR, STEPS, small_cfg

pytestmark = pytest.mark.cuda


def test_adc_trains_on_cuda(tmp_path):
    cfg = small_cfg(tmp_path, device="cuda")
    trainer = Trainer(cfg, log=lambda *a: None)
    assert trainer.model.params["means"].is_cuda
    metrics = trainer.run()
    assert metrics["test"]["psnr"] > MIN_PSNR, metrics
    assert metrics["steps"] == STEPS and metrics["num_gaussians"] == len(read_splats(tmp_path / "splats.ply"))
    assert len(list((tmp_path / "renders").glob("test_*.png"))) == 8


def test_adc_densifies_on_cuda(tmp_path):
    """The densification statistics need ``meta["means2d"]``'s gradient from the gsplat path too."""
    trainer = Trainer(small_cfg(tmp_path, device="cuda", steps=200, save_every=0), log=lambda *a: None)
    n0 = len(trainer.model)
    trainer.run()
    assert len(trainer.model) > 2 * n0  # clone/split from the accumulated gradients (on the CPU: 1,500 -> 8,197)


@pytest.mark.parametrize("kw", [dict(strategy="mcmc", max_gaussians=3000), dict(antialiased=True)],
                         ids=["mcmc", "antialiased"])
def test_other_modes_train_on_cuda(tmp_path, kw):
    metrics = train_model(small_cfg(tmp_path, device="cuda", **kw), log=lambda *a: None)
    assert metrics["test"]["psnr"] > MIN_PSNR - 3.0, metrics
    if kw.get("strategy") == "mcmc":
        assert metrics["num_gaussians"] <= 3000


def test_cuda_run_resumes_on_cpu(tmp_path):
    """A checkpoint written on the GPU resumes on the CPU (``device`` may change on resume)."""
    train_model(small_cfg(tmp_path, device="cuda", steps=100, save_every=50), log=lambda *a: None)
    first = rf.load_latest_checkpoint(tmp_path)[1]["history"]["loss"]
    logs = []
    second = train_model(small_cfg(tmp_path, device="cpu", steps=160, save_every=50), log=logs.append)
    assert any("from step 100" in str(m) for m in logs), logs
    payload = rf.load_latest_checkpoint(tmp_path)[1]
    assert payload["history"]["loss"][:100] == first and len(payload["history"]["loss"]) == 160
    assert second["test"]["psnr"] > 18.0


def test_cuda_and_cpu_renders_agree(tmp_path):
    """One trained model rendered by both backends: the pictures match to float32/fast-math level."""
    trainer = Trainer(small_cfg(tmp_path, device="cuda", steps=150, save_every=0), log=lambda *a: None)
    trainer.run()
    cam = trainer.scene.frames_test[0].camera
    bg = torch.ones(3, device="cuda")
    with torch.no_grad():
        gpu = trainer.model.render([cam], 3, bg)[0][0].cpu()
        trainer.model.to(torch.device("cpu"))
        cpu = trainer.model.render([cam], 3, bg.cpu())[0][0]
    assert (gpu - cpu).abs().mean() < 2e-3 and (gpu - cpu).abs().max() < 0.1


def test_surfels_train_on_cuda(tmp_path):
    """--method 2dgs on gsplat's rasterization_2dgs (centre depth): PSNR, densification from its
    ``gradient_2dgs`` signal, geometry losses switched on (start steps scaled to the 300-step run)."""
    trainer = Trainer(small_cfg(tmp_path, device="cuda", method="2dgs"), log=lambda *a: None)
    n0 = len(trainer.model)
    metrics = trainer.run()
    assert metrics["test"]["psnr"] > MIN_PSNR - 2.0, metrics
    assert len(trainer.model) > n0
    assert len(list((tmp_path / "renders").glob("test_*_normals.png"))) == 8
