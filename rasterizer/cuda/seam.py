"""gsplat's CUDA kernels behind the pipeline seam: ``project``, ``sh_to_color`` and ``composite`` as
separate steps (the same signatures as the reference and cpu backends; see rasterizer/DESIGN.md).

``rasterize_gaussians(..., backend="cuda")`` does not use this module: it calls gsplat's fused
``rasterization``, which measured faster on an H100 (``scripts/bench_cuda_seam.py``; numbers in
rasterizer/DESIGN.md). These steps are for code that needs the screen-space record between the two
halves (a hybrid renderer that inserts its own splats, a custom compositor), and they are the measured
alternative. CUDA tensors only; gsplat is imported lazily.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..records import Composited, Splats
from ..reference.projection import Projection
from ..reference.sh import join_sh
from ..tiles import TileGrid
from ..validate import RasterizerInputError


def _upper_triangle(covars: Tensor) -> Tensor:
    """[N, 3, 3] symmetric -> [N, 6] (xx, xy, xz, yy, yz, zz), gsplat's flattened covariance."""
    i, j = torch.triu_indices(3, 3, device=covars.device)
    return covars[:, i, j]


def project(means, quats, scales, covars, viewmats, Ks, width, height, *, eps2d, near_plane, far_plane,
            opacities, antialiased) -> Projection:
    """Projection step with ``gsplat.fully_fused_projection`` (non-packed: [C, N, ...]).

    Returns :class:`Projection` (means2d [C, N, 2], conics [C, N, 3], depths [C, N], radii [C, N, 2]
    int32, compensations [C, N]: ones in classic mode, as the other backends)."""
    from gsplat import fully_fused_projection

    flat = None if covars is None else _upper_triangle(covars)
    radii, means2d, depths, conics, comp = fully_fused_projection(
        means, flat, None if flat is not None else quats, None if flat is not None else scales, viewmats, Ks,
        width, height, eps2d=eps2d, near_plane=near_plane, far_plane=far_plane, packed=False,
        calc_compensations=antialiased, opacities=opacities)
    if comp is None:
        comp = depths.new_ones(depths.shape)
    return Projection(means2d, conics, depths, radii, comp)


def sh_to_color(degree: int, means: Tensor, coeffs, viewmats: Tensor, radii: Tensor | None = None) -> Tensor:
    """View-dependent colours [C, N, 3] = max(SH(dir) + 0.5, 0) with gsplat's SH kernel; the reference's
    signature and meaning (culled pairs, radii == 0, are 0)."""
    from gsplat import spherical_harmonics

    coeffs = join_sh(coeffs)
    C = viewmats.shape[0]
    centres = torch.linalg.inv(viewmats)[:, :3, 3]  # [C, 3] camera centres in world
    dirs = means[None] - centres[:, None]  # [C, N, 3]
    masks = None if radii is None else (radii > 0).all(dim=-1)
    shs = coeffs[None].expand(C, -1, -1, -1)
    return torch.clamp_min(spherical_harmonics(degree, dirs, shs, masks=masks) + 0.5, 0.0)


def composite(splats: Splats, width: int, height: int, grid: TileGrid, *, absgrad_acc: Tensor | None = None,
              depth_limit: Tensor | None = None) -> Composited:
    """Compositing step: ``isect_tiles`` + ``isect_offset_encode`` + ``rasterize_to_pixels``.

    Returns render [C, H, W, D], alpha [C, H, W, 1] and transmittance 1 - alpha (gsplat keeps no
    separate transmittance). With ``absgrad_acc`` given, gsplat's backward sets ``splats.means2d.absgrad``
    [C, N, 2] itself (it replaces the accumulator the caller hung there; ``RenderMeta.absgrad`` reads the
    attribute). gsplat has no per-pixel depth limit: ``depth_limit`` is refused.
    """
    from gsplat import isect_offset_encode, isect_tiles, rasterize_to_pixels

    if depth_limit is not None:
        raise RasterizerInputError("rasterizer.cuda.seam.composite: gsplat's kernels have no per-pixel depth "
                                   "limit; composite with the reference backend instead")
    C = splats.n_cameras
    _, isect_ids, flatten_ids = isect_tiles(splats.means2d, splats.radii, splats.depths, grid.tile_size,
                                            grid.tiles_x, grid.tiles_y, packed=False, n_images=C)
    offsets = isect_offset_encode(isect_ids, C, grid.tiles_x, grid.tiles_y).reshape(C, grid.tiles_y, grid.tiles_x)
    render, alpha = rasterize_to_pixels(splats.means2d, splats.conics, splats.colors, splats.opacities, width, height,
                                        grid.tile_size, offsets, flatten_ids, packed=False,
                                        absgrad=absgrad_acc is not None)
    return Composited(render, alpha, 1.0 - alpha)

