"""Numba kernels of the surfels' `cpu` backend: per-pixel forward compositing and its hand-written
backward (the arithmetic of ``surfels/composite.py``, the specification).

Tiles (from the 3D path's binning, ``rasterizer.cpu.binning``) run in parallel; inside a tile each
pixel walks the tile's depth-sorted list front to back (forward) or from its last blended surfel back
to the first (backward, recovering T_i = T_{i+1} / (1 - alpha_i) as the 3D backend does). Arithmetic is
float64 whatever the storage dtype; outputs are stored in it. Arrays are flattened over cameras:
surfel g = c * N + n, tile t = c * TT + ty * TW + tx, intersection k indexes the binning's ``ids``.

Per surfel the kernels read ray_transforms [G, 9] (rows M_u, M_v, M_w of K W H), means2d [G, 2],
opacities [G], colors [G, D], depths [G], normals [G, 3]. Per-intersection gradients are written to
one row per k (one thread owns a tile, hence its k) with the columns G_* below, then summed per surfel
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
def surfel_at_pixel(x, y, M, g, means2d, opac):
    """(blended?, alpha, e = exp(-sigma), u, v, use_exact, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2) of
    surfel g at pixel centre (x, y): the ray-splat intersection, sigma with the low-pass
    fallback and the skip tests of ``surfel_alphas`` (blended? is False for a skipped surfel)."""
    hu0 = x * np.float64(M[g, 6]) - np.float64(M[g, 0])
    hu1 = x * np.float64(M[g, 7]) - np.float64(M[g, 1])
    hu2 = x * np.float64(M[g, 8]) - np.float64(M[g, 2])
    hv0 = y * np.float64(M[g, 6]) - np.float64(M[g, 3])
    hv1 = y * np.float64(M[g, 7]) - np.float64(M[g, 4])
    hv2 = y * np.float64(M[g, 8]) - np.float64(M[g, 5])
    c0 = hu1 * hv2 - hu2 * hv1
    c1 = hu2 * hv0 - hu0 * hv2
    c2 = hu0 * hv1 - hu1 * hv0
    if c2 == 0.0:
        return False, 0.0, 0.0, 0.0, 0.0, False, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2
    u = c0 / c2
    v = c1 / c2
    exact = u * u + v * v
    dx = np.float64(means2d[g, 0]) - x
    dy = np.float64(means2d[g, 1]) - y
    low = LOW_PASS_SCALE * (dx * dx + dy * dy)
    use_exact = exact <= low
    sigma = 0.5 * (exact if use_exact else low)
    e = math.exp(-sigma)
    alpha = min(ALPHA_MAX, np.float64(opac[g]) * e)
    ok = sigma >= 0.0 and alpha >= ALPHA_THRESHOLD
    return ok, alpha, e, u, v, use_exact, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2


@njit(cache=True, inline="always")
def surfel_depth_at(g, u, v, use_exact, intersection, M, depths):
    """z_i: the intersection depth M_w . (u, v, 1) where the exact term was used (intersection mode),
    else the centre depth."""
    if intersection and use_exact:
        return u * np.float64(M[g, 6]) + v * np.float64(M[g, 7]) + np.float64(M[g, 8])
    return np.float64(depths[g])


@njit(cache=True, parallel=True)
def forward_kernel(M, means2d, opac, colors, depths, normals, offsets, ids, tile_order, W, H, TW, ts, intersection,
                   render, alpha_out, T_out, wz_out, median_out, normal_out, dist_out, last_k, median_k):
    """Composite every pixel. Outputs [C, H, W, .] in the storage dtype: render (D), alpha (sum w),
    T_out (prod (1 - alpha)), wz_out (sum w z), median_out, normal_out (3), dist_out; last_k / median_k
    [C, H, W] int64: the intersection index of the last blended surfel / of the median one (-1: none)."""
    D = colors.shape[1]
    TT = TW * ((H + ts - 1) // ts)
    for it in prange(tile_order.shape[0]):
        t = tile_order[it]
        c, x0, y0, x1, y1 = tile_box(t, TW, TT, ts, W, H)
        start, end = offsets[t], offsets[t + 1]
        acc = np.zeros(D)
        for py in range(y0, y1):
            for px in range(x0, x1):
                x, y = px + 0.5, py + 0.5
                T = 1.0
                acc[:] = 0.0
                wsum = wz = n0 = n1 = n2 = dist = median = 0.0
                last, med = -1, -1
                for k in range(start, end):
                    g = ids[k]
                    ok, al, e, u, v, use_exact, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2 = surfel_at_pixel(
                        x, y, M, g, means2d, opac)
                    if not ok:
                        continue
                    if T * (1.0 - al) <= T_MIN:
                        break
                    w = al * T
                    z = surfel_depth_at(g, u, v, use_exact, intersection, M, depths)
                    for j in range(D):
                        acc[j] += w * np.float64(colors[g, j])
                    n0 += w * np.float64(normals[g, 0])
                    n1 += w * np.float64(normals[g, 1])
                    n2 += w * np.float64(normals[g, 2])
                    dist += 2.0 * w * (z * wsum - wz)
                    wsum += w
                    wz += w * z
                    if T > MEDIAN_T:
                        median = z
                        med = k
                    T *= 1.0 - al
                    last = k
                for j in range(D):
                    render[c, py, px, j] = acc[j]
                alpha_out[c, py, px, 0] = wsum
                T_out[c, py, px, 0] = T
                wz_out[c, py, px, 0] = wz
                median_out[c, py, px, 0] = median
                normal_out[c, py, px, 0] = n0
                normal_out[c, py, px, 1] = n1
                normal_out[c, py, px, 2] = n2
                dist_out[c, py, px, 0] = dist
                last_k[c, py, px] = last
                median_k[c, py, px] = med


@njit(cache=True, parallel=True)
def backward_kernel(M, means2d, opac, colors, depths, normals, offsets, ids, tile_order, W, H, TW, ts, intersection,
                    alpha_sum, T_final, wz_sum, last_k, median_k, v_render, v_alpha, v_T, v_wz, v_median, v_normal,
                    v_dist, grads):
    """Per-intersection gradients grads [M, G_COLOR + D] (float64, zero on entry) from the cotangents of
    the forward outputs (same shapes; v_alpha is d loss / d sum w). Pixel by pixel, back to front from
    its last blended surfel, with the running sums of what lies behind (sum w_j g_j, sum w_j, sum w_j z_j)."""
    D = colors.shape[1]
    TT = TW * ((H + ts - 1) // ts)
    for it in prange(tile_order.shape[0]):
        t = tile_order[it]
        c, x0, y0, x1, y1 = tile_box(t, TW, TT, ts, W, H)
        start = offsets[t]
        vr = np.zeros(D)
        for py in range(y0, y1):
            for px in range(x0, x1):
                last = last_k[c, py, px]
                if last < 0:
                    continue
                x, y = px + 0.5, py + 0.5
                for j in range(D):
                    vr[j] = np.float64(v_render[c, py, px, j])
                va = np.float64(v_alpha[c, py, px, 0])
                vwz = np.float64(v_wz[c, py, px, 0])
                vn0 = np.float64(v_normal[c, py, px, 0])
                vn1 = np.float64(v_normal[c, py, px, 1])
                vn2 = np.float64(v_normal[c, py, px, 2])
                vd = np.float64(v_dist[c, py, px, 0])
                vmed = np.float64(v_median[c, py, px, 0])
                med = median_k[c, py, px]
                Tf = np.float64(T_final[c, py, px, 0])
                vTf = np.float64(v_T[c, py, px, 0]) * Tf
                W_all = np.float64(alpha_sum[c, py, px, 0])
                Z_all = np.float64(wz_sum[c, py, px, 0])
                T = Tf  # T_{i+1} for the surfel i being processed
                S = 0.0  # sum over blended j > i of w_j dL/dw_j
                W_after = 0.0  # sum over blended j > i of w_j
                Z_after = 0.0  # sum over blended j > i of w_j z_j
                for k in range(last, start - 1, -1):
                    g = ids[k]
                    ok, al, e, u, v, use_exact, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2 = surfel_at_pixel(
                        x, y, M, g, means2d, opac)
                    if not ok:
                        continue
                    T = T / (1.0 - al)  # T_i
                    w = al * T
                    z = surfel_depth_at(g, u, v, use_exact, intersection, M, depths)
                    A = W_all - w - W_after  # sum over j < i of w_j
                    B = Z_all - w * z - Z_after  # sum over j < i of w_j z_j
                    gw = va + vwz * z + vn0 * normals[g, 0] + vn1 * normals[g, 1] + vn2 * normals[g, 2]
                    for j in range(D):
                        gw += vr[j] * np.float64(colors[g, j])
                        grads[k, G_COLOR + j] += vr[j] * w
                    gw += 2.0 * vd * (z * A - B + Z_after - z * W_after)
                    v_z = vwz * w + 2.0 * vd * w * (A - W_after)
                    if k == med:
                        v_z += vmed
                    grads[k, G_NORMAL] += vn0 * w
                    grads[k, G_NORMAL + 1] += vn1 * w
                    grads[k, G_NORMAL + 2] += vn2 * w
                    v_al = T * gw - (S + vTf) / (1.0 - al)
                    S += w * gw
                    W_after += w
                    Z_after += w * z
                    surfel_gradients(k, g, x, y, e, u, v, use_exact, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2,
                                     v_al, v_z, intersection, M, means2d, opac, grads)


@njit(cache=True, inline="always")
def surfel_gradients(k, g, x, y, e, u, v, use_exact, c0, c1, c2, hu0, hu1, hu2, hv0, hv1, hv2, v_al, v_z,
                     intersection, M, means2d, opac, grads):
    """Chain d loss / d alpha_i (v_al) and d loss / d z_i (v_z) through alpha = min(0.999, o e),
    e = exp(-sigma), sigma = 0.5 min(u^2 + v^2, 2 |mean2d - q|^2), (u, v) = (c_x, c_y) / c_z,
    c = h_u x h_v, h_u = x M_w - M_u, h_v = y M_w - M_v, and the depth, into grads[k]."""
    o = np.float64(opac[g])
    v_raw = v_al if o * e <= ALPHA_MAX else 0.0  # the clamp passes no gradient
    grads[k, G_OPAC] += v_raw * e
    v_sigma = -v_raw * o * e
    v_u = 0.0
    v_v = 0.0
    if intersection and use_exact:
        v_u += v_z * np.float64(M[g, 6])
        v_v += v_z * np.float64(M[g, 7])
        grads[k, G_M + 6] += v_z * u
        grads[k, G_M + 7] += v_z * v
        grads[k, G_M + 8] += v_z
    else:
        grads[k, G_DEPTH] += v_z
    if use_exact:
        v_u += v_sigma * u
        v_v += v_sigma * v
    else:
        grads[k, G_MEANS2D] += v_sigma * 2.0 * (np.float64(means2d[g, 0]) - x)
        grads[k, G_MEANS2D + 1] += v_sigma * 2.0 * (np.float64(means2d[g, 1]) - y)
    vc0 = v_u / c2
    vc1 = v_v / c2
    vc2 = -(v_u * u + v_v * v) / c2
    vhu0 = hv1 * vc2 - hv2 * vc1  # d/dh_u of vc . (h_u x h_v) = h_v x vc
    vhu1 = hv2 * vc0 - hv0 * vc2
    vhu2 = hv0 * vc1 - hv1 * vc0
    vhv0 = vc1 * hu2 - vc2 * hu1  # d/dh_v = vc x h_u
    vhv1 = vc2 * hu0 - vc0 * hu2
    vhv2 = vc0 * hu1 - vc1 * hu0
    grads[k, G_M + 0] -= vhu0
    grads[k, G_M + 1] -= vhu1
    grads[k, G_M + 2] -= vhu2
    grads[k, G_M + 3] -= vhv0
    grads[k, G_M + 4] -= vhv1
    grads[k, G_M + 5] -= vhv2
    grads[k, G_M + 6] += x * vhu0 + y * vhv0
    grads[k, G_M + 7] += x * vhu1 + y * vhv1
    grads[k, G_M + 8] += x * vhu2 + y * vhv2


@njit(cache=True, parallel=True)
def sum_rows_per_surfel(grads, perm, starts, counts, out):
    """out[g] = sum of grads[perm[q]] over surfel g's intersections q in [starts[g], starts[g] + counts[g])
    (the binning's layout), in ascending q; out [G, cols] (any float dtype) is overwritten."""
    G = starts.shape[0]
    cols = grads.shape[1]
    for g in prange(G):
        for j in range(cols):
            acc = 0.0
            for q in range(starts[g], starts[g] + counts[g]):
                acc += grads[perm[q], j]
            out[g, j] = acc
