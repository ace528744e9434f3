"""Per-primitive ray geometry for tracing (plain PyTorch, differentiable).

A primitive is written as a centre ``mu`` [N, 3] and a *frame* ``A`` [N, 3, 3] mapping world offsets into
its canonical coordinates, ``x' = A (x - mu)``:

- a 3D Gaussian (``kind = GAUSSIAN``): ``A`` whitens it, ``A^T A = Sigma^-1``: ``A = S^-1 R^T`` from a
  quaternion and scales, or ``A = L^-1`` with ``Sigma = L L^T`` (Cholesky) from an explicit covariance.
  Along a ray ``x(t) = o + t d`` the Mahalanobis distance squared ``m(t) = |o' + t d'|^2`` (o' = A (o - mu),
  d' = A d) is smallest at ``t* = -(o' . d') / (d' . d')`` (= ((mu - o)^T Sigma^-1 d) / (d^T Sigma^-1 d));
  the response is ``m* = m(t*)``.
- a 2D surfel (``kind = SURFEL``, 2DGS): rows of ``A`` are ``t_u / s_u``, ``t_v / s_v`` and the unit
  normal ``n`` (the columns of the surfel's rotation): ``t*`` is the ray's intersection with the surfel's
  plane, ``-o'_w / d'_w``, and ``m* = u^2 + v^2`` the squared tangent-frame coordinates of the hit in
  standard deviations (rays parallel to the plane, ``d'_w = 0``, miss).

alpha = min(ALPHA_MAX, opacity exp(-m* / 2)), skipped (0) below ALPHA_THRESHOLD: the rasterizer's
constants (rasterizer/reference/composite.py). The k-sigma bound of a primitive, the Mahalanobis radius
beyond which alpha < 1/255: ``k^2 = 2 ln(255 opacity)``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..quaternions import quat_to_rotmat
from ..reference.composite import ALPHA_MAX, ALPHA_THRESHOLD

GAUSSIAN = 0
SURFEL = 1


def gaussian_frames(quats: Tensor | None, scales: Tensor | None, covars: Tensor | None = None) -> Tensor:
    """Whitening frames A [N, 3, 3] (A^T A = Sigma^-1) of 3D Gaussians: ``S^-1 R^T`` from quats [N, 4]
    (w, x, y, z) and activated scales [N, 3], or ``L^-1`` of the Cholesky factor of covars [N, 3, 3]."""
    if covars is not None:
        L = torch.linalg.cholesky(covars)
        eye = torch.eye(3, dtype=covars.dtype, device=covars.device).expand_as(covars)
        return torch.linalg.solve_triangular(L, eye, upper=False)
    R = quat_to_rotmat(quats)  # columns: the principal axes
    return R.transpose(-1, -2) / scales[..., :, None]


def surfel_frames(quats: Tensor, scales: Tensor) -> Tensor:
    """Frames A [N, 3, 3] of 2D surfels: rows t_u / s_u, t_v / s_v, n (quats [N, 4], scales [N, 2])."""
    R = quat_to_rotmat(quats)
    Rt = R.transpose(-1, -2)
    return torch.cat([Rt[:, :2] / scales[..., :, None], Rt[:, 2:]], dim=1)


def gaussian_axis_sigmas(quats: Tensor | None, scales: Tensor | None, covars: Tensor | None = None) -> Tensor:
    """[N, 3] standard deviation of each Gaussian along the world axes, sqrt(Sigma_ii) (no gradient)."""
    with torch.no_grad():
        if covars is not None:
            return torch.diagonal(covars, dim1=-2, dim2=-1).clamp(min=0).sqrt()
        M = quat_to_rotmat(quats) * scales[..., None, :]
        return (M * M).sum(-1).sqrt()


def surfel_axis_sigmas(quats: Tensor, scales: Tensor) -> Tensor:
    """[N, 3] half-extent per world axis of a surfel's one-sigma disc (no gradient)."""
    with torch.no_grad():
        M = quat_to_rotmat(quats)[..., :, :2] * scales[..., None, :]
        return (M * M).sum(-1).sqrt()


def sigma_bound_sq(opacities: Tensor) -> Tensor:
    """[N] k^2 = 2 ln(255 opacity): the Mahalanobis distance squared beyond which alpha < 1/255 (negative:
    never visible). No gradient."""
    with torch.no_grad():
        return 2.0 * torch.log(opacities.clamp(min=1e-30) / ALPHA_THRESHOLD)


def ray_response(mu: Tensor, A: Tensor, origins: Tensor, dirs: Tensor, kind: int) -> tuple[Tensor, Tensor]:
    """(t* [...], m* [...]) of primitives (mu [..., 3], A [..., 3, 3]) along rays (origins, dirs [..., 3],
    broadcast together); see the module docstring. Surfels hit edge-on get t* = nan-free 0 and m* = inf."""
    op = (A @ (origins - mu)[..., None])[..., 0]
    dp = (A @ dirs[..., None])[..., 0]
    if kind == GAUSSIAN:
        dd = (dp * dp).sum(-1)
        t = -(op * dp).sum(-1) / dd
        r = op + t[..., None] * dp
        return t, (r * r).sum(-1)
    dw = dp[..., 2]
    hit = dw != 0
    safe = torch.where(hit, dw, torch.ones_like(dw))
    t = torch.where(hit, -op[..., 2] / safe, torch.zeros_like(dw))
    uv = op[..., :2] + t[..., None] * dp[..., :2]
    m = (uv * uv).sum(-1)
    return t, torch.where(hit, m, torch.full_like(m, math.inf))


def response_alpha(opacities: Tensor, m: Tensor) -> Tensor:
    """alpha = min(ALPHA_MAX, opacity exp(-m / 2)), 0 where below ALPHA_THRESHOLD (same shapes)."""
    alpha = torch.clamp_max(opacities * torch.exp(-0.5 * m), ALPHA_MAX)
    return torch.where(alpha >= ALPHA_THRESHOLD, alpha, torch.zeros_like(alpha))
