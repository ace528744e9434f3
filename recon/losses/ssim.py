"""Fused SSIM on the CPU: Numba kernels for the forward pass and a hand-written backward.

Same numerics as :func:`recon.losses.image.ssim` (the specification, plain PyTorch): an 11 x 11 Gaussian
window (sigma 1.5) applied with zero padding ("same" size), C1 = 0.01^2, C2 = 0.03^2, the mean of the
SSIM map over pixels and channels. The 2-D window is the outer product of a 1-D one, so every blur is a
horizontal then a vertical 11-tap pass (exact, zero padding included), about 5x less arithmetic than
the reference's 2-D depthwise convolutions, and the five blurred statistics never leave the row that
uses them.

Backward (the gradient reaches the first image only; the second is the target). With
mu_x = blur(x), e_xx = blur(x^2), e_xy = blur(x y) and S the SSIM map,

    d mean(S) / d x = (1 / n) [ blur(dS/dmu_x) + 2 x blur(dS/de_xx) + y blur(dS/de_xy) ]

(the zero-padded blur is its own adjoint: the window is symmetric). With A1 = 2 mu_x mu_y + C1,
A2 = 2 s_xy + C2, B1 = mu_x^2 + mu_y^2 + C1, B2 = s_xx + s_yy + C2 (s = e - mu mu):
dS/de_xx = -S / B2, dS/de_xy = 2 A1 / (B1 B2),
dS/dmu_x = [2 mu_y (A2 - A1) - 2 S mu_x (B2 - B1)] / (B1 B2).

Images are planes [P, H, W] inside (P = cameras x channels); the torch entry point takes the channels-
last layout of the losses module.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange
from torch import Tensor

from rasterizer.cpu import KERNEL_LOCK
from rasterizer.cpu.vecmath import like

C1 = 0.01**2
C2 = 0.03**2


def gaussian_taps(size: int, sigma: float, dtype) -> np.ndarray:
    """[size] normalised 1-D Gaussian window (the 2-D SSIM window is its outer product)."""
    x = np.arange(size, dtype=np.float64) - (size - 1) / 2
    g = np.exp(-(x**2) / (2 * sigma**2))
    return (g / g.sum()).astype(dtype)


@njit(cache=True, inline="always", fastmath=True)
def blur_row(src, out, g, r, W):
    """out[x] = sum_k g[k] src[x + k] for x in [0, W): src is a row zero-padded by r on each side."""
    for x in range(W):
        out[x] = 0.0
    for k in range(2 * r + 1):
        gk = g[k]
        for x in range(W):
            out[x] += gk * src[x + k]


@njit(cache=True, parallel=True, fastmath=True)
def horizontal_stats(x, y, g, hor):
    """Horizontal pass of the five statistics: hor[s, p, row] = blur_x of x, y, x^2, y^2, x y.

    x, y [P, H, W]; g [2r + 1]; hor [5, P, H, W] (written)."""
    P, H, W = x.shape
    r = g.shape[0] // 2
    for i in prange(P * H):
        p, row = i // H, i % H
        pad = np.zeros((5, W + 2 * r), x.dtype)
        for j in range(W):
            a, b = x[p, row, j], y[p, row, j]
            pad[0, j + r] = a
            pad[1, j + r] = b
            pad[2, j + r] = a * a
            pad[3, j + r] = b * b
            pad[4, j + r] = a * b
        for s in range(5):
            blur_row(pad[s], hor[s, p, row], g, r, W)


@njit(cache=True, inline="always", fastmath=True)
def vertical_sum(hor, s, p, row, g, r, H, W, out):
    """out[x] = sum_k g[k] hor[s, p, row + k - r, x] over rows inside the image (zero padding)."""
    for x in range(W):
        out[x] = 0.0
    for k in range(2 * r + 1):
        yy = row + k - r
        if 0 <= yy < H:
            gk = g[k]
            for x in range(W):
                out[x] += gk * hor[s, p, yy, x]


@njit(cache=True, fastmath=True)
def vertical_block(hor, count, p, row, g):
    """[count, W]: the vertical pass of maps hor[0:count, p] at image row ``row`` (see vertical_sum)."""
    H, W = hor.shape[2], hor.shape[3]
    st = np.empty((count, W), hor.dtype)
    for s in range(count):
        vertical_sum(hor, s, p, row, g, g.shape[0] // 2, H, W, st[s])
    return st


@njit(cache=True, parallel=True, fastmath=True)
def ssim_rows(hor, g, partials, row_sums):
    """Vertical pass, the SSIM map and its partial derivatives, one image row at a time.

    hor [5, P, H, W] from horizontal_stats; writes partials [3, P, H, W] (dS/dmu_x, dS/de_xx,
    dS/de_xy) and row_sums [P * H] (sum of S over the row)."""
    _, P, H, W = hor.shape
    for i in prange(P * H):
        p, row = i // H, i % H
        st = vertical_block(hor, 5, p, row, g)
        ref = st[0, 0]  # constants in the storage dtype: float32 stays float32 (vectorised)
        c1, c2, two = like(C1, ref), like(C2, ref), like(2.0, ref)
        total = 0.0
        for x in range(W):
            mx, my = st[0, x], st[1, x]
            sxx = st[2, x] - mx * mx
            syy = st[3, x] - my * my
            sxy = st[4, x] - mx * my
            a1 = two * mx * my + c1
            a2 = two * sxy + c2
            b1 = mx * mx + my * my + c1
            b2 = sxx + syy + c2
            inv = like(1.0, ref) / (b1 * b2)
            S = a1 * a2 * inv
            total += S
            partials[0, p, row, x] = (two * my * (a2 - a1) - two * S * mx * (b2 - b1)) * inv
            partials[1, p, row, x] = -S / b2
            partials[2, p, row, x] = two * a1 * inv
        row_sums[i] = total


@njit(cache=True, parallel=True, fastmath=True)
def horizontal_partials(partials, g, hor):
    """Horizontal pass of the backward: hor[s] = blur_x(partials[s]) for the 3 partial maps."""
    _, P, H, W = partials.shape
    r = g.shape[0] // 2
    for i in prange(P * H):
        p, row = i // H, i % H
        pad = np.zeros(W + 2 * r, partials.dtype)
        for s in range(3):
            for j in range(W):
                pad[j + r] = partials[s, p, row, j]
            blur_row(pad, hor[s, p, row], g, r, W)


@njit(cache=True, parallel=True, fastmath=True)
def gradient_rows(hor, x, y, g, scale, grad):
    """Vertical pass of the backward and the chain rule: grad = scale (b0 + 2 x b1 + y b2) with
    b = blur(partials); grad [P, H, W] (written)."""
    _, P, H, W = hor.shape
    for i in prange(P * H):
        p, row = i // H, i % H
        st = vertical_block(hor, 3, p, row, g)
        for j in range(W):
            grad[p, row, j] = scale * (st[0, j] + 2.0 * x[p, row, j] * st[1, j] + y[p, row, j] * st[2, j])


def _planes(img: Tensor) -> np.ndarray:
    """[C, H, W, D] tensor -> [C * D, H, W] contiguous numpy planes."""
    C, H, W, D = img.shape
    return np.ascontiguousarray(img.detach().permute(0, 3, 1, 2).reshape(C * D, H, W).numpy())


class FusedSSIM(torch.autograd.Function):
    """mean SSIM of a [C, H, W, D] (differentiable) against b [C, H, W, D] (constant)."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, window: int, sigma: float) -> Tensor:
        x, y = _planes(a), _planes(b)
        g = gaussian_taps(window, sigma, x.dtype)
        P, H, W = x.shape
        hor = np.empty((5, P, H, W), x.dtype)
        partials = np.empty((3, P, H, W), x.dtype)
        row_sums = np.empty(P * H, np.float64)
        with KERNEL_LOCK:
            horizontal_stats(x, y, g, hor)
            ssim_rows(hor, g, partials, row_sums)
        ctx.state = (x, y, g, partials, a.shape)
        return a.new_tensor(float(row_sums.sum()) / x.size)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        x, y, g, partials, shape = ctx.state
        C, H, W, D = shape
        hor = np.empty_like(partials)
        grad = np.empty_like(x)
        scale = x.dtype.type(float(grad_out) / x.size)
        with KERNEL_LOCK:
            horizontal_partials(partials, g, hor)
            gradient_rows(hor, x, y, g, scale, grad)
        out = torch.from_numpy(grad).reshape(C, D, H, W).permute(0, 2, 3, 1)
        return out, None, None, None


def fused_ssim(a: Tensor, b: Tensor, window: int = 11, sigma: float = 1.5) -> Tensor:
    """Mean SSIM of ``a`` against the target ``b`` (both [H, W, D] or [C, H, W, D], CPU float32/64),
    differentiable w.r.t. ``a`` only; same value and gradient as :func:`recon.losses.image.ssim`."""
    if a.shape != b.shape:
        raise ValueError(f"ssim: shapes differ {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.dim() == 3:
        a, b = a[None], b[None]
    if a.dim() != 4:
        raise ValueError(f"expected an image [H, W, D] or [C, H, W, D], got shape {tuple(a.shape)}")
    if window % 2 != 1 or window < 1 or not math.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"ssim: window must be odd and sigma > 0, got {window}, {sigma}")
    return FusedSSIM.apply(a, b.to(a.dtype), window, sigma)


def can_fuse(a: Tensor, b: Tensor) -> bool:
    """Whether :func:`fused_ssim` applies: CPU float32/float64 tensors, no gradient needed for ``b``."""
    return (a.device.type == "cpu" and b.device.type == "cpu" and a.dtype in (torch.float32, torch.float64)
            and not b.requires_grad)
