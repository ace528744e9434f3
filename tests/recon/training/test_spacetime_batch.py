"""``--batch``: several (camera, time) samples per training step, rendered together, their losses averaged;
the densification signal of every sample reaches ADC; refused for training images of several sizes."""

from __future__ import annotations

import pytest
import torch

from recon.data.procedural_4d import procedural_4d_scene
from recon.core.errors import ConfigValueError
from recon.losses.image import photometric_loss
from recon.training.trainer import TrainConfig, Trainer


@pytest.fixture(scope="module")
def scene():
    return procedural_4d_scene(width=32, height=32, n_train=4, n_times=6, test_time_stride=2, n_points=600)


def trainer(scene, **kw) -> Trainer:
    cfg = TrainConfig(method="4dgs", sh_degree=1, progress=False, steps=40, **kw)
    return Trainer(cfg, log=lambda s: None, scene=scene, device="cpu", writes_outputs=False)


def test_one_step_renders_the_batch_together_and_averages_the_losses(scene, monkeypatch):
    tr = trainer(scene, batch=3, background="random")
    calls, losses = [], []
    render = tr.model.render

    def recording(cameras, *a, t=None, **k):
        out = render(cameras, *a, t=t, **k)
        calls.append((list(cameras), list(t), out[0].detach().clone()))
        return out

    monkeypatch.setattr(tr.model, "render", recording)
    real_loss = photometric_loss
    monkeypatch.setattr("recon.training.trainer.photometric_loss", lambda p, g, lam: losses.append(
        (p.detach().clone(), g.clone())) or real_loss(p, g, lam))
    result = tr.train_step(0)
    (cams, times, rgb), = calls  # one render call with the three samples
    assert len(cams) == 3 and rgb.shape[0] == 3 and len(losses) == 3
    gen = torch.Generator().manual_seed(tr.cfg.seed + 1)  # replay the view sampler: index, then background
    picked = []
    for _ in range(3):
        picked.append(scene.frames_train[int(torch.randint(len(scene.frames_train), (1,), generator=gen))])
        torch.rand(3, generator=gen)
    assert cams == [f.camera for f in picked] and times == [f.time for f in picked]  # each at its own time
    assert len(set(times)) > 1
    for k, (pred, gt) in enumerate(losses):
        torch.testing.assert_close(pred, rgb[k])
    mean = sum(float(real_loss(p, g, 0.2)) for p, g in losses) / 3
    assert result.loss == pytest.approx(mean, rel=1e-5)


def test_every_sample_feeds_the_densification_statistics(scene):
    one, three = trainer(scene, batch=1), trainer(scene, batch=3)
    for tr in (one, three):
        tr.train_step(0)
    count1 = one.strategy_state["count"].sum()
    count3 = three.strategy_state["count"].sum()
    assert count3 > 2 * count1  # three views' visible Gaussians counted, against one


def test_batched_4d_training_improves_psnr(scene):
    tr = trainer(scene, batch=2)
    before = tr.evaluate(None)["psnr"]
    for step in range(40):
        tr.advance(step)
    assert tr.evaluate(None)["psnr"] > before + 2.0


def test_batch_refused_for_images_of_several_sizes_and_below_one(scene):
    import dataclasses

    from rasterizer import Camera

    frames = list(scene.frames_train)
    small = frames[0].camera
    other = Camera.from_arrays(small.world_to_cam_numpy(), small.K_numpy(), small.width // 2, small.height // 2)
    frames[0] = dataclasses.replace(frames[0], camera=other)
    mixed = dataclasses.replace(scene, frames_train=frames)
    with pytest.raises(ConfigValueError, match=r"--batch 2: the training images have 2 sizes \(16x16, 32x32\)"):
        trainer(mixed, batch=2)
    with pytest.raises(ConfigValueError, match="--batch 0: must be >= 1"):
        trainer(scene, batch=0)
