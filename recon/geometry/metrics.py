"""Per-view geometry metrics: depth error, normal angle error, and normals from a depth map.

Frames and shapes: depth maps are ``[H, W]`` camera z (along the optical axis, scene units; 0 = no
surface); intrinsics ``K`` are ``[3, 3]`` with pixel centres at integer + 0.5 (the rasterizer's); camera
frames are OpenCV (x right, y down, z forward), as ``rasterizer.Camera.world_to_cam``. Normals are unit
vectors ``[..., 3]``.

:func:`depth_to_normal` is the 2DGS paper's depth-to-normal (also its normal-consistency target): lift every
pixel to its camera-frame point, take central differences to the left/right and up/down neighbours, and
normalise their cross product, oriented towards the camera.
"""

from __future__ import annotations

import torch
from torch import Tensor

from recon.losses.surfels import depth_to_points as batched_depth_to_points


def depth_to_points(depth: Tensor, K: Tensor) -> Tensor:
    """[H, W, 3] camera-frame (OpenCV) points of ``depth`` [H, W] (camera z) with intrinsics ``K`` [3, 3]:
    one camera of :func:`recon.losses.surfels.depth_to_points`."""
    return batched_depth_to_points(depth[None, ..., None], K[None])[0]


def depth_to_normal(depth: Tensor, K: Tensor) -> tuple[Tensor, Tensor]:
    """(normals [H, W, 3] camera frame (OpenCV), valid [H, W] bool) from ``depth`` [H, W] camera z.

    n = normalise((P[y, x-1] - P[y, x+1]) x (P[y+1, x] - P[y-1, x])): for a surface facing the camera it
    points towards the camera (n . P < 0). Valid where the pixel and its four neighbours have depth > 0 and
    the cross product is not degenerate; border pixels and invalid ones hold 0."""
    p = depth_to_points(depth, K)
    n = torch.zeros_like(p)
    dx = p[1:-1, 2:] - p[1:-1, :-2]
    dy = p[2:, 1:-1] - p[:-2, 1:-1]
    c = -torch.linalg.cross(dx, dy, dim=-1)
    norm = c.norm(dim=-1, keepdim=True)
    inner = (norm[..., 0] > 0)
    n[1:-1, 1:-1] = torch.where(inner[..., None], c / norm.clamp(min=torch.finfo(c.dtype).tiny), torch.zeros_like(c))
    have = depth > 0
    valid = torch.zeros_like(have)
    valid[1:-1, 1:-1] = (have[1:-1, 1:-1] & have[1:-1, 2:] & have[1:-1, :-2] & have[2:, 1:-1] & have[:-2, 1:-1]
                         & inner)
    return torch.where(valid[..., None], n, torch.zeros_like(n)), valid


def camera_to_world_normals(normals: Tensor, world_to_cam: Tensor) -> Tensor:
    """[..., 3] world-frame normals of camera-frame ``normals`` [..., 3] (``world_to_cam`` [4, 4], rotation only)."""
    R = world_to_cam[:3, :3].to(normals)
    return normals @ R  # n_world = R^T n_cam, row vectors


def normal_angles_deg(pred: Tensor, true: Tensor) -> Tensor:
    """[...] angle in degrees between ``pred`` and ``true`` [..., 3] (each normalised first; a zero vector
    gives 90 degrees against anything)."""
    eps = torch.finfo(pred.dtype).tiny
    a = pred / pred.norm(dim=-1, keepdim=True).clamp(min=eps)
    b = true / true.norm(dim=-1, keepdim=True).clamp(min=eps)
    return torch.rad2deg(torch.arccos((a * b).sum(-1).clamp(-1.0, 1.0)))


def mean_angle_error_deg(pred: Tensor, true: Tensor, mask: Tensor) -> tuple[float, int]:
    """(mean angle in degrees between ``pred`` and ``true`` [..., 3] over ``mask`` [...], pixel count);
    (nan, 0) for an empty mask."""
    count = int(mask.sum())
    if count == 0:
        return float("nan"), 0
    return float(normal_angles_deg(pred[mask].double(), true[mask].double()).mean()), count


def mean_abs_depth_error(pred: Tensor, true: Tensor, mask: Tensor) -> tuple[float, int]:
    """(mean |pred - true| over ``mask``, pixel count) for depth maps [...] in scene units; (nan, 0) when empty."""
    count = int(mask.sum())
    if count == 0:
        return float("nan"), 0
    return float((pred[mask].double() - true[mask].double()).abs().mean()), count
