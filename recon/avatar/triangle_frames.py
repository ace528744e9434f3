"""Per-triangle orthonormal frames and sizes of a (posed) mesh.

For the triangle (v0, v1, v2): tangent ``t = (v1 - v0) / |v1 - v0|``, normal ``n = (v1 - v0) x (v2 - v0)``
normalised (counter-clockwise faces: outward), bitangent ``b = n x t``. The frame matrix ``F = [t b n]``
(columns) maps triangle-local directions to world ones. The triangle's size ``k`` is its mean edge length
(GaussianAvatars' choice): local offsets and scales are in units of ``k``, so a stretched triangle stretches
its Gaussians.
"""

from __future__ import annotations

import torch
from torch import Tensor

MIN_LENGTH = 1e-12  # guards normalisations of degenerate triangles (their frame is then arbitrary but finite)


def triangle_corners(vertices: Tensor, faces: Tensor) -> Tensor:
    """[F, 3, 3] corner positions (corner, xyz) of ``faces`` [F, 3] int64 into ``vertices`` [V, 3]."""
    return vertices[faces]


def triangle_frames(corners: Tensor) -> tuple[Tensor, Tensor]:
    """(frames [F, 3, 3] with columns (t, b, n), sizes [F] mean edge length) of triangles ``corners`` [F, 3, 3]."""
    v0, v1, v2 = corners.unbind(1)
    e1, e2 = v1 - v0, v2 - v0
    t = e1 / e1.norm(dim=-1, keepdim=True).clamp(min=MIN_LENGTH)
    n = torch.linalg.cross(e1, e2)
    n = n / n.norm(dim=-1, keepdim=True).clamp(min=MIN_LENGTH)
    b = torch.linalg.cross(n, t)
    frames = torch.stack([t, b, n], dim=-1)
    sizes = (e1.norm(dim=-1) + e2.norm(dim=-1) + (v2 - v1).norm(dim=-1)) / 3.0
    return frames, sizes


def triangle_normals(corners: Tensor) -> Tensor:
    """[F, 3] unit normals of triangles ``corners`` [F, 3, 3] (the frames' third column)."""
    return triangle_frames(corners)[0][..., 2]
