"""Gaussians bound to triangles: triangle-local parameters <-> world means, rotations and scales.

A bound Gaussian has a triangle ``face`` and, relative to it (frames and sizes: :mod:`recon.avatar.triangle_frames`):

- ``bary`` [3]: barycentric coordinates (sum 1) of the foot point on the triangle;
- ``offset``: distance along the triangle's unit normal, in units of the triangle size ``k``;
- ``quat_local`` [4] wxyz: rotation relative to the frame ``F = [t b n]``;
- ``log_scales_local`` [3]: log of the standard deviations in units of ``k``.

World values (HRM2Avatar / GaussianAvatars): ``mean = sum_i bary_i v_i + offset k n``,
``R = F R_local`` (quaternion ``q_F (x) q_local``), ``log_scales = log_scales_local + log k``. So a
rigid motion of the triangle moves, rotates the Gaussian exactly with it, and a uniform stretch scales it.
:func:`bind` is the forward map (differentiable in every input, vertices included); :func:`unbind` the
inverse for given triangles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from recon.avatar.quaternions import from_rotmat, multiply, normalize, to_rotmat
from recon.avatar.triangle_frames import triangle_corners, triangle_frames


@dataclass
class WorldGaussians:
    """World-space Gaussians: means [N, 3], quats [N, 4] wxyz (unit), log_scales [N, 3]."""

    means: Tensor
    quats: Tensor
    log_scales: Tensor


@dataclass
class PosedTriangles:
    """What binding needs of a posed mesh, per triangle: corners [F, 3, 3], frames [F, 3, 3] (columns t, b,
    n), quaternions of the frames [F, 4] wxyz, log sizes [F]."""

    corners: Tensor
    frames: Tensor
    frame_quats: Tensor
    log_sizes: Tensor

    @classmethod
    def of(cls, vertices: Tensor, faces: Tensor) -> "PosedTriangles":
        """The triangles ``faces`` [F, 3] of ``vertices`` [V, 3]."""
        corners = triangle_corners(vertices, faces)
        frames, sizes = triangle_frames(corners)
        return cls(corners, frames, from_rotmat(frames), torch.log(sizes.clamp(min=1e-12)))


def bind(triangles: PosedTriangles, face_ids: Tensor, bary: Tensor, offset: Tensor, quat_local: Tensor,
         log_scales_local: Tensor) -> WorldGaussians:
    """World Gaussians of N bound ones: ``face_ids`` [N] int64, ``bary`` [N, 3], ``offset`` [N] (units of the
    triangle size), ``quat_local`` [N, 4] wxyz, ``log_scales_local`` [N, 3] (see the module docstring)."""
    corners = triangles.corners[face_ids]  # [N, 3, 3]
    normals = triangles.frames[face_ids, :, 2]
    log_k = triangles.log_sizes[face_ids]
    means = torch.einsum("nc,ncx->nx", bary, corners) + (offset * torch.exp(log_k))[:, None] * normals
    quats = multiply(triangles.frame_quats[face_ids], normalize(quat_local))
    return WorldGaussians(means, quats, log_scales_local + log_k[:, None])


def unbind(triangles: PosedTriangles, face_ids: Tensor, world: WorldGaussians) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(bary [N, 3], offset [N], quat_local [N, 4], log_scales_local [N, 3]) that :func:`bind` maps to
    ``world`` on the triangles ``face_ids`` [N]: the foot point of each mean on its triangle's plane (its
    barycentric coordinates may fall outside [0, 1] when the foot point is outside the triangle)."""
    corners = triangles.corners[face_ids]
    frames = triangles.frames[face_ids]
    k = torch.exp(triangles.log_sizes[face_ids])
    v0, v1, v2 = corners.unbind(1)
    rel = world.means - v0
    offset = (rel * frames[..., 2]).sum(-1)
    foot = rel - offset[:, None] * frames[..., 2]
    bary12 = plane_barycentric(v1 - v0, v2 - v0, foot)
    bary = torch.cat([1 - bary12.sum(-1, keepdim=True), bary12], dim=-1)
    conj = triangles.frame_quats[face_ids] * torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=k.dtype, device=k.device)
    quat_local = multiply(conj, normalize(world.quats))
    return bary, offset / k, quat_local, world.log_scales - torch.log(k)[:, None]


def plane_barycentric(e1: Tensor, e2: Tensor, p: Tensor) -> Tensor:
    """[N, 2] coefficients (b1, b2) with ``p = b1 e1 + b2 e2`` for ``p`` [N, 3] in the plane of the edges
    ``e1``, ``e2`` [N, 3] (least squares: the 2 x 2 normal equations)."""
    d11, d12, d22 = (e1 * e1).sum(-1), (e1 * e2).sum(-1), (e2 * e2).sum(-1)
    p1, p2 = (p * e1).sum(-1), (p * e2).sum(-1)
    det = (d11 * d22 - d12 * d12).clamp(min=1e-30)
    return torch.stack([(d22 * p1 - d12 * p2) / det, (d11 * p2 - d12 * p1) / det], dim=-1)


def world_rotmats(world: WorldGaussians) -> Tensor:
    """[N, 3, 3] rotation matrices of ``world``'s quaternions."""
    return to_rotmat(world.quats)


def plane_distances(triangles: PosedTriangles, face_ids: Tensor, means: Tensor) -> Tensor:
    """[N] unsigned distance of each point ``means`` [N, 3] from the plane of its triangle ``face_ids``."""
    v0 = triangles.corners[face_ids, 0]
    return ((means - v0) * triangles.frames[face_ids, :, 2]).sum(-1).abs()
