"""recon.geometry.metrics on analytic cases (plane, sphere, known angles) and recon.geometry.ground_truth decoding."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from recon.geometry import ground_truth as gg
from recon.geometry import metrics as gm

ROOT = Path(__file__).resolve().parents[3]
LEGO = ROOT.parent / "shared" / "data" / "lego_400"


def _K(f, w, h):
    return torch.tensor([[f, 0, w / 2], [0, f, h / 2], [0, 0, 1]], dtype=torch.float64)


def _rays(K, w, h):
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64) + 0.5, torch.arange(w, dtype=torch.float64) + 0.5,
                            indexing="ij")
    return torch.stack([(xs - K[0, 2]) / K[0, 0], (ys - K[1, 2]) / K[1, 1], torch.ones_like(xs)], -1)


def test_depth_to_points_inverts_projection():
    K = _K(50.0, 40, 30)
    depth = torch.rand(30, 40, dtype=torch.float64) + 1
    p = gm.depth_to_points(depth, K)
    uvw = p @ K.T
    u, v = uvw[..., 0] / uvw[..., 2], uvw[..., 1] / uvw[..., 2]
    assert torch.allclose(p[..., 2], depth)
    assert torch.allclose(u[0, :], torch.arange(40, dtype=torch.float64) + 0.5, atol=1e-9)
    assert torch.allclose(v[:, 0], torch.arange(30, dtype=torch.float64) + 0.5, atol=1e-9)


def test_depth_to_normal_plane_exact():
    """A slanted plane n . X = d seen by the camera: every interior normal is n (facing the camera)."""
    w, h = 48, 36
    K = _K(40.0, w, h)
    n = torch.tensor([0.3, -0.2, -1.0], dtype=torch.float64)
    n = n / n.norm()
    d = -2.0  # n . X = d < 0: the plane faces the camera at the origin
    depth = d / (_rays(K, w, h) @ n)
    assert (depth > 0).all()
    normals, valid = gm.depth_to_normal(depth, K)
    assert valid[1:-1, 1:-1].all() and not valid[0].any() and not valid[:, -1].any()
    assert torch.allclose(normals[valid], n.expand(int(valid.sum()), 3), atol=1e-9)
    # holes (depth 0) invalidate the pixel and its four neighbours
    depth[10, 10] = 0
    _, valid = gm.depth_to_normal(depth, K)
    assert not valid[10, 10] and not valid[9, 10] and not valid[10, 11] and valid[8, 10]


def _sphere(w, h, f, centre, radius):
    K = _K(f, w, h)
    r = _rays(K, w, h)
    c = torch.tensor(centre, dtype=torch.float64)
    a = (r * r).sum(-1)
    b = -2 * (r @ c)
    cc = c @ c - radius ** 2
    disc = b * b - 4 * a * cc
    hit = disc > 0
    t = torch.where(hit, (-b - disc.clamp(min=0).sqrt()) / (2 * a), torch.zeros_like(a))  # z = t (r_z = 1)
    normals = (r * t[..., None] - c) / radius
    return K, t, normals, hit


@pytest.mark.parametrize("size", [64, 256])
def test_depth_to_normal_sphere(size):
    """Central differences on a sphere's depth: close to the analytic normal inside the silhouette, and
    closer at the finer resolution (discretisation error ~ pixel size)."""
    K, depth, true_n, hit = _sphere(size, size, size * 1.2, (0.1, -0.1, 4.0), 1.0)
    normals, valid = gm.depth_to_normal(depth, K)
    # stay away from the grazing rim, where the depth gradient is unbounded
    inner = valid & ((true_n * -gm.depth_to_points(depth, K) / depth[..., None]).sum(-1) > 0.5)
    err, count = gm.mean_angle_error_deg(normals, true_n, inner)
    assert count > 0.3 * size * size * 0.15
    assert err < (0.015 if size == 256 else 0.2)  # measured 0.007 / 0.11 (second order)
    assert (normals[inner] * true_n[inner]).sum(-1).min() > 0.99  # same orientation (towards the camera)


def test_sphere_normal_error_shrinks_with_resolution():
    errs = []
    for size in (32, 128):
        K, depth, true_n, _ = _sphere(size, size, size * 1.2, (0.0, 0.0, 4.0), 1.0)
        normals, valid = gm.depth_to_normal(depth, K)
        inner = valid & (true_n[..., 2] < -0.5)
        errs.append(gm.mean_angle_error_deg(normals, true_n, inner)[0])
    assert errs[1] < errs[0] / 4


def test_angle_error_known_angles_and_mask():
    pred = torch.tensor([[1.0, 0, 0], [2.0, 0, 0], [0, 0, 3.0], [0, 1.0, 0]], dtype=torch.float64)
    true = torch.tensor([[0, 1.0, 0], [1.0, 1.0, 0], [0, 0, 1.0], [0, -1.0, 0]], dtype=torch.float64)
    ang = gm.normal_angles_deg(pred, true)
    assert torch.allclose(ang, torch.tensor([90.0, 45.0, 0.0, 180.0], dtype=torch.float64), atol=1e-6)
    err, n = gm.mean_angle_error_deg(pred, true, torch.tensor([True, True, False, False]))
    assert n == 2 and err == pytest.approx(67.5)
    err, n = gm.mean_angle_error_deg(pred, true, torch.zeros(4, dtype=torch.bool))
    assert n == 0 and math.isnan(err)


def test_depth_error_mean_absolute_over_mask():
    pred = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    true = torch.tensor([[1.5, 2.0], [1.0, 0.0]])
    err, n = gm.mean_abs_depth_error(pred, true, true > 0)
    assert n == 3 and err == pytest.approx((0.5 + 0.0 + 2.0) / 3)


def test_camera_to_world_normals_inverts_rotation():
    angle = 0.7
    R = torch.tensor([[math.cos(angle), -math.sin(angle), 0], [math.sin(angle), math.cos(angle), 0], [0, 0, 1.0]],
                     dtype=torch.float64) @ torch.tensor([[1.0, 0, 0], [0, 0, -1], [0, 1, 0]], dtype=torch.float64)
    w2c = torch.eye(4, dtype=torch.float64)
    w2c[:3, :3] = R
    w2c[:3, 3] = torch.tensor([1.0, 2.0, 3.0])
    n_world = torch.nn.functional.normalize(torch.randn(10, 3, dtype=torch.float64), dim=-1)
    n_cam = n_world @ R.T
    assert torch.allclose(gm.camera_to_world_normals(n_cam, w2c), n_world, atol=1e-12)


def test_downscale_gt_blocks():
    depth = np.arange(16, dtype=np.float64).reshape(4, 4) + 1
    valid = np.ones((4, 4), bool)
    valid[0, 0] = False
    normals = np.zeros((4, 4, 3))
    normals[..., 2] = 1
    normals[2:, 2:] = [0.0, 1.0, 0.0]
    normals[3, 3] = [1.0, 0.0, 0.0]
    small = gg.downscale_gt(gg.GroundTruth(depth, valid, normals, valid.copy()), 2)
    assert small.depth.shape == (2, 2)
    assert not small.depth_valid[0, 0] and small.depth[0, 0] == 0 and small.depth_valid[1, 1]
    assert small.depth[1, 1] == pytest.approx(np.mean([11, 12, 15, 16]))
    assert np.allclose(small.normals[1, 1], np.array([1.0, 3.0, 0.0]) / math.sqrt(10))


def test_mesh_dataset_ground_truth_decoding(tmp_path):
    """make_mesh_dataset's encodings (16-bit depth / depth_scale, (n + 1) / 2 normals) read back."""
    import imageio.v3 as iio

    (tmp_path / "test").mkdir()
    json.dump({"camera_angle_x": 0.7, "depth_scale": 1000.0, "frames": [{"file_path": "./test/r_0"}]},
              (tmp_path / "transforms_test.json").open("w"))
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[1:3, 1:3, 3] = 255
    depth = np.zeros((4, 4), np.uint16)
    depth[1:3, 1:3] = 2500
    n = np.array([0.0, 0.6, -0.8])
    normal = np.zeros((4, 4, 3), np.uint8)
    normal[1:3, 1:3] = np.round((n + 1) / 2 * 255).astype(np.uint8)
    iio.imwrite(tmp_path / "test" / "r_0.png", rgba)
    iio.imwrite(tmp_path / "test" / "r_0_depth.png", depth)
    iio.imwrite(tmp_path / "test" / "r_0_normal.png", normal)
    assert gg.detect_source(tmp_path) == "mesh"
    gt = gg.load_gt(tmp_path, "test/r_0", "mesh")
    assert gt.depth_valid.sum() == 4 and np.allclose(gt.depth[gt.depth_valid], 2.5)
    assert np.degrees(np.arccos(gt.normals[1, 1] @ n)) < 0.5
    with pytest.raises(gg.GroundTruthError, match="r_1_depth.png: ground-truth image missing"):
        gg.load_gt(tmp_path, "test/r_1", "mesh")
    (tmp_path / "test" / "r_0_depth.png").write_bytes(b"not a png")
    with pytest.raises(gg.GroundTruthError, match="r_0_depth.png: not a readable image"):
        gg.load_gt(tmp_path, "test/r_0", "mesh")


@pytest.mark.skipif(not (LEGO / "transforms_test.json").is_file(), reason=f"{LEGO} absent (../shared data)")
def test_lego_ground_truth_decoding():
    """lego_400's test PNGs decode to depths around the camera distance and unit world normals that face
    the camera."""
    meta = json.loads((LEGO / "transforms_test.json").read_text())
    assert gg.detect_source(LEGO) == "nerf_synthetic"
    for k in (0, 77):
        gt = gg.load_gt(LEGO, f"test/r_{k}", "nerf_synthetic")
        c2w = np.array(meta["frames"][k]["transform_matrix"])
        dist = np.linalg.norm(c2w[:3, 3])
        z = gt.depth[gt.depth_valid]
        assert z.size > 5000 and dist - 2.0 < np.median(z) < dist + 1.0
        assert 0.2 < gt.normal_valid.sum() / gt.depth_valid.sum() < 0.9
        n = gt.normals[gt.normal_valid]
        assert np.allclose(np.linalg.norm(n, axis=1), 1, atol=1e-6) and (n >= 0).all()
        # world normals face the camera: n . (camera - point) > 0
        h, w = gt.depth.shape
        f = 0.5 * w / math.tan(0.5 * meta["camera_angle_x"])
        ys, xs = np.nonzero(gt.normal_valid)
        zz = gt.depth[ys, xs]
        p_cam = np.stack([(xs + 0.5 - w / 2) / f * zz, -(ys + 0.5 - h / 2) / f * zz, -zz], 1)  # OpenGL
        to_cam = -(p_cam @ c2w[:3, :3].T)
        assert ((n * to_cam).sum(1) > 0).mean() > 0.99
