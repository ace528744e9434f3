"""A fused Numba kernel for posing bound Gaussians without gradients (animation playback, export, benchmarks).

:func:`bind_numba` computes exactly what :func:`recon.avatar.binding.bind` does (the PyTorch reference, which
training differentiates) in one pass over the Gaussians, parallel over them: the mean from the barycentric
corners and the normal offset, the quaternion product with the triangle frame's quaternion, the log-scales
plus the triangle's log size. The per-triangle part (:class:`recon.avatar.binding.PosedTriangles`: frames,
their quaternions, sizes) stays in PyTorch: it is F-sized, not N-sized. Measured in scripts/bench_avatar.py.
Each launch holds :data:`rasterizer.cpu.KERNEL_LOCK` (rasterizer/cpu/launch.py: one parallel launch at a time).
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange
from torch import Tensor

from rasterizer.cpu import KERNEL_LOCK
from recon.avatar.binding import PosedTriangles, WorldGaussians


@njit(cache=True, parallel=True)
def _bind_kernel(corners, normals, frame_quats, log_sizes, face_ids, bary, offset, quat_local, log_scales_local,
                 means, quats, log_scales):
    for i in prange(face_ids.shape[0]):
        f = face_ids[i]
        k = np.exp(log_sizes[f]) * offset[i]
        for c in range(3):
            means[i, c] = (bary[i, 0] * corners[f, 0, c] + bary[i, 1] * corners[f, 1, c]
                           + bary[i, 2] * corners[f, 2, c] + k * normals[f, c])
            log_scales[i, c] = log_scales_local[i, c] + log_sizes[f]
        bw, bx, by, bz = quat_local[i, 0], quat_local[i, 1], quat_local[i, 2], quat_local[i, 3]
        norm = np.sqrt(bw * bw + bx * bx + by * by + bz * bz)
        norm = max(norm, 1e-12)
        bw, bx, by, bz = bw / norm, bx / norm, by / norm, bz / norm
        aw, ax, ay, az = frame_quats[f, 0], frame_quats[f, 1], frame_quats[f, 2], frame_quats[f, 3]
        quats[i, 0] = aw * bw - ax * bx - ay * by - az * bz
        quats[i, 1] = aw * bx + ax * bw + ay * bz - az * by
        quats[i, 2] = aw * by - ax * bz + ay * bw + az * bx
        quats[i, 3] = aw * bz + ax * by - ay * bx + az * bw


def _array(t: Tensor, dtype) -> np.ndarray:
    """A contiguous numpy copy (or view) of CPU tensor ``t`` as ``dtype``."""
    return np.ascontiguousarray(t.detach().cpu().numpy(), dtype=dtype)


def bind_numba(triangles: PosedTriangles, face_ids: Tensor, bary: Tensor, offset: Tensor, quat_local: Tensor,
               log_scales_local: Tensor) -> WorldGaussians:
    """:func:`recon.avatar.binding.bind` on CPU tensors, without gradients (same arguments, same result, in
    ``bary``'s dtype)."""
    dt = np.float64 if bary.dtype == torch.float64 else np.float32
    n = int(face_ids.shape[0])
    means, quats, log_scales = np.empty((n, 3), dt), np.empty((n, 4), dt), np.empty((n, 3), dt)
    args = (_array(triangles.corners, dt), _array(triangles.frames[..., 2], dt), _array(triangles.frame_quats, dt),
            _array(triangles.log_sizes, dt), _array(face_ids, np.int64), _array(bary, dt), _array(offset, dt),
            _array(quat_local, dt), _array(log_scales_local, dt), means, quats, log_scales)
    with KERNEL_LOCK:  # the workqueue layer is not re-entrant (the viewer poses and renders from two threads)
        _bind_kernel(*args)
    return WorldGaussians(torch.from_numpy(means), torch.from_numpy(quats), torch.from_numpy(log_scales))
