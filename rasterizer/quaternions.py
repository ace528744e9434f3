"""Quaternions (w, x, y, z) <-> rotation matrices: the project's one implementation.

:func:`quat_to_rotmat` is the single quaternion-to-matrix formula (PyTorch, batched, normalises its
input); :func:`quat_to_rotmat_np` is its numpy adapter (float64 in and out) for file loaders, the
viewer and exporters. :func:`rotmat_to_quat` is the inverse for one matrix; :func:`quat_z_to` the
rotations taking +z onto given unit vectors (splats tangent to a surface). Order and meaning are
those of rasterizer/CONVENTIONS.md: ``q = (w, x, y, z)``, ``R`` acts on column vectors.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


def quat_to_rotmat(quats: Tensor) -> Tensor:
    """Rotation matrices from quaternions.

    Args:
        quats: [..., 4] (w, x, y, z), any norm; normalised here as ``q / max(|q|, 1e-12)``, so a zero
            quaternion gives the identity.
    Returns:
        [..., 3, 3] rotation matrices, same dtype and device.
    """
    w, x, y, z = torch.unbind(F.normalize(quats, dim=-1), dim=-1)
    rows = [
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ]
    return torch.stack(rows, dim=-1).reshape(quats.shape[:-1] + (3, 3))


def quat_to_rotmat_np(quats) -> np.ndarray:
    """numpy adapter of :func:`quat_to_rotmat`: array-like [..., 4] (w, x, y, z) -> float64 [..., 3, 3]."""
    q = torch.from_numpy(np.array(quats, dtype=np.float64))
    return quat_to_rotmat(q).numpy()


def rotmat_to_quat(R) -> np.ndarray:
    """[4] unit quaternion (w, x, y, z), w >= 0, of a [3, 3] rotation matrix (Shepperd's method, float64)."""
    m = np.asarray(R, dtype=np.float64)
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    if trace > max(m[0, 0], m[1, 1], m[2, 2]):
        s = 2.0 * np.sqrt(1.0 + trace)  # 4 |w|
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    elif m[0, 0] >= m[1, 1] and m[0, 0] >= m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])  # 4 |x|
        q = [(m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s]
    elif m[1, 1] >= m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])  # 4 |y|
        q = [(m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s]
    else:
        s = 2.0 * np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])  # 4 |z|
        q = [(m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s]
    q = np.array(q) / np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def quat_z_to(normals: np.ndarray) -> np.ndarray:
    """[N, 4] wxyz unit quaternions rotating +z onto the unit ``normals`` [N, 3] (the shortest rotation)."""
    normals = np.asarray(normals, dtype=np.float64)
    z = np.array([0.0, 0.0, 1.0])
    axis = np.cross(np.broadcast_to(z, normals.shape), normals)
    w = 1.0 + normals @ z
    q = np.concatenate([w[:, None], axis], axis=1)
    flip = w < 1e-6  # normal = -z: rotate 180 degrees about x
    q[flip] = (0.0, 1.0, 0.0, 0.0)
    return q / np.linalg.norm(q, axis=1, keepdims=True)
