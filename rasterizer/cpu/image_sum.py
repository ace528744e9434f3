"""The `cpu` sum-mode renderer of image Gaussians (GaussianImage): Numba kernels, hand-written backward.

Same numerics as ``rasterizer/image/reference.py`` (the specification; float64 tests at 1e-9):
render[y, x] = sum_n colour_n exp(-0.5 q_n), q_n = d^T conic_n d, over the Gaussians whose window holds
the pixel centre (the 3-sigma ellipse q <= 9, or the fixed box of half extents ``extents``).

- Binning: each Gaussian's inclusive pixel box goes to the 16x16 tiles it touches (in Gaussian order:
  counted and filled per contiguous chunk of Gaussians, chunk after chunk, in parallel for many Gaussians).
- Forward: runs of consecutive tiles in parallel; per tile, per Gaussian, per row of its box in the tile, the
  tile's 16 columns in one flat branch-free loop that LLVM vectorises whole (``exp_kernel``: the vectorisable
  float32 exp; columns outside the box and, for the ellipse, pixels with q > 9 get weight 0). Each tile
  accumulates in a channel-major buffer (one per run of tiles), written out once.
- The no-grad render (rasterizer/image/api.py) prepares its inputs with cpu/image_geometry.py instead of
  PyTorch ops and calls tile_lists and forward_render directly.
- Backward: Gaussians in parallel (race-free: each owns its gradients), each over its own rows and chords,
  reading d loss / d render; the mean and conic gradients come from five per-Gaussian sums.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange
from torch import Tensor

from .launch import KERNEL_LOCK
from .schedule import dealt_block, dealt_iterations, thread_count
from .vecmath import FASTMATH, U, exp_kernel, like, radd, select

TS = 16  # tile size in pixels
Q_MAX = 9.0  # the 3-sigma ellipse: q <= 3^2
FORWARD_CHUNKS_PER_THREAD = 4  # runs of consecutive tiles per thread in the forward (load balance)
PARALLEL_BINNING = 262_144  # Gaussians from which binning runs in parallel chunks. At 25,000 (500x500) two
# chunks took 0.41 vs 0.53 ms (best of 80), but a parallel launch waits for both threads: with the 2-core
# machine loaded 11 deep the fill averaged 14 ms per render (cProfile of 100), the serial one stays ~0.2 ms


@njit(cache=True, inline="always")
def pixel_box_axis(m, e, size, lim):
    """(first, last) inclusive pixel indices along one axis of ``size`` pixels whose centres lie within +-e of
    m, clipped to the image (empty: last < first); lim = max(width, height). Same arithmetic as
    geometry.pixel_ranges (clamped to [-1, lim] before rounding rather than after: the same integers, as the
    bounds are integers, and no float-to-int conversion of an out-of-range value)."""
    first = math.ceil(min(max(m - e - 0.5, -1.0), float(lim)))
    last = math.floor(min(max(m + e - 0.5, -1.0), float(lim)))
    return max(first, 0), min(last, size - 1)


@njit(cache=True)
def pixel_boxes(means, extents, width, height):
    """Inclusive pixel boxes [N, 4] (x0, y0, x1, y1) whose centres lie within +-extents of the mean,
    clipped to the image (empty: x1 < x0 or y1 < y0). Same arithmetic as geometry.pixel_ranges."""
    N = means.shape[0]
    boxes = np.empty((N, 4), np.int64)
    lim = max(width, height)
    for g in range(N):
        boxes[g, 0], boxes[g, 2] = pixel_box_axis(means[g, 0], extents[g, 0], width, lim)
        boxes[g, 1], boxes[g, 3] = pixel_box_axis(means[g, 1], extents[g, 1], height, lim)
    return boxes


@njit(cache=True, inline="always")
def chunk_range(c, N, chunks):
    """Gaussians [lo, hi) of chunk c of ``chunks`` contiguous chunks (binning keeps Gaussian order by
    writing chunk after chunk)."""
    return c * N // chunks, (c + 1) * N // chunks


@njit(cache=True, inline="always")
def count_box_tiles(x0, y0, x1, y1, tiles_x, counts):
    """counts[t + 1] += 1 for each tile t the inclusive pixel box touches (none if empty)."""
    if x1 < x0 or y1 < y0:
        return
    for ty in range(y0 // TS, y1 // TS + 1):
        for tx in range(x0 // TS, x1 // TS + 1):
            counts[ty * tiles_x + tx + 1] += 1


@njit(cache=True)
def count_tiles(boxes, lo, hi, tiles_x, counts):
    """count_box_tiles of the boxes of Gaussians [lo, hi) into counts [T + 1]."""
    for g in range(lo, hi):
        count_box_tiles(boxes[g, 0], boxes[g, 1], boxes[g, 2], boxes[g, 3], tiles_x, counts)


@njit(cache=True)
def fill_tiles(boxes, lo, hi, tiles_x, fill, ids):
    """ids[fill[t]++] = g for each tile t of each box of Gaussians [lo, hi), in order."""
    for g in range(lo, hi):
        x0, y0, x1, y1 = boxes[g, 0], boxes[g, 1], boxes[g, 2], boxes[g, 3]
        if x1 < x0 or y1 < y0:
            continue
        for ty in range(y0 // TS, y1 // TS + 1):
            for tx in range(x0 // TS, x1 // TS + 1):
                t = ty * tiles_x + tx
                ids[fill[t]] = g
                fill[t] += 1


@njit(cache=True, parallel=True)
def count_tiles_parallel(boxes, tiles_x, counts):
    """count_tiles of chunk c (chunk_range) into counts[c] [T + 1], chunks in parallel."""
    chunks, N = counts.shape[0], boxes.shape[0]
    for c in prange(chunks):
        lo, hi = chunk_range(c, N, chunks)
        count_tiles(boxes, lo, hi, tiles_x, counts[c])


@njit(cache=True, parallel=True)
def fill_tiles_parallel(boxes, tiles_x, fills, ids):
    """fill_tiles of chunk c from fills[c] [T], chunks in parallel (their slots never overlap)."""
    chunks, N = fills.shape[0], boxes.shape[0]
    for c in prange(chunks):
        lo, hi = chunk_range(c, N, chunks)
        fill_tiles(boxes, lo, hi, tiles_x, fills[c], ids)


@njit(cache=True)
def tile_offsets(counts):
    """From per-chunk tile counts [C, T + 1] (at t + 1): offsets [T + 1] of the tile lists and each chunk's
    first slot in each tile fills [C, T] (chunk c after chunks 0..c-1, so a tile's list is in Gaussian order)."""
    C, T = counts.shape[0], counts.shape[1] - 1
    offsets = np.zeros(T + 1, np.int64)
    fills = np.empty((C, T), np.int64)
    for t in range(T):
        acc = offsets[t]
        for c in range(C):
            fills[c, t] = acc
            acc += counts[c, t + 1]
        offsets[t + 1] = acc
    return offsets, fills


def tile_lists(boxes: np.ndarray, counts: np.ndarray, tiles_x: int) -> tuple[np.ndarray, np.ndarray]:
    """Tile lists: offsets [T + 1] and Gaussian ids [M] int32 (ascending within each tile) of boxes [N, 4],
    given each chunk's tile counts [C, T + 1] (count_tiles of chunk_range(c, N, C); C = 1: one thread)."""
    offsets, fills = tile_offsets(counts)
    ids = np.empty(offsets[-1], np.int32)
    if counts.shape[0] == 1:
        fill_tiles(boxes, 0, boxes.shape[0], tiles_x, fills[0], ids)
    else:
        with KERNEL_LOCK:
            fill_tiles_parallel(boxes, tiles_x, fills, ids)
    return offsets, ids


def bin_boxes(boxes: np.ndarray, tiles_x: int, tiles_y: int, chunks: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Tile lists: offsets [T + 1] and Gaussian ids [M] int32 (ascending within each tile) of the boxes [N, 4],
    counted and filled in ``chunks`` contiguous chunks of Gaussians (in parallel when > 1)."""
    counts = np.zeros((chunks, tiles_x * tiles_y + 1), np.int64)
    if chunks == 1:
        count_tiles(boxes, 0, boxes.shape[0], tiles_x, counts[0])
    else:
        with KERNEL_LOCK:
            count_tiles_parallel(boxes, tiles_x, counts)
    return tile_lists(boxes, counts, tiles_x)


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def weight(a, b, c, dx, dy, ellipse):
    """exp(-0.5 q), 0 outside the ellipse when ``ellipse``; branch-free."""
    q = a * dx * dx + like(2.0, dx) * b * dx * dy + c * dy * dy
    w = exp_kernel(like(-0.5, dx) * q)
    return select(ellipse & (q > like(Q_MAX, dx)), like(0.0, dx), w)


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def row_weights(a, b, c, mx, dy, x_start, x0, x1, ellipse, wrow):
    """wrow[i] = weight of column x_start + i (i < TS), 0 outside the box columns [x0, x1]: a fixed trip
    count, so LLVM vectorises it whole (no scalar remainder)."""
    for i in range(TS):
        x = x_start + i
        w = weight(a, b, c, like(x + 0.5, mx) - mx, dy, ellipse)
        wrow[i] = select((x >= x0) & (x <= x1), w, like(0.0, mx))


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def accumulate_row3(a, b, c, mx, dy, x_start, x0, x1, ellipse, c0, c1, c2, buf, d0, r):
    """Channels d0..d0+2 of one tile row in one fixed-width loop (weight and three channels per lane: LLVM
    vectorises it whole; a loop per channel measured 3x slower)."""
    zero = like(0.0, mx)
    for i in range(TS):
        x = x_start + i
        w = select((x >= x0) & (x <= x1), weight(a, b, c, like(x + 0.5, mx) - mx, dy, ellipse), zero)
        buf[d0, r, i] += c0 * w
        buf[d0 + 1, r, i] += c1 * w
        buf[d0 + 2, r, i] += c2 * w


@njit(cache=True, inline="always")
def channel(colors, g, d):
    """colors[g, d], or 0 past the last channel (channels are processed in groups of three)."""
    return colors[g, d] if d < colors.shape[1] else colors[g, 0] * 0


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def tile_forward(means, conics, colors, boxes, offsets, ids, t, tiles_x, ellipse, buf):
    """Accumulate tile t's Gaussians into buf [D', TS, TS] (channel-major, zeroed by the caller) by rows of TS
    columns. (Half-width rows for the 57% of rows at 500x500 whose box columns lie within half a tile were
    about 10% faster in one measurement, but LLVM contracts their arithmetic into FMAs differently, so pixels
    at q = 9 flipped: not bit-identical to the full rows, not used.)"""
    D = colors.shape[1]
    tx0, ty0 = (t % tiles_x) * TS, (t // tiles_x) * TS
    for k in range(offsets[t], offsets[t + 1]):
        g = ids[k]
        mx, my = means[g, 0], means[g, 1]
        a, b, c = conics[g, 0], conics[g, 1], conics[g, 2]
        x0, x1 = boxes[g, 0], boxes[g, 2]
        for y in range(max(boxes[g, 1], ty0), min(boxes[g, 3], ty0 + TS - 1) + 1):
            dy = like(y + 0.5, mx) - my
            r = U(y - ty0)
            if D == 3:  # RGB: constant channel offsets vectorise best (measured 1.4x over the loop below)
                accumulate_row3(a, b, c, mx, dy, tx0, x0, x1, ellipse, colors[g, 0], colors[g, 1], colors[g, 2],
                                buf, 0, r)
                continue
            for d0 in range(0, D, 3):
                accumulate_row3(a, b, c, mx, dy, tx0, x0, x1, ellipse, colors[g, d0], channel(colors, g, d0 + 1),
                                channel(colors, g, d0 + 2), buf, d0, r)


@njit(cache=True, parallel=True, fastmath=FASTMATH, error_model="numpy")
def forward_kernel(means, conics, colors, boxes, offsets, ids, tiles_x, tiles_y, width, height, ellipse, chunks, out):
    """out [H, W, D] = the sum over each tile's Gaussians: ``chunks`` runs of consecutive tiles in parallel,
    each with one channel-major [D', TS, TS] buffer (D rounded up to a multiple of 3), zeroed per tile,
    filled by tile_forward, then written out once."""
    D = colors.shape[1]
    T = tiles_x * tiles_y
    for ch in prange(chunks):
        buf = np.empty((-(-D // 3) * 3, TS, TS), colors.dtype)
        for t in range(ch * T // chunks, (ch + 1) * T // chunks):
            buf[:] = 0
            tile_forward(means, conics, colors, boxes, offsets, ids, t, tiles_x, ellipse, buf)
            tx0, ty0 = (t % tiles_x) * TS, (t // tiles_x) * TS
            for y in range(ty0, min(ty0 + TS, height)):
                for x in range(tx0, min(tx0 + TS, width)):
                    for d in range(D):
                        out[y, x, d] = buf[d, y - ty0, x - tx0]


@njit(cache=True, parallel=True)
def channel_major_padded(v_out, height_pad, width_pad):
    """[H, W, D] -> [D, Hp, Wp] with zeros beyond the image (Hp, Wp multiples of TS)."""
    H, W, D = v_out.shape
    v = np.zeros((D, height_pad, width_pad), v_out.dtype)
    for y in prange(H):
        for x in range(W):
            for d in range(D):
                v[d, y, x] = v_out[y, x, d]
    return v


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def row_gradients3(a, b, c, mx, dy, x_start, x0, x1, ellipse, c0, c1, c2, v, y, s_x, s_y, s_xx, s_xy, s_yy):
    """One tile-aligned row of TS columns of a three-channel Gaussian's backward: the five running sums of
    s = d loss / d q (times dx, dy, dx^2, dx dy, dy^2) and the three colour-gradient sums of the row."""
    zero = like(0.0, mx)
    a0, a1, a2 = zero, zero, zero
    for i in range(TS):
        x = x_start + i
        dx = like(x + 0.5, mx) - mx
        w = select((x >= x0) & (x <= x1), weight(a, b, c, dx, dy, ellipse), zero)
        v0, v1, v2 = v[0, y, U(x)], v[1, y, U(x)], v[2, y, U(x)]
        a0 = radd(a0, v0 * w)
        a1 = radd(a1, v1 * w)
        a2 = radd(a2, v2 * w)
        s = like(-0.5, mx) * w * (v0 * c0 + v1 * c1 + v2 * c2)
        s_x = radd(s_x, s * dx)
        s_y = radd(s_y, s * dy)
        s_xx = radd(s_xx, s * dx * dx)
        s_xy = radd(s_xy, s * dx * dy)
        s_yy = radd(s_yy, s * dy * dy)
    return s_x, s_y, s_xx, s_xy, s_yy, a0, a1, a2


@njit(cache=True, parallel=True, fastmath=FASTMATH, error_model="numpy")
def backward_kernel(means, conics, colors, boxes, v, ellipse, threads, g_means, g_conics, g_colors):
    """Per Gaussian (in parallel, dealt in blocks): d loss / d (mean, conic, colour) from d loss / d render
    v [D, Hp, Wp] (channel-major, zero-padded to whole tiles), over its box in tile-aligned rows of TS columns.
    With s = d loss / d q per pixel (-0.5 w sum_d v_d c_d): d/da = sum s dx^2, d/db = sum 2 s dx dy,
    d/dc = sum s dy^2, d/dmean = -sum s (2 (a dx + b dy), 2 (b dx + c dy))."""
    N, D = colors.shape
    for it in prange(dealt_iterations(N, threads)):
        lo_g, hi_g = dealt_block(it, N, threads)
        wrow = np.empty(TS, colors.dtype)
        dot = np.empty(TS, colors.dtype)
        for g in range(lo_g, hi_g):
            mx, my = means[g, 0], means[g, 1]
            a, b, c = conics[g, 0], conics[g, 1], conics[g, 2]
            zero = like(0.0, mx)
            s_x, s_y, s_xx, s_xy, s_yy = zero, zero, zero, zero, zero
            for y in range(boxes[g, 1], boxes[g, 3] + 1):
                dy = like(y + 0.5, mx) - my
                for cx in range(boxes[g, 0] // TS, boxes[g, 2] // TS + 1):
                    x_start = cx * TS
                    if D == 3:  # RGB: one fixed-width loop for everything (vectorises whole)
                        s_x, s_y, s_xx, s_xy, s_yy, a0, a1, a2 = row_gradients3(
                            a, b, c, mx, dy, x_start, boxes[g, 0], boxes[g, 2], ellipse, colors[g, 0], colors[g, 1],
                            colors[g, 2], v, y, s_x, s_y, s_xx, s_xy, s_yy)
                        g_colors[g, 0] += a0
                        g_colors[g, 1] += a1
                        g_colors[g, 2] += a2
                        continue
                    row_weights(a, b, c, mx, dy, x_start, boxes[g, 0], boxes[g, 2], ellipse, wrow)
                    for i in range(TS):
                        dot[i] = zero
                    for d in range(D):
                        cd = colors[g, d]
                        acc = zero
                        for i in range(TS):
                            vv = v[d, y, U(x_start + i)]
                            acc = radd(acc, vv * wrow[i])
                            dot[i] += vv * cd
                        g_colors[g, d] += acc
                    for i in range(TS):
                        dx = like(x_start + i + 0.5, mx) - mx
                        s = like(-0.5, mx) * wrow[i] * dot[i]
                        s_x = radd(s_x, s * dx)
                        s_y = radd(s_y, s * dy)
                        s_xx = radd(s_xx, s * dx * dx)
                        s_xy = radd(s_xy, s * dx * dy)
                        s_yy = radd(s_yy, s * dy * dy)
            g_conics[g, 0] = s_xx
            g_conics[g, 1] = 2.0 * s_xy
            g_conics[g, 2] = s_yy
            g_means[g, 0] = -2.0 * (a * s_x + b * s_y)
            g_means[g, 1] = -2.0 * (b * s_x + c * s_y)


def binning_chunks(n: int) -> int:
    """Chunks of Gaussians for binning n of them: one (no parallel launch) below PARALLEL_BINNING, else one per
    thread."""
    return 1 if n < PARALLEL_BINNING else thread_count()


def forward_render(means: np.ndarray, conics: np.ndarray, colors: np.ndarray, boxes: np.ndarray, offsets: np.ndarray,
                   ids: np.ndarray, width: int, height: int, ellipse: bool) -> np.ndarray:
    """render [H, W, D] (numpy, the colours' dtype) of pixel-space Gaussians and their tile lists (bin_boxes)."""
    out = np.empty((height, width, colors.shape[1]), colors.dtype)
    with KERNEL_LOCK:
        forward_kernel(means, conics, colors, boxes, offsets, ids, -(-width // TS), -(-height // TS), width, height,
                       ellipse, FORWARD_CHUNKS_PER_THREAD * thread_count(), out)
    return out


def _np(x: Tensor) -> np.ndarray:
    return x.detach().contiguous().numpy()


def colors_dtype(col: np.ndarray) -> torch.dtype:
    return torch.float64 if col.dtype == np.float64 else torch.float32


class SumComposite(torch.autograd.Function):
    """render [H, W, D] from means_px [N, 2], conics [N, 3], colors [N, D]; extents [N, 2] (no gradient)."""

    @staticmethod
    def forward(ctx, means_px, conics, colors, extents, width, height, ellipse):
        means, con, col = _np(means_px), _np(conics), _np(colors)
        boxes = pixel_boxes(means, _np(extents.to(means_px.dtype)), width, height)
        offsets, ids = bin_boxes(boxes, -(-width // TS), -(-height // TS), binning_chunks(boxes.shape[0]))
        out = forward_render(means, con, col, boxes, offsets, ids, width, height, ellipse)
        ctx.state = (means, con, col, boxes, ellipse)
        ctx.set_materialize_grads(False)
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx, v_render):
        means, con, col, boxes, ellipse = ctx.state
        g_means, g_conics, g_colors = np.zeros_like(means), np.zeros_like(con), np.zeros_like(col)
        if v_render is not None:
            with KERNEL_LOCK:
                H, W = v_render.shape[:2]
                v = channel_major_padded(_np(v_render.to(colors_dtype(col))), -(-H // TS) * TS, -(-W // TS) * TS)
                backward_kernel(means, con, col, boxes, v, ellipse, thread_count(), g_means, g_conics, g_colors)
        return (torch.from_numpy(g_means), torch.from_numpy(g_conics), torch.from_numpy(g_colors), None, None, None,
                None)


def sum_composite_cpu(means_px: Tensor, conics: Tensor, colors: Tensor, extents: Tensor, width: int, height: int,
                      ellipse: bool) -> Tensor:
    """The cpu backend's sum-mode render [H, W, D]; arguments as ``sum_composite_reference``."""
    return SumComposite.apply(means_px, conics, colors, extents, width, height, ellipse)
