"""Numba kernels of the `cpu` backend: tile binning, forward compositing and its hand-written backward.

Same numerics as ``rasterizer/reference/composite.py`` (the specification). Work is organised per
16x16 tile (tiles run in parallel) and, inside a tile, per Gaussian (front to back), visiting only
the pixels where that Gaussian can pass the alpha >= 1/255 test: the rows and, per row, the span of
its ellipse sigma <= ln(255 opacity). Skipping pixels that would be skipped anyway keeps the result
identical to the per-pixel loop of the specification while doing far less work.

Arrays are flattened over cameras: Gaussian index g = c * N + n; tile index t = c * TT + ty * TW + tx.
Arithmetic runs in float64 whatever the storage dtype.
"""

from __future__ import annotations

import math
import os
import threading

import numba
import numpy as np
from numba import njit, prange

# Numba's OpenMP layer and PyTorch's OpenMP runtime spin-wait against each other (PyTorch ops became
# 40x slower after a Numba parallel kernel in our measurements); the workqueue layer does not. It is not
# re-entrant, so every parallel launch holds KERNEL_LOCK (the viewer renders from another thread).
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"
KERNEL_LOCK = threading.Lock()

ALPHA_THRESHOLD = 1.0 / 255.0
ALPHA_MAX = 0.999
T_MIN = 1e-4
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


@njit(cache=True, inline="always")
def count_or_fill_tiles(g, tmin, tmax, means2d, conics, opac, ts, W, H, tile_base, TW, out_tile, out_gauss, pos):
    """Visit the tiles of Gaussian g's box that it can reach with alpha >= 1/255 at some pixel centre
    (a conservative test on the rectangle spanned by the tile's pixel centres).

    With out_tile empty (size 0) it only counts; else it writes tile ids and g from ``pos`` on.
    Returns the number of reached tiles."""
    mx, my = means2d[g, 0], means2d[g, 1]
    a, b, c = conics[g, 0], conics[g, 1], conics[g, 2]
    level = alpha_level(opac[g])
    if level < 0.0:
        return 0
    pd = is_positive_definite(a, b, c)
    inv_a = 1.0 / a if pd else 0.0
    inv_c = 1.0 / c if pd else 0.0
    n = 0
    for ty in range(tmin[g, 1], tmax[g, 1]):
        y0 = ty * ts
        y1 = min(y0 + ts, H)
        for tx in range(tmin[g, 0], tmax[g, 0]):
            x0 = tx * ts
            if pd and min_sigma_on_rect(mx, my, a, b, c, inv_a, inv_c, x0 + 0.5, min(x0 + ts, W) - 0.5,
                                        y0 + 0.5, y1 - 0.5) > level:
                continue
            if out_tile.shape[0] > 0:
                out_tile[pos + n] = tile_base + ty * TW + tx
                out_gauss[pos + n] = g
            n += 1
    return n


@njit(cache=True, parallel=True)
def touched_tiles(order, tmin, tmax, means2d, conics, opac, N, TW, TH, ts, W, H):
    """Tiles each Gaussian really reaches, listed Gaussian by Gaussian in depth order.

    Args:
        order [C, N] Gaussian indices per camera sorted near to far; tmin/tmax [C*N, 2] half-open
        tile ranges (empty for culled Gaussians); means2d [C*N, 2]; conics [C*N, 3]; opac [C*N].
    Returns:
        pair_tile [M] flat tile ids and pair_gauss [M] flat Gaussian ids, grouped by Gaussian in the
        order of ``order`` (camera-major, near to far).
    """
    C = order.shape[0]
    TT = TW * TH
    counts = np.zeros(C * N, np.int64)
    none = np.empty(0, np.int64)
    for j in prange(C * N):
        c = j // N
        g = c * N + order[c, j - c * N]
        counts[j] = count_or_fill_tiles(g, tmin, tmax, means2d, conics, opac, ts, W, H, c * TT, TW, none, none, 0)
    starts = np.zeros(C * N + 1, np.int64)
    for j in range(C * N):
        starts[j + 1] = starts[j] + counts[j]
    pair_tile = np.empty(starts[C * N], np.int64)
    pair_gauss = np.empty(starts[C * N], np.int64)
    for j in prange(C * N):
        if counts[j] > 0:
            c = j // N
            g = c * N + order[c, j - c * N]
            count_or_fill_tiles(g, tmin, tmax, means2d, conics, opac, ts, W, H, c * TT, TW, pair_tile, pair_gauss,
                                starts[j])
    return pair_tile, pair_gauss


@njit(cache=True)
def sort_pairs_by_tile(pair_tile, pair_gauss, n_tiles):
    """Stable counting sort of (tile, Gaussian) pairs by tile: depth order is kept within a tile.

    Returns offsets [n_tiles + 1] and ids [M] (flat Gaussian ids, tile-major)."""
    offsets = np.zeros(n_tiles + 1, np.int64)
    for k in range(pair_tile.shape[0]):
        offsets[pair_tile[k] + 1] += 1
    for t in range(n_tiles):
        offsets[t + 1] += offsets[t]
    fill = offsets[:-1].copy()
    ids = np.empty(pair_tile.shape[0], np.int64)
    for k in range(pair_tile.shape[0]):
        t = pair_tile[k]
        ids[fill[t]] = pair_gauss[k]
        fill[t] += 1
    return offsets, ids


def bin_gaussians(order, tmin, tmax, means2d, conics, opac, N, TW, TH, ts, W, H):
    """Per-tile, depth-sorted Gaussian lists: offsets [C*TT + 1] int64, ids [M] int64 (see
    touched_tiles and sort_pairs_by_tile)."""
    with KERNEL_LOCK:
        pair_tile, pair_gauss = touched_tiles(order, tmin, tmax, means2d, conics, opac, N, TW, TH, ts, W, H)
    return sort_pairs_by_tile(pair_tile, pair_gauss, order.shape[0] * TW * TH)


@njit(cache=True, inline="always")
def row_range(my, a, b, c, level, y0, y1):
    """Rows [ylo, yhi) of the tile whose centres can lie inside the ellipse sigma <= level."""
    if not is_positive_definite(a, b, c):
        return y0, y1
    half = math.sqrt(2.0 * level * a / (a * c - b * b)) + SPAN_MARGIN
    ylo = max(y0, int(math.ceil(my - half - 0.5)))
    yhi = min(y1, int(math.floor(my + half - 0.5)) + 1)
    return ylo, yhi


@njit(cache=True, inline="always")
def col_range(mx, my, a, b, c, level, y, x0, x1):
    """Columns [xlo, xhi) of row y whose centres can lie inside the ellipse sigma <= level."""
    if not is_positive_definite(a, b, c):
        return x0, x1
    dy = y + 0.5 - my
    disc = b * b * dy * dy - a * (c * dy * dy - 2.0 * level)
    if disc < 0.0:
        return x0, x0
    root = math.sqrt(disc)
    lo = (-b * dy - root) / a - SPAN_MARGIN
    hi = (-b * dy + root) / a + SPAN_MARGIN
    xlo = max(x0, int(math.ceil(mx + lo - 0.5)))
    xhi = min(x1, int(math.floor(mx + hi - 0.5)) + 1)
    return xlo, xhi


@njit(cache=True, inline="always")
def row_start(mx, my, a, b, c, y, xlo):
    """Gaussian falloff along row y from column xlo, as a multiplicative recurrence.

    sigma is quadratic in the pixel column, so exp(-sigma) at column x + 1 is exp(-sigma(x)) * r(x)
    with r(x + 1) = r(x) * exp(-a): two multiplications per pixel instead of an exp.
    Returns (dy, vis at xlo, r at xlo, q = exp(-a)); d = mean - pixel centre.
    """
    dy = my - (y + 0.5)
    dx = mx - (xlo + 0.5)
    sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy
    step = 0.5 * a * (1.0 - 2.0 * dx) - b * dy  # sigma(x + 1) - sigma(x)
    return dy, math.exp(-sigma), math.exp(-step), math.exp(-a)


@njit(cache=True, inline="always")
def falloff(pd, vis, a, b, c, dx, dy):
    """exp(-sigma) at one pixel: the recurrence value for positive-definite conics, else computed
    directly (and -1 when sigma < 0, which the specification skips)."""
    if pd:
        return vis
    sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy
    if sigma < 0.0:
        return -1.0
    return math.exp(-sigma)


SIGMA_RECURRENCE_MAX = 500.0  # beyond this exp(-sigma) may underflow: fall back to one exp per row


@njit(cache=True, inline="always")
def column_range(mx, a, b, c, level, x0, x1):
    """Columns [xs, xe) of the tile whose centres can lie inside the ellipse sigma <= level."""
    half = math.sqrt(2.0 * level * c / (a * c - b * b)) + SPAN_MARGIN
    return max(x0, int(math.ceil(mx - half - 0.5))), min(x1, int(math.floor(mx + half - 0.5)) + 1)


@njit(cache=True, inline="always")
def sigma_at(mx, my, a, b, c, x, y):
    """sigma of pixel (x, y) (centre at +0.5)."""
    dx = mx - (x + 0.5)
    dy = my - (y + 0.5)
    return 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy


@njit(cache=True, inline="always")
def grid_start(mx, my, a, b, c, xs, ylo):
    """Recurrence state at pixel (xs, ylo) for walking rows downward and columns rightward.

    sigma is quadratic in (x, y), so along column xs: E(y+1) = E(y) ES(y), ES(y+1) = ES(y) exp(-c);
    the column ratio R(y) = exp(-(sigma(xs+1, y) - sigma(xs, y))) obeys R(y+1) = R(y) exp(-b).
    Returns (E, ES, exp(-c), R, exp(-b)).
    """
    dx = mx - (xs + 0.5)
    dy = my - (ylo + 0.5)
    sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy
    step_x = 0.5 * a * (1.0 - 2.0 * dx) - b * dy
    step_y = 0.5 * c * (1.0 - 2.0 * dy) - b * dx
    return math.exp(-sigma), math.exp(-step_y), math.exp(-c), math.exp(-step_x), math.exp(-b)


@njit(cache=True, inline="always")
def tile_box(t, TW, TT, ts, W, H):
    """Camera and pixel box (c, x0, y0, x1, y1) of flat tile t."""
    c = t // TT
    r = t - c * TT
    ty = r // TW
    tx = r - ty * TW
    x0, y0 = tx * ts, ty * ts
    return c, x0, y0, min(x0 + ts, W), min(y0 + ts, H)


@njit(cache=True, inline="always")
def gaussian_walk(mx, my, a, b, c, level, x0, y0, x1, y1):
    """Where and how to walk one Gaussian's pixels inside a tile.

    Returns (ylo, yhi, xs, xe, mode, E, ES, qc, R, qb, q): the row range and column range of its
    ellipse in the tile, mode 0 = nothing to do, 1 = 2-D recurrence from (xs, ylo) (see grid_start),
    2 = one exp per row (row_start; ellipses so thin that the recurrence could underflow),
    3 = direct exp per pixel (conic not positive definite; the tile's whole box).
    """
    if not is_positive_definite(a, b, c):
        return y0, y1, x0, x1, 3, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0
    ylo, yhi = row_range(my, a, b, c, level, y0, y1)
    xs, xe = column_range(mx, a, b, c, level, x0, x1)
    if ylo >= yhi or xs >= xe:
        return ylo, yhi, xs, xe, 0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0
    q = math.exp(-a)
    if (sigma_at(mx, my, a, b, c, xs, ylo) < SIGMA_RECURRENCE_MAX
            and sigma_at(mx, my, a, b, c, xs, yhi - 1) < SIGMA_RECURRENCE_MAX):
        E, ES, qc, R, qb = grid_start(mx, my, a, b, c, xs, ylo)
        return ylo, yhi, xs, xe, 1, E, ES, qc, R, qb, q
    return ylo, yhi, xs, xe, 2, 1.0, 1.0, 1.0, 1.0, 1.0, q


@njit(cache=True, inline="always")
def walk_row(y, mode, mx, my, a, b, c, level, xs, xe, E, ES, qc, R, qb, q):
    """Step the walk of gaussian_walk to row y.

    Returns (xlo, xhi, dy, vis, r, q, E, ES, R): the row's column span (empty when xlo >= xhi), dy,
    exp(-sigma) at (xlo, y) with its column ratio r and ratio step q, and the recurrence state
    advanced to row y + 1.
    """
    vis, r = E, R
    E *= ES
    ES *= qc
    R *= qb
    if mode == 3:
        xlo, xhi = xs, xe
    else:
        xlo, xhi = col_range(mx, my, a, b, c, level, y, xs, xe)
    dy = my - (y + 0.5)
    if xlo < xhi:
        if mode == 1:
            for _ in range(xlo - xs):
                vis *= r
                r *= q
        elif mode == 2:
            dy, vis, r, q = row_start(mx, my, a, b, c, y, xlo)
    return xlo, xhi, dy, vis, r, q, E, ES, R


@njit(cache=True, parallel=True)
def forward_kernel(means2d, conics, opac, colors, offsets, ids, tile_order, W, H, TW, TH, ts,
                   render, alpha_out, T_final, last_ids):
    """Front-to-back compositing of all tiles in parallel. Writes render [C,H,W,D], alpha_out
    [C,H,W,1], T_final [C,H,W] (transmittance after the last blended Gaussian) and last_ids [C,H,W]
    (position in ``ids`` of the last blended Gaussian, -1 if none)."""
    for it in prange(tile_order.shape[0]):
        forward_tile(tile_order[it], means2d, conics, opac, colors, offsets, ids, W, H, TW, TH, ts,
                     render, alpha_out, T_final, last_ids)


@njit(cache=True, fastmath=True)
def forward_tile(t, means2d, conics, opac, colors, offsets, ids, W, H, TW, TH, ts, render, alpha_out, T_final,
                 last_ids):
    """Forward pass of one tile t (see forward_kernel)."""
    TT = TW * TH
    D = colors.shape[1]
    c, x0, y0, x1, y1 = tile_box(t, TW, TT, ts, W, H)
    T = np.ones(ts * ts)  # per-tile state, pixel p = ly * ts + lx
    done = np.zeros(ts * ts, np.bool_)
    last = np.full(ts * ts, -1, np.int64)
    acc = np.zeros(ts * ts * D)
    col = np.empty(D)
    n_active = (x1 - x0) * (y1 - y0)
    for k in range(offsets[t], offsets[t + 1]):
        if n_active == 0:
            break
        g = ids[k]
        mx, my = means2d[g, 0], means2d[g, 1]
        a, b, cc, op = conics[g, 0], conics[g, 1], conics[g, 2], opac[g]
        level = alpha_level(op)
        ylo, yhi, xs, xe, mode, E, ES, qc, R, qb, q = gaussian_walk(mx, my, a, b, cc, level, x0, y0, x1, y1)
        if mode == 0:
            continue
        for ch in range(D):
            col[ch] = colors[g, ch]
        for y in range(ylo, yhi):
            xlo, xhi, dy, vis, r, q, E, ES, R = walk_row(y, mode, mx, my, a, b, cc, level, xs, xe,
                                                         E, ES, qc, R, qb, q)
            if xlo >= xhi:
                continue
            row = (y - y0) * ts - x0
            for x in range(xlo, xhi):
                v = falloff(mode != 3, vis, a, b, cc, mx - (x + 0.5), dy)
                vis *= r
                r *= q
                p = row + x
                if done[p] or v < 0.0:
                    continue
                al = min(ALPHA_MAX, op * v)
                if al < ALPHA_THRESHOLD:
                    continue
                Tp = T[p]
                next_T = Tp * (1.0 - al)
                if next_T <= T_MIN:
                    done[p] = True
                    n_active -= 1
                    continue
                w = al * Tp
                base = p * D
                if D == 3:  # RGB, unrolled: a runtime-length loop costs ~20% of the forward pass
                    acc[base] += col[0] * w
                    acc[base + 1] += col[1] * w
                    acc[base + 2] += col[2] * w
                else:
                    for ch in range(D):
                        acc[base + ch] += col[ch] * w
                T[p] = next_T
                last[p] = k
    for y in range(y0, y1):
        for x in range(x0, x1):
            p = (y - y0) * ts + (x - x0)
            for ch in range(D):
                render[c, y, x, ch] = acc[p * D + ch]
            alpha_out[c, y, x, 0] = 1.0 - T[p]
            T_final[c, y, x] = T[p]
            last_ids[c, y, x] = last[p]


@njit(cache=True, inline="always")
def backward_channel(ch, base, fac, Ti, ra, vr_px, col, S, gcol):
    """One colour channel of one pixel in the backward pass: accumulates the colour gradient, updates
    the colour-behind sum S and returns this channel's share of d loss / d alpha."""
    vr = vr_px[base + ch]
    gcol[ch] += fac * vr
    share = (col[ch] * Ti - S[base + ch] * ra) * vr
    S[base + ch] += col[ch] * fac
    return share


@njit(cache=True, parallel=True)
def backward_kernel(means2d, conics, opac, colors, offsets, ids, tile_order, W, H, TW, TH, ts,
                    T_final, last_ids, v_render, v_alpha, g_means2d, g_abs, g_conics, g_opac, g_colors):
    """Back-to-front pass of all tiles in parallel; gradients per intersection k (g_* [M, ...]) so
    that tiles never write to the same place."""
    for it in prange(tile_order.shape[0]):
        backward_tile(tile_order[it], means2d, conics, opac, colors, offsets, ids, W, H, TW, TH, ts, T_final,
                      last_ids, v_render, v_alpha, g_means2d, g_abs, g_conics, g_opac, g_colors)


@njit(cache=True, fastmath=True)
def backward_tile(t, means2d, conics, opac, colors, offsets, ids, W, H, TW, TH, ts, T_final, last_ids, v_render,
                  v_alpha, g_means2d, g_abs, g_conics, g_opac, g_colors):
    """Backward pass of one tile t, recovering T_i = T_{i+1} / (1 - alpha_i) from back to front."""
    TT = TW * TH
    D = colors.shape[1]
    c, x0, y0, x1, y1 = tile_box(t, TW, TT, ts, W, H)
    # per-tile copies, pixel p = ly * ts + lx
    T = np.ones(ts * ts)
    S = np.zeros(ts * ts * D)  # colour of what lies behind: sum_{j>i} c_j alpha_j T_j
    last = np.full(ts * ts, -1, np.int64)
    Tf_va = np.zeros(ts * ts)  # T_final * v_alpha
    vr_px = np.zeros(ts * ts * D)
    k_end = offsets[t]
    for y in range(y0, y1):
        for x in range(x0, x1):
            p = (y - y0) * ts + (x - x0)
            T[p] = T_final[c, y, x]
            Tf_va[p] = T_final[c, y, x] * v_alpha[c, y, x, 0]
            last[p] = last_ids[c, y, x]
            for ch in range(D):
                vr_px[p * D + ch] = v_render[c, y, x, ch]
            k_end = max(k_end, last_ids[c, y, x] + 1)
    gcol = np.zeros(D)
    col = np.empty(D)
    for k in range(k_end - 1, offsets[t] - 1, -1):
        g = ids[k]
        mx, my = means2d[g, 0], means2d[g, 1]
        a, b, cc, op = conics[g, 0], conics[g, 1], conics[g, 2], opac[g]
        level = alpha_level(op)
        ylo, yhi, xs, xe, mode, E, ES, qc, R, qb, q = gaussian_walk(mx, my, a, b, cc, level, x0, y0, x1, y1)
        if mode == 0:
            continue
        gm0 = gm1 = ab0 = ab1 = ga = gb = gc = go = 0.0
        for ch in range(D):
            gcol[ch] = 0.0
            col[ch] = colors[g, ch]
        for y in range(ylo, yhi):
            xlo, xhi, dy, vis_row, r, q, E, ES, R = walk_row(y, mode, mx, my, a, b, cc, level, xs, xe,
                                                             E, ES, qc, R, qb, q)
            if xlo >= xhi:
                continue
            row = (y - y0) * ts - x0
            for x in range(xlo, xhi):
                dx = mx - (x + 0.5)
                vis = falloff(mode != 3, vis_row, a, b, cc, dx, dy)
                vis_row *= r
                r *= q
                p = row + x
                if k > last[p] or vis < 0.0:
                    continue
                al = min(ALPHA_MAX, op * vis)
                if al < ALPHA_THRESHOLD:
                    continue
                ra = 1.0 / (1.0 - al)
                Ti = T[p] * ra
                T[p] = Ti
                fac = al * Ti
                v_al = Tf_va[p] * ra
                base = p * D
                if D == 3:  # RGB, unrolled (see forward_tile)
                    v_al += (backward_channel(0, base, fac, Ti, ra, vr_px, col, S, gcol)
                             + backward_channel(1, base, fac, Ti, ra, vr_px, col, S, gcol)
                             + backward_channel(2, base, fac, Ti, ra, vr_px, col, S, gcol))
                else:
                    for ch in range(D):
                        v_al += backward_channel(ch, base, fac, Ti, ra, vr_px, col, S, gcol)
                if op * vis <= ALPHA_MAX:
                    v_sigma = -op * vis * v_al
                    ga += 0.5 * dx * dx * v_sigma
                    gb += dx * dy * v_sigma
                    gc += 0.5 * dy * dy * v_sigma
                    gx = v_sigma * (a * dx + b * dy)
                    gy = v_sigma * (b * dx + cc * dy)
                    gm0 += gx
                    gm1 += gy
                    ab0 += abs(gx)
                    ab1 += abs(gy)
                    go += vis * v_al
        g_means2d[k, 0], g_means2d[k, 1] = gm0, gm1
        g_abs[k, 0], g_abs[k, 1] = ab0, ab1
        g_conics[k, 0], g_conics[k, 1], g_conics[k, 2] = ga, gb, gc
        g_opac[k] = go
        for ch in range(D):
            g_colors[k, ch] = gcol[ch]


@njit(cache=True)
def scatter_add_rows(dst, src, ids):
    """dst[ids[k]] += src[k] for 2-D arrays (per-intersection gradients -> per Gaussian)."""
    for k in range(ids.shape[0]):
        g = ids[k]
        for j in range(src.shape[1]):
            dst[g, j] += src[k, j]
