"""Export budgets: importance ranking (volume and camera footprint), SH truncation, device presets."""

import numpy as np
import pytest

from rasterizer.camera import Camera
from recon.export.budget import (DEVICE_BUDGETS, TARGETS, apply_budget,
                                 footprint_pixels, importance, resolve_budget, top_k_indices,
                                 volume_importance)
from recon.export.splats import SplatData, random_splats, sigmoid


def test_volume_importance_formula():
    d = random_splats(100, sh_degree=0)
    expected = sigmoid(d.logit_opacities) * np.exp(d.log_scales.astype(np.float64).sum(1))
    np.testing.assert_allclose(volume_importance(d), expected, rtol=1e-12)


def test_keeps_most_important_in_file_order():
    d = random_splats(1000, sh_degree=2, seed=1)
    out, info = apply_budget(d, max_splats=100)
    scores = volume_importance(d)
    keep = np.sort(np.argsort(-scores)[:100])
    np.testing.assert_array_equal(out.means, d.means[keep])
    assert info.kept_splats == 100 and info.dropped == 900 and info.importance == "volume"
    assert out.sh_degree == 2


def test_top_k_ties_are_deterministic():
    np.testing.assert_array_equal(top_k_indices(np.ones(10), 3), [0, 1, 2])
    np.testing.assert_array_equal(top_k_indices(np.array([1.0, 3, 2]), 5), [0, 1, 2])


def test_sh_truncation_and_no_raise():
    d = random_splats(20, sh_degree=3)
    out, info = apply_budget(d, sh_degree=1)
    assert out.sh_degree == 1 and info.sh_degree == 1
    np.testing.assert_array_equal(out.sh, d.sh[:, :4])
    d0 = random_splats(20, sh_degree=0)
    out, _ = apply_budget(d0, sh_degree=3)
    assert out.sh_degree == 0


def test_presets_table_and_overrides():
    assert set(TARGETS) == {"desktop", "web", "android", "iphone", "phone", "quest3", "visionpro"}
    assert DEVICE_BUDGETS["phone"].max_splats <= DEVICE_BUDGETS["android"].max_splats
    assert DEVICE_BUDGETS["quest3"].max_splats <= 1_000_000
    assert 1_000_000 <= DEVICE_BUDGETS["android"].max_splats <= 2_000_000
    assert 1_000_000 <= DEVICE_BUDGETS["iphone"].max_splats <= 3_000_000
    assert 1_000_000 <= DEVICE_BUDGETS["desktop"].max_splats <= 5_000_000
    assert 1_000_000 <= DEVICE_BUDGETS["web"].max_splats <= 2_000_000
    assert resolve_budget("quest3", None, None) == (1_000_000, DEVICE_BUDGETS["quest3"].sh_degree)
    assert resolve_budget("quest3", 10, 2) == (10, 2)
    with pytest.raises(ValueError):
        resolve_budget("toaster", None, None)
    with pytest.raises(ValueError):
        resolve_budget(None, 0, None)
    with pytest.raises(ValueError):
        resolve_budget(None, None, 4)


def _camera_at_origin(width=64, height=48, f=50.0):
    K = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]])
    return Camera.from_arrays(np.eye(4), K, width, height)


def test_footprint_area_of_a_sphere():
    """An isotropic Gaussian of std s at depth z covers pi (3 f s / z)^2 pixels (plus low-pass)."""
    s, z, f = 0.02, 4.0, 50.0
    d = SplatData(means=[[0, 0, z]], quats=[[1, 0, 0, 0]], log_scales=[[np.log(s)] * 3],
                  logit_opacities=[0.0], sh=np.zeros((1, 1, 3)))
    area = footprint_pixels(d, [_camera_at_origin(f=f)])[0]
    sigma_px2 = (f * s / z) ** 2 + 0.3
    assert area == pytest.approx(9 * np.pi * sigma_px2, rel=1e-6)


def test_footprint_ignores_splats_behind_or_outside():
    d = SplatData(means=[[0, 0, 4], [0, 0, -4], [100, 0, 4]], quats=np.tile([1.0, 0, 0, 0], (3, 1)),
                  log_scales=np.full((3, 3), -3.0), logit_opacities=np.zeros(3),
                  sh=np.zeros((3, 1, 3)))
    area = footprint_pixels(d, [_camera_at_origin()])
    assert area[0] > 0 and area[1] == 0 and area[2] == 0


def test_camera_importance_prefers_visible_splats():
    """With cameras, a big splat no camera sees loses to a small splat in view; by volume it wins."""
    d = SplatData(means=[[0, 0, 4], [0, 0, -4]], quats=np.tile([1.0, 0, 0, 0], (2, 1)),
                  log_scales=[[-4.0] * 3, [0.0] * 3], logit_opacities=[2.0, 2.0],
                  sh=np.zeros((2, 1, 3)))
    cams = [_camera_at_origin()]
    out, info = apply_budget(d, max_splats=1, cameras=cams)
    assert info.importance == "footprint" and out.means[0, 2] == 4
    out, info = apply_budget(d, max_splats=1)
    assert info.importance == "volume" and out.means[0, 2] == -4
    scores, how = importance(d, cams)
    assert how == "footprint" and scores[1] == 0


def test_footprint_takes_float32_training_cameras_as_float64():
    """A training Camera (float32 tensors) scores exactly like the float64 view of the same camera."""
    torch = pytest.importorskip("torch")

    K = torch.tensor([[50.0, 0, 32], [0, 50, 24], [0, 0, 1]])
    w2c = torch.eye(4)
    w2c[:3, 3] = torch.tensor([0.1, -0.2, 0.3])
    cam32 = Camera(world_to_cam=w2c, K=K, width=64, height=48)
    cam64 = Camera.from_arrays(w2c.numpy(), K.numpy(), 64, 48)
    d = random_splats(500, seed=4, extent=2.0)
    d.means[:, 2] += 6.0
    a, b = footprint_pixels(d, [cam32]), footprint_pixels(d, [cam64])
    assert (a > 0).any()
    np.testing.assert_array_equal(a, b)
