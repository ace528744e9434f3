"""The one quaternion -> rotation matrix implementation (rasterizer/quaternions.py) against the four
formulas it replaced (reference covariance, COLMAP, viewer, export budget), copied here verbatim as
they were, and the camera conversions built on it (rasterizer/camera.py). COLMAP's zero-qvec case:
tests/recon/data/test_data_colmap.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rasterizer.camera import (Camera, camera_to_dict, intrinsics_from_vertical_fov, opengl_cam_to_world_to_opencv_world_to_cam,
                               pose_from_world_to_cam, rigid_inverse, world_to_cam_from_pose)
from rasterizer.quaternions import quat_to_rotmat, quat_to_rotmat_np, rotmat_to_quat

EPS64 = 4e-15  # a few ulps of entries in [-1, 1] (1.1e-15 seen with another numpy build: 5 ulps)


# ----------------------------------------------------------------- the replaced implementations


def old_colmap(q):  # recon/data/colmap.py qvec_to_rotmat
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def old_viewer(quats_wxyz):  # viewer/scene.py quats_to_rotmats
    q = quats_wxyz / np.maximum(np.linalg.norm(quats_wxyz, axis=1, keepdims=True), 1e-12)
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], axis=1)


def old_budget(quats_wxyz):  # recon/export/budget.py _rotmats
    q = np.asarray(quats_wxyz, dtype=np.float64)  # recon.core.splat_data.normalized_quats, inlined
    norm = np.linalg.norm(q, axis=-1, keepdims=True)
    bad = ~(norm[..., 0] > 0)
    q = q / np.where(norm > 0, norm, 1.0)
    q[bad] = (1.0, 0.0, 0.0, 0.0)
    w, x, y, z = q.T
    return np.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], axis=1).reshape(-1, 3, 3)


@pytest.fixture
def quats():
    rng = np.random.default_rng(7)
    q = rng.normal(size=(2000, 4)) * rng.uniform(0.01, 50.0, size=(2000, 1))
    q[0] = (1.0, 0.0, 0.0, 0.0)
    q[1] = (0.0, 0.0, 0.0, 1.0)
    return q


def test_torch_function_matches_an_independent_implementation(quats):
    from scipy.spatial.transform import Rotation

    q = np.asarray(quats, dtype=np.float64)
    want = Rotation.from_quat(q[:, [1, 2, 3, 0]]).as_matrix()  # scipy is scalar-last (x, y, z, w)
    np.testing.assert_allclose(quat_to_rotmat(torch.as_tensor(q)).numpy(), want, atol=1e-12)
    import rasterizer.reference.covariance as cov

    assert cov.quat_to_rotmat is quat_to_rotmat


def test_numpy_adapter_matches_the_numpy_formulas(quats):
    R = quat_to_rotmat_np(quats)
    assert R.dtype == np.float64 and R.shape == (len(quats), 3, 3)
    np.testing.assert_allclose(R, old_viewer(quats), rtol=0, atol=EPS64)
    np.testing.assert_allclose(R, old_budget(quats), rtol=0, atol=EPS64)
    np.testing.assert_allclose(R, np.stack([old_colmap(q) for q in quats]), rtol=0, atol=EPS64)
    np.testing.assert_allclose(quat_to_rotmat_np(quats[5]), old_colmap(quats[5]), rtol=0, atol=EPS64)  # one [4]


def test_matrices_are_rotations_and_zero_quaternion_is_identity(quats):
    R = quat_to_rotmat_np(quats)
    np.testing.assert_allclose(R @ R.transpose(0, 2, 1), np.broadcast_to(np.eye(3), R.shape), atol=1e-14)
    np.testing.assert_allclose(np.linalg.det(R), 1.0, atol=1e-14)
    np.testing.assert_array_equal(quat_to_rotmat_np([0.0, 0.0, 0.0, 0.0]), np.eye(3))  # as viewer and budget did
    np.testing.assert_array_equal(quat_to_rotmat_np(np.zeros((3, 4))), old_budget(np.zeros((3, 4))))


def test_rotmat_to_quat_inverts(quats):
    for q in quats[:200]:
        qn = q / np.linalg.norm(q) * (1 if q[0] >= 0 else -1)
        np.testing.assert_allclose(rotmat_to_quat(quat_to_rotmat_np(q)), qn, atol=1e-12)


# ----------------------------------------------------------------- camera conversions


def old_viser_to_world_to_cam(wxyz, position):  # viewer/camera_path.py, as it was
    R_wc = old_colmap(wxyz)
    c = np.asarray(position, dtype=np.float64)
    w2c = np.eye(4)
    w2c[:3, :3] = R_wc.T
    w2c[:3, 3] = -R_wc.T @ c
    return w2c


def old_opengl(cam_to_world_gl):  # recon/data/nerfstudio.py, as it was
    c2w = np.eye(4)
    c2w[: np.asarray(cam_to_world_gl).shape[0]] = np.asarray(cam_to_world_gl, dtype=np.float64)
    c2w_cv = c2w @ np.diag([1.0, -1.0, -1.0, 1.0])
    R, t = c2w_cv[:3, :3], c2w_cv[:3, 3]
    w2c = np.eye(4)
    w2c[:3, :3] = R.T
    w2c[:3, 3] = -R.T @ t
    return w2c


def test_pose_conversions_match_the_old_viewer_ones(quats):
    rng = np.random.default_rng(3)
    for q in quats[:50]:
        c = rng.normal(size=3) * 5
        w2c = world_to_cam_from_pose(q, c)
        np.testing.assert_allclose(w2c, old_viser_to_world_to_cam(q, c), rtol=0, atol=1e-13)
        q2, c2 = pose_from_world_to_cam(w2c)
        np.testing.assert_allclose(q2, q / np.linalg.norm(q) * (1 if q[0] >= 0 else -1), atol=1e-12)
        np.testing.assert_allclose(c2, c, atol=1e-12)
        np.testing.assert_allclose(rigid_inverse(rigid_inverse(w2c)), w2c, atol=1e-13)


def test_opengl_conversion_is_bit_identical_to_the_old_loader():
    rng = np.random.default_rng(5)
    for _ in range(20):
        c2w = np.eye(4)
        c2w[:3, :3] = quat_to_rotmat_np(rng.normal(size=4))
        c2w[:3, 3] = rng.normal(size=3)
        np.testing.assert_array_equal(opengl_cam_to_world_to_opencv_world_to_cam(c2w), old_opengl(c2w))
        np.testing.assert_array_equal(opengl_cam_to_world_to_opencv_world_to_cam(c2w[:3]), old_opengl(c2w[:3]))


def test_camera_record_conversions():
    K = intrinsics_from_vertical_fov(1.0, 64, 48)
    cam = Camera.from_arrays(np.eye(4), K, 64, 48)
    assert cam.world_to_cam.dtype == torch.float64 and cam.width == 64
    f32 = cam.to(dtype=torch.float32)
    assert f32.K.dtype == torch.float32 and f32.width == 64 and cam.K.dtype == torch.float64
    np.testing.assert_array_equal(f32.K_numpy(), K.astype(np.float32).astype(np.float64))
    d = camera_to_dict(cam)
    assert d == {"world_to_cam": np.eye(4).tolist(), "K": K.tolist(), "width": 64, "height": 48}


def test_quat_z_to_rotates_z_onto_the_normals():
    from rasterizer.quaternions import quat_z_to

    rng = np.random.default_rng(4)
    n = rng.normal(size=(200, 3))
    n = np.concatenate([n, [[0, 0, 1.0], [0, 0, -1.0], [1e-9, 0, -1.0]]])
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    q = quat_z_to(n)
    assert np.allclose(np.linalg.norm(q, axis=1), 1)
    assert np.allclose(quat_to_rotmat_np(q)[:, :, 2], n, atol=1e-6)
