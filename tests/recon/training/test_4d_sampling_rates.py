"""Knobs of 4D training on real rigs (issue 55): ``--view-order shuffled`` (every (camera, time) view once per
pass) and ``--spacetime.time-lr-scale`` (the temporal parameters' own learning rate)."""

from __future__ import annotations

import dataclasses

import torch

from recon.losses.spacetime import SpaceTimeConfig
from recon.training.trainer import TrainConfig, Trainer
from tests.recon.data.test_panoptic_segmentation import write_tiny_panoptic
from tests.recon.models.test_spacetime_segmentation import wall_of_gaussians


def test_shuffled_views_visit_every_view_once_per_pass_and_resume_in_order(tmp_path):
    cfg = TrainConfig(data=write_tiny_panoptic(tmp_path / "pan"), out=tmp_path / "run", method="4dgs", steps=2,
                      save_every=0, progress=False, init_num_random=30, view_order="shuffled", batch=2)
    trainer = Trainer(cfg, log=lambda *a: None, writes_outputs=False)
    n = len(trainer.images)
    drawn = []
    for step in range(n):  # n steps of 2 views: two passes
        expected = trainer.next_views()
        with torch.no_grad():
            picks, _, _, _ = trainer.render_views(step)
        assert [i for i, _ in picks] == expected
        drawn += expected
    assert sorted(drawn[:n]) == sorted(drawn[n:]) == list(range(n)) and drawn[:n] != drawn[n:]
    payload = trainer.checkpoint_payload()
    again = Trainer(cfg, log=lambda *a: None, writes_outputs=False)
    again.load_checkpoint(payload)
    assert again.next_views() == trainer.next_views()  # a resumed run goes on with the same order
    random = Trainer(dataclasses.replace(cfg, view_order="random"), log=lambda *a: None, writes_outputs=False)
    draws = [i for s in range(n) for i, _ in random.render_views(s)[0]]
    assert sorted(draws[:n]) != list(range(n))  # with replacement: some view twice in the first n (this seed)


def test_time_lr_scale_scales_the_temporal_moves_only():
    moved = {}
    for scale in (1.0, 0.25):
        torch.manual_seed(0)
        model = wall_of_gaussians()
        model.configure(TrainConfig(spacetime=SpaceTimeConfig(time_lr_scale=scale)))
        before = {n: model.params[n].detach().clone() for n in ("means4", "log_scales4")}
        rgb, _, _ = model.render([model_camera()], t=0.3)
        (rgb * torch.linspace(0, 1, rgb.shape[2])[None, None, :, None]).mean().backward()
        model.step()
        moved[scale] = {n: model.params[n].detach() - before[n] for n in before}
    for n in ("means4", "log_scales4"):
        full, quarter = moved[1.0][n], moved[0.25][n]
        assert full[:, 3].abs().max() > 0
        torch.testing.assert_close(quarter[:, 3], 0.25 * full[:, 3], rtol=1e-3, atol=1e-7)  # float32 rounding of t + move
        torch.testing.assert_close(quarter[:, :3], full[:, :3], rtol=0, atol=0)


def model_camera():
    from recon.data import load_scene

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        return load_scene(write_tiny_panoptic(Path(d) / "pan")).frames_train[0].camera


def test_shuffled_views_are_refused_for_ray_batch_methods():
    import pytest

    from recon.core.errors import ConfigValueError
    from recon.training.trainer import check_view_options

    class RayMethod:
        RAY_BATCHES = True
        method = "rays"

    with pytest.raises(ConfigValueError, match="--view-order shuffled: --method rays"):
        check_view_options(RayMethod, TrainConfig(view_order="shuffled"))
    check_view_options(RayMethod, TrainConfig())
