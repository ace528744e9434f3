"""Work of each kernel of a training step, counted from its problem sizes (scripts/roofline.py).

One function per kernel, named for it, taking the calls the step made (``[(args, kwargs, result)]``,
roofline_timing.KernelTimer) and returning ``Work(flops, bytes, rule)``; ``rule`` says how it was
counted. Conventions:

- flops: floating-point adds, multiplies, divides, square roots, min/max and compares on floats, one
  each; a fused multiply-add is 2; integer and index arithmetic is not counted. ``exp_f32`` (vecmath)
  is EXP_FLOPS. Per-item constants are counted from the kernel's source, operation by operation.
- bytes: the compulsory traffic: every input array read once and every output written once, at its
  storage size; gathers count the bytes of the rows gathered (not whole cache lines); data re-read from
  the caches (a blur's halo, a tile's pixel state) is not counted again.
- Where the work depends on which pixels a Gaussian's rows cross, the count uses the rows the kernel
  visits (``gaussian_rows``: the rows within the Gaussian's alpha >= 1/255 extent, 16 pixels each),
  without early termination (pixels that are done are still evaluated by the branch-free loops).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

F32 = 4
I64 = 8
EXP_FLOPS = 24  # vecmath.exp_f32: 2 clamps, round (3), 2 FMA reduction (4), 5 FMA polynomial (10), 4 + 1 assembly
TS = 16  # tile size
SW = 8  # strip width (compositing.SW)


class Work(NamedTuple):
    flops: float
    bytes: float
    rule: str


def _sum(calls, fn) -> Work:
    """Work summed over the calls (fn(args, result) -> Work for one call)."""
    works = [fn(a, out) for a, _, out in calls]
    if not works:
        return Work(0.0, 0.0, "not called")
    return Work(sum(w.flops for w in works), sum(w.bytes for w in works), works[0].rule)


# ---------------------------------------------------------------------------- 3DGS projection
PROJECT_FWD_FLOPS = 250  # per (camera, Gaussian): quat -> R 25, S R^T and Sigma = M^T M 45, camera rotation
# W Sigma W^T 90 + mean 18, Jacobian J (W Sigma W^T) J^T 40, projection 8, + eps2d and 2x2 inverse 12, radius 12
PROJECT_BWD_FLOPS = 600  # estimate: the reverse of each step above, about 2.4x the forward (two products per product)


def project_forward(calls) -> Work:
    def one(a, out):
        m, vm = a[0], a[5]
        N, C = m.shape[0], vm.shape[0]
        read = N * (3 + 4 + 3) * m.itemsize
        write = C * N * (2 + 3 + 1 + 1) * m.itemsize + C * N * 2 * 4
        return Work(C * N * PROJECT_FWD_FLOPS, read + write,
                    f"{PROJECT_FWD_FLOPS} flops per (camera, Gaussian); bytes: means, quats, scales in, means2d, "
                    "conics, depths, compensations, radii out")
    return _sum(calls, one)


def project_backward(calls) -> Work:
    def one(a, out):
        m, vm = a[0], a[5]
        N, C = m.shape[0], vm.shape[0]
        read = N * (3 + 4 + 3) * m.itemsize + C * N * (2 + 3 + 1) * m.itemsize + C * N * 2 * 4
        write = N * (3 + 4 + 3) * m.itemsize
        return Work(C * N * PROJECT_BWD_FLOPS, read + write,
                    f"{PROJECT_BWD_FLOPS} flops per (camera, Gaussian); bytes: parameters and cotangents in, "
                    "gradients out")
    return _sum(calls, one)


# ---------------------------------------------------------------------------- SH colours
def _visible(radii) -> int:
    """(camera, Gaussian) pairs not culled (the SH kernels skip the others)."""
    if radii.size == 0:
        return -1
    return int(((radii[..., 0] > 0) & (radii[..., 1] > 0)).sum())


def sh_forward(calls) -> Work:
    def one(a, out):
        m, aN, K, r, colors = a[0], a[3], a[4], a[5], a[6]
        C, N = colors.shape[0], colors.shape[1]
        pairs = _visible(r)
        pairs = C * N if pairs < 0 else pairs
        flops = pairs * (10 + 3 * K + 6 * K + 3)  # direction 10, basis ~3/coefficient, 3 FMA/coefficient, clamp 3
        read = N * 3 * m.itemsize + pairs * K * 3 * aN.itemsize
        return Work(flops, read + C * N * 3 * m.itemsize,
                    "per visible pair: direction 10 + basis 3K + colour 6K + clamp 3 flops (K bases); bytes: the "
                    "pair's K x 3 coefficients and mean in, colour out")
    return _sum(calls, one)


def sh_backward(calls) -> Work:
    def one(a, out):
        m, aN, K, v = a[0], a[3], a[4], a[6]
        C, N = v.shape[0], v.shape[1]
        pairs = int(np.any(v != 0.0, axis=-1).sum())  # the kernel skips pairs no gradient reaches
        flops = pairs * (10 + 3 * K + 6 * K + 6 * K + 6 * K + 30)  # forward again, v_sh 6K, w 6K, basis grad + chain 30
        read = N * 3 * m.itemsize + pairs * K * 3 * aN.itemsize + C * N * 3 * v.itemsize
        return Work(flops, read + N * (K * 3 + 3) * m.itemsize,
                    "per pair with a gradient: the forward 10 + 9K, coefficient gradients 6K, basis cotangents 6K, "
                    "direction chain 30 flops; bytes: coefficients, means, v_colors in, gradients out")
    return _sum(calls, one)


# ---------------------------------------------------------------------------- sorting and binning
def depth_sort(calls) -> Work:
    def one(a, out):
        depths, radii = a[0], a[1]
        n = depths.size
        m = _visible(radii) if radii.size else n
        # key build (read depth 4 + radii 8, write key 4 + index 8), 3 passes x (histogram read 4, scatter read
        # 12 write 12)
        return Work(0.0, n * 24 + m * 3 * (4 + 24), "integer sort (no flops); bytes: key build 24/Gaussian, "
                    "3 radix passes x 28 bytes per sorted key")
    return _sum(calls, one)


def tile_extents(calls) -> Work:
    def one(a, out):
        means2d = a[0]
        tmin, tmax = out[0], out[1]
        boxes = float(np.prod(np.maximum(tmax - tmin, 0), axis=1).sum())  # tiles tested
        G = means2d.shape[0]
        read = G * (2 + 3 + 1) * means2d.itemsize + G * 2 * 4
        write = G * (2 + 2 + 1 + 1 + 1) * 8
        return Work(boxes * 40 + G * 20, read + write,
                    "40 flops per tile of each box tested (min_sigma_on_rect: 4 edges x ~10) + 20 per Gaussian "
                    "(rectangle, row extent); bytes: splats in, rectangles, extents, counts, masks out")
    return _sum(calls, one)


def tile_lists(calls) -> Work:
    def one(a, out):
        M = out[0].shape[0]
        G = a[1].shape[0]
        return Work(0.0, M * 2 * I64 + G * (I64 * 5),
                    "no flops (bits of masks to ids); bytes: per pair tile + Gaussian id out, per Gaussian order, "
                    "count, mask, start")
    return _sum(calls, one)


def tile_sort(calls) -> Work:
    def one(a, out):
        M = a[0].shape[0]
        return Work(0.0, M * (I64 + 2 * I64 + 2 * I64),
                    "counting sort by tile (no flops); bytes: tile ids read twice 16, Gaussian ids read 8, "
                    "ids and perm written 16 per pair")
    return _sum(calls, one)


def pack(calls) -> Work:
    def one(a, out):
        packed, rows = out
        M = packed.shape[0]
        row = packed.shape[1] * packed.itemsize
        return Work(0.0, M * (I64 + row + I64 + I64) + M * (row + 2 * I64),
                    "gather (no flops); bytes per pair: id 8, the Gaussian's 9 values + row extent + mean y in, the "
                    "packed row and rows out")
    return _sum(calls, one)


def span(h, m, lo, hi):
    """Pixels [first, last) in [lo, hi) whose centres lie within h of m (compositing.gaussian_rows, vectorised)."""
    with np.errstate(invalid="ignore"):
        flo = np.ceil(m - h - 0.5)
        fhi = np.floor(m + h - 0.5) + 1.0
    first = np.clip(np.nan_to_num(flo, nan=0, posinf=1e9, neginf=-1e9), lo, hi)
    last = np.clip(np.nan_to_num(fhi, nan=0, posinf=1e9, neginf=-1e9), lo, hi)
    return first, np.where(h < 0, first, np.maximum(last, first))


def pixels_visited(offsets, rows, TW, TH, W, H) -> float:
    """Pixels the compositing loops evaluate: per intersection, the tile rows within its extent
    (compositing.gaussian_rows) times 8 per strip of 8 columns its column extent reaches
    (compositing.gaussian_strips; rows [M, 2] without column extents: 16 per row)."""
    n_tiles = offsets.shape[0] - 1
    tile = np.repeat(np.arange(n_tiles), np.diff(offsets))
    r = tile % (TW * TH)
    y0, x0 = (r // TW) * TS, (r % TW) * TS
    ylo, yhi = span(rows[:, 0], rows[:, 1], y0, np.minimum(y0 + TS, H))
    if rows.shape[1] < 4:
        return float((yhi - ylo).sum()) * TS
    xlo, xhi = span(rows[:, 2], rows[:, 3], x0, np.minimum(x0 + TS, W))
    strips = np.where(xhi > xlo, (xhi - 1 - x0) // SW - (xlo - x0) // SW + 1, 0)
    return float(((yhi - ylo) * strips).sum()) * SW


COMPOSITE_FWD_FLOPS = 14 + EXP_FLOPS + 10  # per pixel visited (forward_pixels): d 2, sigma 9, max 1, op vis 1,
# min 1 | next T 2, weight 1, 3 colour FMA 6, T update 1 (compares and selects not counted)
COMPOSITE_BWD_FLOPS = 14 + EXP_FLOPS + 38  # blend_pixels: alpha again 14 + exp | T_i recovery 3, T update 1, fac 1,
# d alpha / d sigma 1; gradient_pixels: colour sums 6, sum_ch c v_render 5, v_alpha 5, P update 2, v_sigma 1, d 2,
# u w 2, moment sums 8, v_sigma sum 1


def composite_forward(calls) -> Work:
    def one(a, out):
        offsets, ids, packed, rows = a[5], a[6], a[7], a[8]
        W, H, TW, TH = a[10], a[11], a[12], a[13]
        render = a[17]
        M = ids.shape[0]
        px = pixels_visited(offsets, rows, TW, TH, W, H)
        pix_bytes = render.size * render.itemsize + render.shape[0] * H * W * (4 + 4 + 4)
        return Work(px * COMPOSITE_FWD_FLOPS, M * (packed.shape[1] * packed.itemsize + 16 + I64) + pix_bytes,
                    f"{COMPOSITE_FWD_FLOPS} flops per pixel visited (alpha 14 + exp {EXP_FLOPS} + blend 10); bytes: "
                    "packed pairs in, render, alpha, T, last id out")
    return _sum(calls, one)


def composite_backward(calls) -> Work:
    def one(a, out):
        packed, rows, offsets, ids = a[0], a[1], a[3], a[4]
        W, H, TW, TH = a[6], a[7], a[8], a[9]
        v_render = a[13]
        M = ids.shape[0]
        px = pixels_visited(offsets, rows, TW, TH, W, H)
        pix_bytes = v_render.size * v_render.itemsize + v_render.shape[0] * H * W * (4 + 4 + 4)
        return Work(px * COMPOSITE_BWD_FLOPS, M * (packed.shape[1] * packed.itemsize + 16 + I64 + 9 * F32) + pix_bytes,
                    f"{COMPOSITE_BWD_FLOPS} flops per pixel visited (alpha 14 + exp + 38), an upper bound: per strip "
                    "the rows outside the ellipse's band and those whose pixels all stopped in front are skipped; bytes: packed pairs, v_render, v_alpha, T, last "
                    "in, 9 gradients per pair out")
    return _sum(calls, one)


def gradient_sums(calls) -> Work:
    def one(a, out):
        g_colors, perm = a[3], a[5]
        M, D = g_colors.shape
        G = a[6].shape[0]
        return Work(M * (6 + D), M * (I64 + (6 + D) * F32) + G * ((6 + D) * F32 + 2 * I64),
                    "one add per gradient value per pair; bytes: perm and per-pair gradients in, per-Gaussian out")
    return _sum(calls, one)


# ---------------------------------------------------------------------------- SSIM (11 taps)
def _values(x) -> float:
    """Values (pixels x channels) of a kernel's [C, H, W * D] image rows."""
    return float(x.size)


def ssim_forward(calls) -> Work:
    def one(a, out):
        n = _values(a[0])
        l1 = 3 if a[7].shape[0] > 0 else 0  # the photometric loss's L1 term summed in the same pass
        return Work(n * (3 + 5 * 22 + 5 * 22 + 30 + l1), n * (2 + 3) * F32,
                    "per pixel and channel: 3 products + 5 maps x 11 FMA horizontal + 5 x 11 vertical + SSIM and "
                    "its 3 partials 30 (+ 3 for |x - y| summed, in the photometric loss); bytes: x, y in, 3 "
                    "partials out (the blurred rows stay in cache)")
    return _sum(calls, one)


def ssim_backward(calls) -> Work:
    def one(a, out):
        n = _values(a[1])
        l1 = 3 if a[8] != 0 else 0  # the photometric loss's L1 sign term added in the same pass
        return Work(n * (3 * 22 * 2 + 5 + l1), n * (3 + 2 + 1) * F32,
                    "per pixel and channel: 3 maps x 11 FMA horizontal + 3 x 11 vertical + chain 5 (+ 3 for the "
                    "L1 term's sign, in the photometric loss); bytes: 3 partials, x, y in, gradient out")
    return _sum(calls, one)


# ---------------------------------------------------------------------------- Adam
ADAM_FLOPS = 12  # m: 3, v: 4, sqrt 1, + eps 1, divide 1, lr multiply 1, subtract 1 (bias corrections: scalars)


def adam(calls, params) -> Work:
    """params: the optimiser's parameters (their gradients' sizes at the end of the step)."""
    n = sum(p.numel() for p in params)
    return Work(len(calls) * n * ADAM_FLOPS, len(calls) * n * 7 * F32,
                f"{ADAM_FLOPS} flops per parameter; bytes: parameter, gradient, 2 moments in, parameter and "
                "moments out (28 per float32 parameter)")


# ---------------------------------------------------------------------------- NeRF
def hash_forward(calls) -> Work:
    def one(a, out):
        x, table, res = a[0], a[1], a[2]
        N, L, F = x.shape[0], res.shape[0], table.shape[1]
        return Work(N * L * (24 + 16 * F), N * 3 * x.itemsize + N * L * (8 * F + F) * table.itemsize,
                    "per point and level: trilinear weights 24 + 8 corners x F features x 2 flops; bytes: point "
                    "in, 8 gathered rows of F values in, L F features out")
    return _sum(calls, one)


def hash_backward(calls) -> Work:
    def one(a, out):
        x, grad_out, res, grad_table = a[0], a[1], a[2], a[5]
        N, L, F = x.shape[0], res.shape[0], grad_table.shape[1]
        return Work(N * L * (24 + 16 * F), N * 3 * x.itemsize + N * L * F * grad_out.itemsize
                    + N * L * 8 * F * 2 * grad_table.itemsize + grad_table.size * grad_table.itemsize,
                    "per point and level: weights 24 + 8 corners x F x 2 flops; bytes: point and L F cotangents "
                    "in, 8 scattered rows read and written, the table zeroed")
    return _sum(calls, one)


def _linear_dims(module) -> list[tuple[int, int]]:
    return [(m.in_features, m.out_features) for m in module.modules() if hasattr(m, "in_features")]


def mlp_forward(calls, module) -> Work:
    dims = _linear_dims(module)

    def one(a, out):
        N = a[0].shape[0]
        return Work(N * sum(2 * i * o + o for i, o in dims), N * sum(i + o for i, o in dims) * F32
                    + sum(i * o for i, o in dims) * F32,
                    "2 flops per weight per sample (+ ReLU); bytes: each layer's input and output activations, "
                    "the weights")
    return _sum(calls, one)


def mlp_backward(calls, module) -> Work:
    dims = _linear_dims(module)

    def one(a, out):
        N = a[0].shape[0]
        return Work(N * sum(4 * i * o + o for i, o in dims), N * sum(2 * i + 2 * o for i, o in dims) * F32
                    + 2 * sum(i * o for i, o in dims) * F32,
                    "4 flops per weight per sample (input and weight gradients) + ReLU mask; bytes: activations and "
                    "their cotangents, weights and their gradients")
    return _sum(calls, one)


def _fused_sizes(a):
    """(N, active levels, F, D, H, O) of a fused encoding + MLP kernel call (recon/nerf/fused_encoding_mlp.py)."""
    u, table, active, w1t, w2t = a[0], a[2], a[5], a[6], a[8]
    return u.shape[0], active, table.shape[1], w1t.shape[0], w1t.shape[1], w2t.shape[1]  # (u, extra, table, ...)


def fused_encoding_mlp_forward(calls) -> Work:
    def one(a, out):
        N, La, F, D, H, O = _fused_sizes(a)
        return Work(N * (La * (24 + 16 * F) + 2 * D * H + H + 2 * H * O),
                    N * 3 * F32 + N * La * 8 * F * a[2].itemsize + N * O * F32 + (D * H + H * O) * F32
                    + 2 * N * D * F32,
                    "per sample: the hash encoding's count over the active levels, then 2 flops per weight (+ the "
                    "activation); bytes: point in, 8 gathered rows of F values per level, the features written "
                    "and read back once (L2 blocks of MLP_ROWS), outputs, the weights (the hidden layer stays in "
                    "L2)")
    return _sum(calls, one)


def fused_encoding_mlp_backward(calls) -> Work:
    def one(a, out):
        w1t, w2, grad_h, grad_feats = a[1], a[3], a[7], a[9]  # (feats, w1t, b1, w2, w1f, act, beta, grad_h, ...)
        N, AF, (D, H), O = grad_h.shape[0], grad_feats.shape[1], w1t.shape, w2.shape[0]
        return Work(N * (2 * D * H + H + 2 * H * O + 4 * H * O + H + 2 * D * H + 2 * AF * H),
                    N * (D + AF + O) * F32 + 3 * (D * H + H * O) * F32,
                    "per sample: the first layer recomputed (2 flops per weight + activation), then 4 flops per "
                    "weight of the second layer, 2 per weight of the first (its weight gradient) and 2 per "
                    "feature weight (the features' cotangents), + the activation's slope; bytes: the saved "
                    "features in, their cotangents out, output cotangents in, weights and their gradients (the "
                    "scatter into the table is the hash encoding backward's entry)")
    return _sum(calls, one)


def transmittance_forward(calls) -> Work:
    def one(a, out):
        S = a[0].shape[0]
        return Work(S * 8, S * (4 + 8 + 8 + 8) + S * 8 * 2, "per sample: delta 1, sigma delta 1, exp ~1 (torch), "
                    "cumulative sum 1, weight 2 + 2; bytes: sigma, t0, t1, ray in, weights, transmittance out")
    return _sum(calls, one)


def transmittance_backward(calls) -> Work:
    def one(a, out):
        S = a[0].shape[0]
        return Work(S * 16, S * 8 * 4, "per sample: twice the forward; bytes: 2 cotangents and 2 saved in, 1 out")
    return _sum(calls, one)


def volume_composite_forward(calls) -> Work:
    def one(a, out):
        S = a[0].shape[0]
        return Work(S * 12, S * (4 + 12 + 8 + 8 + 8), "per sample: weighted colour 6, opacity 1, depth 5 (segment "
                    "sums); bytes: weight, rgb, t0, t1, ray in")
    return _sum(calls, one)


def volume_composite_backward(calls) -> Work:
    def one(a, out):
        S = a[0].shape[0]
        return Work(S * 12, S * (4 + 12 + 8 + 4 + 12), "per sample: gathered cotangents x values 12; bytes: "
                    "weights, rgb, ray in, their gradients out")
    return _sum(calls, one)


def major_row_sums(calls) -> Work:
    def one(a, out):
        values, starts = a[0], a[1]
        return Work(float(values.size), values.size * values.itemsize * 2 + starts.shape[0] * 2 * I64,
                    "one add per value; bytes: the per-intersection rows in, per-surfel sums out (same size at most)")
    return _sum(calls, one)
