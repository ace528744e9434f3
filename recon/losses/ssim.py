"""Fused SSIM on the CPU: one Numba kernel for the forward pass, one for its hand-written backward.

Same numerics as :func:`recon.losses.image.ssim` (the specification, plain PyTorch): an 11 x 11 Gaussian
window (sigma 1.5) applied with zero padding ("same" size), C1 = 0.01^2, C2 = 0.03^2, the mean of the
SSIM map over pixels and channels. The 2-D window is the outer product of a 1-D one, so every blur is a
horizontal then a vertical 11-tap pass (exact, zero padding included), about 5x less arithmetic than
the reference's 2-D depthwise convolutions.

Layout: images stay channels-last, a row being W pixels x D channels interleaved ([C, H, W * D]); the
horizontal pass steps its taps by D values, so one tap is one contiguous (vectorised) pass over the whole
row, all channels at once, and no plane is ever copied out. Each kernel walks a band of image rows; the
horizontal pass of every row it needs is computed once into a ring of 2r + 1 rows (r = window // 2), from
which the vertical pass of the band's rows reads: the blurred statistics never leave L1/L2 (the four
kernels before wrote 5 + 3 full maps out and read them back). The forward writes the SSIM map's partial
derivatives (3 maps) for the backward and the map's per-row sums.

Backward (the gradient reaches the first image only; the second is the target). With
mu_x = blur(x), e_xx = blur(x^2), e_xy = blur(x y) and S the SSIM map,

    d mean(S) / d x = (1 / n) [ blur(dS/dmu_x) + 2 x blur(dS/de_xx) + y blur(dS/de_xy) ]

(the zero-padded blur is its own adjoint: the window is symmetric). With A1 = 2 mu_x mu_y + C1,
A2 = 2 s_xy + C2, B1 = mu_x^2 + mu_y^2 + C1, B2 = s_xx + s_yy + C2 (s = e - mu mu):
dS/de_xx = -S / B2, dS/de_xy = 2 A1 / (B1 B2),
dS/dmu_x = [2 mu_y (A2 - A1) - 2 S mu_x (B2 - B1)] / (B1 B2).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange
from torch import Tensor

from rasterizer.cpu import KERNEL_LOCK
from rasterizer.cpu.schedule import thread_count
from rasterizer.cpu.vecmath import U, like

C1 = 0.01**2
C2 = 0.03**2
N_STATS = 5  # blurred x, y, x^2, y^2, x y
N_PARTIALS = 3  # dS/dmu_x, dS/de_xx, dS/de_xy


def gaussian_taps(size: int, sigma: float, dtype) -> np.ndarray:
    """[size] normalised 1-D Gaussian window (the 2-D SSIM window is its outer product)."""
    x = np.arange(size, dtype=np.float64) - (size - 1) / 2
    g = np.exp(-(x**2) / (2 * sigma**2))
    return (g / g.sum()).astype(dtype)


@njit(cache=True, inline="always", fastmath=True)
def blur_row(src, out, g, step):
    """out[j] = sum_k g[k] src[j + k step] for j in [0, len(out)): ``src`` is a channels-last row zero-padded
    by r pixels (r ``step`` values, step = D channels) on each side, so tap k moves by whole pixels."""
    n = out.shape[0]
    for j in range(n):
        out[j] = 0.0
    for k in range(g.shape[0]):
        gk = g[k]
        off = U(k * step)  # unsigned: no wraparound test per access (vectorised)
        for j in range(U(n)):
            out[j] += gk * src[off + j]


@njit(cache=True, inline="always", fastmath=True)
def vertical_row(ring, s, row, g, H, out):
    """out[j] = sum_k g[k] hor[row + k - r][j] over rows inside the image (zero padding), the horizontal
    rows of statistic s read from the ring (row y in slot y % (2r + 1))."""
    r = g.shape[0] // 2
    taps = g.shape[0]
    for j in range(out.shape[0]):
        out[j] = 0.0
    for k in range(taps):
        yy = row + k - r
        if 0 <= yy < H:
            gk = g[k]
            src = ring[s, yy % taps]
            for j in range(out.shape[0]):
                out[j] += gk * src[j]


@njit(cache=True, inline="always")
def band(i, bands, H):
    """(camera, first row, last row + 1) of band i when each camera's H rows are cut into ``bands`` bands."""
    c, b = i // bands, i % bands
    rows = (H + bands - 1) // bands
    return c, b * rows, min(H, (b + 1) * rows)


@njit(cache=True, fastmath=True)
def horizontal_stats_row(x, y, c, row, g, D, pad, ring):
    """Horizontal pass of the five statistics of image row ``row`` into its ring slot: blur_x of x, y,
    x^2, y^2, x y (pad [5, n + 2 r D] scratch, its margins zero)."""
    n = x.shape[2]
    o = (g.shape[0] // 2) * D
    for j in range(n):
        a, b = x[c, row, j], y[c, row, j]
        pad[0, o + j] = a
        pad[1, o + j] = b
        pad[2, o + j] = a * a
        pad[3, o + j] = b * b
        pad[4, o + j] = a * b
    slot = row % g.shape[0]
    for s in range(N_STATS):
        blur_row(pad[s], ring[s, slot], g, D)


@njit(cache=True, parallel=True, fastmath=True)
def ssim_forward_kernel(x, y, g, D, bands, partials, row_sums, l1_sums):
    """The SSIM map of x against y in one pass: per band of rows, the horizontal pass of each needed row
    once (ring of 2r + 1 rows), the vertical pass, the map, its partial derivatives and row sums.

    x, y [C, H, W * D] channels-last rows; g [2r + 1]; ``bands`` bands of rows per camera (the parallel
    work; results do not depend on it). Writes partials [3, C, H, W * D] (dS/dmu_x, dS/de_xx, dS/de_xy)
    and row_sums [C * H] float64 (sum of S over the row's pixels and channels); l1_sums [C * H] float64
    the rows' sums of |x - y| (the L1 term of the photometric loss), or empty ([0]: not summed)."""
    C, H, n = x.shape
    with_l1 = l1_sums.shape[0] > 0
    taps = g.shape[0]
    r = taps // 2
    for i in prange(C * bands):
        c, y0, y1 = band(i, bands, H)
        pad = np.zeros((N_STATS, n + 2 * r * D), x.dtype)
        ring = np.zeros((N_STATS, taps, n), x.dtype)  # zeros: a row never computed reads as 0, never stale
        st = np.empty((N_STATS, n), x.dtype)
        ref = x[0, 0, 0]  # constants in the storage dtype: float32 stays float32 (vectorised)
        c1, c2, two, one = like(C1, ref), like(C2, ref), like(2.0, ref), like(1.0, ref)
        ready = max(y0 - r, 0)  # next horizontal row to compute
        for row in range(y0, y1):
            while ready <= min(row + r, H - 1):
                horizontal_stats_row(x, y, c, ready, g, D, pad, ring)
                ready += 1
            for s in range(N_STATS):
                vertical_row(ring, s, row, g, H, st[s])
            total = 0.0
            for j in range(n):
                mx, my = st[0, j], st[1, j]
                sxx = st[2, j] - mx * mx
                syy = st[3, j] - my * my
                sxy = st[4, j] - mx * my
                a1 = two * mx * my + c1
                a2 = two * sxy + c2
                b1 = mx * mx + my * my + c1
                b2 = sxx + syy + c2
                inv = one / (b1 * b2)
                S = a1 * a2 * inv
                total += S
                partials[0, c, row, j] = (two * my * (a2 - a1) - two * S * mx * (b2 - b1)) * inv
                partials[1, c, row, j] = -S / b2
                partials[2, c, row, j] = two * a1 * inv
            row_sums[c * H + row] = total
            if with_l1:
                l1 = 0.0
                for j in range(n):
                    l1 += abs(x[c, row, j] - y[c, row, j])
                l1_sums[c * H + row] = l1


@njit(cache=True, parallel=True, fastmath=True)
def ssim_backward_kernel(partials, x, y, g, D, bands, scale, grad, l1_scale):
    """d (scale * sum S + l1_scale * sum |x - y|) / d x in one pass: per band of rows, the horizontal pass of
    the 3 partial maps of each needed row once (ring), their vertical pass and the chain rule
    grad = scale (b0 + 2 x b1 + y b2) + l1_scale sign(x - y), b = blur(partials) (sign(0) = 0, as torch's
    ``l1_loss``; l1_scale 0: SSIM alone). Shapes as ssim_forward_kernel; grad [C, H, W * D] (written)."""
    _, C, H, n = partials.shape
    zero = like(0.0, scale)
    with_l1 = l1_scale != zero
    taps = g.shape[0]
    r = taps // 2
    o = r * D
    for i in prange(C * bands):
        c, y0, y1 = band(i, bands, H)
        pad = np.zeros(n + 2 * o, partials.dtype)
        ring = np.zeros((N_PARTIALS, taps, n), partials.dtype)
        st = np.empty((N_PARTIALS, n), partials.dtype)
        two = like(2.0, scale)
        ready = max(y0 - r, 0)
        for row in range(y0, y1):
            while ready <= min(row + r, H - 1):
                for s in range(N_PARTIALS):
                    for j in range(n):
                        pad[o + j] = partials[s, c, ready, j]
                    blur_row(pad, ring[s, ready % taps], g, D)
                ready += 1
            for s in range(N_PARTIALS):
                vertical_row(ring, s, row, g, H, st[s])
            if with_l1:
                for j in range(n):
                    d = x[c, row, j] - y[c, row, j]
                    sign_term = l1_scale if d > zero else (-l1_scale if d < zero else zero)
                    grad[c, row, j] = scale * (st[0, j] + two * x[c, row, j] * st[1, j] + y[c, row, j] * st[2, j]) \
                        + sign_term
            else:
                for j in range(n):
                    grad[c, row, j] = scale * (st[0, j] + two * x[c, row, j] * st[1, j] + y[c, row, j] * st[2, j])


def _rows(img: Tensor) -> np.ndarray:
    """[C, H, W, D] tensor -> [C, H, W * D] numpy rows (a view; a copy only when ``img`` is not contiguous)."""
    C, H, W, D = img.shape
    return img.detach().contiguous().reshape(C, H, W * D).numpy()


def row_bands(H: int) -> int:
    """Bands of rows per camera for the kernels' parallel loop: one per thread (each band recomputes the
    horizontal pass of 2r rows beyond its ends, so no more than needed), at most one per 16 rows."""
    return max(1, min(thread_count(), H // 16))


def ssim_sums(x: np.ndarray, y: np.ndarray, D: int, window: int, sigma: float, with_l1: bool):
    """Run the forward kernel on rows x, y [C, H, W * D] (D channels): (mean SSIM, mean |x - y| or None,
    the backward's state (x, y, taps, partials, bands))."""
    g = gaussian_taps(window, sigma, x.dtype)
    C, H, n = x.shape
    bands = row_bands(H)
    partials = np.empty((N_PARTIALS, C, H, n), x.dtype)
    row_sums = np.empty(C * H, np.float64)
    l1_sums = np.empty(C * H if with_l1 else 0, np.float64)
    with KERNEL_LOCK:
        ssim_forward_kernel(x, y, g, D, bands, partials, row_sums, l1_sums)
    l1 = float(l1_sums.sum()) / x.size if with_l1 else None
    return float(row_sums.sum()) / x.size, l1, (x, y, g, partials, bands)


def ssim_gradient(state, D: int, scale: float, l1_scale: float) -> np.ndarray:
    """d (scale * sum S + l1_scale * sum |x - y|) / d x [C, H, W * D] from :func:`ssim_sums`' state."""
    x, y, g, partials, bands = state
    grad = np.empty_like(x)
    with KERNEL_LOCK:
        ssim_backward_kernel(partials, x, y, g, D, bands, x.dtype.type(scale), grad, x.dtype.type(l1_scale))
    return grad


class FusedSSIM(torch.autograd.Function):
    """mean SSIM of a [C, H, W, D] (differentiable) against b [C, H, W, D] (constant)."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, window: int, sigma: float) -> Tensor:
        x, y = _rows(a), _rows(b)
        ctx.D = a.shape[3]
        mean, _, ctx.state = ssim_sums(x, y, ctx.D, window, sigma, with_l1=False)
        ctx.save_for_backward(a, b)  # only for autograd's in-place check: x, y may be views of a, b
        ctx.shape = a.shape
        return a.new_tensor(mean)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        ctx.saved_tensors  # raises if a or b was modified in place since the forward (x, y would have changed)
        grad = ssim_gradient(ctx.state, ctx.D, float(grad_out) / ctx.state[0].size, 0.0)
        return torch.from_numpy(grad).reshape(ctx.shape), None, None, None


class FusedPhotometricLoss(torch.autograd.Function):
    """The 3DGS loss (1 - lam) mean|a - b| + lam (1 - mean SSIM(a, b)) of a [C, H, W, D] (differentiable)
    against b (constant) from the SSIM kernels, the L1 term summed and differentiated in the same passes."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, lam: float, window: int, sigma: float) -> Tensor:
        x, y = _rows(a), _rows(b)
        ctx.D, ctx.lam = a.shape[3], float(lam)
        mean_ssim, mean_l1, ctx.state = ssim_sums(x, y, ctx.D, window, sigma, with_l1=True)
        ctx.save_for_backward(a, b)  # only for autograd's in-place check
        ctx.shape = a.shape
        t = x.dtype.type  # the means rounded to the storage dtype first, as the reference's tensors are: identical
        return a.new_tensor(t(1.0 - lam) * t(mean_l1) + t(lam) * (t(1.0) - t(mean_ssim)))  # images give 0 exactly

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        ctx.saved_tensors  # raises if a or b was modified in place since the forward
        n, g = ctx.state[0].size, float(grad_out)
        grad = ssim_gradient(ctx.state, ctx.D, -ctx.lam * g / n, (1.0 - ctx.lam) * g / n)
        return torch.from_numpy(grad).reshape(ctx.shape), None, None, None, None


def fused_ssim(a: Tensor, b: Tensor, window: int = 11, sigma: float = 1.5) -> Tensor:
    """Mean SSIM of ``a`` against the target ``b`` (both [H, W, D] or [C, H, W, D], CPU float32/64),
    differentiable w.r.t. ``a`` only; same value and gradient as :func:`recon.losses.image.ssim`."""
    a, b = checked_pair(a, b, window, sigma)
    return FusedSSIM.apply(a, b.to(a.dtype), window, sigma)


def fused_photometric_loss(a: Tensor, b: Tensor, lam: float = 0.2, window: int = 11, sigma: float = 1.5) -> Tensor:
    """``(1 - lam) L1 + lam (1 - SSIM)`` of ``a`` against the target ``b`` (both [H, W, D] or [C, H, W, D], CPU
    float32/64), differentiable w.r.t. ``a`` only; the value and gradient of
    :func:`recon.losses.image.photometric_loss_reference` (the L1 term summed in float64)."""
    a, b = checked_pair(a, b, window, sigma)
    return FusedPhotometricLoss.apply(a, b.to(a.dtype), float(lam), window, sigma)


def checked_pair(a: Tensor, b: Tensor, window: int, sigma: float) -> tuple[Tensor, Tensor]:
    """(a, b) as [C, H, W, D]; ValueError for differing shapes, other ranks, an even window or sigma <= 0."""
    if a.shape != b.shape:
        raise ValueError(f"ssim: shapes differ {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.dim() == 3:
        a, b = a[None], b[None]
    if a.dim() != 4:
        raise ValueError(f"expected an image [H, W, D] or [C, H, W, D], got shape {tuple(a.shape)}")
    if window % 2 != 1 or window < 1 or not math.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"ssim: window must be odd and sigma > 0, got {window}, {sigma}")
    return a, b


def can_fuse(a: Tensor, b: Tensor) -> bool:
    """Whether :func:`fused_ssim` applies: CPU float32/float64 tensors, no gradient needed for ``b``."""
    return (a.device.type == "cpu" and b.device.type == "cpu" and a.dtype in (torch.float32, torch.float64)
            and not b.requires_grad)
