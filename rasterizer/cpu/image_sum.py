"""The `cpu` sum-mode renderer of image Gaussians (GaussianImage): Numba kernels, hand-written backward.

Same numerics as ``rasterizer/image/reference.py`` (the specification; float64 tests at 1e-9):
render[y, x] = sum_n colour_n exp(-0.5 q_n), q_n = d^T conic_n d, over the Gaussians whose window holds
the pixel centre (the 3-sigma ellipse q <= 9, or the fixed box of half extents ``extents``).

- Windows: each row of a Gaussian's inclusive pixel box is covered by windows of TS = 16 columns, starting at
  the box's first column rounded down to ALIGN = 4 and every TS columns after. Windows aligned to the box
  rather than to the tiles evaluate 24% fewer lanes (5.7M instead of 7.5M for 25,000 Gaussians fitted to
  500x500; ALIGN 1, 2 and 8 measured slower: misaligned read-modify-writes, or more lanes).
- Binning: a Gaussian goes to each 16x16 tile that holds one of its window starts in one of its rows (in
  Gaussian order: counted and filled per contiguous chunk of Gaussians, chunk after chunk, in parallel for many
  Gaussians).
- Forward: the threads claim rows of tiles one at a time (schedule.claim: a thread that starts late takes
  fewer); along a row, tile by tile, per Gaussian, per row of its box in the tile, its window's 16 columns in
  one flat branch-free loop that LLVM vectorises whole (``exp_kernel``: the vectorisable float32 exp; columns
  outside the box and, for the ellipse, pixels with q > 9 get weight 0), added into a channel-major strip of
  the row of tiles (a window spills into the next tile), written out once. (Bands of 16 full-width rows
  binned without tiles, so that each pixel summed its Gaussians in ascending order, measured 18% slower:
  the band's Gaussians land all over the strip.)
- The no-grad render (rasterizer/image/api.py) prepares its inputs with cpu/image_geometry.py instead of
  PyTorch ops and calls tile_lists and forward_render directly.
- Backward: Gaussians in parallel (race-free: each owns its gradients), each over its own rows and windows,
  reading d loss / d render; the mean and conic gradients come from five per-Gaussian sums.
- Both vector loops are compiled for 512-bit registers where the CPU has AVX-512 (``vecmath.wide_vectors``):
  a 16-lane float32 row is one vector instead of two. On a 2-vCPU Xeon (AVX-512) the 500x500 render went from
  5.0-5.3 to 4.2-4.4 ms and the fit step from 16.9 to 15.5 ms; the forward's sums are the same bits (each lane
  does the same float operations), the backward's reductions are added in another order (1e-8 relative).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange
from torch import Tensor

from .launch import KERNEL_LOCK
from .launch import kernel_array
from .schedule import claim, dealt_block, dealt_iterations, thread_count
from .vecmath import FASTMATH, U, exp_kernel, like, radd, select, wide_vectors

TS = 16  # tile size in pixels
ALIGN = 4  # windows start at a multiple of ALIGN columns (16-byte aligned float32 vectors; the fastest of 1, 2,
# 4, 8 and 16 in a measurement at 500x500 and 2000x2000)
Q_MAX = 9.0  # the 3-sigma ellipse: q <= 3^2
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
def first_window(x0):
    """The first column of a box's first window: its first column x0 rounded down to ALIGN (the windows are
    first_window(x0) + k TS, k = 0, 1, ... up to the box's last column)."""
    return x0 - x0 % ALIGN


@njit(cache=True, inline="always")
def count_box_tiles(x0, y0, x1, y1, tiles_x, counts):
    """counts[t + 1] += 1 for each tile t that holds the start of one of the box's windows in one of its rows
    (window_starts; none if the box is empty)."""
    if x1 < x0 or y1 < y0:
        return
    for ty in range(y0 // TS, y1 // TS + 1):
        for xs in range(first_window(x0), x1 + 1, TS):
            counts[ty * tiles_x + xs // TS + 1] += 1


@njit(cache=True)
def count_tiles(boxes, lo, hi, tiles_x, counts):
    """count_box_tiles of the boxes of Gaussians [lo, hi) into counts [T + 1]."""
    for g in range(lo, hi):
        count_box_tiles(boxes[g, 0], boxes[g, 1], boxes[g, 2], boxes[g, 3], tiles_x, counts)


@njit(cache=True)
def fill_tiles(boxes, lo, hi, tiles_x, fill, ids):
    """ids[fill[t]++] = g for each tile t of each box of Gaussians [lo, hi) (count_box_tiles), in order."""
    for g in range(lo, hi):
        x0, y0, x1, y1 = boxes[g, 0], boxes[g, 1], boxes[g, 2], boxes[g, 3]
        if x1 < x0 or y1 < y0:
            continue
        for ty in range(y0 // TS, y1 // TS + 1):
            for xs in range(first_window(x0), x1 + 1, TS):
                t = ty * tiles_x + xs // TS
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


@njit(cache=True, inline="always")
def centre(x, ref):
    """The centre x + 0.5 of pixel x (an int below 2^23) in ref's float type, computed in that type: exact,
    so the same value as float64 x + 0.5 rounded, without float64 arithmetic in the vector loops."""
    return like(x, ref) + like(0.5, ref)


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
        w = weight(a, b, c, centre(x, mx) - mx, dy, ellipse)
        wrow[i] = select((x >= x0) & (x <= x1), w, like(0.0, mx))


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def accumulate_rows3(a, b, c, mx, my, y_first, y_last, y_base, x_start, x0, x1, ellipse, c0, c1, c2, buf, d0):
    """Channels d0..d0+2 of one window, columns x_start..x_start + TS - 1, rows y_first..y_last, added into
    buf[d, y - y_base, x_start..]: per row, one fixed-width loop over the TS columns (weight and three channels per
    lane: LLVM vectorises it whole; a loop per channel measured 3x slower). Columns outside the box columns
    [x0, x1] get weight 0. The row loop lives here, with the vector loop, so that LLVM keeps the loop's
    constants in registers across rows."""
    zero = like(0.0, mx)
    xs, lo, hi = np.int32(x_start), np.int32(x0), np.int32(x1)
    for y in range(y_first, y_last + 1):
        dy = centre(y, mx) - my
        r = U(y - y_base)
        for i in range(TS):
            x = np.int32(xs + i)
            w = select((x >= lo) & (x <= hi), weight(a, b, c, centre(x, mx) - mx, dy, ellipse), zero)
            buf[d0, r, U(x_start + i)] += c0 * w
            buf[d0 + 1, r, U(x_start + i)] += c1 * w
            buf[d0 + 2, r, U(x_start + i)] += c2 * w


@njit(cache=True, inline="always")
def window_start(x0, tx0):
    """The start of the box's window (box columns x0, x0 + TS, x0 + 2 TS, ...) that lies in the tile whose first
    column is tx0 (binning put the Gaussian in this tile because one does)."""
    first = first_window(x0)
    return first if first >= tx0 else first + (tx0 - first + TS - 1) // TS * TS


@njit(cache=True, inline="always")
def channel(colors, g, d):
    """colors[g, d], or 0 past the last channel (channels are processed in groups of three)."""
    return colors[g, d] if d < colors.shape[1] else like(0.0, colors[g, 0])


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def tile_forward(means, conics, colors, boxes, offsets, ids, t, tiles_x, ellipse, buf):
    """Add the windows that start in tile t into its row of tiles, buf [D', TS, (tiles_x + 1) TS] (channel-major,
    image columns; a window spills up to TS - 1 columns into the next tile): per Gaussian, per row of its box in
    the tile, the TS columns from its window's start (window_start)."""
    wide_vectors()
    D = colors.shape[1]
    tx0, ty0 = (t % tiles_x) * TS, (t // tiles_x) * TS
    for k in range(offsets[t], offsets[t + 1]):
        g = ids[k]
        mx, my = means[g, 0], means[g, 1]
        a, b, c = conics[g, 0], conics[g, 1], conics[g, 2]
        x0, x1 = boxes[g, 0], boxes[g, 2]
        x_start = window_start(x0, tx0)
        y_first, y_last = max(boxes[g, 1], ty0), min(boxes[g, 3], ty0 + TS - 1)
        if D == 3:  # RGB: constant channel offsets vectorise best (measured 1.4x over the loop below)
            accumulate_rows3(a, b, c, mx, my, y_first, y_last, ty0, x_start, x0, x1, ellipse, colors[g, 0],
                             colors[g, 1], colors[g, 2], buf, 0)
            continue
        for d0 in range(0, D, 3):
            accumulate_rows3(a, b, c, mx, my, y_first, y_last, ty0, x_start, x0, x1, ellipse, colors[g, d0],
                             channel(colors, g, d0 + 1), channel(colors, g, d0 + 2), buf, d0)


@njit(cache=True, parallel=True, fastmath=FASTMATH, error_model="numpy")
def forward_kernel(means, conics, colors, boxes, offsets, ids, tiles_x, tiles_y, width, height, ellipse, threads,
                   counter, out):
    """out [H, W, D] = the sum of the windows, row of tiles by row of tiles: each of ``threads`` threads claims the
    next unclaimed row from ``counter`` [1] (zeroed by the caller; schedule.claim), adds it tile by tile, left to
    right, into its channel-major strip [D', TS, (tiles_x + 1) TS] (D rounded up to a multiple of 3;
    tile_forward), and writes the row out. A pixel's sum is the windows that started in the tile to its left
    (in Gaussian order), then those of its own tile, whichever thread adds them."""
    D = colors.shape[1]
    for _ in prange(threads):
        strip = np.empty((-(-D // 3) * 3, TS, (tiles_x + 1) * TS), colors.dtype)
        while True:
            ty = claim(counter)
            if ty >= tiles_y:
                break
            strip[:] = 0
            for tx in range(tiles_x):
                tile_forward(means, conics, colors, boxes, offsets, ids, ty * tiles_x + tx, tiles_x, ellipse, strip)
            ty0 = ty * TS
            for y in range(ty0, min(ty0 + TS, height)):
                for x in range(width):
                    for d in range(D):
                        out[y, x, d] = strip[d, y - ty0, x]


@njit(cache=True, parallel=True)
def channel_major_padded(v_out, height_pad, width_pad):
    """[H, W, D] -> [D, Hp, Wp] with zeros beyond the image (Hp >= H, Wp >= W)."""
    H, W, D = v_out.shape
    v = np.zeros((D, height_pad, width_pad), v_out.dtype)
    for y in prange(H):
        for x in range(W):
            for d in range(D):
                v[d, y, x] = v_out[y, x, d]
    return v


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def row_gradients3(a, b, c, mx, dy, x_start, x0, x1, ellipse, c0, c1, c2, v, y, s_x, s_y, s_xx, s_xy, s_yy):
    """One window row (TS columns from x_start) of a three-channel Gaussian's backward: the five running sums of
    s = d loss / d q (times dx, dy, dx^2, dx dy, dy^2) and the three colour-gradient sums of the row."""
    zero = like(0.0, mx)
    a0, a1, a2 = zero, zero, zero
    xs, lo, hi = np.int32(x_start), np.int32(x0), np.int32(x1)
    for i in range(TS):
        x = np.int32(xs + i)
        dx = centre(x, mx) - mx
        w = select((x >= lo) & (x <= hi), weight(a, b, c, dx, dy, ellipse), zero)
        v0, v1, v2 = v[0, y, U(x_start + i)], v[1, y, U(x_start + i)], v[2, y, U(x_start + i)]
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
    v [D, H, W + TS] (channel-major, zero-padded on the right), over its box in the forward's windows of TS
    columns (from the box's first column rounded down to ALIGN).
    With s = d loss / d q per pixel (-0.5 w sum_d v_d c_d): d/da = sum s dx^2, d/db = sum 2 s dx dy,
    d/dc = sum s dy^2, d/dmean = -sum s (2 (a dx + b dy), 2 (b dx + c dy))."""
    N, D = colors.shape
    for it in prange(dealt_iterations(N, threads)):
        wide_vectors()  # marks the loop body's function (Numba outlines a prange body into one of its own)
        lo_g, hi_g = dealt_block(it, N, threads)
        wrow = np.empty(TS, colors.dtype)
        dot = np.empty(TS, colors.dtype)
        for g in range(lo_g, hi_g):
            mx, my = means[g, 0], means[g, 1]
            a, b, c = conics[g, 0], conics[g, 1], conics[g, 2]
            zero = like(0.0, mx)
            s_x, s_y, s_xx, s_xy, s_yy = zero, zero, zero, zero, zero
            for y in range(boxes[g, 1], boxes[g, 3] + 1):
                dy = centre(y, mx) - my
                # the forward's windows
                for x_start in range(first_window(boxes[g, 0]), boxes[g, 2] + 1, TS):
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
                        dx = centre(x_start + i, mx) - mx
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


MAX_TILE_ENTRIES = 1 << 23
"""tile-list entries (int32 Gaussian ids: 32 MB) one forward pass of the no-grad render holds. The entries grow
with the Gaussians' sizes, not their count (a Gaussian spanning a 4000-pixel-square image has 62,500), so a
model of a million large Gaussians would need gigabytes of tile lists at once: above this the render is drawn
in contiguous chunks of Gaussians (:func:`entry_chunks`), each binned and rendered alone, and summed. (2^25
entries, 128 MB, with two chunks' lists alive at once, peaked at 1,012-1,044 MB RSS on a million Gaussians of
sigma 40 px at 1000x1000, 221M entries; 2^23, each chunk's lists freed first: 575 MB, 126 s CPU:
scripts/bench_image_memory.py, docs/fuzzing.md.)"""


@njit(cache=True)
def box_entries(boxes: np.ndarray) -> np.ndarray:
    """Tile-list entries [N] int64 of each pixel box [N, 4] (x0, y0, x1, y1 inclusive): what count_box_tiles
    counts (its rows of tiles times its windows per row; 0 for an empty box), without temporaries of N."""
    N = boxes.shape[0]
    out = np.zeros(N, np.int64)
    for g in range(N):
        x0, y0, x1, y1 = boxes[g, 0], boxes[g, 1], boxes[g, 2], boxes[g, 3]
        if x1 >= x0 and y1 >= y0:
            out[g] = (y1 // TS - y0 // TS + 1) * ((x1 - first_window(x0)) // TS + 1)
    return out


def entry_chunks(entries: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Contiguous ranges [lo, hi) of Gaussians, in order and covering all of them, each holding at most
    ``budget`` tile-list entries (a single Gaussian above it: a range of its own)."""
    ends = np.cumsum(entries)
    ranges, lo = [], 0
    while lo < len(entries):
        start = ends[lo - 1] if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, start + budget, side="right")))
        ranges.append((lo, hi))
        lo = hi
    return ranges


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
                       ellipse, thread_count(), np.zeros(1, np.int64), out)
    return out


def colors_dtype(col: np.ndarray) -> torch.dtype:
    return torch.float64 if col.dtype == np.float64 else torch.float32


class SumComposite(torch.autograd.Function):
    """render [H, W, D] from means_px [N, 2], conics [N, 3], colors [N, D]; extents [N, 2] (no gradient)."""

    @staticmethod
    def forward(ctx, means_px, conics, colors, extents, width, height, ellipse):
        means, con, col = kernel_array(means_px), kernel_array(conics), kernel_array(colors)
        boxes = pixel_boxes(means, kernel_array(extents.to(means_px.dtype)), width, height)
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
                v = channel_major_padded(kernel_array(v_render.to(colors_dtype(col))), H, W + TS)
                backward_kernel(means, con, col, boxes, v, ellipse, thread_count(), g_means, g_conics, g_colors)
        return (torch.from_numpy(g_means), torch.from_numpy(g_conics), torch.from_numpy(g_colors), None, None, None,
                None)


def sum_composite_cpu(means_px: Tensor, conics: Tensor, colors: Tensor, extents: Tensor, width: int, height: int,
                      ellipse: bool) -> Tensor:
    """The cpu backend's sum-mode render [H, W, D]; arguments as ``sum_composite_reference``."""
    return SumComposite.apply(means_px, conics, colors, extents, width, height, ellipse)
