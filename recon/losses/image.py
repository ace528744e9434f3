"""Image losses and metrics of 3DGS: L1, SSIM (11 x 11 Gaussian window, sigma 1.5), PSNR.

Images are channels-last ``[H, W, 3]`` or batched ``[C, H, W, 3]``, float in [0, 1].
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor

SSIM_WINDOW = 11
SSIM_SIGMA = 1.5
SSIM_C1 = 0.01**2  # (K1 L)^2 with L = 1
SSIM_C2 = 0.03**2  # (K2 L)^2


def _batched(img: Tensor) -> Tensor:
    """[H, W, D] or [C, H, W, D] -> [C, D, H, W] (for conv2d)."""
    if img.dim() == 3:
        img = img[None]
    if img.dim() != 4:
        raise ValueError(f"expected an image [H, W, D] or [C, H, W, D], got shape {tuple(img.shape)}")
    return img.permute(0, 3, 1, 2)


@lru_cache(maxsize=8)
def _gaussian_window(size: int, sigma: float, channels: int, dtype: torch.dtype, device: str) -> Tensor:
    """[channels, 1, size, size] normalised 2D Gaussian window (depthwise conv weights)."""
    x = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    g = g / g.sum()
    w = (g[:, None] * g[None, :]).to(dtype=dtype, device=device)
    return w.expand(channels, 1, size, size).contiguous()


def l1_loss(a: Tensor, b: Tensor) -> Tensor:
    """Mean absolute difference (scalar); PyTorch's fused ``l1_loss`` (one pass forward and backward)."""
    return F.l1_loss(a, b)


def ssim(a: Tensor, b: Tensor, window: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA) -> Tensor:
    """Mean SSIM (scalar) of two images [H, W, D] or [C, H, W, D], as 3DGS ``ssim``.

    Local statistics use a ``window`` x ``window`` Gaussian window (``sigma``) with zero padding
    ("same" size output), constants C1 = 0.01^2, C2 = 0.03^2, averaged over pixels and channels.
    """
    if a.shape != b.shape:
        raise ValueError(f"ssim: shapes differ {tuple(a.shape)} vs {tuple(b.shape)}")
    x, y = _batched(a), _batched(b)
    D = x.shape[1]
    w = _gaussian_window(window, sigma, D, x.dtype, str(x.device))
    pad = window // 2

    def blur(t: Tensor) -> Tensor:
        return F.conv2d(t, w, padding=pad, groups=D)

    mu_x, mu_y = blur(x), blur(y)
    mu_xx, mu_yy, mu_xy = mu_x * mu_x, mu_y * mu_y, mu_x * mu_y
    var_x = blur(x * x) - mu_xx
    var_y = blur(y * y) - mu_yy
    cov = blur(x * y) - mu_xy
    num = (2 * mu_xy + SSIM_C1) * (2 * cov + SSIM_C2)
    den = (mu_xx + mu_yy + SSIM_C1) * (var_x + var_y + SSIM_C2)
    return (num / den).mean()


def auto_ssim(render: Tensor, target: Tensor) -> Tensor:
    """SSIM through the fused Numba kernels (:mod:`recon.losses.ssim`, same numerics, about 10x
    faster) for CPU tensors, else :func:`ssim`."""
    from recon.losses.ssim import can_fuse, fused_ssim

    if can_fuse(render, target):
        return fused_ssim(render, target)
    return ssim(render, target)


def photometric_loss(render: Tensor, target: Tensor, ssim_lambda: float = 0.2) -> Tensor:
    """3DGS loss ``(1 - lambda) L1 + lambda (1 - SSIM)`` (lambda = 0.2): for CPU tensors one autograd node
    (:func:`recon.losses.ssim.fused_photometric_loss`: the L1 term inside the fused SSIM kernels' passes, same
    value and gradient), else :func:`photometric_loss_reference`."""
    from recon.losses.ssim import can_fuse, fused_photometric_loss

    if can_fuse(render, target):
        return fused_photometric_loss(render, target, ssim_lambda)
    return photometric_loss_reference(render, target, ssim_lambda)


def photometric_loss_reference(render: Tensor, target: Tensor, ssim_lambda: float = 0.2) -> Tensor:
    """The specification of :func:`photometric_loss` in plain PyTorch (:func:`l1_loss`, :func:`ssim`)."""
    return (1.0 - ssim_lambda) * l1_loss(render, target) + ssim_lambda * (1.0 - ssim(render, target))


def masked_render(render: Tensor, target: Tensor, mask: Tensor | None) -> Tensor:
    """``render`` where ``mask`` [H, W, 1] (1 = keep) says so, ``target`` elsewhere (soft masks blend):
    pixels outside the mask add nothing to a loss against ``target`` and get no gradient (as nerfstudio
    applies dataset masks). ``mask`` None: ``render`` unchanged."""
    if mask is None:
        return render
    return render * mask + target * (1.0 - mask)


def psnr_from_mse(mse: float, max_value: float = 1.0) -> float:
    """``10 log10(max^2 / mse)`` in dB; inf for mse 0."""
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(max_value**2 / mse)


def psnr(a: Tensor, b: Tensor, max_value: float = 1.0) -> float:
    """PSNR in dB: ``10 log10(max^2 / MSE)`` over all pixels and channels (MSE summed in float64; for
    metrics); inf for identical images."""
    return psnr_from_mse(float((a.detach().double() - b.detach().double()).square().mean()), max_value)


def to_host(values: Tensor) -> list[float]:
    """The values of a small 1-D tensor as Python floats: one device sync (on CUDA) for all of them."""
    return values.tolist()


@torch.no_grad()
def squared_error_terms(render: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
    """[1] (no mask) or [3] on ``render``'s device and dtype: the MSE of ``render`` clamped to [0, 1] against
    ``target`` (one fused pass); with a loss ``mask`` ([H, W, 1] or [B, H, W, 1], 1 = keep; soft masks weigh)
    also the mask-weighted sum of squared errors and the kept weight (mask sum x 3 channels)."""
    clamped = render.clamp(0.0, 1.0)
    terms = [F.mse_loss(clamped, target)]
    if mask is not None:
        mask = mask.to(render)
        terms += [((clamped - target).square() * mask).sum(), mask.expand_as(render).sum()]
    return torch.stack(terms)


def quick_psnrs(render: Tensor, target: Tensor, mask: Tensor | None = None) -> tuple[float, float | None]:
    """(full-image PSNR, masked PSNR or None without ``mask``) of ``render`` clamped to [0, 1] against
    ``target`` (images [H, W, 3] or [B, H, W, 3], or rays [R, 3]), the MSEs in the storage dtype, read back
    with one device sync (for progress displays, where :func:`psnr`'s float64 copies cost milliseconds a step
    at 480 x 272). The masked PSNR is over the pixels a loss ``mask`` keeps: the weighted squared error
    divided by the kept weight; it never counts pixels outside the mask, filled in or not; inf when the kept
    pixels match exactly, nan when the mask keeps nothing."""
    values = to_host(squared_error_terms(render.detach(), target, mask))
    full = psnr_from_mse(values[0])
    if mask is None:
        return full, None
    sq, weight = values[1], values[2]
    return full, (math.nan if weight <= 0.0 else psnr_from_mse(sq / weight))


def quick_psnr(render: Tensor, target: Tensor) -> float:
    """The full-image PSNR of :func:`quick_psnrs`."""
    return quick_psnrs(render, target)[0]
