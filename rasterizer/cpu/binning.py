"""Numba kernels of the `cpu` backend's tile binning: which 16x16 tiles each Gaussian reaches.

A Gaussian joins a tile only if its alpha can reach 1/255 at one of the tile's pixel centres (an exact
ellipse-vs-rectangle test, ``min_sigma_on_rect``; for splats described by row chords instead, the
surfels, the columns their ellipse and disc reach in each tile row, ``chords.band_columns``); pairs are
laid out Gaussian by Gaussian in depth order, then counting-sorted by tile (stable: depth order within
a tile). ``bin_gaussians`` runs it all and returns :class:`Bins`, which the compositing kernels
(``compositing.py``) read.

Arrays are flattened over cameras: Gaussian index g = c * N + n; tile index t = c * TT + ty * TW + tx.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .chords import band_columns, chord_ellipse, chord_pad
from .launch import KERNEL_LOCK, for_threads
from .schedule import dealt_block, dealt_iterations, thread_count
from .vecmath import like, prefetch_span

SPAN_MARGIN = 1e-4  # pixels added to each analytic span: rounding can never drop a contributing pixel


@njit(cache=True, inline="always")
def alpha_level(opacity):
    """sigma level below which alpha = opacity exp(-sigma) >= 1/255 (negative: never)."""
    if opacity <= 0.0:
        return -1.0
    return math.log(opacity * 255.0) + 1e-9


@njit(cache=True, inline="always")
def is_positive_definite(a, b, c):
    return a > 0.0 and c > 0.0 and a * c - b * b > 0.0


@njit(cache=True, inline="always")
def min_sigma_on_rect(mx, my, a, b, c, inv_a, inv_c, xlo, xhi, ylo, yhi):
    """Minimum of 0.5 (a dx^2 + c dy^2) + b dx dy, d = p - mean, over p in [xlo,xhi] x [ylo,yhi]
    (positive-definite conic; inv_a = 1/a, inv_c = 1/c). The minimum of a convex quadratic over a
    rectangle not containing its centre lies on an edge: minimise along each of the four edges."""
    if xlo <= mx <= xhi and ylo <= my <= yhi:
        return 0.0
    best = math.inf
    dylo, dyhi = ylo - my, yhi - my
    dxlo, dxhi = xlo - mx, xhi - mx
    for dx in (dxlo, dxhi):  # vertical edges: minimise over dy
        dy = min(max(-b * dx * inv_c, dylo), dyhi)
        best = min(best, 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy)
    for dy in (dylo, dyhi):  # horizontal edges: minimise over dx
        dx = min(max(-b * dy * inv_a, dxlo), dxhi)
        best = min(best, 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy)
    return best


MASK_TILES = 64  # boxes of at most this many tiles keep their reached tiles as a uint64 bitmask


@njit(cache=True)
def count_or_fill_tiles(g, tmin, tmax, means2d, conics, opac, chords, ts, W, H, tile_base, TW, out_tile, out_gauss,
                        pos):
    """Visit the tiles of Gaussian g's box that it can reach with alpha >= 1/255 at some pixel centre
    (a conservative test on the rectangle spanned by the tile's pixel centres, from its conic; or, with
    ``chords`` [G, chords.ROWS] given instead of None, from its row chords: the tile columns
    chords.band_columns finds per tile row, and ``conics`` may be None). With both None, every tile of
    the box. Each None is a separate compilation with its branch pruned.

    With out_tile empty (size 0) it only counts; else it writes tile ids and g from ``pos`` on.
    Returns (number of reached tiles, bitmask of them in box order (bit (ty - ty0) * box_w + tx - tx0)
    when the box has at most MASK_TILES tiles, else 0).

    Not ``inline="always"``: Numba 0.68's IR inlining of this function into the parallel loops of
    gaussian_extents and touched_tiles compiled a reach test that depended on what the process had
    compiled before (after the float64 pipeline the float32 kernel dropped reached tiles, a wrong render;
    otherwise it kept every tile of the box). As a plain call it matches its Python definition in every
    compile order (tests/rasterizer/test_cpu_binning.py::test_reach_test_keeps_exactly_the_reached_tiles)."""
    mask = np.uint64(0)
    if tmax[g, 0] <= tmin[g, 0] or tmax[g, 1] <= tmin[g, 1]:  # empty box (culled, or off the image)
        return 0, mask
    level = alpha_level(opac[g])
    if level < 0.0:
        return 0, mask
    if chords is not None:  # None: a separate compilation with this pruned
        ell = chord_ellipse(chords, g)
        pad = chord_pad(W, ts)
    elif conics is not None:
        mx, my = means2d[g, 0], means2d[g, 1]
        a, b, c = conics[g, 0], conics[g, 1], conics[g, 2]
        pd = is_positive_definite(a, b, c)
        inv_a = 1.0 / a if pd else 0.0
        inv_c = 1.0 / c if pd else 0.0
    box_w = tmax[g, 0] - tmin[g, 0]
    small = box_w * (tmax[g, 1] - tmin[g, 1]) <= MASK_TILES
    n = 0
    bit = 0
    for ty in range(tmin[g, 1], tmax[g, 1]):
        y0 = ty * ts
        y1 = min(y0 + ts, H)
        if chords is not None:
            ea, eb, da, db = band_columns(chords, g, ell, y0, y1, ts, W, pad)
        for tx in range(tmin[g, 0], tmax[g, 0]):
            x0 = tx * ts
            if chords is not None:
                reached = (ea <= tx <= eb) or (da <= tx <= db)
            elif conics is None:
                reached = True
            else:
                reached = not pd or min_sigma_on_rect(mx, my, a, b, c, inv_a, inv_c, x0 + 0.5, min(x0 + ts, W) - 0.5,
                                                      y0 + 0.5, y1 - 0.5) <= level
            if reached:
                if out_tile.shape[0] > 0:
                    out_tile[pos + n] = tile_base + ty * TW + tx
                    out_gauss[pos + n] = g
                elif small:
                    mask |= np.uint64(1) << np.uint64(bit)
                n += 1
            bit += 1
    return n, mask


@njit(cache=True, inline="always")
def fill_from_mask(g, mask, tmin, tmax, tile_base, TW, out_tile, out_gauss, pos):
    """Write the tiles of ``mask`` (see count_or_fill_tiles) for Gaussian g from ``pos`` on."""
    box_w = tmax[g, 0] - tmin[g, 0]
    n = 0
    bit = 0
    while mask != np.uint64(0):
        if mask & np.uint64(1):
            out_tile[pos + n] = tile_base + (tmin[g, 1] + bit // box_w) * TW + tmin[g, 0] + bit % box_w
            out_gauss[pos + n] = g
            n += 1
        mask >>= np.uint64(1)
        bit += 1


@njit(cache=True, parallel=True)
def touched_tiles(order, counts, masks, tmin, tmax, means2d, conics, opac, chords, N, TW, TH, ts, W, H, threads):
    """Tiles each Gaussian really reaches, listed Gaussian by Gaussian in depth order.

    Args:
        order [C, N] Gaussian indices per camera sorted near to far; counts, masks [C*N], tmin/tmax
        [C*N, 2] from gaussian_extents; means2d [C*N, 2]; conics None or [C*N, 3]; opac [C*N]; chords:
        None or [C*N, chords.ROWS] (count_or_fill_tiles).
    Returns:
        pair_tile [M] flat tile ids and pair_gauss [M] flat Gaussian ids, grouped by Gaussian in the
        order of ``order`` (camera-major, near to far), tiles ascending within a Gaussian; starts [C*N]:
        where each Gaussian's pairs start (counts[g] of them).
    Small boxes' reached tiles come from their bitmasks; only large boxes are tested again.
    """
    C = order.shape[0]
    TT = TW * TH
    starts = np.zeros(C * N, np.int64)  # output position of g: prefix sums taken in depth order
    total = 0
    for c in range(C):  # (camera by camera: a division per Gaussian cost 0.6 ms of 0.8 at 218k, serial)
        for i in range(N):
            g = c * N + order[c, i]
            starts[g] = total
            total += counts[g]
    pair_tile = np.empty(total, np.int64)
    pair_gauss = np.empty(total, np.int64)
    for it in prange(dealt_iterations(C * N, threads)):
        lo, hi = dealt_block(it, C * N, threads)
        for g in range(lo, hi):
            if counts[g] > 0:
                if masks[g] != np.uint64(0):
                    fill_from_mask(g, masks[g], tmin, tmax, (g // N) * TT, TW, pair_tile, pair_gauss, starts[g])
                else:
                    count_or_fill_tiles(g, tmin, tmax, means2d, conics, opac, chords, ts, W, H, (g // N) * TT, TW,
                                        pair_tile, pair_gauss, starts[g])
    return pair_tile, pair_gauss, starts


@njit(cache=True)
def sort_pairs_by_tile(pair_tile, pair_gauss, n_tiles):
    """Stable counting sort of (tile, Gaussian) pairs by tile: depth order is kept within a tile.

    Returns offsets [n_tiles + 1], ids [M] (flat Gaussian ids, tile-major) and perm [M] (pair k went
    to ids[perm[k]])."""
    offsets = np.zeros(n_tiles + 1, np.int64)
    for k in range(pair_tile.shape[0]):
        offsets[pair_tile[k] + 1] += 1
    for t in range(n_tiles):
        offsets[t + 1] += offsets[t]
    fill = offsets[:-1].copy()
    ids = np.empty(pair_tile.shape[0], np.int64)
    perm = np.empty(pair_tile.shape[0], np.int64)
    for k in range(pair_tile.shape[0]):
        t = pair_tile[k]
        ids[fill[t]] = pair_gauss[k]
        perm[k] = fill[t]
        fill[t] += 1
    return offsets, ids, perm


@njit(cache=True)
def tile_rect(g, means2d, radii, inv_ts, TW, TH, tmin, tmax):
    """tmin[g], tmax[g]: half-open tile rectangle of Gaussian g's box mean +- radius, with the
    arithmetic of ``rasterizer.tiles.tile_ranges`` (in the storage dtype). For a Gaussian that is not
    culled (gaussian_extents handles those)."""
    for j in range(2):
        lim = TW if j == 0 else TH
        m = means2d[g, j] * inv_ts
        r = like(radii[g, j], m) * inv_ts
        lo = min(max(np.int64(math.floor(m - r)), 0), lim)
        hi = min(max(np.int64(math.ceil(m + r)), 0), lim)
        tmin[g, j] = lo
        tmax[g, j] = hi


@njit(cache=True)
def row_half_extent(conics, opac, g):
    """Half height in pixels (+ SPAN_MARGIN) of Gaussian g's alpha >= 1/255 ellipse sigma <= ln(255
    opacity), float64; -1 for opacity <= 0 (no rows), inf for a conic that is not positive definite or
    for conics None (every row). The tile kernels only offset it by the mean (gaussian_rows)."""
    level = alpha_level(np.float64(opac[g]))
    if level < 0.0:
        return -1.0
    if conics is None:  # None: a separate compilation with the conic pruned
        return np.inf
    a, b, c = np.float64(conics[g, 0]), np.float64(conics[g, 1]), np.float64(conics[g, 2])
    if not is_positive_definite(a, b, c):
        return np.inf
    return math.sqrt(2.0 * level * a / (a * c - b * b)) + SPAN_MARGIN


@njit(cache=True, parallel=True)
def gaussian_extents(means2d, radii, conics, opac, chords, ts, TW, TH, W, H, threads):
    """Per Gaussian, in one parallel pass: tile rectangles tmin, tmax [G, 2] int64 (tile_rect), row half
    extents [G] float64 (row_half_extent), and the tiles it reaches (count_or_fill_tiles, counting):
    counts [G] int64 and masks [G] uint64. means2d [G, 2], radii [G, 2] int32, conics None or [G, 3],
    opac [G], chords None or [G, chords.ROWS] (the reach test: count_or_fill_tiles); image W x H. Culled Gaussians
    (a zero radius) get the empty rectangle (0, 0)-(0, 0), row half extent -1 and no tiles. Gaussians
    are dealt to ``threads`` threads in blocks (schedule.py)."""
    G = means2d.shape[0]
    tmin = np.empty((G, 2), np.int64)
    tmax = np.empty((G, 2), np.int64)
    row_half = np.empty(G)
    counts = np.empty(G, np.int64)
    masks = np.empty(G, np.uint64)
    inv_ts = like(1.0 / ts, np.zeros(1, means2d.dtype)[0])  # exact: ts is a power of two
    none = np.empty(0, np.int64)
    for it in prange(dealt_iterations(G, threads)):
        lo, hi = dealt_block(it, G, threads)
        for g in range(lo, hi):
            if radii[g, 0] <= 0 or radii[g, 1] <= 0:  # culled (most of a large scene's): empty rectangle, no rows
                tmin[g, 0] = tmin[g, 1] = tmax[g, 0] = tmax[g, 1] = 0
                row_half[g] = -1.0
                counts[g] = 0
                masks[g] = 0
                continue
            tile_rect(g, means2d, radii, inv_ts, TW, TH, tmin, tmax)
            row_half[g] = row_half_extent(conics, opac, g)
            counts[g], masks[g] = count_or_fill_tiles(g, tmin, tmax, means2d, conics, opac, chords, ts, W, H, 0, TW,
                                                      none, none, 0)
    return tmin, tmax, row_half, counts, masks


class Bins(NamedTuple):
    """Per-tile, depth-sorted Gaussian lists (see bin_gaussians)."""

    row_half: np.ndarray  # [C*N] float64 row half extents (row_half_extent; -1 for culled Gaussians)
    offsets: np.ndarray  # [C*TT + 1] int64: tile t's intersections are ids[offsets[t]:offsets[t + 1]]
    ids: np.ndarray  # [M] int64 flat Gaussian ids, tile-major, near to far within a tile
    perm: np.ndarray  # [M] int64: Gaussian g's intersections are ids[perm[starts[g]:starts[g] + counts[g]]]
    starts: np.ndarray  # [C*N] int64
    counts: np.ndarray  # [C*N] int64


def bin_gaussians(order, means2d, radii, conics, opac, N, TW, TH, ts, W, H, chords=None) -> Bins:
    """Per-tile, depth-sorted Gaussian lists (see touched_tiles and sort_pairs_by_tile) from depth
    order [C, N], means2d [C*N, 2], radii [C*N, 2] int32, conics [C*N, 3] or None, opac [C*N]; with
    chords [C*N, chords.ROWS] (float64) the tiles are those the row chords reach, and conics may be
    None (count_or_fill_tiles); with neither, every tile of each box. Without conics the row half
    extents are inf (every row; -1 for culled or transparent Gaussians): only the 3D kernels read them."""
    with KERNEL_LOCK:
        threads = thread_count()
        tmin, tmax, row_half, counts, masks = for_threads(gaussian_extents, threads)(
            means2d, radii, conics, opac, chords, ts, TW, TH, W, H, threads)
        pair_tile, pair_gauss, starts = for_threads(touched_tiles, threads)(
            order, counts, masks, tmin, tmax, means2d, conics, opac, chords, N, TW, TH, ts, W, H, threads)
    offsets, ids, perm = sort_pairs_by_tile(pair_tile, pair_gauss, order.shape[0] * TW * TH)
    return Bins(row_half, offsets, ids, perm, starts, counts)


# ---------------------------------------------------------------------------- Gaussian-major rows

RUNS_AHEAD = 4  # sum_major_rows: runs of rows prefetched RUNS_AHEAD Gaussians on (3-32 measured alike on surfels)


@njit(cache=True, parallel=True)
def major_rows(perm):
    """row_of [M] int64 with row_of[perm[q]] = q: where the tile-major intersection k (``ids[k]``) sits in
    the Gaussian-major order the pairs were made in (:class:`Bins`: Gaussian g's intersections are
    ``ids[perm[starts[g]:starts[g] + counts[g]]]``). A backward that writes intersection k's values to row
    row_of[k] leaves each Gaussian's rows consecutive, for :func:`sum_major_rows` (the surfel backward)."""
    row_of = np.empty_like(perm)
    for q in prange(perm.shape[0]):
        row_of[perm[q]] = q
    return row_of


@njit(cache=True, parallel=True)
def sum_major_rows(values, starts, counts, out, threads):
    """out[g] = the sum of rows [starts[g], starts[g] + counts[g]) of values [M, cols] (Gaussian g's
    intersections in Gaussian-major order: :func:`major_rows`), added in ascending order; out [G, cols] is
    overwritten. Gaussians dealt to the threads in blocks (``schedule``); their runs of rows lie in depth
    order, not in g's, so the run RUNS_AHEAD Gaussians on is prefetched."""
    G = starts.shape[0]
    cols = values.shape[1]
    for it in prange(dealt_iterations(G, threads)):
        lo, hi = dealt_block(it, G, threads)
        for g in range(lo, hi):
            if g + RUNS_AHEAD < G and counts[g + RUNS_AHEAD] > 0:
                prefetch_span(values, starts[g + RUNS_AHEAD] * cols, counts[g + RUNS_AHEAD] * cols)
            for j in range(cols):
                out[g, j] = 0.0
            for q in range(starts[g], starts[g] + counts[g]):
                for j in range(cols):
                    out[g, j] += values[q, j]
