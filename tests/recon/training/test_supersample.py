"""Supersampled rendering (recon/training/supersample.py, ``splatforge train --supersample N``): the camera at N x the
resolution keeps the pixel grid (an N x N block covers one pixel), the reduction is the block mean, a smooth
scene renders the same either way while a sub-pixel edge's coverage comes out closer to its area, and a run
trains and evaluates with it."""

from __future__ import annotations

import math

import pytest
import torch

from rasterizer import Camera
from recon.core.errors import ConfigValueError
from recon.models import GaussianModel, SurfelModel
from recon.training.supersample import box_reduce, render_supersampled
from recon.training.trainer import TrainConfig, Trainer


def camera(width=24, height=16) -> Camera:
    K = torch.tensor([[30.0, 0.0, 11.3], [0.0, 28.0, 7.9], [0.0, 0.0, 1.0]], dtype=torch.float64)
    return Camera(world_to_cam=torch.eye(4, dtype=torch.float64), K=K, width=width, height=height)


def project(cam: Camera, points: torch.Tensor) -> torch.Tensor:
    p = points @ cam.K.T
    return p[:, :2] / p[:, 2:]


@pytest.mark.parametrize("factor", [2, 3])
def test_camera_keeps_the_pixel_grid(factor):
    cam = camera()
    big = cam.scaled(factor)
    assert (big.width, big.height) == (cam.width * factor, cam.height * factor)
    points = torch.tensor([[0.1, -0.2, 2.0], [-0.3, 0.05, 3.5], [0.0, 0.0, 1.0]], dtype=torch.float64)
    # continuous pixel coordinates scale by the factor: pixel (i, j) of cam <-> block [f i, f i + f) of big
    assert torch.allclose(project(big, points), factor * project(cam, points), atol=1e-12)
    assert cam.scaled(1) is cam and torch.equal(cam.K, camera().K)  # the original is untouched


def test_box_reduce_is_the_block_mean():
    img = torch.arange(2 * 4 * 6 * 3, dtype=torch.float64).reshape(2, 4, 6, 3)
    out = box_reduce(img, 2)
    assert out.shape == (2, 2, 3, 3)
    assert torch.allclose(out[1, 1, 2], img[1, 2:4, 4:6].reshape(-1, 3).mean(0))
    assert box_reduce(img, 1) is img


def flat_model(means, scale, opacity=0.99, surfels=False) -> GaussianModel:
    """3D Gaussians of ``scale`` [3] (or, ``surfels``, 2D surfels of its first two scales, facing the
    camera's z axis) with one opacity and grey colour."""
    n = len(means)
    scale = scale[:2] if surfels else scale
    params = {"means": torch.as_tensor(means, dtype=torch.float32),
              "quats": torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1),
              "log_scales": torch.log(torch.tensor(scale, dtype=torch.float32)).repeat(n, 1),
              "logit_opacities": torch.full((n,), math.log(opacity / (1 - opacity))),
              "sh0": torch.full((n, 1, 3), 0.5), "shN": torch.zeros(n, 0, 3)}
    return (SurfelModel if surfels else GaussianModel)(params, sh_degree=0, extent=1.0)


def test_smooth_scene_renders_the_same_and_meta_is_at_the_rendered_size():
    model = flat_model([[0.0, 0.0, 3.0]], [0.4, 0.3, 0.01], opacity=0.6)  # ~4-6 px wide: smooth at 1 px
    cam = camera().to(dtype=torch.float32)
    bg = torch.zeros(3)
    plain, alpha, _ = render_supersampled(model, [cam], 1, None, bg)
    ref, ref_alpha, _ = model.render([cam], None, bg)
    assert torch.equal(plain, ref) and torch.equal(alpha, ref_alpha)
    ss, ss_alpha, meta = render_supersampled(model, [cam], 2, None, bg)
    assert ss.shape == plain.shape and ss_alpha.shape == alpha.shape
    assert (meta["width"], meta["height"]) == (2 * cam.width, 2 * cam.height)
    assert (ss_alpha - alpha).abs().max() < 0.03 and ss_alpha.max() > 0.3


@pytest.mark.parametrize("surfels", [False, True], ids=["3dgs", "2dgs"])
def test_sharp_edge_coverage_moves_toward_its_area(surfels):
    """A dense, opaque wall of tiny splats (a quarter pixel apart) filling the half plane right of pixel
    column 12's left edge: column 11 covers none of it. The pixel-centre renderer's low-pass (3D: the
    0.3 px^2 dilation; surfels: the 2DGS fallback, std 0.7 px) saturates there (measured 0.998 / 1.0: the
    silhouette a pixel too wide; surfels also 0.52 in column 10); at 2x 0.42 / 0.56, at 4x 0.10 / 0.14."""
    cam = camera(24, 8).to(dtype=torch.float32)
    z = 2.0
    fx, cx = float(cam.K[0, 0]), float(cam.K[0, 2])
    x_edge = (12.0 - cx) * z / fx  # world x of the left edge of pixel column 12
    step = 0.25 * z / fx
    xs = torch.arange(0, 60) * step + x_edge + step / 2
    ys = (torch.arange(0, 40) - 20) * step
    gx, gy = torch.meshgrid(xs, ys, indexing="ij")
    means = torch.stack([gx.reshape(-1), gy.reshape(-1), torch.full((gx.numel(),), z)], -1)
    model = flat_model(means, [step / 3, step / 3, step / 3], opacity=0.9, surfels=surfels)
    bg = torch.zeros(3)
    alpha = {f: render_supersampled(model, [cam], f, None, bg)[1][0, 4, :, 0].detach() for f in (1, 2, 4)}
    assert all(a[13] > 0.95 and a[9] < 0.01 for a in alpha.values())  # opaque inside, empty far outside
    assert alpha[1][11] > 0.9  # the dilation
    assert alpha[2][11] < 0.6 and alpha[4][11] < alpha[2][11] - 0.2, alpha


def test_trainer_renders_supersampled_and_checks_the_value(tmp_path):
    cfg = TrainConfig(data="procedural", data_factor=4, init_num_random=300, steps=1, save_every=0,
                      progress=False, out=tmp_path / "run", supersample=2)
    trainer = Trainer(cfg, log=lambda *_: None)
    picks, gts, render, meta = trainer.render_views(0)
    assert render.shape[1:3] == gts[0].shape[:2]
    assert meta["width"] == 2 * gts[0].shape[1]
    with pytest.raises(ConfigValueError, match="supersample"):
        Trainer(TrainConfig(data="procedural", out=tmp_path / "bad", supersample=0, progress=False),
                log=lambda *_: None)


def test_run_evaluates_as_it_trained(tmp_path):
    """metrics.json of a --supersample 2 run and `splatforge eval --run` agree (both render supersampled);
    evaluating the same splats without supersampling gives another number."""
    from recon.commands.evaluate import _evaluate
    from recon.training.evaluation import evaluate_on_scene
    from recon.run.folder import Run
    from recon.training.train_run import train_model

    out = tmp_path / "run"
    metrics = train_model(TrainConfig(data="procedural", data_factor=4, init_num_random=300, steps=5, save_every=0,
                                      progress=False, out=out, supersample=2), log=lambda *_: None)
    again = _evaluate(out, None, None, None, tmp_path / "eval", "cpu")
    assert again["psnr"] == pytest.approx(metrics["test"]["psnr"], abs=1e-6)
    run = Run.open(out)
    plain = evaluate_on_scene(run.load_model(None, "cpu", extent=run.scene.extent), run.scene,
                              background=run.background().tolist())
    assert abs(plain["psnr"] - metrics["test"]["psnr"]) > 1e-3


def test_4d_run_with_a_batch_of_times_trains_supersampled(tmp_path):
    """--method 4dgs, two (camera, time) samples a step, rendered at 2x: trains and evaluates."""
    from recon.training.train_run import train_model

    metrics = train_model(TrainConfig(method="4dgs", data="procedural-4d", data_factor=4, steps=3, save_every=0,
                                      progress=False, out=tmp_path / "run4d", supersample=2, batch=2),
                          log=lambda *_: None)
    assert metrics["steps"] == 3 and math.isfinite(metrics["test"]["psnr"])
