"""Numba kernels of the surfels' `cpu` backend: per-pixel forward compositing and its hand-written
backward (the arithmetic of ``surfels/composite.py``, the specification).

Tiles (from the 3D path's binning, ``rasterizer.cpu.binning``) run in parallel; inside a tile the
depth-sorted surfels are taken front to back (forward) or back to front (backward, recovering
T_i = T_{i+1} / (1 - alpha_i) per pixel as the 3D backend does), each over the pixels of its alpha
>= 1/255 box (``alpha_boxes``) that are still live; per pixel this is the order and arithmetic of the
specification's walk along the tile's list. Arithmetic is
float64 whatever the storage dtype; outputs are stored in it. Arrays are flattened over cameras:
surfel g = c * N + n, tile t = c * TT + ty * TW + tx, intersection k indexes the binning's ``ids``.

Per surfel the kernels read ray_transforms [G, 9] (rows M_u, M_v, M_w of K W H), means2d [G, 2],
opacities [G], colors [G, D], depths [G], normals [G, 3], once per (tile, surfel), out of the pixel
loops. Per-intersection gradients are summed over the pixels in registers and written to one row per k
(one thread owns a tile, hence its k) with the columns G_* below, then summed per surfel
(``sum_rows_per_surfel``) through the binning's permutation.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

ALPHA_THRESHOLD = 1.0 / 255.0
ALPHA_MAX = 0.999
T_MIN = 1e-4
MEDIAN_T = 0.5
LOW_PASS_SCALE = 2.0

# per-intersection gradient columns
G_MEANS2D, G_M, G_OPAC, G_DEPTH, G_NORMAL, G_COLOR = 0, 2, 11, 12, 13, 16


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
def surfel_values(g, M, means2d, opac):
    """Surfel g's K W H rows (9 values), mean2d and opacity as float64 scalars (loaded once per surfel
    and tile, out of the pixel loops)."""
    return (np.float64(M[g, 0]), np.float64(M[g, 1]), np.float64(M[g, 2]), np.float64(M[g, 3]),
            np.float64(M[g, 4]), np.float64(M[g, 5]), np.float64(M[g, 6]), np.float64(M[g, 7]),
            np.float64(M[g, 8]), np.float64(means2d[g, 0]), np.float64(means2d[g, 1]), np.float64(opac[g]))


@njit(cache=True, inline="always")
def surfel_at_pixel(x, y, Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o, level):
    """(blended?, alpha, e = exp(-sigma), u, v, use_exact, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2) of a
    surfel (surfel_values) at pixel centre (x, y): the ray-splat intersection, sigma with the low-pass
    fallback and the skip tests of ``surfel_alphas`` (blended? is False for a skipped surfel). ``level``
    (surfel_level) only saves the exp where sigma is clearly too large for alpha >= 1/255."""
    hu0 = x * Mw0 - Mu0
    hu1 = x * Mw1 - Mu1
    hu2 = x * Mw2 - Mu2
    hv0 = y * Mw0 - Mv0
    hv1 = y * Mw1 - Mv1
    hv2 = y * Mw2 - Mv2
    c0 = hu1 * hv2 - hu2 * hv1
    c1 = hu2 * hv0 - hu0 * hv2
    c2 = hu0 * hv1 - hu1 * hv0
    if c2 == 0.0:
        return False, 0.0, 0.0, 0.0, 0.0, False, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2
    u = c0 / c2
    v = c1 / c2
    exact = u * u + v * v
    dx = mx - x
    dy = my - y
    low = LOW_PASS_SCALE * (dx * dx + dy * dy)
    use_exact = exact <= low
    sigma = 0.5 * (exact if use_exact else low)
    if sigma > level:
        return False, 0.0, 0.0, u, v, use_exact, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2
    e = math.exp(-sigma)
    alpha = min(ALPHA_MAX, o * e)
    ok = sigma >= 0.0 and alpha >= ALPHA_THRESHOLD
    return ok, alpha, e, u, v, use_exact, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2


@njit(cache=True, inline="always")
def surfel_level(o):
    """sigma above which alpha = min(0.999, o exp(-sigma)) < 1/255 for sure: ln(255 o) plus a margin
    that rounding of the exp cannot cross (the exact test follows the exp)."""
    return math.log(max(o * 255.0, 1e-300)) + 1e-6


@njit(cache=True, inline="always")
def surfel_depth_at(u, v, use_exact, intersection, Mw0, Mw1, Mw2, depth):
    """z_i: the intersection depth M_w . (u, v, 1) where the exact term was used (intersection mode),
    else the centre depth."""
    if intersection and use_exact:
        return u * Mw0 + v * Mw1 + Mw2
    return depth


@njit(cache=True, inline="always")
def beyond_limit(u, v, use_exact, Mw0, Mw1, Mw2, depth, lim):
    """Whether a blended surfel lies at or behind the pixel's depth limit ``lim`` (camera z, float64,
    may be +inf): its intersection depth (centre depth where the low-pass fallback gave sigma) >= lim
    (the specification's ``limit_depths`` / ``limit_by_depth``)."""
    return surfel_depth_at(u, v, use_exact, True, Mw0, Mw1, Mw2, depth) >= lim


@njit(cache=True)
def load_tile_limits(limits, c, x0, y0, x1, y1):
    """The depth limits [npix] float64 of one tile's pixels (limits [C, H, W] float64, +inf: none)."""
    tw = x1 - x0
    lim = np.empty(tw * (y1 - y0))
    for py in range(y0, y1):
        for px in range(x0, x1):
            lim[(py - y0) * tw + px - x0] = limits[c, py, px]
    return lim


BOX_MARGIN = 1e-3  # pixels added around each surfel's alpha >= 1/255 box: rounding never drops a pixel


T_LEVEL, T_CONIC = 0, 1  # columns of the per-surfel table: alpha level, row conic (a, b, d: 9 values)
TABLE = 10


@njit(cache=True, parallel=True)
def alpha_boxes(M, means2d, opac, radii, boxes, table):
    """Per surfel g, table[g] = (surfel_level, row_conic) (read per intersection by the pixel kernels)
    and boxes[g] = (xmin, xmax, ymin, ymax) float64, pixel-centre coordinates outside which
    its alpha is below 1/255 (so the kernels skip those pixels: the specification skips them too). The
    region is {u^2 + v^2 <= 2 L} (the exact term; L = ln(255 opacity)), whose image is the ellipse of
    the dual conic with (u, v) scaled by r = sqrt(2 L) (its box: the closed form of ``screen_boxes``),
    united with the low-pass disc |q - mean2d|^2 <= L; plus BOX_MARGIN. Where the circle of radius r
    reaches the camera plane (z <= 0 somewhere on it: its image is no ellipse) the box is unbounded.
    Culled surfels and opacity < 1/255 get an empty box."""
    for g in prange(M.shape[0]):
        Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o = surfel_values(g, M, means2d, opac)
        table[g, T_LEVEL] = surfel_level(o)
        conic = row_conic(Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2)
        for j in range(9):
            table[g, T_CONIC + j] = conic[j]
        if radii[g, 0] <= 0 or radii[g, 1] <= 0 or o * 255.0 < 1.0:
            boxes[g, 0], boxes[g, 1], boxes[g, 2], boxes[g, 3] = 1.0, -1.0, 1.0, -1.0
            continue
        L = math.log(o * 255.0) + 1e-12
        rd = math.sqrt(L)
        a = 2.0 * L
        dist = a * (Mw0 * Mw0 + Mw1 * Mw1) - Mw2 * Mw2
        if not dist < -1e-9 * Mw2 * Mw2:  # the circle reaches z <= 0 (or nearly): no ellipse, no bound
            boxes[g, 0], boxes[g, 1], boxes[g, 2], boxes[g, 3] = -np.inf, np.inf, -np.inf, np.inf
            continue
        cx = (a * (Mu0 * Mw0 + Mu1 * Mw1) - Mu2 * Mw2) / dist
        cy = (a * (Mv0 * Mw0 + Mv1 * Mw1) - Mv2 * Mw2) / dist
        hx = math.sqrt(max(cx * cx - (a * (Mu0 * Mu0 + Mu1 * Mu1) - Mu2 * Mu2) / dist, 0.0))
        hy = math.sqrt(max(cy * cy - (a * (Mv0 * Mv0 + Mv1 * Mv1) - Mv2 * Mv2) / dist, 0.0))
        boxes[g, 0] = min(cx - hx, mx - rd) - BOX_MARGIN
        boxes[g, 1] = max(cx + hx, mx + rd) + BOX_MARGIN
        boxes[g, 2] = min(cy - hy, my - rd) - BOX_MARGIN
        boxes[g, 3] = max(cy + hy, my + rd) + BOX_MARGIN


@njit(cache=True, inline="always")
def pixel_span(lo, hi, p0, p1):
    """Pixels [a, b) of [p0, p1) whose centres p + 0.5 lie in [lo, hi]."""
    a = p0
    if lo > p0 + 0.5:
        a = p1 if lo - 0.5 >= p1 else int(math.ceil(lo - 0.5))
    b = p1
    if hi < p1 - 0.5:
        b = p0 if hi - 0.5 < p0 else int(math.floor(hi - 0.5)) + 1
    return a, max(a, b)


@njit(cache=True, inline="always")
def row_conic(Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2):
    """c = h_u x h_v is linear in the pixel: c = x a + y b + d with a = M_v x M_w, b = M_w x M_u,
    d = M_u x M_v; returns (a, b, d) as 9 scalars (row_span solves for the row's x-range with them)."""
    return (Mv1 * Mw2 - Mv2 * Mw1, Mv2 * Mw0 - Mv0 * Mw2, Mv0 * Mw1 - Mv1 * Mw0,
            Mw1 * Mu2 - Mw2 * Mu1, Mw2 * Mu0 - Mw0 * Mu2, Mw0 * Mu1 - Mw1 * Mu0,
            Mu1 * Mv2 - Mu2 * Mv1, Mu2 * Mv0 - Mu0 * Mv2, Mu0 * Mv1 - Mu1 * Mv0)


ROW_MARGIN = 1e-3  # pixels added to each row's analytic x-range


@njit(cache=True, inline="always")
def row_span(y, xa, xb, bounded, a0, a1, a2, b0, b1, b2, d0, d1, d2, mx, my, level):
    """Pixels [xa', xb') of [xa, xb) in the row of centre y where alpha >= 1/255 is possible: the
    row's chord of the ellipse c_0^2 + c_1^2 <= 2 level c_2^2 (the exact term, a quadratic in x) united
    with the chord of the low-pass disc |q - mean2d|^2 <= level, plus ROW_MARGIN; the whole [xa, xb)
    for a surfel whose alpha box is unbounded (its image is no ellipse)."""
    if not bounded:
        return xa, xb
    lo, hi = np.inf, -np.inf
    dy = y - my
    if dy * dy <= level:
        r = math.sqrt(level - dy * dy)
        lo, hi = mx - r, mx + r
    e0, e1, e2 = b0 * y + d0, b1 * y + d1, b2 * y + d2
    two = 2.0 * level
    qa = a0 * a0 + a1 * a1 - two * a2 * a2
    qb = 2.0 * (a0 * e0 + a1 * e1 - two * a2 * e2)
    qc = e0 * e0 + e1 * e1 - two * e2 * e2
    if qa > 0.0:
        disc = qb * qb - 4.0 * qa * qc
        if disc < 0.0 and -disc <= 1e-9 * qb * qb:  # tangent up to rounding: keep the vertex
            disc = 0.0
        if disc >= 0.0:
            sq = math.sqrt(disc)
            q = -0.5 * (qb + (sq if qb >= 0.0 else -sq))
            if q != 0.0:
                r1, r2 = q / qa, qc / q
            else:
                r1 = r2 = -qb / (2.0 * qa)
            lo, hi = min(lo, r1, r2), max(hi, r1, r2)
    else:  # not an ellipse on this row after all: no bound
        return xa, xb
    if lo > hi:
        return xa, xa
    a, b = pixel_span(lo - ROW_MARGIN, hi + ROW_MARGIN, xa, xb)
    return a, b


@njit(cache=True, inline="always")
def shrink_span(a, b, p0, level, least):
    """[a, b) without the rows (or columns) at either end whose ``level`` (indexed from p0) is below
    ``least`` (forward: no live pixel; backward: no pixel whose last blended surfel is that deep)."""
    while a < b and level[a - p0] < least:
        a += 1
    while b > a and level[b - 1 - p0] < least:
        b -= 1
    return a, b


@njit(cache=True, parallel=True)
def forward_kernel(M, means2d, opac, colors, depths, normals, boxes, table, offsets, ids, tile_order, W, H, TW, ts,
                   intersection, limits, render, alpha_out, T_out, wz_out, median_out, normal_out, dist_out, last_k,
                   median_k):
    """Composite every pixel. Outputs [C, H, W, .] in the storage dtype: render (D), alpha (sum w),
    T_out (prod (1 - alpha)), wz_out (sum w z), median_out, normal_out (3), dist_out; last_k / median_k
    [C, H, W] int64: the intersection index of the last blended surfel / of the median one (-1: none).
    Per tile, surfels front to back, each over the pixels of its alpha box (alpha_boxes) that are live.
    ``limits`` [C, H, W] float64 depth limits (+inf: none) or None (a separate compilation with the
    test pruned): a surfel at or behind a pixel's limit (beyond_limit) is skipped there."""
    D = colors.shape[1]
    TT = TW * ((H + ts - 1) // ts)
    for it in prange(tile_order.shape[0]):
        t = tile_order[it]
        c, x0, y0, x1, y1 = tile_box(t, TW, TT, ts, W, H)
        start, end = offsets[t], offsets[t + 1]
        tw = x1 - x0
        npix = tw * (y1 - y0)
        T = np.ones(npix)
        done = np.zeros(npix, np.bool_)
        acc = np.zeros((D, npix))
        st = np.zeros((7, npix))  # sum w, sum w z, normal (3), distortion, median
        last = np.full(npix, -1, np.int64)
        med = np.full(npix, -1, np.int64)
        col = np.empty(D)
        row_live = np.full(y1 - y0, tw, np.int64)  # live pixels per row / column: spans shrink to them
        col_live = np.full(tw, y1 - y0, np.int64)
        if limits is not None:
            lim = load_tile_limits(limits, c, x0, y0, x1, y1)
            limited = lim.min() < np.inf  # a tile without a finite limit skips the test
        n_done = 0
        for k in range(start, end):
            if n_done == npix:
                break
            g = ids[k]
            xa, xb = pixel_span(boxes[g, 0], boxes[g, 1], x0, x1)
            ya, yb = pixel_span(boxes[g, 2], boxes[g, 3], y0, y1)
            xa, xb = shrink_span(xa, xb, x0, col_live, 1)
            ya, yb = shrink_span(ya, yb, y0, row_live, 1)
            if xa == xb or ya == yb:
                continue
            Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o = surfel_values(g, M, means2d, opac)
            level = table[g, T_LEVEL]
            ca0, ca1, ca2 = table[g, T_CONIC], table[g, T_CONIC + 1], table[g, T_CONIC + 2]
            cb0, cb1, cb2 = table[g, T_CONIC + 3], table[g, T_CONIC + 4], table[g, T_CONIC + 5]
            cd0, cd1, cd2 = table[g, T_CONIC + 6], table[g, T_CONIC + 7], table[g, T_CONIC + 8]
            bounded = boxes[g, 1] < np.inf
            depth = np.float64(depths[g])
            n0, n1, n2 = np.float64(normals[g, 0]), np.float64(normals[g, 1]), np.float64(normals[g, 2])
            for j in range(D):
                col[j] = np.float64(colors[g, j])
            for py in range(ya, yb):
                if row_live[py - y0] == 0:
                    continue
                ra, rb = row_span(py + 0.5, xa, xb, bounded, ca0, ca1, ca2, cb0, cb1, cb2, cd0, cd1, cd2, mx, my,
                                  level)
                for px in range(ra, rb):
                    p = (py - y0) * tw + px - x0
                    if done[p]:
                        continue
                    ok, al, e, u, v, use_exact, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2 = surfel_at_pixel(
                        px + 0.5, py + 0.5, Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o, level)
                    if not ok:
                        continue
                    if limits is not None and limited and beyond_limit(u, v, use_exact, Mw0, Mw1, Mw2, depth,
                                                                        lim[p]):
                        continue
                    Tp = T[p]
                    if Tp * (1.0 - al) <= T_MIN:
                        done[p] = True
                        n_done += 1
                        row_live[py - y0] -= 1
                        col_live[px - x0] -= 1
                        continue
                    w = al * Tp
                    z = surfel_depth_at(u, v, use_exact, intersection, Mw0, Mw1, Mw2, depth)
                    for j in range(D):
                        acc[j, p] += w * col[j]
                    st[2, p] += w * n0
                    st[3, p] += w * n1
                    st[4, p] += w * n2
                    st[5, p] += 2.0 * w * (z * st[0, p] - st[1, p])
                    st[0, p] += w
                    st[1, p] += w * z
                    if Tp > MEDIAN_T:
                        st[6, p] = z
                        med[p] = k
                    T[p] = Tp * (1.0 - al)
                    last[p] = k
        for py in range(y0, y1):
            for px in range(x0, x1):
                p = (py - y0) * tw + px - x0
                for j in range(D):
                    render[c, py, px, j] = acc[j, p]
                alpha_out[c, py, px, 0] = st[0, p]
                T_out[c, py, px, 0] = T[p]
                wz_out[c, py, px, 0] = st[1, p]
                median_out[c, py, px, 0] = st[6, p]
                normal_out[c, py, px, 0] = st[2, p]
                normal_out[c, py, px, 1] = st[3, p]
                normal_out[c, py, px, 2] = st[4, p]
                dist_out[c, py, px, 0] = st[5, p]
                last_k[c, py, px] = last[p]
                median_k[c, py, px] = med[p]


# per-pixel backward inputs, loaded once per tile (rows of the tile's [NB, npix] array)
B_VA, B_VWZ, B_VD, B_VN, B_VMED, B_VTF, B_WALL, B_ZALL = 0, 1, 2, 3, 6, 7, 8, 9
NB = 10


@njit(cache=True, parallel=True)
def backward_kernel(M, means2d, opac, colors, depths, normals, boxes, table, offsets, ids, tile_order, W, H, TW, ts,
                    intersection, limits, alpha_sum, T_final, wz_sum, last_k, median_k, v_render, v_alpha, v_T, v_wz,
                    v_median, v_normal, v_dist, grads):
    """Per-intersection gradients grads [M, G_COLOR + D] (float64, every row written) from the cotangents
    of the forward outputs (same shapes; v_alpha is d loss / d sum w). Per tile, surfels back to front,
    each over the pixels of its alpha box whose last blended surfel is not in front of it, with
    per-pixel running sums of what lies behind (sum w_j dL/dw_j, sum w_j, sum w_j z_j): per pixel, the
    arithmetic and order of a back-to-front walk from its last blended surfel. ``limits``: as the
    forward's (skipped surfels get nothing)."""
    D = colors.shape[1]
    TT = TW * ((H + ts - 1) // ts)
    for it in prange(tile_order.shape[0]):
        t = tile_order[it]
        c, x0, y0, x1, y1 = tile_box(t, TW, TT, ts, W, H)
        start, end = offsets[t], offsets[t + 1]
        tw = x1 - x0
        npix = tw * (y1 - y0)
        T = np.empty(npix)
        S = np.zeros(npix)  # sum over blended j > i of w_j dL/dw_j
        W_after = np.zeros(npix)
        Z_after = np.zeros(npix)
        pv = np.empty((NB, npix))
        vr = np.empty((D, npix))
        last = np.empty(npix, np.int64)
        med = np.empty(npix, np.int64)
        top = start - 1
        if limits is not None:
            lim = load_tile_limits(limits, c, x0, y0, x1, y1)
            limited = lim.min() < np.inf  # a tile without a finite limit skips the test
        for py in range(y0, y1):
            for px in range(x0, x1):
                p = (py - y0) * tw + px - x0
                Tf = np.float64(T_final[c, py, px, 0])
                T[p] = Tf
                last[p] = last_k[c, py, px]
                med[p] = median_k[c, py, px]
                top = max(top, last[p])
                pv[B_VA, p] = v_alpha[c, py, px, 0]
                pv[B_VWZ, p] = v_wz[c, py, px, 0]
                pv[B_VD, p] = v_dist[c, py, px, 0]
                for j in range(3):
                    pv[B_VN + j, p] = v_normal[c, py, px, j]
                pv[B_VMED, p] = v_median[c, py, px, 0]
                pv[B_VTF, p] = np.float64(v_T[c, py, px, 0]) * Tf
                pv[B_WALL, p] = alpha_sum[c, py, px, 0]
                pv[B_ZALL, p] = wz_sum[c, py, px, 0]
                for j in range(D):
                    vr[j, p] = v_render[c, py, px, j]
        for k in range(end - 1, top, -1):  # behind every pixel's last blended surfel: no gradient
            grads[k, :] = 0.0
        row_last = np.full(y1 - y0, -1, np.int64)  # per row / column the deepest last blended surfel:
        col_last = np.full(tw, -1, np.int64)  # spans shrink to the rows and columns that reach k
        for py in range(y0, y1):
            for px in range(x0, x1):
                q = last[(py - y0) * tw + px - x0]
                row_last[py - y0] = max(row_last[py - y0], q)
                col_last[px - x0] = max(col_last[px - x0], q)
        gcol = np.zeros(D)
        col = np.empty(D)
        for k in range(top, start - 1, -1):
            g = ids[k]
            grads[k, :] = 0.0
            xa, xb = pixel_span(boxes[g, 0], boxes[g, 1], x0, x1)
            ya, yb = pixel_span(boxes[g, 2], boxes[g, 3], y0, y1)
            xa, xb = shrink_span(xa, xb, x0, col_last, k)
            ya, yb = shrink_span(ya, yb, y0, row_last, k)
            if xa == xb or ya == yb:
                continue
            Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o = surfel_values(g, M, means2d, opac)
            level = table[g, T_LEVEL]
            ca0, ca1, ca2 = table[g, T_CONIC], table[g, T_CONIC + 1], table[g, T_CONIC + 2]
            cb0, cb1, cb2 = table[g, T_CONIC + 3], table[g, T_CONIC + 4], table[g, T_CONIC + 5]
            cd0, cd1, cd2 = table[g, T_CONIC + 6], table[g, T_CONIC + 7], table[g, T_CONIC + 8]
            bounded = boxes[g, 1] < np.inf
            depth = np.float64(depths[g])
            n0, n1, n2 = np.float64(normals[g, 0]), np.float64(normals[g, 1]), np.float64(normals[g, 2])
            for j in range(D):
                col[j] = np.float64(colors[g, j])
                gcol[j] = 0.0
            gm0 = gm1 = go = gd = gn0 = gn1 = gn2 = 0.0
            gM0 = gM1 = gM2 = gM3 = gM4 = gM5 = gM6 = gM7 = gM8 = 0.0
            for py in range(ya, yb):
                if row_last[py - y0] < k:
                    continue
                ra, rb = row_span(py + 0.5, xa, xb, bounded, ca0, ca1, ca2, cb0, cb1, cb2, cd0, cd1, cd2, mx, my,
                                  level)
                for px in range(ra, rb):
                    p = (py - y0) * tw + px - x0
                    if last[p] < k:
                        continue
                    x, y = px + 0.5, py + 0.5
                    ok, al, e, u, v, use_exact, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2 = surfel_at_pixel(
                        x, y, Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o, level)
                    if not ok:
                        continue
                    if limits is not None and limited and beyond_limit(u, v, use_exact, Mw0, Mw1, Mw2, depth,
                                                                        lim[p]):
                        continue
                    inv_keep = 1.0 / (1.0 - al)
                    Ti = T[p] * inv_keep
                    T[p] = Ti
                    w = al * Ti
                    z = surfel_depth_at(u, v, use_exact, intersection, Mw0, Mw1, Mw2, depth)
                    A = pv[B_WALL, p] - w - W_after[p]  # sum over j < i of w_j
                    B = pv[B_ZALL, p] - w * z - Z_after[p]  # sum over j < i of w_j z_j
                    vd = pv[B_VD, p]
                    vn0, vn1, vn2 = pv[B_VN, p], pv[B_VN + 1, p], pv[B_VN + 2, p]
                    gw = pv[B_VA, p] + pv[B_VWZ, p] * z + vn0 * n0 + vn1 * n1 + vn2 * n2
                    for j in range(D):
                        gw += vr[j, p] * col[j]
                        gcol[j] += vr[j, p] * w
                    gw += 2.0 * vd * (z * A - B + Z_after[p] - z * W_after[p])
                    v_z = pv[B_VWZ, p] * w + 2.0 * vd * w * (A - W_after[p])
                    if k == med[p]:
                        v_z += pv[B_VMED, p]
                    gn0 += vn0 * w
                    gn1 += vn1 * w
                    gn2 += vn2 * w
                    v_al = Ti * gw - (S[p] + pv[B_VTF, p]) * inv_keep
                    S[p] += w * gw
                    W_after[p] += w
                    Z_after[p] += w * z
                    (d_m0, d_m1, d_o, d_d, d0, d1, d2, d3, d4, d5, d6, d7, d8) = surfel_gradients(
                        x, y, e, u, v, use_exact, c2, hu0, hu1, hu2, hv0, hv1, hv2, v_al, v_z, intersection,
                        Mw0, Mw1, mx, my, o)
                    gm0 += d_m0
                    gm1 += d_m1
                    go += d_o
                    gd += d_d
                    gM0 += d0
                    gM1 += d1
                    gM2 += d2
                    gM3 += d3
                    gM4 += d4
                    gM5 += d5
                    gM6 += d6
                    gM7 += d7
                    gM8 += d8
            grads[k, G_MEANS2D], grads[k, G_MEANS2D + 1] = gm0, gm1
            grads[k, G_M], grads[k, G_M + 1], grads[k, G_M + 2] = gM0, gM1, gM2
            grads[k, G_M + 3], grads[k, G_M + 4], grads[k, G_M + 5] = gM3, gM4, gM5
            grads[k, G_M + 6], grads[k, G_M + 7], grads[k, G_M + 8] = gM6, gM7, gM8
            grads[k, G_OPAC], grads[k, G_DEPTH] = go, gd
            grads[k, G_NORMAL], grads[k, G_NORMAL + 1], grads[k, G_NORMAL + 2] = gn0, gn1, gn2
            for j in range(D):
                grads[k, G_COLOR + j] = gcol[j]


@njit(cache=True, inline="always")
def surfel_gradients(x, y, e, u, v, use_exact, c2, hu0, hu1, hu2, hv0, hv1, hv2, v_al, v_z, intersection, Mw0,
                     Mw1, mx, my, o):
    """Chain d loss / d alpha_i (v_al) and d loss / d z_i (v_z) through alpha = min(0.999, o e),
    e = exp(-sigma), sigma = 0.5 min(u^2 + v^2, 2 |mean2d - q|^2), (u, v) = (c_x, c_y) / c_z,
    c = h_u x h_v, h_u = x M_w - M_u, h_v = y M_w - M_v, and the depth. Returns the gradients of
    (mean2d x, y, opacity, centre depth, M_u (3), M_v (3), M_w (3))."""
    v_raw = v_al if o * e <= ALPHA_MAX else 0.0  # the clamp passes no gradient
    d_o = v_raw * e
    v_sigma = -v_raw * o * e
    v_u = 0.0
    v_v = 0.0
    d_depth = 0.0
    dw0 = dw1 = dw2 = 0.0
    if intersection and use_exact:
        v_u += v_z * Mw0
        v_v += v_z * Mw1
        dw0 += v_z * u
        dw1 += v_z * v
        dw2 += v_z
    else:
        d_depth = v_z
    d_m0 = d_m1 = 0.0
    if use_exact:
        v_u += v_sigma * u
        v_v += v_sigma * v
    else:
        d_m0 = v_sigma * 2.0 * (mx - x)
        d_m1 = v_sigma * 2.0 * (my - y)
    inv_c2 = 1.0 / c2
    vc0 = v_u * inv_c2
    vc1 = v_v * inv_c2
    vc2 = -(v_u * u + v_v * v) * inv_c2
    vhu0 = hv1 * vc2 - hv2 * vc1  # d/dh_u of vc . (h_u x h_v) = h_v x vc
    vhu1 = hv2 * vc0 - hv0 * vc2
    vhu2 = hv0 * vc1 - hv1 * vc0
    vhv0 = vc1 * hu2 - vc2 * hu1  # d/dh_v = vc x h_u
    vhv1 = vc2 * hu0 - vc0 * hu2
    vhv2 = vc0 * hu1 - vc1 * hu0
    return (d_m0, d_m1, d_o, d_depth, -vhu0, -vhu1, -vhu2, -vhv0, -vhv1, -vhv2, dw0 + x * vhu0 + y * vhv0,
            dw1 + x * vhu1 + y * vhv1, dw2 + x * vhu2 + y * vhv2)


@njit(cache=True, parallel=True)
def sum_rows_per_surfel(grads, perm, starts, counts, out):
    """out[g] = sum of grads[perm[q]] over surfel g's intersections q in [starts[g], starts[g] + counts[g])
    (the binning's layout), in ascending q; out [G, cols] (any float dtype) is overwritten."""
    G = starts.shape[0]
    cols = grads.shape[1]
    for g in prange(G):
        for j in range(cols):
            out[g, j] = 0.0
        for q in range(starts[g], starts[g] + counts[g]):
            k = perm[q]
            for j in range(cols):
                out[g, j] += grads[k, j]
