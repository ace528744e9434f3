"""Numba kernels of the surfels' `cpu` backend: forward compositing and its hand-written backward (the
arithmetic of ``surfels/composite.py``, the specification), organised as the 3D backend's
(``rasterizer.cpu.compositing``).

Tiles of 16x16 pixels (from the 3D path's binning, ``rasterizer.cpu.binning``) run in parallel; inside
a tile the depth-sorted surfels are taken front to back (forward) or back to front (backward,
recovering T_i = T_{i+1} / (1 - alpha_i) per pixel), each over the block of tile rows its alpha >=
1/255 box crosses (``surfel_rows``). Every pixel of those rows is evaluated by one flat, branch-free
loop (selects, no ifs) that LLVM vectorises (16 float32 pixels at a time with AVX-512); a pixel the
specification skips (alpha < 1/255, no ray-splat hit, behind its depth limit, done, or, backward,
past its last blended surfel) contributes exact zeros, so per pixel the results are those of the
specification's walk along the tile's list (float64 tests: 1e-9).

Arithmetic runs in the storage dtype (float32 stays float32, with the vectorisable ``exp_f32``;
float64 uses math.exp). Per-tile state is one flat array in that dtype at constant offsets (LLVM
can then prove that the loops' loads and stores do not overlap). Arrays are flattened over cameras:
surfel g = c * N + n, tile t = c * TT + ty * TW + tx, intersection k indexes the binning's ``ids``.

Per surfel, ``pack_surfels`` gathers once per render what the tile loops read (its K W H rows M_u,
M_v, M_w, mean2d, opacity, centre depth, camera normal and colour channels 0..2) into one row
[G, PACKED], and its alpha box's y range with the polynomials of its per-row chord into rows
[G, ROWS] (float64; ``row_reaches`` trims each surfel's rows per tile with them). Per-intersection
gradients are sums over the pixels (vectorised reductions) written to one row per k (one thread owns
a tile, hence its k) at k's place in the binning's surfel-major order (``binning.major_rows``), with
the columns G_* below, then summed per surfel over consecutive rows (``binning.sum_major_rows``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..cpu.compositing import F_THR as _F_THR_3D
from ..cpu.chords import (R_BOUNDED, R_LEVEL, R_MX, R_MY, R_Q0, R_Q1, R_Q2, R_XC0, R_XC1, R_YMAX, R_YMIN, ROWS,
                          pixel_span, reached_rows, tile_rows)
from ..cpu.compositing import accumulate_pixels, count_done, init_tile_pixels, tile_box
from ..cpu.vecmath import FASTMATH, U, exp_kernel, like, prefetch_span, radd, select

ALPHA_THRESHOLD = 1.0 / 255.0
ALPHA_MAX = 0.999
T_MIN = 1e-4
MEDIAN_T = 0.5
LOW_PASS_SCALE = 2.0
TS = 16
NPIX = TS * TS
LIVE_CHECK = 4  # forward: test for "every pixel done" every LIVE_CHECK surfels
AHEAD = 8  # surfel rows read by a random index are prefetched AHEAD intersections on

# per-intersection gradient columns
G_MEANS2D, G_M, G_OPAC, G_DEPTH, G_NORMAL, G_COLOR = 0, 2, 11, 12, 13, 16

# packed per-surfel columns (pack_surfels): K W H rows (9), mean2d, opacity, centre depth, normal, colours 0..2
P_M, P_MX, P_MY, P_OP, P_DEPTH, P_N, P_C = 0, 9, 10, 11, 12, 13, 16
PACKED = 19

BOX_MARGIN = 1e-3  # pixels added around each surfel's alpha >= 1/255 box: rounding never drops a pixel

# per-surfel float64 row geometry (pack_surfels) in the layout of rasterizer.cpu.chords: the alpha box's y
# range, and the polynomials in the row's y of its alpha region's chord, with which the binning drops the
# tiles a surfel reaches no pixel of and the kernels trim its block of rows to those it can reach in a
# tile: the exact term's ellipse and the low-pass disc (mean2d, level)
LEVEL_MARGIN = 1e-5  # relative margin on the alpha level ln(255 o)

# "No limit" in the tile's depth limits: the largest finite value of the dtype (the kernels are compiled
# without infinities, FASTMATH's ninf); the caller clamps the limits to it.

# forward tile state (offsets into one flat array of the storage dtype)
F_T = 0  # [NPIX] transmittance T
F_THR = F_T + NPIX  # [NPIX] alpha threshold: 1/255 while live, 2 once done (where the 3D count_done reads it)
F_CX = F_THR + NPIX  # [NPIX] pixel-centre x
F_CY = F_CX + NPIX  # [NPIX] pixel-centre y
F_LIM = F_CY + NPIX  # [NPIX] depth limit (the dtype's max: none)
F_W = F_LIM + NPIX  # [NPIX] the current surfel's weights alpha T (0 where not blended)
F_SW = F_W + NPIX  # [NPIX] sum w
F_WZ = F_SW + NPIX  # [NPIX] sum w z
F_N = F_WZ + NPIX  # [3, NPIX] sum w n
F_DIST = F_N + 3 * NPIX  # [NPIX] distortion
F_MED = F_DIST + NPIX  # [NPIX] median depth
F_ACC = F_MED + NPIX  # [max(D, 3), NPIX] colour
assert F_THR == _F_THR_3D, "count_done (rasterizer.cpu.compositing) reads the thresholds at its F_THR"

# backward tile state
B_T = 0  # [NPIX] transmittance T_i, recovered back to front
B_CX = B_T + NPIX
B_CY = B_CX + NPIX
B_LIM = B_CY + NPIX
B_S = B_LIM + NPIX  # [NPIX] T_final dL/dT_final + sum over blended j > i of w_j dL/dw_j
B_P = B_S + NPIX  # [NPIX] P = sum w (all blended) - 2 sum over blended j > i of w_j
B_Q = B_P + NPIX  # [NPIX] Q = sum w z (all blended) - 2 sum over blended j > i of w_j z_j
B_VA = B_Q + NPIX  # [NPIX] d loss / d sum w
B_VWZ = B_VA + NPIX  # [NPIX] d loss / d sum w z
B_VD = B_VWZ + NPIX  # [NPIX] d loss / d distortion
B_VN = B_VD + NPIX  # [3, NPIX] d loss / d normal
B_VMED = B_VN + 3 * NPIX  # [NPIX] d loss / d median depth
B_XG = B_VMED + NPIX  # [NPIX] the current surfel's sum over channels >= 3 of c v_render (0 for D <= 3)
B_W = B_XG + NPIX  # [NPIX] the current surfel's weights w (0 where not blended)
B_VR = B_W + NPIX  # [max(D, 3), NPIX] d loss / d render

FASTMATH_SUMS = FASTMATH | {"reassoc"}  # loops without exp: lets LLVM vectorise their sums


@njit(cache=True, inline="always")
def alpha_y_range(Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, my, o):
    """(ymin, ymax) float64, the pixel-centre rows outside which a surfel's alpha is below 1/255. The region
    is {u^2 + v^2 <= 2 L} (the exact term; L = ln(255 opacity)), whose image is the ellipse of the dual
    conic with (u, v) scaled by r = sqrt(2 L), united with the low-pass disc |q - mean2d|^2 <= L; plus
    BOX_MARGIN. Where the circle of radius r reaches the camera plane (z <= 0 somewhere on it: its image
    is no ellipse) the range is unbounded. Opacity < 1/255: an empty range. (Each row's x-range comes
    from the chord polynomials, chord_polynomials / reached_rows, so no x-range is computed here.)"""
    if o * 255.0 < 1.0:
        return 1.0, -1.0
    L = math.log(o * 255.0) + 1e-12
    rd = math.sqrt(L)
    a = 2.0 * L
    dist = a * (Mw0 * Mw0 + Mw1 * Mw1) - Mw2 * Mw2
    if not dist < -1e-9 * Mw2 * Mw2:  # the circle reaches z <= 0 (or nearly): no ellipse, no bound
        return -np.inf, np.inf
    cy = (a * (Mv0 * Mw0 + Mv1 * Mw1) - Mv2 * Mw2) / dist
    hy = math.sqrt(max(cy * cy - (a * (Mv0 * Mv0 + Mv1 * Mv1) - Mv2 * Mv2) / dist, 0.0))
    return min(cy - hy, my - rd) - BOX_MARGIN, max(cy + hy, my + rd) + BOX_MARGIN


@njit(cache=True, parallel=True)
def pack_surfels(M, means2d, opac, colors, depths, normals, radii, packed, rows):
    """Per surfel g: packed[g] (storage dtype; colour channels the render lacks are 0) as the P_*
    columns, and rows[g] (float64) as the R_* columns: the y range of its alpha box (alpha_y_range; culled
    surfels and opacity < 1/255: empty, unbounded images: infinite), its alpha level and row conic."""
    D = colors.shape[1]
    for g in prange(M.shape[0]):
        for j in range(9):
            packed[g, P_M + j] = M[g, j]
        packed[g, P_MX], packed[g, P_MY], packed[g, P_OP] = means2d[g, 0], means2d[g, 1], opac[g]
        packed[g, P_DEPTH] = depths[g]
        for j in range(3):
            packed[g, P_N + j] = normals[g, j]
            packed[g, P_C + j] = colors[g, j] if j < D else 0.0
        Mu0, Mu1, Mu2 = np.float64(M[g, 0]), np.float64(M[g, 1]), np.float64(M[g, 2])
        Mv0, Mv1, Mv2 = np.float64(M[g, 3]), np.float64(M[g, 4]), np.float64(M[g, 5])
        Mw0, Mw1, Mw2 = np.float64(M[g, 6]), np.float64(M[g, 7]), np.float64(M[g, 8])
        mx, my, o = np.float64(means2d[g, 0]), np.float64(means2d[g, 1]), np.float64(opac[g])
        level = math.log(max(o * 255.0, 1e-300)) * (1.0 + LEVEL_MARGIN) + LEVEL_MARGIN
        rows[g, R_MX], rows[g, R_MY], rows[g, R_LEVEL] = mx, my, level
        chord_polynomials(rows, g, row_conic(Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2), level)
        if radii[g, 0] <= 0 or radii[g, 1] <= 0:
            rows[g, R_YMIN], rows[g, R_YMAX] = 1.0, -1.0
            continue
        rows[g, R_YMIN], rows[g, R_YMAX] = alpha_y_range(Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, my, o)


@njit(cache=True, inline="always")
def row_conic(Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2):
    """c = h_u x h_v is linear in the pixel: c = x a + y b + d with a = M_v x M_w, b = M_w x M_u,
    d = M_u x M_v; returns (a, b, d) as 9 scalars (row_reaches solves for a row's x-range with them)."""
    return (Mv1 * Mw2 - Mv2 * Mw1, Mv2 * Mw0 - Mv0 * Mw2, Mv0 * Mw1 - Mv1 * Mw0,
            Mw1 * Mu2 - Mw2 * Mu1, Mw2 * Mu0 - Mw0 * Mu2, Mw0 * Mu1 - Mw1 * Mu0,
            Mu1 * Mv2 - Mu2 * Mv1, Mu2 * Mv0 - Mu0 * Mv2, Mu0 * Mv1 - Mu1 * Mv0)


@njit(cache=True, inline="always")
def chord_polynomials(rows, g, conic, level):
    """rows[g]'s chord columns from the row conic (a, b, d) and the alpha level L: on the row of centre
    y the exact term's region c_0^2 + c_1^2 <= 2 L c_2^2 (c = x a + y b + d) is qa x^2 + qb x + qc <= 0
    with qa constant, qb linear and qc quadratic in y; for qa > 0 (an ellipse) its chord has centre
    -qb / (2 qa) and squared half-width centre^2 - qc / qa. qa <= 0 (no ellipse): R_BOUNDED 0."""
    a0, a1, a2, b0, b1, b2, d0, d1, d2 = conic
    two = 2.0 * level
    qa = a0 * a0 + a1 * a1 - two * a2 * a2
    rows[g, R_BOUNDED] = 1.0 if qa > 0.0 else 0.0
    if not qa > 0.0:
        rows[g, R_XC1] = rows[g, R_XC0] = rows[g, R_Q2] = rows[g, R_Q1] = rows[g, R_Q0] = 0.0
        return
    # qb = 2 (a0 e0 + a1 e1 - 2L a2 e2), e = b y + d; qc = e0^2 + e1^2 - 2L e2^2
    qb1 = 2.0 * (a0 * b0 + a1 * b1 - two * a2 * b2)
    qb0 = 2.0 * (a0 * d0 + a1 * d1 - two * a2 * d2)
    rows[g, R_XC1] = -qb1 / (2.0 * qa)
    rows[g, R_XC0] = -qb0 / (2.0 * qa)
    rows[g, R_Q2] = (b0 * b0 + b1 * b1 - two * b2 * b2) / qa
    rows[g, R_Q1] = 2.0 * (b0 * d0 + b1 * d1 - two * b2 * d2) / qa
    rows[g, R_Q0] = (d0 * d0 + d1 * d1 - two * d2 * d2) / qa


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def surfel_at(x, y, Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o):
    """A surfel at pixel centre (x, y), branch-free (the one definition for the forward and the
    backward, which must agree exactly: the backward recovers T_i by dividing by 1 - alpha):
    h_u = x M_w - M_u, h_v = y M_w - M_v, c = h_u x h_v, (u, v) = (c_0, c_1) / c_2,
    sigma = 0.5 min(u^2 + v^2, 2 |mean2d - q|^2), e = exp(-sigma), alpha = min(0.999, o e), and the
    intersection depth M_w . (u, v, 1). Returns (hit (c_2 != 0), alpha, e, u, v, use_exact, 1 / c_2,
    z_hit, dx, dy, hu0, hu1, hu2, hv0, hv1, hv2) with d = mean2d - q; where there is no hit, 1 / c_2
    is 1 (all finite)."""
    zero, one, half, two = like(0.0, o), like(1.0, o), like(0.5, o), like(LOW_PASS_SCALE, o)
    hu0 = x * Mw0 - Mu0
    hu1 = x * Mw1 - Mu1
    hu2 = x * Mw2 - Mu2
    hv0 = y * Mw0 - Mv0
    hv1 = y * Mw1 - Mv1
    hv2 = y * Mw2 - Mv2
    c0 = hu1 * hv2 - hu2 * hv1
    c1 = hu2 * hv0 - hu0 * hv2
    c2 = hu0 * hv1 - hu1 * hv0
    hit = c2 != zero
    r = one / select(hit, c2, one)
    u = c0 * r
    v = c1 * r
    exact = u * u + v * v
    dx = mx - x
    dy = my - y
    low = two * (dx * dx + dy * dy)
    use_exact = exact <= low
    sigma = half * select(use_exact, exact, low)
    e = exp_kernel(-sigma)
    al = o * e
    al = select(al > like(ALPHA_MAX, o), like(ALPHA_MAX, o), al)
    z_hit = u * Mw0 + v * Mw1 + Mw2
    return hit & (sigma >= zero), al, e, u, v, use_exact, r, z_hit, dx, dy, hu0, hu1, hu2, hv0, hv1, hv2


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def forward_pixels(st, last, medk, lo, hi, k, Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o, depth, n0, n1,
                   n2, c0, c1, c2, intersection, extra, limited):
    """Blend surfel k into tile pixels [lo, hi), branch-free (inlined into forward_tile).

    Per pixel: the surfel's alpha (surfel_at); it blends where it hits, alpha reaches the pixel's
    threshold (1/255, or 2 once done), its limit depth (intersection depth where the exact term gave
    sigma, else the centre depth) is in front of the pixel's limit (only when ``limited``: limits given)
    and T (1 - alpha) > 1e-4, and the pixel is done instead where T (1 - alpha) <= 1e-4. Adds w = alpha T
    times colours 0..2, normal, z and 1 to the sums, the distortion term 2 w (z sum w - sum w z) before
    them, and records the median (z and k of the last blend with T > 0.5) and the last blended k; w goes
    to F_W when ``extra`` (channels >= 3 to add: accumulate_pixels)."""
    zero, one, two = like(0.0, o), like(1.0, o), like(2.0, o)
    tmin, done, tmed = like(T_MIN, o), like(2.0, o), like(MEDIAN_T, o)
    k32, minus1 = np.int32(k), np.int32(-1)
    for p in range(U(lo), U(hi)):
        hit, al, _, _, _, use_exact, _, z_hit, _, _, _, _, _, _, _, _ = surfel_at(
            st[U(F_CX) + p], st[U(F_CY) + p], Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o)
        thr = st[U(F_THR) + p]
        Tp = st[U(F_T) + p]
        next_T = Tp * (one - al)
        ok = hit & (al >= thr)
        if limited:  # loop-invariant (limits given): LLVM unswitches it
            ok = ok & (select(use_exact, z_hit, depth) < st[U(F_LIM) + p])
        stop = ok & (next_T <= tmin)
        blend = ok & (next_T > tmin)
        # Updates never store select(cond, new, the loaded value): LLVM turns that into a masked store,
        # very slow on AMD cores (rasterizer.cpu.compositing).
        w = select(blend, al * Tp, zero)
        z = select(intersection & use_exact, z_hit, depth)
        sw = st[U(F_SW) + p]
        wz = st[U(F_WZ) + p]
        st[U(F_DIST) + p] += two * w * (z * sw - wz)
        st[U(F_SW) + p] = sw + w
        st[U(F_WZ) + p] = wz + w * z
        if extra:  # loop-invariant: LLVM unswitches it
            st[U(F_W) + p] = w
        st[U(F_N) + p] += w * n0
        st[U(F_N + NPIX) + p] += w * n1
        st[U(F_N + 2 * NPIX) + p] += w * n2
        st[U(F_ACC) + p] += c0 * w
        st[U(F_ACC + NPIX) + p] += c1 * w
        st[U(F_ACC + 2 * NPIX) + p] += c2 * w
        is_med = blend & (Tp > tmed)
        m = select(is_med, one, zero)  # exact either way: med (1 - m) + z m
        st[U(F_MED) + p] = st[U(F_MED) + p] * (one - m) + z * m
        st[U(F_T) + p] = Tp * select(blend, one - al, one)
        st[U(F_THR) + p] = select(stop, done, abs(thr))  # abs: LLVM cannot prove it is the old value
        last[p] = max(last[p], select(blend, k32, minus1))  # k grows: the max is the last blended
        medk[p] = max(medk[p], select(is_med, k32, minus1))


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def load_tile_limits(st, base, limits, c, x0, y0, x1, y1):
    """The depth limits of one tile's pixels into st[base:base + NPIX] (limits [C, H, W] in the storage
    dtype, finite)."""
    for y in range(y0, y1):
        for x in range(x0, x1):
            st[base + (y - y0) * TS + x - x0] = limits[c, y, x]


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def surfel_scalars(packed, g):
    """The P_* values of surfel g (19 scalars of the storage dtype)."""
    return (packed[g, 0], packed[g, 1], packed[g, 2], packed[g, 3], packed[g, 4], packed[g, 5], packed[g, 6],
            packed[g, 7], packed[g, 8], packed[g, P_MX], packed[g, P_MY], packed[g, P_OP], packed[g, P_DEPTH],
            packed[g, P_N], packed[g, P_N + 1], packed[g, P_N + 2], packed[g, P_C], packed[g, P_C + 1],
            packed[g, P_C + 2])


@njit(cache=True, parallel=True)
def forward_kernel(packed, rows, colors, offsets, ids, tile_order, W, H, TW, TH, intersection, limits, render,
                   alpha_out, T_out, wz_out, median_out, normal_out, dist_out, last_k, median_k):
    """Composite every tile in parallel. Outputs [C, H, W, .] in the storage dtype: render (D), alpha
    (sum w), T_out (prod (1 - alpha)), wz_out (sum w z), median_out, normal_out (3), dist_out; last_k /
    median_k [C, H, W] int32: the intersection index of the last blended surfel / of the median one (-1:
    none). ``limits`` [C, H, W] depth limits in the storage dtype (finite: the dtype's max is none) or None
    (a separate compilation)."""
    for it in prange(tile_order.shape[0]):
        forward_tile(tile_order[it], packed, rows, colors, offsets, ids, W, H, TW, TH, intersection, limits, render,
                     alpha_out, T_out, wz_out, median_out, normal_out, dist_out, last_k, median_k)


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def forward_tile(t, packed, rows, colors, offsets, ids, W, H, TW, TH, intersection, limits, render, alpha_out, T_out,
                 wz_out, median_out, normal_out, dist_out, last_k, median_k):
    """Forward pass of one tile t (see forward_kernel): surfels front to back, each over the rows its
    alpha box crosses, until every pixel of the tile is done."""
    D = colors.shape[1]
    c, x0, y0, x1, y1 = tile_box(t, TW, TW * TH, TS, W, H)
    st = np.zeros(F_ACC + max(D, 3) * NPIX, packed.dtype)
    last = np.full(NPIX, -1, np.int32)
    medk = np.full(NPIX, -1, np.int32)
    init_tile_pixels(st, F_T, F_CX, F_CY, x0, y0)
    done = like(2.0, st[0])
    st[F_THR:F_THR + NPIX] = done
    st[F_LIM:F_LIM + NPIX] = np.finfo(packed.dtype).max
    for ly in range(y1 - y0):
        for lx in range(x1 - x0):
            st[F_THR + ly * TS + lx] = ALPHA_THRESHOLD
    if limits is not None:  # None: a separate compilation with this pruned
        load_tile_limits(st, F_LIM, limits, c, x0, y0, x1, y1)
    start, end = offsets[t], offsets[t + 1]
    for k in range(start, end):
        if (k - start) % LIVE_CHECK == LIVE_CHECK - 1 and count_done(st, done) == NPIX:
            break
        if k + AHEAD < end:
            ga = ids[k + AHEAD]
            prefetch_span(packed, ga * PACKED, PACKED)
            prefetch_span(rows, ga * ROWS, ROWS)
        g = ids[k]
        ylo, yhi = tile_rows(rows, g, x0, y0, x1, y1)
        if ylo >= yhi:
            continue
        lo, hi = (ylo - y0) * TS, (yhi - y0) * TS
        (Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o, depth, n0, n1, n2, c0, c1,
         c2) = surfel_scalars(packed, g)
        forward_pixels(st, last, medk, lo, hi, k, Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o, depth, n0,
                       n1, n2, c0, c1, c2, intersection, D > 3, limits is not None)
        if D > 3:
            accumulate_pixels(st, lo, hi, colors, g, F_ACC, F_W)
    for y in range(y0, y1):
        for x in range(x0, x1):
            p = (y - y0) * TS + x - x0
            for ch in range(D):
                render[c, y, x, ch] = st[F_ACC + ch * NPIX + p]
            alpha_out[c, y, x, 0] = st[F_SW + p]
            T_out[c, y, x, 0] = st[F_T + p]
            wz_out[c, y, x, 0] = st[F_WZ + p]
            median_out[c, y, x, 0] = st[F_MED + p]
            for j in range(3):
                normal_out[c, y, x, j] = st[F_N + j * NPIX + p]
            dist_out[c, y, x, 0] = st[F_DIST + p]
            last_k[c, y, x] = last[p]
            median_k[c, y, x] = medk[p]


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def backward_pixels(st, last, medk, lo, hi, k, Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o, depth, n0, n1,
                    n2, c0, c1, c2, intersection, extra, limited):
    """Backward of surfel k over tile pixels [lo, hi) in one branch-free pass (inlined into
    backward_tile). Where k was blended (the forward's test and k <= the pixel's last blended):
    T_i = T_{i+1} / (1 - alpha), w = alpha T_i. The distortion sum_{i, j < i} 2 w_i w_j (z_i - z_j) has
    dD/dw = 2 (z A - B) + 2 (Z_after - z W_after), with A, B the sums of w and w z in front (all minus
    this one minus those behind) and W_after, Z_after those behind; with the running P = W_all - 2 W_after
    and Q = Z_all - 2 Z_after (B_P, B_Q: A - W_after = P - w, B - Z_after = Q - w z) that is 2 (z P - Q), so
      dL/dw = v_alpha + v_wz z + v_normal . n + v_render . c + 2 v_dist (z P - Q),
      dL/dz = v_wz w + 2 v_dist w (P - w) (+ v_median where k gave the median),
      dL/dalpha = T_i dL/dw - S / (1 - alpha), S = T_final v_T + sum behind of w dL/dw (B_S);
    then through alpha = min(0.999, o e), sigma and (u, v) = (c_0, c_1) / c_2 to mean2d, opacity, centre
    depth and vc = d loss / d c (the specification's chain). Elsewhere every term is an exact 0.
    Updates T, S, P (-= 2 w), Q (-= 2 w z), and when ``extra`` (channels >= 3: B_XG holds their
    v_render . c) B_W (w). Returns the sums over the pixels: (mean2d x, y, opacity,
    depth, normal (3), colour 0..2, and for ray_transform_gradients sum vc, sum x vc, sum y vc and the
    intersection depth's d loss / d M_w). backward_tile inlines it twice, with ``intersection`` a
    constant True or False: in the centre-depth copy every intersection-depth term folds away (LLVM did
    not unswitch the loop on the flag; single-threaded case b, the backward kernel's minimum went from
    ~132 to ~117 ms)."""
    zero, one, two = like(0.0, o), like(1.0, o), like(2.0, o)
    amax, thr = like(ALPHA_MAX, o), like(ALPHA_THRESHOLD, o)
    k32 = np.int32(k)
    gm0 = gm1 = go = gd = gn0 = gn1 = gn2 = gc0 = gc1 = gc2 = zero
    s0 = s1 = s2 = sx0 = sx1 = sx2 = sy0 = sy1 = sy2 = dw0 = dw1 = dw2 = zero
    for p in range(U(lo), U(hi)):
        x = st[U(B_CX) + p]
        y = st[U(B_CY) + p]
        hit, al, e, u, v, use_exact, r, z_hit, dx, dy, hu0, hu1, hu2, hv0, hv1, hv2 = surfel_at(
            x, y, Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o)
        ok = hit & (al >= thr) & (k32 <= last[p])
        if limited:
            ok = ok & (select(use_exact, z_hit, depth) < st[U(B_LIM) + p])
        ra = one / (one - al)
        ti = select(ok, st[U(B_T) + p] * ra, zero)
        st[U(B_T) + p] *= select(ok, ra, one)  # arithmetic, not a masked store
        ra = select(ok, ra, zero)
        w = al * ti
        ie = intersection & use_exact
        z = select(ie, z_hit, depth)
        P = st[U(B_P) + p]
        Q = st[U(B_Q) + p]
        vd = st[U(B_VD) + p]
        vwz = st[U(B_VWZ) + p]
        vn0 = st[U(B_VN) + p]
        vn1 = st[U(B_VN + NPIX) + p]
        vn2 = st[U(B_VN + 2 * NPIX) + p]
        vr0 = st[U(B_VR) + p]
        vr1 = st[U(B_VR + NPIX) + p]
        vr2 = st[U(B_VR + 2 * NPIX) + p]
        gw = st[U(B_VA) + p] + vwz * z + vn0 * n0 + vn1 * n1 + vn2 * n2
        gw += vr0 * c0 + vr1 * c1 + vr2 * c2
        if extra:  # loop-invariant: LLVM unswitches it
            gw += st[U(B_XG) + p]
        gw += two * vd * (z * P - Q)
        v_z = vwz * w + two * vd * w * (P - w)
        v_z += select(ok & (medk[p] == k32), st[U(B_VMED) + p], zero)
        s = st[U(B_S) + p]
        v_al = ti * gw - s * ra
        st[U(B_S) + p] = s + w * gw
        st[U(B_P) + p] = P - two * w
        st[U(B_Q) + p] = Q - two * w * z
        if extra:
            st[U(B_W) + p] = w
        gn0 = radd(gn0, vn0 * w)
        gn1 = radd(gn1, vn1 * w)
        gn2 = radd(gn2, vn2 * w)
        gc0 = radd(gc0, vr0 * w)
        gc1 = radd(gc1, vr1 * w)
        gc2 = radd(gc2, vr2 * w)
        ov = o * e
        v_raw = select(ov <= amax, v_al, zero)  # the clamp passes no gradient
        go = radd(go, v_raw * e)
        v_sigma = -v_raw * ov
        v_u = select(ie, v_z * Mw0, zero) + select(use_exact, v_sigma * u, zero)
        v_v = select(ie, v_z * Mw1, zero) + select(use_exact, v_sigma * v, zero)
        gd = radd(gd, select(ie, zero, v_z))
        v_low = select(use_exact, zero, two * v_sigma)
        gm0 = radd(gm0, v_low * dx)
        gm1 = radd(gm1, v_low * dy)
        vc0 = v_u * r
        vc1 = v_v * r
        vc2 = -(v_u * u + v_v * v) * r
        s0 = radd(s0, vc0)
        s1 = radd(s1, vc1)
        s2 = radd(s2, vc2)
        sx0 = radd(sx0, x * vc0)
        sx1 = radd(sx1, x * vc1)
        sx2 = radd(sx2, x * vc2)
        sy0 = radd(sy0, y * vc0)
        sy1 = radd(sy1, y * vc1)
        sy2 = radd(sy2, y * vc2)
        dw0 = radd(dw0, select(ie, v_z * u, zero))
        dw1 = radd(dw1, select(ie, v_z * v, zero))
        dw2 = radd(dw2, select(ie, v_z, zero))
    return (gm0, gm1, go, gd, gn0, gn1, gn2, gc0, gc1, gc2, (s0, s1, s2), (sx0, sx1, sx2), (sy0, sy1, sy2),
            (dw0, dw1, dw2))


@njit(cache=True, inline="always")
def cross(a, b):
    """a x b of 3-tuples."""
    return a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]


@njit(cache=True, inline="always")
def ray_transform_gradients(Mu, Mv, Mw, S, Sx, Sy, dW):
    """d loss / d (M_u, M_v, M_w) from the pixel sums of vc = d loss / d c (S = sum vc, Sx = sum x vc,
    Sy = sum y vc) and dW = sum of the intersection depth's d loss / d M_w. With h_u = x M_w - M_u,
    h_v = y M_w - M_v and c = h_u x h_v, d loss / d h_u = h_v x vc and d loss / d h_v = vc x h_u, so
      d/dM_u = -sum h_v x vc = M_v x S - M_w x Sy,
      d/dM_v = -sum vc x h_u = S x M_u - Sx x M_w,
      d/dM_w = dW + sum (x h_v x vc + y vc x h_u) = dW + Sx x M_v + M_u x Sy
    (the x y terms cancel)."""
    a, b = cross(Mv, S), cross(Mw, Sy)
    c, d = cross(S, Mu), cross(Sx, Mw)
    e, f = cross(Sx, Mv), cross(Mu, Sy)
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], c[0] - d[0], c[1] - d[1], c[2] - d[2],
            dW[0] + e[0] + f[0], dW[1] + e[1] + f[1], dW[2] + e[2] + f[2])


@njit(cache=True, fastmath=FASTMATH_SUMS, error_model="numpy")
def extra_colour_pixels(st, lo, hi, colors, g):
    """Renders with more than 3 channels, before backward_pixels: B_XG[p] = sum over channels ch >= 3 of
    colors[g, ch] v_render[ch, p] for p in [lo, hi)."""
    for p in range(U(lo), U(hi)):
        st[U(B_XG) + p] = like(0.0, st[0])
    for ch in range(3, colors.shape[1]):
        col = colors[g, ch]
        base = U(B_VR + ch * NPIX)
        for p in range(U(lo), U(hi)):
            st[U(B_XG) + p] += col * st[base + p]


@njit(cache=True, fastmath=FASTMATH_SUMS, error_model="numpy")
def extra_colour_gradients(st, lo, hi, D, grads, k):
    """Renders with more than 3 channels, after backward_pixels: grads[k, G_COLOR + ch] = sum over
    [lo, hi) of w v_render[ch] for channels ch >= 3."""
    for ch in range(3, D):
        base = U(B_VR + ch * NPIX)
        s = like(0.0, st[0])
        for p in range(U(lo), U(hi)):
            s += st[U(B_W) + p] * st[base + p]
        grads[k, G_COLOR + ch] = s


@njit(cache=True, parallel=True)
def backward_kernel(packed, rows, colors, offsets, ids, row_of, tile_order, W, H, TW, TH, intersection, limits,
                    alpha_sum, T_final, wz_sum, last_k, median_k, v_render, v_alpha, v_T, v_wz, v_median, v_normal,
                    v_dist, grads):
    """Per-intersection gradients grads [M, G_COLOR + D] (storage dtype, every row written) from the
    cotangents of the forward outputs (same shapes; v_alpha is d loss / d sum w), tiles in parallel.
    Intersection k's gradients go to row row_of[k] (binning.major_rows: the binning's surfel-major
    order, which binning.sum_major_rows then reads in sequence). ``limits``: as the forward's (skipped
    surfels get nothing)."""
    for it in prange(tile_order.shape[0]):
        backward_tile(tile_order[it], packed, rows, colors, offsets, ids, row_of, W, H, TW, TH, intersection, limits,
                      alpha_sum, T_final, wz_sum, last_k, median_k, v_render, v_alpha, v_T, v_wz, v_median, v_normal,
                      v_dist, grads)


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def backward_tile(t, packed, rows, colors, offsets, ids, row_of, W, H, TW, TH, intersection, limits, alpha_sum,
                  T_final, wz_sum, last_k, median_k, v_render, v_alpha, v_T, v_wz, v_median, v_normal, v_dist, grads):
    """Backward pass of one tile t: surfels back to front from the deepest last blended one, each over
    the rows of its alpha box that reach it (a row whose pixels all stopped in front of k gives 0)."""
    D = colors.shape[1]
    c, x0, y0, x1, y1 = tile_box(t, TW, TW * TH, TS, W, H)
    start, end = offsets[t], offsets[t + 1]
    st = np.zeros(B_VR + max(D, 3) * NPIX, packed.dtype)
    last = np.full(NPIX, -1, np.int32)
    medk = np.full(NPIX, -1, np.int32)
    row_last = np.full(TS, -1, np.int64)
    init_tile_pixels(st, B_T, B_CX, B_CY, x0, y0)
    st[B_LIM:B_LIM + NPIX] = np.finfo(packed.dtype).max
    if limits is not None:
        load_tile_limits(st, B_LIM, limits, c, x0, y0, x1, y1)
    top = start - 1
    for y in range(y0, y1):
        for x in range(x0, x1):
            p = (y - y0) * TS + x - x0
            Tf = T_final[c, y, x, 0]
            st[B_T + p] = Tf
            st[B_S + p] = v_T[c, y, x, 0] * Tf
            st[B_VA + p] = v_alpha[c, y, x, 0]
            st[B_VWZ + p] = v_wz[c, y, x, 0]
            st[B_VD + p] = v_dist[c, y, x, 0]
            for j in range(3):
                st[B_VN + j * NPIX + p] = v_normal[c, y, x, j]
            st[B_VMED + p] = v_median[c, y, x, 0]
            st[B_P + p] = alpha_sum[c, y, x, 0]
            st[B_Q + p] = wz_sum[c, y, x, 0]
            for ch in range(D):
                st[B_VR + ch * NPIX + p] = v_render[c, y, x, ch]
            last[p] = last_k[c, y, x]
            medk[p] = median_k[c, y, x]
            row_last[y - y0] = max(row_last[y - y0], np.int64(last[p]))
        top = max(top, row_last[y - y0])
    for k in range(top + 1, end):  # behind every pixel's last blended surfel: no gradient
        grads[row_of[k], :] = 0.0
    for k in range(top, start - 1, -1):
        if k - AHEAD >= start:
            ga = ids[k - AHEAD]
            prefetch_span(packed, ga * PACKED, PACKED)
            prefetch_span(grads, row_of[k - AHEAD] * grads.shape[1], grads.shape[1])
            prefetch_span(rows, ga * ROWS, ROWS)
        g = ids[k]
        q = row_of[k]
        ylo, yhi = pixel_span(rows[g, R_YMIN], rows[g, R_YMAX], y0, y1)
        while ylo < yhi and row_last[ylo - y0] < k:
            ylo += 1
        while yhi > ylo and row_last[yhi - 1 - y0] < k:
            yhi -= 1
        ylo, yhi = reached_rows(rows, g, ylo, yhi, x0, x1)
        if ylo >= yhi:
            grads[q, :] = 0.0
            continue
        lo, hi = (ylo - y0) * TS, (yhi - y0) * TS
        if D > 3:
            extra_colour_pixels(st, lo, hi, colors, g)
        (Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o, depth, n0, n1, n2, c0, c1,
         c2) = surfel_scalars(packed, g)
        if intersection:  # two inlined copies: in the centre-depth one every intersection term folds away
            sums = backward_pixels(st, last, medk, lo, hi, k, Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o,
                                   depth, n0, n1, n2, c0, c1, c2, True, D > 3, limits is not None)
        else:
            sums = backward_pixels(st, last, medk, lo, hi, k, Mu0, Mu1, Mu2, Mv0, Mv1, Mv2, Mw0, Mw1, Mw2, mx, my, o,
                                   depth, n0, n1, n2, c0, c1, c2, False, D > 3, limits is not None)
        (grads[q, G_MEANS2D], grads[q, G_MEANS2D + 1], grads[q, G_OPAC], grads[q, G_DEPTH], grads[q, G_NORMAL],
         grads[q, G_NORMAL + 1], grads[q, G_NORMAL + 2], gc0, gc1, gc2, S, Sx, Sy, dW) = sums
        (grads[q, G_M], grads[q, G_M + 1], grads[q, G_M + 2], grads[q, G_M + 3], grads[q, G_M + 4], grads[q, G_M + 5],
         grads[q, G_M + 6], grads[q, G_M + 7], grads[q, G_M + 8]) = ray_transform_gradients(
            (Mu0, Mu1, Mu2), (Mv0, Mv1, Mv2), (Mw0, Mw1, Mw2), S, Sx, Sy, dW)
        grads[q, G_COLOR] = gc0
        if D > 1:
            grads[q, G_COLOR + 1] = gc1
        if D > 2:
            grads[q, G_COLOR + 2] = gc2
        if D > 3:
            extra_colour_gradients(st, lo, hi, D, grads, q)
