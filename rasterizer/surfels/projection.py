"""Surfel projection (plain PyTorch, the specification): per (camera, surfel) the ray-splat transform,
the camera-frame normal, the screen bounding box and culling (2DGS; gsplat 1.5.3's arithmetic).

A surfel has centre p (world), rotation R (quaternion, wxyz) with tangents t_u, t_v (its first two
columns) and normal t_w (third column), and scales (s_u, s_v). In camera c (world_to_cam [R_c | t_c],
intrinsics K), W H = [R_c s_u t_u, R_c s_v t_v, R_c p + t_c] (3x3, columns) maps a splat point
(u, v, 1) to the camera-space point and K W H to homogeneous pixels (x z, y z, z). ``ray_transforms``
holds K W H; its rows M_u, M_v, M_w are the columns of the paper's M = (K W H)^T.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from rasterizer.quaternions import quat_to_rotmat

EXTENT_SIGMAS = 3.33  # screen radius: this many times the half extent of the 1-sigma ellipse's box
MIN_HALF_EXTENT_SQ = 1e-4  # squared half extents are clamped to this before the square root


class SurfelProjection(NamedTuple):
    """ray_transforms [C, N, 3, 3] (K W H), means2d [C, N, 2], depths [C, N] (camera z of the centre),
    normals [C, N, 3] (unit, camera frame, facing the camera), radii [C, N, 2] int32 (0 = culled).
    Culled pairs hold zeros, with no gradient."""

    ray_transforms: Tensor
    means2d: Tensor
    depths: Tensor
    normals: Tensor
    radii: Tensor


def camera_frames(means: Tensor, quats: Tensor, scales: Tensor, viewmats: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(W H [C, N, 3, 3] with columns R_c s_u t_u, R_c s_v t_v, p_c; centres p_c [C, N, 3]; raw normals
    R_c t_w [C, N, 3]) from means [N, 3], quats [N, 4], scales [N, 2], viewmats [C, 4, 4]."""
    Rc = viewmats[:, None, :3, :3] @ quat_to_rotmat(quats)[None]  # [C, N, 3, 3]
    centres = (viewmats[:, None, :3, :3] @ means[None, :, :, None])[..., 0] + viewmats[:, None, :3, 3]
    tangents = Rc[..., :2] * scales[None, :, None, :]  # [C, N, 3, 2]
    WH = torch.cat([tangents, centres[..., None]], dim=-1)
    return WH, centres, Rc[..., 2]


def facing_normals(normals: Tensor, centres: Tensor) -> Tensor:
    """Normals [C, N, 3] flipped where they point away from the camera (n . p_c > 0; the camera sits at
    the origin, so -p_c points from the surfel to it). As gsplat: n . p_c == 0 flips too."""
    toward = (-(normals * centres).sum(-1, keepdim=True)) > 0
    return torch.where(toward, normals, -normals)


def screen_boxes(KWH: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(means2d [C, N, 2], half extents [C, N, 2], valid [C, N]) of the pixel bounding box of each
    surfel's 1-sigma ellipse u^2 + v^2 = 1, from the dual conic (gsplat's closed form, with
    f = (1, 1, -1) / (M_w . diag(1, 1, -1) M_w)); valid is False where that denominator is 0
    (the surfel is seen edge-on or degenerate)."""
    Mu, Mv, Mw = KWH[..., 0, :], KWH[..., 1, :], KWH[..., 2, :]
    test = KWH.new_tensor([1.0, 1.0, -1.0])
    distance = (test * Mw * Mw).sum(-1, keepdim=True)
    valid = distance[..., 0] != 0
    f = torch.where(distance != 0, test / torch.where(distance != 0, distance, torch.ones_like(distance)), 0.0)
    means2d = torch.stack([(f * Mu * Mw).sum(-1), (f * Mv * Mw).sum(-1)], dim=-1)
    second = torch.stack([(f * Mu * Mu).sum(-1), (f * Mv * Mv).sum(-1)], dim=-1)
    half_sq = means2d * means2d - second
    return means2d, half_sq, valid


def surfel_radii(half_sq: Tensor, means2d: Tensor, depths: Tensor, valid: Tensor, width: int, height: int,
                 near_plane: float, far_plane: float) -> Tensor:
    """int32 radii [C, N, 2] = ceil(3.33 sqrt(max(half_extent^2, 1e-4))), 0 for pairs outside the depth
    range, degenerate (not valid) or with a box entirely off the image."""
    radius = torch.ceil(EXTENT_SIGMAS * torch.sqrt(half_sq.clamp(min=MIN_HALF_EXTENT_SQ)))
    keep = valid & (depths > near_plane) & (depths < far_plane)
    keep &= ((means2d[..., 0] + radius[..., 0] > 0) & (means2d[..., 0] - radius[..., 0] < width)
             & (means2d[..., 1] + radius[..., 1] > 0) & (means2d[..., 1] - radius[..., 1] < height))
    return torch.where(keep[..., None], radius, torch.zeros_like(radius)).to(torch.int32)


def project_surfels(means: Tensor, quats: Tensor, scales: Tensor, viewmats: Tensor, Ks: Tensor, width: int,
                    height: int, *, near_plane: float = 0.01, far_plane: float = 1e10) -> SurfelProjection:
    """Project N surfels (means [N, 3] world, quats [N, 4] wxyz, scales [N, 2]) into C pinhole cameras
    (viewmats [C, 4, 4] world_to_cam, Ks [C, 3, 3]). Gradients reach means, quats and scales through
    the visible pairs' ray transforms, means2d, depths and normals."""
    WH, centres, raw_normals = camera_frames(means, quats, scales, viewmats)
    KWH = Ks[:, None] @ WH
    normals = facing_normals(raw_normals, centres)
    depths = centres[..., 2]
    with torch.no_grad():
        m2d, half_sq, valid = screen_boxes(KWH.detach())
        radii = surfel_radii(half_sq, m2d, depths.detach(), valid, width, height, near_plane, far_plane)
    means2d, _, _ = screen_boxes(KWH)
    visible = (radii > 0).all(-1)
    zero = lambda t: torch.where(visible.view(visible.shape + (1,) * (t.dim() - 2)), t, 0.0)  # noqa: E731
    return SurfelProjection(zero(KWH), zero(means2d), zero(depths), zero(normals), radii)
