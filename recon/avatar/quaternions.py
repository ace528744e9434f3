"""wxyz quaternions (the code's convention, rasterizer/CONVENTIONS.md): products and rotation matrices.

Shapes: quaternions [..., 4] (w, x, y, z), rotation matrices [..., 3, 3] acting on column vectors.
"""

from __future__ import annotations

import torch
from torch import Tensor


def normalize(q: Tensor, eps: float = 1e-12) -> Tensor:
    """[..., 4] unit quaternions (a zero quaternion stays zero-safe through ``eps``)."""
    return q / q.norm(dim=-1, keepdim=True).clamp(min=eps)


def multiply(a: Tensor, b: Tensor) -> Tensor:
    """Hamilton product a (x) b of [..., 4] wxyz quaternions: the rotation b, then a."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack([aw * bw - ax * bx - ay * by - az * bz,
                        aw * bx + ax * bw + ay * bz - az * by,
                        aw * by - ax * bz + ay * bw + az * bx,
                        aw * bz + ax * by - ay * bx + az * bw], dim=-1)


def to_rotmat(q: Tensor) -> Tensor:
    """[..., 3, 3] rotation matrices of [..., 4] wxyz quaternions (normalised first)."""
    w, x, y, z = normalize(q).unbind(-1)
    return torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
                       dim=-1).reshape(q.shape[:-1] + (3, 3))


def from_rotmat(R: Tensor) -> Tensor:
    """[..., 4] unit wxyz quaternions (w >= 0) of [..., 3, 3] rotation matrices.

    Shepperd's method: of the four candidate formulas the one with the largest divisor is taken per
    matrix, so the result is accurate and differentiable away from the (measure-zero) switch points."""
    m = R
    m00, m01, m02 = m[..., 0, 0], m[..., 0, 1], m[..., 0, 2]
    m10, m11, m12 = m[..., 1, 0], m[..., 1, 1], m[..., 1, 2]
    m20, m21, m22 = m[..., 2, 0], m[..., 2, 1], m[..., 2, 2]
    t = torch.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1)
    r = t.clamp(min=1e-12).sqrt()  # 2 |w|, 2 |x|, 2 |y|, 2 |z| candidates
    candidates = torch.stack([
        torch.stack([r[..., 0] ** 2, m21 - m12, m02 - m20, m10 - m01], -1) / (2 * r[..., 0:1]),
        torch.stack([m21 - m12, r[..., 1] ** 2, m01 + m10, m02 + m20], -1) / (2 * r[..., 1:2]),
        torch.stack([m02 - m20, m01 + m10, r[..., 2] ** 2, m12 + m21], -1) / (2 * r[..., 2:3]),
        torch.stack([m10 - m01, m02 + m20, m12 + m21, r[..., 3] ** 2], -1) / (2 * r[..., 3:4]),
    ], dim=-2)  # [..., 4 candidates, 4]
    best = t.argmax(dim=-1)
    q = torch.gather(candidates, -2, best[..., None, None].expand(best.shape + (1, 4))).squeeze(-2)
    q = torch.where(q[..., :1] < 0, -q, q)
    return normalize(q)


def axis_angle(axis: Tensor, angle: Tensor) -> Tensor:
    """[..., 4] wxyz quaternions of rotations by ``angle`` [...] (radians) about ``axis`` [..., 3]."""
    axis = axis / axis.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    half = 0.5 * angle[..., None]
    return torch.cat([torch.cos(half), torch.sin(half) * axis], dim=-1)
