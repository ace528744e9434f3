"""Numba kernels of the `cpu` backend's compositing: forward blending and its hand-written backward.

Same numerics as ``rasterizer/reference/composite.py`` (the specification). Work is organised per
16x16 tile (tiles run in parallel) and, inside a tile, per Gaussian (front to back forward, back to
front backward), over the block of tile rows its alpha >= 1/255 ellipse sigma <= ln(255 opacity)
crosses, in each of the tile's two 8-column strips the ellipse reaches (see TS, SW below); both passes
clip those rows further, per strip, to the rows the ellipse reaches within the strip's columns (band_rows,
for Gaussians over 3+ rows), the forward to the strip's rows that still hold a live pixel (live_rows), the
backward leaving out the strip's rows at either end whose pixels all stopped in front of the Gaussian
(blended_rows). Every pixel of those rows is evaluated directly (sigma, alpha, the skip tests) by flat,
branch-free loops that LLVM vectorises (8 float32 pixels at a time with AVX2, 16 with AVX-512); skipped
rows and strips hold only pixels the specification skips too, so results equal its per-pixel loop
(float64 tests: 1e-9; the backward's sums are regrouped, float32 gradients agree to rounding).

Renders that will be differentiated first gather each intersection's Gaussian (mean, conic,
opacity, three colour channels, row extent) into packed arrays in tile-major order
(pack_intersections), which both passes then read in order.

Arithmetic runs in the storage dtype (float32 stays float32; exp is the vectorisable ``exp_f32`` of
``vecmath.py``, float64 uses math.exp); per-Gaussian gradient sums are reductions in that dtype.
Arrays are flattened over cameras: Gaussian index g = c * N + n; tile index t = c * TT + ty * TW + tx.
Tile lists come from the binning (``binning.py``); per-intersection gradients go back to the
Gaussians through its permutation (``sum_per_gaussian``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .binning import SPAN_MARGIN
from .schedule import dealt_block, dealt_iterations
from .vecmath import FASTMATH, U, exp_kernel, like, prefetch, prefetch_span, radd, select

ALPHA_THRESHOLD = 1.0 / 255.0
ALPHA_MAX = 0.999
T_MIN = 1e-4


# Gathers by a random index (a Gaussian per intersection, intersections per Gaussian) wait for memory one
# after another unless the rows AHEAD iterations on are prefetched (vecmath.prefetch).
AHEAD = 8

# Per intersection, what the tile kernels read of its Gaussian, gathered once per training render in
# tile-major order (pack_intersections) and read in order by the forward and the backward kernel,
# instead of gathering from the [C*N, .] arrays Gaussian by Gaussian in every tile, where each load
# waits for the last (measured on captured colmap_bird steps at 218k Gaussians: forward + backward
# 58-65 -> 52-55 ms including the ~2 ms gather; a per-tile gather of 32 at a time gained only a third
# of that). Renders without gradients skip it: M x 52 bytes, and a forward that stops early (the 1M
# Gaussian benchmark) reads a small part of the intersections (packing them all made it 2.8x slower).
P_MX, P_MY, P_A, P_B, P_C, P_OP, P_C0 = 0, 1, 2, 3, 4, 5, 6  # packed columns: mean, conic, opacity, colour 0..2
PACKED = 9


@njit(cache=True, inline="always")
def intersection_values(k, g, packed, means2d, conics, opac, colors):
    """(mean x, mean y, conic a, b, c, opacity, colours 0..2) of intersection k, Gaussian g: from the
    packed arrays (pack_intersections), or (``packed`` None) from the [C*N, .] arrays (colour channels
    the render lacks are 0), the one place that defines what is packed."""
    if packed is not None:
        return (packed[k, P_MX], packed[k, P_MY], packed[k, P_A], packed[k, P_B], packed[k, P_C], packed[k, P_OP],
                packed[k, P_C0], packed[k, P_C0 + 1], packed[k, P_C0 + 2])
    D = colors.shape[1]
    zero = like(0.0, opac[g])
    return (means2d[g, 0], means2d[g, 1], conics[g, 0], conics[g, 1], conics[g, 2], opac[g],
            colors[g, 0] if D > 0 else zero, colors[g, 1] if D > 1 else zero, colors[g, 2] if D > 2 else zero)


@njit(cache=True, parallel=True)
def pack_intersections(means2d, conics, opac, colors, row_half, ids):
    """packed [M, PACKED] (storage dtype; colour channels the render lacks are 0) and rows [M, 4]
    float64 (row half extent, mean y, column half extent, mean x: what gaussian_rows takes for the rows
    and for the columns) of Gaussian ids[k] for every k."""
    M = ids.shape[0]
    packed = np.empty((M, PACKED), means2d.dtype)
    rows = np.empty((M, 4), np.float64)
    D = colors.shape[1]
    for k in prange(M):
        if k + AHEAD < M:  # random rows: prefetched (see AHEAD)
            ga = ids[k + AHEAD]
            prefetch(means2d, 2 * ga)
            prefetch(conics, 3 * ga)
            prefetch(opac, ga)
            prefetch_span(colors, D * ga, min(D, 3))
            prefetch(row_half, ga)
        g = ids[k]
        (packed[k, P_MX], packed[k, P_MY], packed[k, P_A], packed[k, P_B], packed[k, P_C], packed[k, P_OP],
         packed[k, P_C0], packed[k, P_C0 + 1], packed[k, P_C0 + 2]) = intersection_values(k, g, None, means2d, conics,
                                                                                           opac, colors)
        rows[k, 0] = row_half[g]
        rows[k, 1] = np.float64(means2d[g, 1])
        rows[k, 2] = column_half_extent(row_half[g], np.float64(conics[g, 0]), np.float64(conics[g, 2]))
        rows[k, 3] = np.float64(means2d[g, 0])
    return packed, rows


@njit(cache=True, inline="always")
def column_half_extent(row_half, a, c):
    """Half width in pixels (+ SPAN_MARGIN) of the alpha >= 1/255 ellipse of a Gaussian with conic (a, ., c)
    and row half extent ``row_half`` (binning.row_half_extent: sqrt(2 level a / det) + SPAN_MARGIN; the
    ellipse's half width is sqrt(2 level c / det), the same with c for a), float64; -1 and inf pass
    through (no columns, every column)."""
    if row_half < 0.0 or not math.isfinite(row_half):
        return row_half
    return (row_half - SPAN_MARGIN) * math.sqrt(c / a) + SPAN_MARGIN


@njit(cache=True, inline="always")
def gaussian_rows_between(ylo_f, yhi_f, y0, y1):
    """Rows [ylo, yhi) within [y0, y1) whose centres y + 0.5 lie in [ylo_f, yhi_f]."""
    flo = math.ceil(ylo_f - 0.5)
    fhi = math.floor(yhi_f - 0.5) + 1.0
    ylo = y0 if flo < y0 else (y1 if flo > y1 else int(flo))
    yhi = y1 if fhi > y1 else (y0 if fhi < y0 else int(fhi))
    return ylo, yhi


@njit(cache=True, inline="always")
def gaussian_rows(h, my, y0, y1):
    """Rows [ylo, yhi) of the tile (y0 <= ylo, yhi <= y1) where a Gaussian with mean y ``my`` and row
    half extent ``h`` (row_half_extent) can pass alpha >= 1/255: those whose centres lie within h of
    its mean (all rows for an infinite extent, none for a negative one). Float64 whatever the storage
    dtype."""
    if h < 0.0:
        return y0, y0
    return gaussian_rows_between(my - h, my + h, y0, y1)


@njit(cache=True, inline="always")
def tile_box(t, TW, TT, ts, W, H):
    """Camera and pixel box (c, x0, y0, x1, y1) of flat tile t."""
    c = t // TT
    r = t - c * TT
    ty = r // TW
    tx = r - ty * TW
    x0, y0 = tx * ts, ty * ts
    return c, x0, y0, min(x0 + ts, W), min(y0 + ts, H)


# The compositing kernels work on one 16x16 tile at a time, held as two strips of 8 columns (SW), strip
# by strip, row by row: pixel (lx, ly) is p = (lx // SW) * STRIP + ly * SW + lx % SW (tile_pixel). Per
# Gaussian they run, in each strip its ellipse reaches (columns: column_half_extent), over the contiguous
# block of pixels of the rows it crosses: one flat, branch-free loop (selects, no ifs) that LLVM
# vectorises (one 8-pixel strip row is one AVX2 vector of float32). A Gaussian that reaches only one
# strip costs half a tile row per row (colmap_bird f2: most of them). Per-tile state lives in ONE flat array in the input dtype at the constant
# offsets below, so LLVM can prove that the loops' loads and stores do not overlap. Pixels outside the
# image (edge tiles) are marked done from the start.
TS = 16
NPIX = TS * TS
SW = 8  # strip width in pixels
STRIP = TS * SW  # pixels per strip
LIVE_CHECK = 4  # forward: test for "every pixel done" every LIVE_CHECK Gaussians

# forward state
F_T = 0  # [NPIX] transmittance T
F_THR = F_T + NPIX  # [NPIX] alpha threshold: 1/255 while the pixel is live, 2 (unreachable) once done
F_CX = F_THR + NPIX  # [NPIX] pixel-centre x
F_CY = F_CX + NPIX  # [NPIX] pixel-centre y
F_W = F_CY + NPIX  # [NPIX] blending weights alpha T of the current Gaussian (0 where not blended)
F_ACC = F_W + NPIX  # [max(D, 3), NPIX] accumulated colour

# backward state
B_T = 0  # [NPIX] transmittance T_i, recovered back to front
B_P = B_T + NPIX  # [NPIX] T_final v_alpha - sum over channels 0..2 of S v_render (S: the colour behind; gradient_pixels)
B_CX = B_P + NPIX  # [NPIX] pixel-centre x
B_CY = B_CX + NPIX  # [NPIX] pixel-centre y
B_XVAL = B_CY + NPIX  # [NPIX] current Gaussian: the channels >= 3 part of d loss / d alpha (0 for D <= 3)
B_TI = B_XVAL + NPIX  # [NPIX] current Gaussian: T_i where blended, else 0 (blend_pixels)
B_RA = B_TI + NPIX  # [NPIX] current Gaussian: 1 / (1 - alpha) where blended, else 0
B_FAC = B_RA + NPIX  # [NPIX] current Gaussian: alpha T_i where blended, else 0
B_Q = B_FAC + NPIX  # [NPIX] current Gaussian: d sigma-part, -opacity exp(-sigma) where alpha is not clamped, else 0
B_VR = B_Q + NPIX  # [D', NPIX] v_render (D' = max(D, 3)); then S of channels 3..D-1 [D - 3, NPIX]


FASTMATH_SUMS = FASTMATH | {"reassoc"}  # for loops without exp: lets LLVM vectorise their sums


@njit(cache=True, inline="always")
def tile_pixel(lx, ly, sw):
    """Index in the tile state of pixel (lx, ly) for strips of width ``sw`` (SW: the 3D kernels; TS: one
    strip, the row-major layout p = ly * TS + lx of the surfel kernels)."""
    return (lx // sw) * (TS * sw) + ly * sw + lx % sw


@njit(cache=True, inline="always")
def init_tile_pixels(st, T0, CX, CY, x0, y0, sw=TS):
    """T = 1 and pixel-centre coordinates for one tile of state ``st`` (offsets T0, CX, CY), in the
    layout of strips of width ``sw`` (tile_pixel)."""
    for ly in range(TS):
        for lx in range(TS):
            p = tile_pixel(lx, ly, sw)
            st[T0 + p] = 1.0
            st[CX + p] = x0 + lx + 0.5
            st[CY + p] = y0 + ly + 0.5


@njit(cache=True)
def gaussian_strips(rows, k, x0, x1):
    """Strips (first, last + 1) of the tile with columns [x0, x1) that intersection k's ellipse reaches
    (its columns: gaussian_rows of the column half extent rows[k, 2] about the mean x rows[k, 3]); with
    ``rows`` None, every strip of the tile."""
    if rows is None:
        return 0, (x1 - x0 - 1) // SW + 1
    xlo, xhi = gaussian_rows(rows[k, 2], rows[k, 3], x0, x1)
    if xlo >= xhi:
        return 0, 0
    return (xlo - x0) // SW, (xhi - 1 - x0) // SW + 1


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def pixel_alpha(st, CX, CY, p, mx, my, a, b, c, op):
    """At tile pixel p (centres at st[CX + p], st[CY + p]): d = mean - centre, sigma = 0.5 (a dx^2 +
    c dy^2) + b dx dy, exp(-max(sigma, 0)) and alpha = min(0.999, op exp(-max(sigma, 0))). Returns
    (dx, dy, sigma, vis, alpha). The one definition of alpha for the forward and the backward, which
    must agree exactly (the backward recovers T_i by dividing by 1 - alpha)."""
    zero, half, amax = like(0.0, op), like(0.5, op), like(ALPHA_MAX, op)
    dx = mx - st[U(CX) + p]
    dy = my - st[U(CY) + p]
    sigma = half * (a * dx * dx + c * dy * dy) + b * dx * dy
    vis = exp_kernel(-select(sigma > zero, sigma, zero))
    al = op * vis
    return dx, dy, sigma, vis, select(al > amax, amax, al)


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def pixel_blended(st, last, p, k32, sigma, al):
    """Was Gaussian k32 blended at pixel p (k32 <= last[p], sigma >= 0, alpha >= 1/255)? Returns (ok,
    T_i = T_{i+1} / (1 - alpha) from st[B_T + p], 1 / (1 - alpha)), T_i and the ratio 0 where not."""
    zero, one, thr = like(0.0, al), like(1.0, al), like(ALPHA_THRESHOLD, al)
    ok = (sigma >= zero) & (al >= thr) & (k32 <= last[p])
    ra = one / (one - al)
    return ok, select(ok, st[U(B_T) + p] * ra, zero), select(ok, ra, zero)


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def forward_pixels(st, last, lo, hi, k, mx, my, a, b, c, op, c0, c1, c2):
    """Blend Gaussian k into tile pixels [lo, hi), branch-free (inlined into forward_tile: per-call
    set-up, such as broadcasting the constants, then happens once per tile).

    Per pixel: alpha (pixel_alpha); it blends when sigma >= 0, alpha reaches the pixel's threshold
    (1/255, or 2 once done) and T (1 - alpha) > 1e-4, and is done instead when T (1 - alpha) <= 1e-4.
    Updates T, thresholds and last [NPIX] int32 (index k of the last blended Gaussian); writes the
    weights alpha T (0 where not blended) to st[F_W + p] and adds (c0, c1, c2) times them to the first
    three accumulated channels in the same pass (RGB renders need no separate pass; fewer channels
    pass zeros, more add the rest with accumulate_pixels)."""
    zero, one = like(0.0, op), like(1.0, op)
    tmin, done = like(T_MIN, op), like(2.0, op)
    k32, minus1 = np.int32(k), np.int32(-1)
    for p in range(U(lo), U(hi)):
        _, _, sigma, _, al = pixel_alpha(st, F_CX, F_CY, p, mx, my, a, b, c, op)
        thr = st[U(F_THR) + p]
        Tp = st[U(F_T) + p]
        next_T = Tp * (one - al)
        ok = (sigma >= zero) & (al >= thr)
        stop = ok & (next_T <= tmin)
        blend = ok & (next_T > tmin)
        # Updates never store select(cond, new, the loaded value): LLVM turns that into a masked store
        # (vmaskmovps), very slow on AMD cores.
        w = select(blend, al * Tp, zero)
        st[U(F_W) + p] = w
        st[U(F_ACC) + p] += c0 * w
        st[U(F_ACC + NPIX) + p] += c1 * w
        st[U(F_ACC + 2 * NPIX) + p] += c2 * w
        st[U(F_T) + p] = Tp * select(blend, one - al, one)
        st[U(F_THR) + p] = select(stop, done, abs(thr))  # abs: LLVM cannot prove it is the old value
        last[p] = max(last[p], select(blend, k32, minus1))  # k grows: the max is the last blended


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def accumulate_pixels(st, lo, hi, colors, g, acc=F_ACC, weights=F_W):
    """acc[ch, p] += colors[g, ch] * w[p] for p in [lo, hi) and channels ch >= 3 (forward_pixels adds
    the first three in its own pass; w from forward_pixels). ``acc`` and ``weights``: where the colour
    sums [D, NPIX] and the weights [NPIX] lie in st (the surfel kernels' layout differs)."""
    for ch in range(3, colors.shape[1]):
        col = colors[g, ch]
        base = U(acc + ch * NPIX)
        for p in range(U(lo), U(hi)):
            st[base + p] += col * st[U(weights) + p]


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def count_done(st, done_threshold):
    """Number of tile pixels that are done (threshold raised to done_threshold) or outside the image."""
    n = 0
    for p in range(NPIX):
        n += select(st[F_THR + p] == done_threshold, 1, 0)
    return n


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def live_rows(st, done, live):
    """Per strip s of the tile, the rows holding a pixel not done (threshold below ``done``; pixels outside
    the image count as done): live[2 s], live[2 s + 1] = first, last + 1 (0, 0 when none). Returns whether any
    pixel of the tile is live."""
    anyl = False
    for s in range(2):
        first, end = TS, 0
        for ly in range(TS):
            base = F_THR + s * STRIP + ly * SW
            n = 0.0
            for j in range(SW):
                n += st[base + j]
            if n < SW * done:  # a threshold below done
                first = min(first, ly)
                end = ly + 1
        if end == 0:
            first = 0
        live[2 * s], live[2 * s + 1] = first, end
        anyl = anyl or end > 0
    return anyl


BAND_MIN_ROWS = 3  # forward_tile clips the rows of a Gaussian crossing at least this many to each strip's band
BAND_LEVEL_SLACK = 1e-5  # band_rows widens the alpha >= 1/255 ellipse to sigma <= level (1 + this)


@njit(cache=True, inline="always")
def band_shape(h, a, b, c):
    """(r, cw, ut, sdet) of a Gaussian's alpha >= 1/255 ellipse 0.5 (a dx^2 + c dy^2) + b dx dy <= level (float64
    conic; h its row half extent, binning.row_half_extent, finite), widened by BAND_LEVEL_SLACK: r its vertical
    and cw its horizontal half extent, ut the dx of its highest point (dy = r), sdet = sqrt(a c - b^2)."""
    r = (h - SPAN_MARGIN) * math.sqrt(1.0 + BAND_LEVEL_SLACK)
    return r, r * math.sqrt(c / a), -b * r / a, math.sqrt(max(a * c - b * b, 0.0))


@njit(cache=True, inline="always")
def band_top(u, cw, sdet, b, c):
    """Largest dy of the ellipse (band_shape) at dx = u: (-b u + sdet sqrt(cw^2 - u^2)) / c for |u| <= cw; for
    |u| a rounding margin beyond cw the square root is taken as 0 (the ellipse's extreme column point)."""
    return (-b * u + sdet * math.sqrt(max(cw * cw - u * u, 0.0))) / c


@njit(cache=True, inline="always")
def band_rows(r, cw, ut, sdet, mx, my, b, c, bx0, y0, y1):
    """Rows [ylo, yhi) of the tile's rows [y0, y1) in which the ellipse of band_shape (r, cw, ut, sdet; mean mx,
    my; conic b, c), widened by SPAN_MARGIN, reaches a pixel centre of the columns [bx0, bx0 + SW): the ellipse
    cut by a vertical band, whose extreme rows are its own (r at ut) when the band holds ut, else at the band's
    edge nearest to ut (the ellipse's upper edge is concave)."""
    # dx over the band's pixel centres, within the ellipse's columns widened by SPAN_MARGIN (band_top clamps
    # the square root at |u| > cw: there the ellipse's extreme column point)
    lo, hi = max(bx0 + 0.5 - mx, -cw - SPAN_MARGIN), min(bx0 + SW - 0.5 - mx, cw + SPAN_MARGIN)
    if lo > hi:
        return y0, y0
    top = r if lo <= ut <= hi else band_top(min(max(ut, lo), hi), cw, sdet, b, c)
    bottom = -r if lo <= -ut <= hi else -band_top(min(max(ut, -hi), -lo), cw, sdet, b, c)
    return gaussian_rows_between(my + bottom - SPAN_MARGIN, my + top + SPAN_MARGIN, y0, y1)


# "No limit" in the depth-limit arrays: the largest float32, as the kernels are compiled without infinities
# (FASTMATH's ninf); the caller clamps the limits to +-NO_LIMIT (no finite float32 depth reaches it).
NO_LIMIT = np.float32(np.finfo(np.float32).max)


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def load_tile_limits(limits, c, x0, y0, x1, y1):
    """The depth limits [NPIX] float32 of one tile's pixels (limits [C, H, W] float32, finite); NO_LIMIT
    outside the image."""
    lim = np.full(NPIX, NO_LIMIT, np.float32)
    for y in range(y0, y1):
        for x in range(x0, x1):
            lim[tile_pixel(x - x0, y - y0, SW)] = limits[c, y, x]
    return lim


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def cut_pixels(st, lim, depth, done):
    """Mark done the tile pixels whose depth limit ``lim`` [NPIX] is not beyond ``depth`` (lim <= depth)
    and drop their limits (NO_LIMIT). Returns the smallest limit left: the depth of the next cut."""
    nearest = NO_LIMIT
    for p in range(NPIX):
        cut = lim[p] <= depth
        st[F_THR + p] = select(cut, done, st[F_THR + p])
        lim[p] = select(cut, NO_LIMIT, lim[p])
        nearest = min(nearest, lim[p])
    return nearest


@njit(cache=True, parallel=True)
def forward_kernel(means2d, conics, opac, colors, row_half, offsets, ids, packed, rows, tile_order, W, H, TW, TH, ts,
                   depths32, limits, render, alpha_out, T_final, last_ids):
    """Front-to-back compositing of all tiles in parallel. Reads the Gaussians from the packed arrays
    (pack_intersections) when they are given, else (``packed`` and ``rows`` None) from the [C*N, .]
    arrays through ``ids``; colours of channels >= 3 always from ``colors``. With depth ``limits``
    [C,H,W] float32 (finite, see NO_LIMIT; None: no limit), a pixel stops at the first Gaussian whose
    depth (depths32 [C*N] float32, the sort keys) is >= its limit: in depth order, none behind it
    contributes either (the backward needs no change: the pixel is done, as after T <= 1e-4).
    Writes render [C,H,W,D], alpha_out [C,H,W,1], T_final [C,H,W] (transmittance after the last
    blended Gaussian) and last_ids [C,H,W] int32 (position in ``ids`` of the last blended Gaussian, -1
    if none). Requires ts == TS. A tile without Gaussians is not visited: the caller passes these arrays
    holding what it would get (render 0, alpha 0, T_final 1, last_ids -1), as composite.py allocates them."""
    for it in prange(tile_order.shape[0]):
        forward_tile(tile_order[it], means2d, conics, opac, colors, row_half, offsets, ids, packed, rows, W, H, TW,
                     TH, depths32, limits, render, alpha_out, T_final, last_ids)


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def forward_tile(t, means2d, conics, opac, colors, row_half, offsets, ids, packed, rows, W, H, TW, TH, depths32,
                 limits, render, alpha_out, T_final, last_ids):
    """Forward pass of one tile t (see forward_kernel): Gaussians front to back, each over the rows
    its ellipse crosses, until every pixel of the tile is done. A tile without Gaussians returns at once
    (the outputs already hold what it would write: see forward_kernel)."""
    if offsets[t] == offsets[t + 1]:
        return
    D = colors.shape[1]
    c, x0, y0, x1, y1 = tile_box(t, TW, TW * TH, TS, W, H)
    st = np.zeros(F_ACC + max(D, 3) * NPIX, colors.dtype)  # >= 3 channels: forward_pixels adds to three
    last = np.full(NPIX, -1, np.int32)
    init_tile_pixels(st, F_T, F_CX, F_CY, x0, y0, SW)
    done = like(2.0, st[0])
    st[F_THR:F_THR + NPIX] = done
    for ly in range(y1 - y0):
        for lx in range(x1 - x0):
            st[F_THR + tile_pixel(lx, ly, SW)] = ALPHA_THRESHOLD
    if limits is not None:  # None: a separate compilation with the depth cuts pruned
        lim = load_tile_limits(limits, c, x0, y0, x1, y1)
        next_cut = lim.min()
    live = np.empty(4, np.int64)  # per strip s: its live rows lie in [live[2 s], live[2 s + 1]) (live_rows)
    for s in range(2):
        live[2 * s], live[2 * s + 1] = 0, y1 - y0
    for k in range(offsets[t], offsets[t + 1]):
        if (k - offsets[t]) % LIVE_CHECK == LIVE_CHECK - 1 and not live_rows(st, done, live):
            break
        g = ids[k]
        if limits is not None and depths32[g] >= next_cut:  # cut the pixels whose limit it reaches
            next_cut = cut_pixels(st, lim, depths32[g], done)
        if packed is not None:  # None: a separate compilation with this branch pruned
            ylo, yhi = gaussian_rows(rows[k, 0], rows[k, 1], y0, y1)
        else:
            ylo, yhi = gaussian_rows(row_half[g], np.float64(means2d[g, 1]), y0, y1)
        if ylo >= yhi:
            continue
        s0, s1 = gaussian_strips(rows, k, x0, x1)
        mx, my, a, b, cc, op, c0, c1, c2 = intersection_values(k, g, packed, means2d, conics, opac, colors)
        h = rows[k, 0] if packed is not None else row_half[g]
        banded = yhi - ylo >= BAND_MIN_ROWS and math.isfinite(h)
        if banded:
            fa, fb, fc = np.float64(a), np.float64(b), np.float64(cc)
            r, cw, ut, sdet = band_shape(h, fa, fb, fc)
        for s in range(s0, s1):
            rlo, rhi = max(ylo, y0 + live[2 * s]), min(yhi, y0 + live[2 * s + 1])
            if banded and rlo < rhi:
                blo, bhi = band_rows(r, cw, ut, sdet, np.float64(mx), np.float64(my), fb, fc, x0 + s * SW, y0, y1)
                rlo, rhi = max(rlo, blo), min(rhi, bhi)
            if rlo >= rhi:
                continue
            lo, hi = s * STRIP + (rlo - y0) * SW, s * STRIP + (rhi - y0) * SW
            forward_pixels(st, last, lo, hi, k, mx, my, a, b, cc, op, c0, c1, c2)
            if D > 3:
                accumulate_pixels(st, lo, hi, colors, g)
    for y in range(y0, y1):
        for x in range(x0, x1):
            p = tile_pixel(x - x0, y - y0, SW)
            for ch in range(D):
                render[c, y, x, ch] = st[F_ACC + ch * NPIX + p]
            alpha_out[c, y, x, 0] = 1.0 - st[F_T + p]
            T_final[c, y, x] = st[F_T + p]
            last_ids[c, y, x] = last[p]


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def blend_pixels(st, last, lo, hi, k, mx, my, a, b, c, op):
    """First pass of the backward of Gaussian k over tile pixels [lo, hi), branch-free (inlined into
    backward_tile): where k was blended (pixel_blended) recovers T_i = T_{i+1} / (1 - alpha) and updates
    st[B_T + p] to it; writes B_TI (T_i), B_RA (1 / (1 - alpha)), B_FAC (alpha T_i), all 0 where k was not
    blended, and B_Q = d alpha / d sigma = -opacity exp(-sigma) (0 where alpha was clamped at 0.999).
    Two passes (this, then gradient_pixels) instead of one: each loop's constants and sums then fit in the
    16 vector registers of AVX2 (one pass spilled about 30 of its 140 instructions a vector to the stack)."""
    zero, one, amax = like(0.0, op), like(1.0, op), like(ALPHA_MAX, op)
    k32 = np.int32(k)
    for p in range(U(lo), U(hi)):
        _, _, sigma, vis, al = pixel_alpha(st, B_CX, B_CY, p, mx, my, a, b, c, op)
        ok, ti, ra = pixel_blended(st, last, p, k32, sigma, al)
        st[U(B_T) + p] *= select(ok, ra, one)  # arithmetic, not a masked store (see forward_pixels)
        st[U(B_TI) + p] = ti
        st[U(B_RA) + p] = ra
        st[U(B_FAC) + p] = al * ti
        ov = op * vis
        st[U(B_Q) + p] = select(ov <= amax, -ov, zero)


@njit(cache=True, fastmath=FASTMATH_SUMS, error_model="numpy")
def backward_color_pixels(st, lo, hi, colors, g, D, g_colors, k):
    """Channels ch >= 3 of Gaussian k (after blend_pixels; per channel, pixels [lo, hi)):
    g_colors[k, ch] += sum alpha T_i v_render (zeros before the first strip); adds the colour part of d loss / d alpha,
    (c T_i - S / (1 - alpha)) v_render, to B_XVAL; updates the colour behind S += c alpha T_i. Pixels
    where k was not blended contribute 0 (temporaries 0)."""
    for p in range(U(lo), U(hi)):
        st[U(B_XVAL) + p] = like(0.0, st[0])
    for ch in range(3, D):
        col = colors[g, ch]
        vr = U(B_VR + ch * NPIX)
        s = U(B_VR + (D + ch - 3) * NPIX)
        gsum = like(0.0, col)
        for p in range(U(lo), U(hi)):
            v = st[vr + p]
            fac = st[U(B_FAC) + p]
            gsum += fac * v
            st[U(B_XVAL) + p] += (col * st[U(B_TI) + p] - st[s + p] * st[U(B_RA) + p]) * v
            st[s + p] += col * fac
        g_colors[k, ch] += gsum


@njit(cache=True, fastmath=FASTMATH, error_model="numpy", inline="always")
def gradient_pixels(st, lo, hi, mx, my, a, b, c, c0, c1, c2, with_abs):
    """Second pass of the backward of a Gaussian over tile pixels [lo, hi) (after blend_pixels and, for
    more than 3 channels, backward_color_pixels; inlined into backward_tile, ``with_abs`` a literal there,
    so each call site compiles one loop): sums alpha T_i v_render over the pixels for channels 0..2
    (colours c0..c2; zeros for channels the render lacks, whose v_render rows are 0); forms d loss / d
    alpha and from it v_sigma = d loss / d sigma = B_Q d loss / d alpha.

    d loss / d alpha = T_final v_alpha / (1 - alpha) + sum_ch (c T_i - S / (1 - alpha)) v_render (S the
    colour behind, channels 0..2; + B_XVAL, the channels >= 3 part), written as P / (1 - alpha) + T_i
    sum_ch c v_render with P = T_final v_alpha - sum_ch S v_render per pixel (st[B_P + p]), updated as
    S = radd(S, c alpha T_i: one value per pixel instead of the three channels of S. Pixels where the Gaussian)
    was not blended contribute 0 (B_TI, B_RA, B_FAC 0).

    Returns the sums over the pixels of v_sigma (dx, dy, dx^2, dx dy, dy^2) (d = mean - pixel centre;
    conic_gradients), of v_sigma itself (d loss / d opacity = -that / opacity: opacity_gradient), the
    colour gradients and, with ``with_abs``, of |d loss / d means2d| per pixel (x, y; else 0):
    (sx, sy, sxx, sxy, syy, ssig, s0, s1, s2, absx, absy). Sums use radd (vectorised reductions)."""
    zero = like(0.0, a)
    sx = sy = sxx = sxy = syy = ssig = s0 = s1 = s2 = absx = absy = zero
    for p in range(U(lo), U(hi)):
        fac = st[U(B_FAC) + p]
        v0 = st[U(B_VR) + p]
        v1 = st[U(B_VR + NPIX) + p]
        v2 = st[U(B_VR + 2 * NPIX) + p]
        s0 = radd(s0, fac * v0)
        s1 = radd(s1, fac * v1)
        s2 = radd(s2, fac * v2)
        cv = c0 * v0 + c1 * v1 + c2 * v2
        pv = st[U(B_P) + p]
        v_al = pv * st[U(B_RA) + p] + cv * st[U(B_TI) + p] + st[U(B_XVAL) + p]
        st[U(B_P) + p] = pv - cv * fac
        v_sigma = st[U(B_Q) + p] * v_al
        dx = mx - st[U(B_CX) + p]
        dy = my - st[U(B_CY) + p]
        u = v_sigma * dx
        w = v_sigma * dy
        sx = radd(sx, u)
        sy = radd(sy, w)
        sxx = radd(sxx, u * dx)
        sxy = radd(sxy, u * dy)
        syy = radd(syy, w * dy)
        ssig = radd(ssig, v_sigma)
        if with_abs:
            absx = radd(absx, abs(v_sigma * (a * dx + b * dy)))
            absy = radd(absy, abs(v_sigma * (b * dx + c * dy)))
    return sx, sy, sxx, sxy, syy, ssig, s0, s1, s2, absx, absy


@njit(cache=True, inline="always")
def conic_gradients(sx, sy, sxx, sxy, syy, a, b, c):
    """(d loss / d conic (a, b, c), d loss / d means2d (x, y)) from the sums of gradient_pixels:
    sigma = a dx^2 / 2 + b dx dy + c dy^2 / 2 and d sigma / d mean = (a dx + b dy, b dx + c dy)."""
    return 0.5 * sxx, sxy, 0.5 * syy, a * sx + b * sy, b * sx + c * sy


@njit(cache=True, inline="always")
def opacity_gradient(ssig, op):
    """d loss / d opacity from the sum of v_sigma over the pixels (gradient_pixels): where alpha = op vis
    is not clamped, d loss / d op = vis d loss / d alpha and v_sigma = -op vis d loss / d alpha, so the sum
    is -ssig / op (0 for op = 0, where no pixel blends)."""
    return -ssig / op if op > 0.0 else like(0.0, op)


@njit(cache=True, inline="always")
def blended_rows(strip_last, s, k, rlo, rhi):
    """Rows [rlo, rhi) (tile-local) of strip s with the rows at either end left out where no pixel blended
    Gaussian k or anything behind it (strip_last[s * TS + ly] < k: the largest last blended index of the
    strip's row ly); those pixels contribute exactly 0."""
    while rlo < rhi and strip_last[s * TS + rlo] < k:
        rlo += 1
    while rhi > rlo and strip_last[s * TS + rhi - 1] < k:
        rhi -= 1
    return rlo, rhi


@njit(cache=True, parallel=True)
def backward_kernel(packed, rows, colors, offsets, ids, tile_order, W, H, TW, TH, ts, T_final, last_ids, v_render,
                    v_alpha, g_means2d, g_abs, g_conics, g_opac, g_colors):
    """Back-to-front pass of all tiles in parallel (inputs as forward_kernel); gradients per
    intersection k (g_* [M, ...]) so that tiles never write to the same place; g_abs may be empty
    ([0, 2]: no |d loss / d means2d| sums). Requires ts == TS."""
    for it in prange(tile_order.shape[0]):
        backward_tile(tile_order[it], packed, rows, colors, offsets, ids, W, H, TW, TH, T_final, last_ids, v_render,
                      v_alpha, g_means2d, g_abs, g_conics, g_opac, g_colors)


@njit(cache=True, fastmath=FASTMATH, error_model="numpy")
def backward_tile(t, packed, rows, colors, offsets, ids, W, H, TW, TH, T_final, last_ids, v_render, v_alpha, g_means2d,
                  g_abs, g_conics, g_opac, g_colors):
    """Backward pass of one tile t, recovering T_i = T_{i+1} / (1 - alpha_i) from back to front. A
    Gaussian's pixels are those of forward_tile's clipping (its rows; per strip the ellipse's band,
    band_rows, for Gaussians over BAND_MIN_ROWS rows or more) less, at either end, the strip's rows where
    every pixel stopped in front of it (blended_rows); each strip's sums are added in locals and written
    once per intersection."""
    D = colors.shape[1]
    with_abs = g_abs.shape[0] > 0
    c, x0, y0, x1, y1 = tile_box(t, TW, TW * TH, TS, W, H)
    Dp = max(D, 3)  # v_render rows for at least 3 channels (gradient_pixels reads three)
    st = np.zeros(B_VR + (Dp + max(D - 3, 0)) * NPIX, colors.dtype)  # v_render, P, B_XVAL 0 outside the image
    last = np.full(NPIX, -1, np.int32)
    strip_last = np.full(2 * TS, -1, np.int64)  # [s * TS + ly]: the largest last blended index in strip s, row ly
    init_tile_pixels(st, B_T, B_CX, B_CY, x0, y0, SW)
    for y in range(y0, y1):
        for x in range(x0, x1):
            p = tile_pixel(x - x0, y - y0, SW)
            st[B_T + p] = T_final[c, y, x]
            st[B_P + p] = T_final[c, y, x] * v_alpha[c, y, x, 0]
            last[p] = last_ids[c, y, x]
            for ch in range(D):
                st[B_VR + ch * NPIX + p] = v_render[c, y, x, ch]
            i = ((x - x0) // SW) * TS + y - y0
            strip_last[i] = max(strip_last[i], last_ids[c, y, x])
    k_end = max(offsets[t], strip_last.max() + 1)
    for k in range(k_end - 1, offsets[t] - 1, -1):
        ylo, yhi = gaussian_rows(rows[k, 0], rows[k, 1], y0, y1)
        if ylo >= yhi:
            continue
        s0, s1 = gaussian_strips(rows, k, x0, x1)
        mx, my = packed[k, P_MX], packed[k, P_MY]
        a, b, cc, op = packed[k, P_A], packed[k, P_B], packed[k, P_C], packed[k, P_OP]
        c0, c1, c2 = packed[k, P_C0], packed[k, P_C0 + 1], packed[k, P_C0 + 2]
        banded = yhi - ylo >= BAND_MIN_ROWS and math.isfinite(rows[k, 0])
        if banded:
            fb, fc = np.float64(b), np.float64(cc)
            r, cw, ut, sdet = band_shape(rows[k, 0], np.float64(a), fb, fc)
        zero = like(0.0, op)
        sx = sy = sxx = sxy = syy = ssig = r0 = r1 = r2 = absx = absy = zero
        for s in range(s0, s1):  # sums over the strips the ellipse reaches
            rlo, rhi = ylo, yhi
            if banded:
                blo, bhi = band_rows(r, cw, ut, sdet, np.float64(mx), np.float64(my), fb, fc, x0 + s * SW, y0, y1)
                rlo, rhi = max(rlo, blo), min(rhi, bhi)
            rlo, rhi = blended_rows(strip_last, s, k, rlo - y0, rhi - y0)
            if rlo >= rhi:
                continue
            lo, hi = s * STRIP + rlo * SW, s * STRIP + rhi * SW
            blend_pixels(st, last, lo, hi, k, mx, my, a, b, cc, op)
            if D > 3:
                backward_color_pixels(st, lo, hi, colors, ids[k], D, g_colors, k)
            if with_abs:
                px, py, pxx, pxy, pyy, psig, p0, p1, p2, ax, ay = gradient_pixels(st, lo, hi, mx, my, a, b, cc, c0, c1,
                                                                                  c2, True)
                absx, absy = absx + ax, absy + ay
            else:
                px, py, pxx, pxy, pyy, psig, p0, p1, p2, _, _ = gradient_pixels(st, lo, hi, mx, my, a, b, cc, c0, c1,
                                                                                c2, False)
            sx, sy, sxx, sxy, syy, ssig = sx + px, sy + py, sxx + pxx, sxy + pxy, syy + pyy, ssig + psig
            r0, r1, r2 = r0 + p0, r1 + p1, r2 + p2
        g_conics[k, 0], g_conics[k, 1], g_conics[k, 2], g_means2d[k, 0], g_means2d[k, 1] = conic_gradients(
            sx, sy, sxx, sxy, syy, a, b, cc)
        if with_abs:
            g_abs[k, 0], g_abs[k, 1] = absx, absy
        g_opac[k] = opacity_gradient(ssig, op)
        g_colors[k, 0] = r0
        if D > 1:
            g_colors[k, 1] = r1
        if D > 2:
            g_colors[k, 2] = r2


@njit(cache=True, parallel=True)
def sum_per_gaussian(g_means2d, g_conics, g_opac, g_colors, g_abs, perm, starts, counts,
                     v_means2d, v_conics, v_opac, v_colors, v_abs, threads):
    """Per-intersection gradients [M, .] -> per Gaussian [G, .]: v_x[g] = sum of g_x[k] over Gaussian
    g's intersections k (see Bins), added in ascending k as a serial scatter-add would. g_abs/v_abs
    may be empty ([0, 2]: no |d loss / d means2d| accumulation)."""
    with_abs = v_abs.shape[0] > 0
    D = g_colors.shape[1]
    zero = np.zeros(1, g_opac.dtype)[0]
    G = starts.shape[0]
    for it in prange(dealt_iterations(G, threads)):
        lo, hi = dealt_block(it, G, threads)
        for g in range(lo, hi):
            if g + 2 * AHEAD < G and counts[g + 2 * AHEAD] > 0:  # random rows: prefetched in two steps (see AHEAD)
                prefetch_span(perm, starts[g + 2 * AHEAD], counts[g + 2 * AHEAD])
            if g + AHEAD < G:
                for q in range(starts[g + AHEAD], starts[g + AHEAD] + counts[g + AHEAD]):
                    k = perm[q]
                    prefetch(g_means2d, 2 * k)
                    prefetch(g_conics, 3 * k)
                    prefetch(g_opac, k)
                    prefetch_span(g_colors, D * k, D)
                    if with_abs:
                        prefetch(g_abs, 2 * k)
            m0 = m1 = c0 = c1 = c2 = o = a0 = a1 = zero
            for j in range(D):
                v_colors[g, j] = 0.0
            for q in range(starts[g], starts[g] + counts[g]):
                k = perm[q]
                m0 += g_means2d[k, 0]
                m1 += g_means2d[k, 1]
                c0 += g_conics[k, 0]
                c1 += g_conics[k, 1]
                c2 += g_conics[k, 2]
                o += g_opac[k]
                for j in range(D):
                    v_colors[g, j] += g_colors[k, j]
                if with_abs:
                    a0 += g_abs[k, 0]
                    a1 += g_abs[k, 1]
            v_means2d[g, 0], v_means2d[g, 1] = m0, m1
            v_conics[g, 0], v_conics[g, 1], v_conics[g, 2] = c0, c1, c2
            v_opac[g] = o
            if with_abs:
                v_abs[g, 0], v_abs[g, 1] = a0, a1
