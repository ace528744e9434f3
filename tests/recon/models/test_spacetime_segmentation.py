"""The segmentation as an extra rendered target of 4dgs (``--spacetime.seg-weight``, issue 55): each Gaussian's
foreground value rendered as a one-channel pass of the same slice learns a view's foreground segmentation."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from recon.data import load_scene, load_segmentation
from recon.losses.spacetime import SpaceTimeConfig, segmentation_l1
from recon.models.spacetime import PARAM_NAMES, SpaceTimeGaussians
from recon.training.trainer import TrainConfig, Trainer
from tests.recon.data.test_panoptic_segmentation import W, H, write_tiny_panoptic


def wall_of_gaussians() -> SpaceTimeGaussians:
    """Opaque 4D Gaussians on a grid in the plane z = 0 covering the tiny Panoptic cameras' views (they sit at
    z = -3 looking +z, 16 x 12 pixels at focal 20: about 2.4 x 1.8 units there), lasting the whole clip."""
    xs, ys = np.meshgrid(np.linspace(-1.8, 1.8, 25), np.linspace(-1.2, 1.2, 17))
    pts = torch.tensor(np.stack([xs.ravel(), ys.ravel(), np.zeros(xs.size)], 1), dtype=torch.float32)
    model = SpaceTimeGaussians.from_points(pts, torch.full((len(pts),), 0.5), torch.full((len(pts), 3), 0.5), 0, 1.0,
                                           init_opacity=0.99, init_scale=0.8)
    with torch.no_grad():
        model.params["log_scales4"][:, 3] = math.log(5.0)  # static over the clip
    return model


def seg_cfg(weight: float) -> TrainConfig:
    return TrainConfig(spacetime=SpaceTimeConfig(seg_weight=weight))


def test_the_foreground_channel_learns_the_segmentation(tmp_path):
    scene = load_scene(write_tiny_panoptic(tmp_path / "pan"))
    frames = scene.frames_train[:2]
    target = torch.as_tensor(load_segmentation(frames[0]))
    model = wall_of_gaussians()
    model.configure(seg_cfg(1.0))
    cams, times = [f.camera for f in frames], [f.time for f in frames]

    def error() -> float:
        with torch.no_grad():
            _, _, meta = model.render(cams, t=times)
        return float((meta["segmentation"][0, ..., 0] - target).abs().mean())

    before = error()
    for step in range(150):
        _, _, meta = model.render(cams, t=times)
        meta["segmentations"] = [torch.as_tensor(load_segmentation(f)) for f in frames]
        terms = model.loss_terms(meta, step, seg_cfg(1.0))
        assert set(terms) == {"segmentation"}
        terms["segmentation"].backward()
        model.step()
        model.zero_grad()
    with torch.no_grad():
        _, _, meta = model.render(cams, t=times)
    seg = meta["segmentation"][0, ..., 0]
    assert meta["segmentation"].shape == (2, H, W, 1)
    assert before > 0.3 and error() < 0.12, (before, error())
    assert seg[:, : W // 4 - 1].mean() > 0.8 and seg[:, W // 4 + 1:].mean() < 0.15


def test_off_by_default_and_views_without_segmentation_add_nothing(tmp_path):
    model = wall_of_gaussians()
    model.configure(TrainConfig())
    _, _, meta = model.render([load_scene(write_tiny_panoptic(tmp_path / "pan")).frames_train[0].camera], t=0.5)
    assert "segmentation" not in meta and model.loss_terms(meta, 0, TrainConfig()) == {}
    assert segmentation_l1(torch.zeros(2, 4, 4, 1), [None, None]) is None
    half = segmentation_l1(torch.ones(1, 8, 8, 1), [torch.zeros(4, 4)])  # a 2x supersampled render: box-reduced
    assert float(half) == 1.0


def test_training_with_the_segmentation_target(tmp_path):
    root = write_tiny_panoptic(tmp_path / "pan")
    cfg = TrainConfig(data=root, out=tmp_path / "run", method="4dgs", steps=3, save_every=0, progress=False,
                      init_num_random=200, spacetime=SpaceTimeConfig(seg_weight=0.5))
    trainer = Trainer(cfg, log=lambda *a: None)
    assert trainer.model.renders_segmentation
    before = trainer.model.params["logit_foreground"].detach().clone()
    trainer.run()
    assert not torch.equal(trainer.model.params["logit_foreground"].detach()[: len(before)], before[: len(before)]) \
        or len(trainer.model) != len(before)
    resumed = Trainer(dataclasses.replace(cfg, steps=4), log=lambda *a: None)
    resumed.resume()
    assert resumed.model.renders_segmentation  # configured again after a checkpoint


def test_checkpoints_from_before_the_foreground_parameter_load():
    model = wall_of_gaussians()
    state = model.state_dict()
    state["params"].pop("logit_foreground")
    opt = state["optimizer"]
    last = opt["param_groups"].pop()
    for pid in last["params"]:
        opt["state"].pop(pid, None)
    old = SpaceTimeGaussians.from_state_dict(state)
    assert torch.equal(old.params["logit_foreground"], torch.zeros(len(model)))
    assert [g["name"] for g in old.optimizer.param_groups] == list(PARAM_NAMES)
