"""Typed records of the surfel (2DGS) pipeline: the surfel counterparts of ``rasterizer.records``.

- :class:`SurfelSplats`: what the surfel projection hands to a surfel ``composite`` (screen space).
- :class:`SurfelComposited`: what that ``composite`` returns (before backgrounds).
- :class:`SurfelRender` and :class:`SurfelMeta`: what :func:`rasterizer.rasterize_surfels` returns.

Frames and conventions: rasterizer/CONVENTIONS.md and the surfel section of rasterizer/DESIGN.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from torch import Tensor


@dataclass(frozen=True)
class SurfelSplats:
    """N surfels in C cameras, in screen space.

    means2d [C, N, 2]: centre of the pixel bounding box of each surfel's 1-sigma ellipse (what the tile
    binning and the low-pass fallback use; pixel centres at +0.5); ray_transforms [C, N, 3, 3]: K W H,
    whose rows (M_u, M_v, M_w) map a splat point (u, v, 1) to homogeneous pixels (x z, y z, z);
    opacities [C, N]; colors [C, N, D] (already evaluated SH or given colours); depths [C, N]
    camera-space z of the centres (the sort key); normals [C, N, 3] unit camera-frame normals turned to
    face the camera; radii [C, N, 2] int32 (0 = culled, never composited). Culled pairs hold zeros.
    """

    means2d: Tensor
    ray_transforms: Tensor
    opacities: Tensor
    colors: Tensor
    depths: Tensor
    normals: Tensor
    radii: Tensor


@dataclass(frozen=True)
class SurfelComposited:
    """What a surfel ``composite`` returns, all [C, H, W, .] and differentiable: render (D colour
    channels, no background), alpha (1), transmittance (1, prod (1 - alpha_i)), depth (1, expected
    depth, sum w_i z_i / alpha), median_depth (1), normals (3, camera frame, sum w_i n_i) and
    distortion (1, 2 sum_i w_i sum_{j<i} w_j (z_i - z_j))."""

    render: Tensor
    alpha: Tensor
    transmittance: Tensor
    depth: Tensor
    median_depth: Tensor
    normals: Tensor
    distortion: Tensor


@dataclass
class SurfelMeta:
    """Per-render metadata of :func:`rasterizer.rasterize_surfels` (C cameras, N surfels).

    radii [C, N, 2] int32 (0 = culled); means2d [C, N, 2] (its ``.grad`` holds d loss / d means2d
    after backward, reference and cpu backends; only the low-pass fallback depends on it directly);
    depths [C, N] camera-space z of the centres; ray_transforms [C, N, 3, 3] (K W H, see
    :class:`SurfelSplats`; its ``.grad`` after backward, reference and cpu backends: gsplat's 2DGS
    densification statistic is (grad[..., 0, 2], grad[..., 1, 2]) x depth); normals [C, N, 3]
    per-surfel camera-frame normals facing the camera;
    opacities [C, N] as composited; transmittance [C, H, W, 1]; width, height, tile_size, tiles_x,
    tiles_y, n_cameras; ``backend_extras``: what a backend adds (cuda: the rest of gsplat's meta, e.g.
    ``gradient_2dgs``, gsplat's densification gradient).
    """

    radii: Tensor
    means2d: Tensor
    depths: Tensor
    ray_transforms: Tensor
    normals: Tensor
    opacities: Tensor
    transmittance: Tensor
    width: int
    height: int
    tile_size: int
    tiles_x: int
    tiles_y: int
    n_cameras: int
    backend_extras: dict[str, Any] = field(default_factory=dict)


class SurfelRender(NamedTuple):
    """What :func:`rasterizer.rasterize_surfels` returns (C cameras, H x W pixels), all differentiable.

    render [C, H, W, D] colours (backgrounds blended in); alpha [C, H, W, 1]; depth [C, H, W, 1]
    expected depth sum w_i z_i / max(alpha, 1e-10) (0 where nothing is seen); median_depth [C, H, W, 1]
    depth of the last blended surfel whose incoming transmittance is above 0.5 (0 where none);
    normals [C, H, W, 3] camera frame (OpenCV) and normals_world [C, H, W, 3] world frame, both
    sum w_i n_i (alpha-weighted, not normalised: divide by alpha, or normalise, for unit normals);
    distortion [C, H, W, 1] depth distortion 2 sum_i w_i sum_{j<i} w_j (z_i - z_j) (= sum_{i,j} w_i
    w_j |z_i - z_j| when depths come in order); meta :class:`SurfelMeta`.
    """

    render: Tensor
    alpha: Tensor
    depth: Tensor
    median_depth: Tensor
    normals: Tensor
    normals_world: Tensor
    distortion: Tensor
    meta: SurfelMeta
