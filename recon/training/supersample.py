"""Supersampled rendering: a view rendered at N x its resolution and reduced by averaging N x N pixel blocks.

A box filter over the pixel's area is what a camera's sensor and antialiased renders (Blender's, and
scripts/make_mesh_dataset.py's ``--samples``) record. A splat rasterizer instead evaluates each pixel at
its centre, with a screen-space low-pass of about a pixel (3D Gaussians: the 0.3 px^2 dilation; 2D
surfels: the 2DGS fallback ``2 |x - mean2d|^2``, a 0.7 px standard deviation). Where many splats overlap
at a silhouette, seen edge-on, those low-pass footprints saturate the composited alpha about a pixel
outside the splats' centres, so training pulls the surface that far inside to match the target's
coverage (measured on the spot benchmark: opaque surfel centres 0.0065 scene units, about a pixel,
inside the true surface at 400 px; 2.7x that at 200 px). Rendering at N x the resolution shrinks that
footprint to 1/N of a target pixel.

Cameras: pixel centres at (x + 0.5, y + 0.5) in both grids, so the camera at N x the resolution
(``Camera.scaled(N)``) has K[:2] multiplied by N (fx, fy, cx, cy all scale), and an N x N block of its
pixels covers exactly one pixel of the original grid.
"""

from __future__ import annotations

from typing import Sequence

import torch.nn.functional as F
from torch import Tensor


def box_reduce(image: Tensor, factor: int) -> Tensor:
    """[C, H*f, W*f, D] -> [C, H, W, D]: the mean of each f x f block."""
    if factor == 1:
        return image
    return F.avg_pool2d(image.permute(0, 3, 1, 2), factor).permute(0, 2, 3, 1)


def render_supersampled(model, cameras: Sequence, factor: int, *args, **kwargs) -> tuple[Tensor, Tensor, dict]:
    """``model.render(cameras, *args, **kwargs)`` at ``factor`` x the resolution, render and alpha box-reduced
    to the cameras' size ([C, H, W, 3], [C, H, W, 1]); ``meta`` stays at the rendered resolution (its
    ``width``, ``height`` and ``Ks`` describe that grid: densification's screen gradients and the 2DGS
    geometry losses read it there)."""
    if factor == 1:
        return model.render(list(cameras), *args, **kwargs)
    render, alpha, meta = model.render([c.scaled(factor) for c in cameras], *args, **kwargs)
    return box_reduce(render, factor), box_reduce(alpha, factor), meta
