"""Image Gaussians: from normalised image coordinates to pixels (no gradients lost on the way).

Frames (rasterizer/CONVENTIONS.md): normalised coordinates run over [-1, 1] on both axes, x to the right and
y down; the centre of pixel column i of a W-pixel-wide image is at x = (2 i + 1) / W - 1, so a pixel
position (pixel centres at +0.5) is p = (x + 1) W / 2. A covariance in normalised units maps to pixels by
S Sigma S with S = diag(W / 2, H / 2). Covariances are stored as 3 numbers (sxx, sxy, syy); conics
(a, b, c) are the inverse covariance, the Gaussian is exp(-0.5 (a dx^2 + 2 b dx dy + c dy^2)).
"""

from __future__ import annotations

import torch
from torch import Tensor

SIGMA_WINDOW = 3.0  # the default window: the 3-sigma ellipse, Mahalanobis distance <= 3


def cholesky_to_covars(cholesky: Tensor) -> Tensor:
    """L = [[l11, 0], [l21, l22]] (cholesky [N, 3] = (l11, l21, l22)) -> Sigma = L L^T as (sxx, sxy, syy) [N, 3]."""
    l11, l21, l22 = cholesky.unbind(-1)
    return torch.stack([l11 * l11, l11 * l21, l21 * l21 + l22 * l22], dim=-1)


def covars_from_matrices(covars: Tensor) -> Tensor:
    """[N, 2, 2] symmetric matrices -> (sxx, sxy, syy) [N, 3] (the mean of the two off-diagonals)."""
    return torch.stack([covars[:, 0, 0], 0.5 * (covars[:, 0, 1] + covars[:, 1, 0]), covars[:, 1, 1]], dim=-1)


def means_to_pixels(means: Tensor, width: int, height: int) -> Tensor:
    """Normalised means [N, 2] -> pixel positions [N, 2] (pixel centres at +0.5)."""
    half = means.new_tensor([width / 2.0, height / 2.0])
    return (means + 1.0) * half


def covars_to_pixels(covars: Tensor, width: int, height: int) -> Tensor:
    """Normalised covariances (sxx, sxy, syy) [N, 3] -> pixel units: S Sigma S, S = diag(W / 2, H / 2)."""
    sx, sy = width / 2.0, height / 2.0
    return covars * covars.new_tensor([sx * sx, sx * sy, sy * sy])


def prefilter(covars_px: Tensor, colors: Tensor, variance: float) -> tuple[Tensor, Tensor]:
    """Low-pass each Gaussian with an isotropic Gaussian of ``variance`` (pixels^2), keeping its integral:
    Sigma' = Sigma + v I, colour' = colour sqrt(det Sigma / det Sigma'). v = 0 changes nothing (the exact
    same tensors are returned). Used for anti-aliasing when rendering below the fitted resolution."""
    if variance <= 0.0:
        return covars_px, colors
    filtered = covars_px + covars_px.new_tensor([variance, 0.0, variance])
    ratio = determinant(covars_px).clamp(min=0.0) / determinant(filtered)
    return filtered, colors * ratio.sqrt()[:, None]


def determinant(covars: Tensor) -> Tensor:
    """det of (sxx, sxy, syy) [N, 3] -> [N]."""
    return covars[:, 0] * covars[:, 2] - covars[:, 1] * covars[:, 1]


def conics_of(covars_px: Tensor) -> Tensor:
    """Inverse covariances (a, b, c) [N, 3] of (sxx, sxy, syy) [N, 3]."""
    det = determinant(covars_px)
    return torch.stack([covars_px[:, 2], -covars_px[:, 1], covars_px[:, 0]], dim=-1) / det[:, None]


def window_extents(covars_px: Tensor, window: float | None, width: int, height: int) -> Tensor:
    """Half extents [N, 2] in pixels of the box that holds each Gaussian's window (no gradient).

    window None: the 3-sigma ellipse, whose bounding box has half extents 3 sqrt(sxx), 3 sqrt(syy).
    window w > 0: GSASR's fixed window, |dx| <= w W / 2 and |dy| <= w H / 2 (w in normalised units)."""
    c = covars_px.detach()
    if window is None:
        return SIGMA_WINDOW * torch.stack([c[:, 0], c[:, 2]], dim=-1).clamp(min=0.0).sqrt()
    return c.new_tensor([window * width / 2.0, window * height / 2.0]).expand(c.shape[0], 2)


def pixel_ranges(means_px: Tensor, extents: Tensor, width: int, height: int) -> tuple[Tensor, Tensor]:
    """Inclusive pixel index ranges [N, 2] (first, last) as (x, y) whose centres lie in each window box:
    |i + 0.5 - m| <= e  <=>  ceil(m - e - 0.5) <= i <= floor(m + e - 0.5); clipped to the image (a Gaussian
    with no pixel has last < first)."""
    m, e = means_px.detach(), extents
    lim = torch.tensor([width - 1, height - 1], device=m.device)
    first = torch.ceil(m - e - 0.5).clamp(min=-1, max=max(width, height)).to(torch.int64)
    last = torch.floor(m + e - 0.5).clamp(min=-1, max=max(width, height)).to(torch.int64)
    return first.clamp(min=0), torch.minimum(last, lim)
