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


@njit(cache=True)
def min_sigma_on_rect(mx, my, a, b, c, xlo, xhi, ylo, yhi):
    """Minimum of 0.5 (a dx^2 + c dy^2) + b dx dy, d = p - mean, over p in [xlo,xhi] x [ylo,yhi]."""
    if xlo <= mx <= xhi and ylo <= my <= yhi:
        return 0.0
    best = math.inf
    dylo, dyhi = ylo - my, yhi - my
    dxlo, dxhi = xlo - mx, xhi - mx
    for dx in (dxlo, dxhi):  # vertical edges: minimise over dy
        dy = min(max(-b * dx / c, dylo), dyhi)
        best = min(best, 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy)
    for dy in (dylo, dyhi):  # horizontal edges: minimise over dx
        dx = min(max(-b * dy / a, dxlo), dxhi)
        best = min(best, 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy)
    return best


@njit(cache=True)
def touches_tile(mx, my, a, b, c, opacity, x0, y0, x1, y1):
    """Can this Gaussian reach alpha >= 1/255 at any pixel centre of the tile [x0,x1) x [y0,y1)?"""
    level = alpha_level(opacity)
    if level < 0.0:
        return False
    if not is_positive_definite(a, b, c):
        return True  # degenerate conic: let the per-pixel test decide
    return min_sigma_on_rect(mx, my, a, b, c, x0 + 0.5, x1 - 0.5, y0 + 0.5, y1 - 0.5) <= level


@njit(cache=True)
def bin_gaussians(order, tmin, tmax, means2d, conics, opac, N, TW, TH, ts, W, H):
    """Counting sort of (tile, Gaussian) pairs, depth order kept within each tile.

    Args:
        order [C, N] Gaussian indices per camera sorted near to far (culled ones may be included:
        their tile range is empty); tmin/tmax [C*N, 2] half-open tile ranges; means2d [C*N, 2];
        conics [C*N, 3]; opac [C*N].
    Returns:
        offsets [C*TT + 1] int64 and ids [M] int64 flat Gaussian indices.
    """
    C = order.shape[0]
    TT = TW * TH
    counts = np.zeros(C * TT + 1, np.int64)
    for pass_ in range(2):
        if pass_ == 1:
            for t in range(C * TT):
                counts[t + 1] += counts[t]
            ids = np.empty(counts[C * TT], np.int64)
            fill = counts[:-1].copy()
        for c in range(C):
            for j in range(N):
                g = c * N + order[c, j]
                mx, my = means2d[g, 0], means2d[g, 1]
                a, b, cc, op = conics[g, 0], conics[g, 1], conics[g, 2], opac[g]
                for ty in range(tmin[g, 1], tmax[g, 1]):
                    y0 = ty * ts
                    y1 = min(y0 + ts, H)
                    for tx in range(tmin[g, 0], tmax[g, 0]):
                        x0 = tx * ts
                        if not touches_tile(mx, my, a, b, cc, op, x0, y0, min(x0 + ts, W), y1):
                            continue
                        t = c * TT + ty * TW + tx
                        if pass_ == 0:
                            counts[t + 1] += 1
                        else:
                            ids[fill[t]] = g
                            fill[t] += 1
    return counts, ids


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
def tile_box(t, TW, TT, ts, W, H):
    """Camera and pixel box (c, x0, y0, x1, y1) of flat tile t."""
    c = t // TT
    r = t - c * TT
    ty = r // TW
    tx = r - ty * TW
    x0, y0 = tx * ts, ty * ts
    return c, x0, y0, min(x0 + ts, W), min(y0 + ts, H)


@njit(cache=True, parallel=True)
def forward_kernel(means2d, conics, opac, colors, offsets, ids, tile_order, W, H, TW, TH, ts,
                   render, alpha_out, T_final, last_ids):
    """Front-to-back compositing. Writes render [C,H,W,D], alpha_out [C,H,W,1], T_final [C,H,W]
    (transmittance after the last blended Gaussian) and last_ids [C,H,W] (position in ``ids`` of the
    last blended Gaussian, -1 if none)."""
    TT = TW * TH
    D = colors.shape[1]
    for it in prange(tile_order.shape[0]):
        t = tile_order[it]
        c, x0, y0, x1, y1 = tile_box(t, TW, TT, ts, W, H)
        T = np.ones((ts, ts))
        done = np.zeros((ts, ts), np.bool_)
        last = np.full((ts, ts), -1, np.int64)
        acc = np.zeros((ts, ts, D))
        n_active = (x1 - x0) * (y1 - y0)
        for k in range(offsets[t], offsets[t + 1]):
            g = ids[k]
            mx, my = means2d[g, 0], means2d[g, 1]
            a, b, cc, op = conics[g, 0], conics[g, 1], conics[g, 2], opac[g]
            level = alpha_level(op)
            ylo, yhi = row_range(my, a, b, cc, level, y0, y1)
            for y in range(ylo, yhi):
                xlo, xhi = col_range(mx, my, a, b, cc, level, y, x0, x1)
                dy = my - (y + 0.5)
                ly = y - y0
                for x in range(xlo, xhi):
                    lx = x - x0
                    if done[ly, lx]:
                        continue
                    dx = mx - (x + 0.5)
                    sigma = 0.5 * (a * dx * dx + cc * dy * dy) + b * dx * dy
                    if sigma < 0.0:
                        continue
                    al = min(ALPHA_MAX, op * math.exp(-sigma))
                    if al < ALPHA_THRESHOLD:
                        continue
                    next_T = T[ly, lx] * (1.0 - al)
                    if next_T <= T_MIN:
                        done[ly, lx] = True
                        n_active -= 1
                        continue
                    w = al * T[ly, lx]
                    for ch in range(D):
                        acc[ly, lx, ch] += colors[g, ch] * w
                    T[ly, lx] = next_T
                    last[ly, lx] = k
            if n_active == 0:
                break
        for y in range(y0, y1):
            for x in range(x0, x1):
                for ch in range(D):
                    render[c, y, x, ch] = acc[y - y0, x - x0, ch]
                alpha_out[c, y, x, 0] = 1.0 - T[y - y0, x - x0]
                T_final[c, y, x] = T[y - y0, x - x0]
                last_ids[c, y, x] = last[y - y0, x - x0]


@njit(cache=True, parallel=True)
def backward_kernel(means2d, conics, opac, colors, offsets, ids, tile_order, W, H, TW, TH, ts,
                    T_final, last_ids, v_render, v_alpha, g_means2d, g_abs, g_conics, g_opac, g_colors):
    """Back-to-front pass recovering T_i = T_{i+1} / (1 - alpha_i); gradients per intersection k
    (g_* [M, ...]) so that tiles never write to the same place."""
    TT = TW * TH
    D = colors.shape[1]
    for it in prange(tile_order.shape[0]):
        t = tile_order[it]
        c, x0, y0, x1, y1 = tile_box(t, TW, TT, ts, W, H)
        T = np.ones((ts, ts))
        S = np.zeros((ts, ts, D))  # colour of what lies behind: sum_{j>i} c_j alpha_j T_j
        k_end = offsets[t]
        for y in range(y0, y1):
            for x in range(x0, x1):
                T[y - y0, x - x0] = T_final[c, y, x]
                k_end = max(k_end, last_ids[c, y, x] + 1)
        gcol = np.zeros(D)
        for k in range(k_end - 1, offsets[t] - 1, -1):
            g = ids[k]
            mx, my = means2d[g, 0], means2d[g, 1]
            a, b, cc, op = conics[g, 0], conics[g, 1], conics[g, 2], opac[g]
            level = alpha_level(op)
            gm0 = gm1 = ab0 = ab1 = ga = gb = gc = go = 0.0
            gcol[:] = 0.0
            ylo, yhi = row_range(my, a, b, cc, level, y0, y1)
            for y in range(ylo, yhi):
                xlo, xhi = col_range(mx, my, a, b, cc, level, y, x0, x1)
                dy = my - (y + 0.5)
                ly = y - y0
                for x in range(xlo, xhi):
                    if k > last_ids[c, y, x]:
                        continue
                    lx = x - x0
                    dx = mx - (x + 0.5)
                    sigma = 0.5 * (a * dx * dx + cc * dy * dy) + b * dx * dy
                    if sigma < 0.0:
                        continue
                    vis = math.exp(-sigma)
                    al = min(ALPHA_MAX, op * vis)
                    if al < ALPHA_THRESHOLD:
                        continue
                    ra = 1.0 / (1.0 - al)
                    Ti = T[ly, lx] * ra
                    T[ly, lx] = Ti
                    fac = al * Ti
                    v_al = T_final[c, y, x] * ra * v_alpha[c, y, x, 0]
                    for ch in range(D):
                        vr = v_render[c, y, x, ch]
                        gcol[ch] += fac * vr
                        v_al += (colors[g, ch] * Ti - S[ly, lx, ch] * ra) * vr
                        S[ly, lx, ch] += colors[g, ch] * fac
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
