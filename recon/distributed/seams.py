"""Seam metric of a merged block model: PSNR on pixels whose surface lies near a block border vs the rest.

Per test view: the model's expected depth (``render_mode="RGB+ED"``) back-projects each pixel centre to the
world; a pixel is a seam pixel when the core block owning its surface point differs from the owner of a
point ``width`` away along e1 or e2 (so it lies within ``width`` of an inner border on the ground). Pixels
with alpha < 0.5 (empty: sky, background) count in neither set. PSNRs pool squared errors over all views.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from rasterizer import rasterize_gaussians
from recon.distributed.partition import Partition, in_core

MIN_ALPHA = 0.5


def owners(part: Partition, xy: np.ndarray) -> np.ndarray:
    """[N] int: the id of the block whose half-open core box holds each ground point [N, 2]."""
    out = np.full(len(xy), -1)
    for b in part.blocks:
        out[in_core(xy, b.core)] = b.id
    return out


def surface_points(depth: Tensor, K: Tensor, world_to_cam: Tensor) -> Tensor:
    """[H, W, 3] world points of pixel centres at expected ``depth`` [H, W] (camera z); K [3, 3], world_to_cam
    [4, 4] (OpenCV)."""
    H, W = depth.shape
    v, u = torch.meshgrid(torch.arange(H, dtype=depth.dtype) + 0.5, torch.arange(W, dtype=depth.dtype) + 0.5,
                          indexing="ij")
    x = (u - K[0, 2]) / K[0, 0] * depth
    y = (v - K[1, 2]) / K[1, 1] * depth
    cam = torch.stack([x, y, depth], dim=-1)
    R, t = world_to_cam[:3, :3], world_to_cam[:3, 3]
    return (cam - t) @ R  # R^T (x - t) for each row


def seam_mask(part: Partition, points: np.ndarray, width: float) -> np.ndarray:
    """[N] bool: ground owners of world ``points`` [N, 3] change within ``width`` along e1 or e2."""
    xy = part.ground(points)
    own = owners(part, xy)
    near = np.zeros(len(xy), bool)
    for d in ((width, 0.0), (-width, 0.0), (0.0, width), (0.0, -width)):
        near |= owners(part, xy + np.asarray(d)) != own
    return near


@torch.no_grad()
def seam_metric(model, frames: Sequence, images, background: Tensor, part: Partition,
                width_fraction: float = 0.05) -> dict:
    """``{"seam_psnr", "interior_psnr", "seam_pixels", "interior_pixels", "width"}`` over ``frames`` (test
    views with their :class:`recon.data.frame_images.FrameImages` ``images``); ``width`` = ``width_fraction`` x
    the robust box's longer side. PSNRs are None when a set is empty."""
    width = width_fraction * float(np.max(part.box.hi - part.box.lo))
    sums = {True: [0.0, 0], False: [0.0, 0]}
    p = model.params
    for i, frame in enumerate(frames):
        gt = images.rgb(i, background.to(model.device))
        viewmats, Ks, W, H, degree, bg = model.render_inputs([frame.camera], None, background)
        out, alpha, _ = rasterize_gaussians(p["means"], p["quats"], model.scales, model.opacities,
                                            (p["sh0"], p["shN"]), viewmats, Ks, W, H, sh_degree=degree,
                                            backgrounds=bg,
                                            render_mode="RGB+ED",
                                            rasterize_mode="antialiased" if model.antialiased else "classic")
        rgb, depth = out[0, ..., :3].clamp(0, 1).cpu(), out[0, ..., 3].cpu()
        valid = (alpha[0, ..., 0].cpu() >= MIN_ALPHA).numpy()
        pts = surface_points(depth.double(), Ks[0].cpu().double(), viewmats[0].cpu().double()).numpy()
        near = seam_mask(part, pts.reshape(-1, 3), width).reshape(H, W)
        err = ((rgb - gt.cpu()) ** 2).sum(-1).numpy()
        for key, mask in ((True, near & valid), (False, ~near & valid)):
            sums[key][0] += float(err[mask].sum())
            sums[key][1] += int(mask.sum())

    def psnr(total: float, n: int) -> float | None:
        if n == 0:
            return None
        mse = total / (3 * n)
        return float("inf") if mse == 0 else -10 * math.log10(mse)

    return {"seam_psnr": psnr(*sums[True]), "interior_psnr": psnr(*sums[False]), "seam_pixels": sums[True][1],
            "interior_pixels": sums[False][1], "width": width}
