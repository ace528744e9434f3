"""Differentiable compositing on the CPU: a torch.autograd.Function around the Numba kernels."""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor

from ..records import Composited, Splats
from ..tiles import TileGrid
from . import binning as B
from . import compositing as K
from . import forward_only
from .launch import KERNEL_LOCK
from .launch import for_threads, kernel_array
from .schedule import thread_count
from .sort import depth_order


def interleaved_tile_order(n_tiles: int) -> np.ndarray:
    """Tile visiting order that deals neighbouring tiles to different threads (load balance under
    static scheduling: busy regions of the image are shared by all threads)."""
    n_threads = max(1, numba.get_num_threads())
    if n_threads == 1:
        return np.arange(n_tiles, dtype=np.int64)  # (what the sort gives)
    return np.argsort(np.arange(n_tiles) % n_threads, kind="stable").astype(np.int64)


class BinnedTiles:
    """Per-tile depth-sorted Gaussian lists for C cameras (numpy; the fields of binning.Bins) and the
    tile visiting order, computed once per render. ``chords`` [C*N, chords.ROWS] (float64 numpy, the
    splats' row chords: rasterizer.cpu.chords) replaces the conics' tile test (binning.bin_gaussians);
    conics [C, N, 3] None: no conic test (with chords None too, every tile of each box)."""

    def __init__(self, means2d: Tensor, conics: Tensor | None, opac: Tensor, radii: Tensor, depths: Tensor,
                 grid: TileGrid, width: int, height: int, chords: np.ndarray | None = None):
        C, N = depths.shape
        self.depths32 = kernel_array(depths.detach().to(torch.float32))  # [C, N] the sort keys
        with KERNEL_LOCK:
            order = depth_order(self.depths32, kernel_array(radii))
        self.row_half, self.offsets, self.ids, self.perm, self.starts, self.counts = B.bin_gaussians(
            order, kernel_array(means2d.reshape(C * N, 2)), kernel_array(radii.reshape(C * N, 2)),
            None if conics is None else kernel_array(conics.reshape(C * N, 3)),
            kernel_array(opac.reshape(C * N)), N, grid.tiles_x, grid.tiles_y, grid.tile_size, width, height, chords)
        self.order = interleaved_tile_order(C * grid.tiles_x * grid.tiles_y)


def depth_limits32(depth_limit: Tensor | None) -> np.ndarray | None:
    """Depth limits [C, H, W] as the kernels compare them: float32, clamped to +-NO_LIMIT (no infinities)."""
    if depth_limit is None:
        return None
    return np.clip(kernel_array(depth_limit.to(torch.float32)), -K.NO_LIMIT, K.NO_LIMIT)


class CompositeFunction(torch.autograd.Function):
    """render [C,H,W,D], alpha [C,H,W,1], transmittance [C,H,W,1] from means2d [C,N,2], conics [C,N,3],
    opacities [C,N], colors [C,N,D]; gradients for all four (and the |grad means2d| accumulator). With
    a depth limit [C,H,W] (no gradient) a pixel stops at the first Gaussian not in front of it."""

    @staticmethod
    def forward(ctx, means2d, conics, opac, colors, radii, depths, width, height, grid, absgrad_acc, will_backward,
                depth_limit):
        C, N, D = colors.shape
        flat = (kernel_array(means2d.reshape(C * N, 2)), kernel_array(conics.reshape(C * N, 3)), kernel_array(opac.reshape(C * N)),
                kernel_array(colors.reshape(C * N, D)))
        if grid.tile_size != K.TS:
            raise ValueError(f"the cpu backend composites {K.TS}x{K.TS} tiles, got tile_size={grid.tile_size}")
        bins = BinnedTiles(means2d, conics, opac, radii, depths, grid, width, height)
        if bins.ids.shape[0] >= 2**31:
            raise ValueError("more than 2^31 tile-Gaussian intersections (per-pixel indices are int32)")
        dtype = flat[3].dtype
        render = np.zeros((C, height, width, D), dtype)
        alpha = np.zeros((C, height, width, 1), dtype)
        T_final = np.ones((C, height, width, 1), dtype)
        last_ids = np.full((C, height, width), -1, np.int32)
        with KERNEL_LOCK:
            if will_backward:  # pack the intersections once for both passes (compositing.pack_intersections)
                packed, rows = K.pack_intersections(*flat, bins.row_half, bins.ids)
            else:
                packed = rows = None
            for_threads(K.forward_kernel, thread_count())(
                *flat, bins.row_half, bins.offsets, bins.ids, packed, rows, bins.order, width, height, grid.tiles_x,
                grid.tiles_y, grid.tile_size, bins.depths32.reshape(C * N), depth_limits32(depth_limit), render, alpha,
                T_final[..., 0], last_ids)
        transmittance = torch.from_numpy(T_final)
        ctx.save_for_backward(transmittance)  # the backward reads it: in-place changes must be caught
        ctx.state = (flat, bins, (packed, rows), last_ids, (C, N, D), width, height, grid, absgrad_acc)
        ctx.set_materialize_grads(False)
        return torch.from_numpy(render), torch.from_numpy(alpha), transmittance

    @staticmethod
    def backward(ctx, v_render, v_alpha, v_transmittance):
        flat, bins, (packed, rows), last_ids, (C, N, D), width, height, grid, absgrad_acc = ctx.state
        (transmittance,) = ctx.saved_tensors
        T_final = transmittance.numpy()[..., 0]
        dtype = flat[3].dtype
        v_render = np.zeros((C, height, width, D), dtype) if v_render is None else kernel_array(v_render)
        v_alpha = pixel_cotangent(v_alpha, v_transmittance, (C, height, width, 1), dtype)
        M = bins.ids.shape[0]
        g_means2d = np.zeros((M, 2), dtype)
        g_abs = np.zeros((M if absgrad_acc is not None else 0, 2), dtype)  # empty: not summed
        g_conics, g_opac, g_colors = np.zeros((M, 3), dtype), np.zeros((M, 1), dtype), np.zeros((M, D), dtype)
        with KERNEL_LOCK:
            K.backward_kernel(packed, rows, flat[3], bins.offsets, bins.ids, bins.order, width, height, grid.tiles_x,
                              grid.tiles_y, grid.tile_size, T_final, last_ids, v_render, v_alpha,
                              g_means2d, g_abs, g_conics, g_opac[:, 0], g_colors)
        G = C * N
        outs = (np.empty((G, 2), dtype), np.empty((G, 3), dtype), np.empty(G, dtype), np.empty((G, D), dtype))
        v_abs = np.empty((G if absgrad_acc is not None else 0, 2), dtype)
        with KERNEL_LOCK:
            K.sum_per_gaussian(g_means2d, g_conics, g_opac[:, 0], g_colors, g_abs, bins.perm, bins.starts,
                               bins.counts, *outs, v_abs, thread_count())
        if absgrad_acc is not None:
            absgrad_acc += torch.from_numpy(v_abs).to(absgrad_acc.dtype)
        v_means2d, v_conics, v_opac, v_colors = (torch.from_numpy(a) for a in outs)
        return (v_means2d.view(C, N, 2), v_conics.view(C, N, 3), v_opac.view(C, N), v_colors.view(C, N, D),
                None, None, None, None, None, None, None, None)


def pixel_cotangent(v_alpha: Tensor | None, v_transmittance: Tensor | None, shape: tuple, dtype) -> np.ndarray:
    """d loss / d alpha [C,H,W,1] as the kernels take it: alpha = 1 - T_final, so the transmittance's
    cotangent enters as -v_transmittance (zeros where neither output was used)."""
    if v_transmittance is None:
        return np.zeros(shape, dtype) if v_alpha is None else kernel_array(v_alpha)
    if v_alpha is None:
        return kernel_array(-v_transmittance)
    return kernel_array(v_alpha - v_transmittance)


def composite_cpu(splats: Splats, width: int, height: int, grid: TileGrid, *, absgrad_acc: Tensor | None = None,
                  depth_limit: Tensor | None = None) -> Composited:
    """Compositing step of the cpu backend (see CompositeFunction; arguments as the reference's
    ``composite``)."""
    s = splats
    will_backward = forward_only.needs_graph(s.means2d, s.conics, s.opacities, s.colors)
    return Composited(*forward_only.apply(CompositeFunction, s.means2d, s.conics, s.opacities, s.colors, s.radii,
                                          s.depths, width, height, grid, absgrad_acc, will_backward, depth_limit))
