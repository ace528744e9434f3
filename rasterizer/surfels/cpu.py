"""The surfels' `cpu` backend: Numba compositing (``cpu_kernels.py``) with a hand-written backward,
behind one autograd function, on the 3D path's depth sort and tile binning (``rasterizer.cpu``).

Binning: ``rasterizer.cpu.composite.BinnedTiles`` with the surfels' row chords (``pack_surfels``; the
layout and tests of ``rasterizer.cpu.chords``) as its tile test: the reference's ``intersect_tiles``
pairs less those whose surfel the kernels' row trim finds no row of the tile for (it reaches no pixel
there with alpha >= 1/255), so every output and gradient is the one of the whole box, bit for bit. The
projection is ``cpu_projection.py`` (Numba, hand-written backward; cameras get no gradient, as in the 3D cpu
backend) and SH colours are the 3D cpu backend's kernels. Every parallel launch holds ``KERNEL_LOCK``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ..cpu.binning import major_rows, sum_major_rows
from ..cpu.composite import BinnedTiles
from ..cpu.launch import KERNEL_LOCK
from ..cpu.launch import kernel_array
from ..cpu.schedule import thread_count
from ..tiles import TileGrid
from . import cpu_kernels as K
from .records import SurfelComposited, SurfelSplats


def _cotangent(v: Tensor | None, shape: tuple, dtype) -> np.ndarray:
    return np.zeros(shape, dtype) if v is None else kernel_array(v)


class SurfelCompositeFunction(torch.autograd.Function):
    """(render [C,H,W,D], alpha (sum w), transmittance, wz (sum w z), median depth, normals (3),
    distortion) from means2d [C,N,2], ray_transforms [C,N,3,3], opacities [C,N], colors [C,N,D],
    depths [C,N], normals [C,N,3]; gradients for all six. With a depth limit [C,H,W] (camera z, +inf
    none; no gradient) a surfel at or behind a pixel's limit is skipped there (``composite.py``)."""

    @staticmethod
    def forward(ctx, means2d, ray_transforms, opac, colors, depths, normals, radii, width, height, grid, intersection,
                depth_limit):
        C, N, D = colors.shape
        flat = (kernel_array(ray_transforms.reshape(C * N, 9)), kernel_array(means2d.reshape(C * N, 2)), kernel_array(opac.reshape(C * N)),
                kernel_array(colors.reshape(C * N, D)), kernel_array(depths.reshape(C * N)), kernel_array(normals.reshape(C * N, 3)))
        dt = flat[3].dtype
        packed, rows = np.empty((C * N, K.PACKED), dt), np.empty((C * N, K.ROWS))
        with KERNEL_LOCK:
            K.pack_surfels(*flat, kernel_array(radii.reshape(C * N, 2)), packed, rows)
        bins = BinnedTiles(means2d, None, opac, radii, depths, grid, width, height, chords=rows)  # chords: the tiles
        if bins.ids.shape[0] >= 2**31:
            raise ValueError("more than 2^31 tile-surfel intersections (per-pixel indices are int32)")
        limits = kernel_limits(depth_limit, dt)
        img = lambda ch: np.zeros((C, height, width, ch), dt)  # noqa: E731
        render, alpha, T, wz, median, nrm, dist = img(D), img(1), img(1), img(1), img(1), img(3), img(1)
        last_k = np.empty((C, height, width), np.int32)
        median_k = np.empty((C, height, width), np.int32)
        with KERNEL_LOCK:
            K.forward_kernel(packed, rows, flat[3], bins.offsets, bins.ids, bins.order, width, height, grid.tiles_x,
                             grid.tiles_y, intersection, limits, render, alpha, T, wz, median, nrm, dist, last_k,
                             median_k)
        outs = tuple(torch.from_numpy(a) for a in (render, alpha, T, wz, median, nrm, dist))
        ctx.save_for_backward(outs[1], outs[2], outs[3])  # the backward reads them: in-place changes are caught
        ctx.state = (flat[3], (packed, rows), bins, last_k, median_k, (C, N, D), width, height, grid, intersection,
                     limits)
        ctx.set_materialize_grads(False)
        return outs

    @staticmethod
    def backward(ctx, v_render, v_alpha, v_T, v_wz, v_median, v_normals, v_dist):
        (colors, (packed, rows), bins, last_k, median_k, (C, N, D), width, height, grid, intersection,
         limits) = ctx.state
        alpha, T, wz = (kernel_array(t) for t in ctx.saved_tensors)
        dt = colors.dtype
        shape = lambda ch: (C, height, width, ch)  # noqa: E731
        cot = [_cotangent(v, shape(ch), dt) for v, ch in ((v_render, D), (v_alpha, 1), (v_T, 1), (v_wz, 1),
                                                           (v_median, 1), (v_normals, 3), (v_dist, 1))]
        grads = np.empty((bins.ids.shape[0], K.G_COLOR + D), dt)  # every row written by the kernel
        per_surfel = np.empty((C * N, K.G_COLOR + D), dt)
        with KERNEL_LOCK:
            row_of = major_rows(bins.perm)
            K.backward_kernel(packed, rows, colors, bins.offsets, bins.ids, row_of, bins.order, width, height,
                              grid.tiles_x, grid.tiles_y, intersection, limits, alpha, T, wz, last_k, median_k, *cot,
                              grads)
            sum_major_rows(grads, bins.starts, bins.counts, per_surfel, thread_count())
        g = torch.from_numpy(per_surfel)
        return (g[:, K.G_MEANS2D:K.G_M].reshape(C, N, 2), g[:, K.G_M:K.G_OPAC].reshape(C, N, 3, 3),
                g[:, K.G_OPAC].reshape(C, N), g[:, K.G_COLOR:].reshape(C, N, D), g[:, K.G_DEPTH].reshape(C, N),
                g[:, K.G_NORMAL:K.G_COLOR].reshape(C, N, 3), None, None, None, None, None, None)


def kernel_limits(depth_limit: Tensor | None, dt) -> np.ndarray | None:
    """Depth limits [C, H, W] as the kernels compare them: in the storage dtype ``dt``, each rounded up to
    the nearest value of that dtype (for a depth z of that dtype, z >= rounded limit exactly when
    z >= limit: the specification's float64 comparison) and clamped to the dtype's largest finite
    value (the kernels' "no limit"; they are compiled without infinities)."""
    if depth_limit is None:
        return None
    lim64 = kernel_array(depth_limit.to(torch.float64))
    lim = lim64.astype(dt)
    lim = np.where(lim < lim64, np.nextafter(lim, np.array(np.inf, dt)), lim)
    big = np.finfo(dt).max
    return np.ascontiguousarray(np.clip(lim, -big, big))


def composite_surfels_cpu(splats: SurfelSplats, grid: TileGrid, width: int, height: int,
                          surfel_depth: str = "centre", depth_limit: Tensor | None = None) -> SurfelComposited:
    """Compositing step of the surfels' cpu backend; same outputs (and ``depth_limit``) as
    ``composite_surfels_reference``."""
    from .composite import DEPTH_ALPHA_MIN

    if grid.tile_size != 16:
        raise ValueError(f"the cpu backend composites 16x16 tiles, got tile_size={grid.tile_size}")
    s = splats
    render, alpha, T, wz, median, normals, dist = SurfelCompositeFunction.apply(
        s.means2d, s.ray_transforms, s.opacities, s.colors, s.depths, s.normals, s.radii, width, height, grid,
        surfel_depth == "intersection", depth_limit)
    depth = wz / alpha.clamp(min=DEPTH_ALPHA_MIN)
    return SurfelComposited(render, alpha, T, depth, median, normals, dist)
