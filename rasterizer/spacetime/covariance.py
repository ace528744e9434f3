"""4D covariances and their conditioning on time (the time-independent half of slicing).

Sigma4 = R S S^T R^T with R = L(q_l) R(q_r) (:mod:`.rotation`) and S = diag(scales4), axes
(x, y, z, t). Conditioning the 4D Gaussian on a time t gives a 3D Gaussian with

    mean3(t) = mu_xyz + v (t - mu_t),   v = Sigma_xyz,t / Sigma_tt   (the velocity, [N, 3])
    Sigma3   = Sigma_xyz,xyz - Sigma_xyz,t Sigma_t,xyz / Sigma_tt       (independent of t)

and a temporal factor exp(-0.5 (t - mu_t)^2 / Sigma_tt) (:mod:`.slicing` applies these at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .rotation import BILINEAR, rotmat4_from_quats


def covariance_4d(quats_left: Tensor, quats_right: Tensor, scales4: Tensor) -> Tensor:
    """Sigma4 = R S S^T R^T [N, 4, 4] from quaternions [N, 4] (any non-zero norm) and activated
    scales [N, 4] (x, y, z, t). The plain definition; slicing uses :func:`condition_on_time`."""
    m = rotmat4_from_quats(quats_left, quats_right) * scales4[:, None, :]
    return m @ m.transpose(-1, -2)


@dataclass(frozen=True)
class TimeConditioned:
    """The time-independent part of slicing N 4D Gaussians: covars [N, 3, 3] (Sigma3, symmetric),
    velocities [N, 3] (Sigma_xyz,t / Sigma_tt: world units per unit time) and time_variances [N]
    (Sigma_tt). Same dtype and device as the inputs; differentiable."""

    covars: Tensor
    velocities: Tensor
    time_variances: Tensor


# the 6 distinct entries of a symmetric 3x3 as (row, column) pairs (00, 01, 02, 11, 12, 22), and entry
# (i, j), row-major, as its position among them
_FIRST = (0, 0, 0, 1, 1, 2)
_SECOND = (0, 1, 2, 1, 2, 2)
_SYM3 = (0, 1, 2, 1, 3, 4, 2, 4, 5)


def _index(values, device) -> Tensor:
    return torch.tensor(values, device=device)


def _scaled_rotation_rows(quats_left: Tensor, quats_right: Tensor, scales4: Tensor, first_row: int = 0) -> Tensor:
    """Rows ``first_row``..3 of M = R S, one component per row: [(4 - first_row) * 4, N] (row 4 i + k is
    M_ik = R_ik s_k). Quaternions [N, 4] any non-zero norm, scales [N, 4].

    R comes from the unnormalised quaternions' 16 products and :data:`BILINEAR` (one small matrix
    product), the normalisation q / max(|q|, 1e-12) folded into the scales: L(a) R(p) is bilinear, so
    R(a / |a|, p / |p|) = R(a, p) / (|a| |p|). The [N, 4] inputs become rows by ``stack(unbind)``
    (``.T.contiguous()`` copies several times slower here)."""
    n = scales4.shape[0]
    cols = torch.stack([*quats_left.unbind(-1), *quats_right.unbind(-1), *scales4.unbind(-1)])  # [12, N]
    a, p, s = cols[0:4], cols[4:8], cols[8:12]
    inv = torch.rsqrt((cols[0:8] * cols[0:8]).reshape(2, 4, n).sum(1).clamp_min(1e-24))  # [2, N]: 1 / |q|
    inv = inv[0] * inv[1]
    products = (a[:, None, :] * p[None, :, :]).reshape(16, n)
    rot = _table(scales4)[4 * first_row:] @ products  # [(4 - first_row) * 4, N]
    return (rot.reshape(4 - first_row, 4, n) * (s * inv)[None]).reshape(4 * (4 - first_row), n)


def _table(x: Tensor) -> Tensor:
    return BILINEAR.to(device=x.device, dtype=x.dtype)


def time_variances(quats_left: Tensor, quats_right: Tensor, scales4: Tensor) -> Tensor:
    """Sigma_tt [N] alone (what culling needs): the squared norm of row t of R S."""
    m_t = _scaled_rotation_rows(quats_left, quats_right, scales4, first_row=3)  # [4, N]
    return (m_t * m_t).sum(0)


def condition_on_time(quats_left: Tensor, quats_right: Tensor, scales4: Tensor) -> TimeConditioned:
    """Sigma3, velocity and Sigma_tt of N 4D Gaussians (quaternions [N, 4], any non-zero norm;
    activated scales [N, 4]), without forming Sigma4.

    With M = R S (rows m_x, m_y, m_z, m_t; Sigma4 = M M^T) and u = m_t / |m_t|: Sigma_tt = |m_t|^2,
    Sigma_it = m_i . m_t, and the Schur complement Sigma3 = Sigma_xyz - Sigma_xyz,t Sigma_t,xyz / Sigma_tt
    = P P^T with P = M_xyz (I - u u^T), the rows of M_xyz with their component along u removed. As a
    Gram matrix it stays positive semi-definite in float32 where the subtraction does not (a long,
    thin Gaussian tilted in time: spatial scales 1e-4 of the time scale made most float32 Schur
    complements indefinite).

    Computed one component per row ([k, N] tensors: every operation streams contiguous memory) and in
    few, large operations (:func:`_scaled_rotation_rows`); no batched 4x4 matmul and no advanced
    indexing (index_select only): PyTorch runs those several times slower here (rasterizer/DESIGN.md,
    4D Gaussians).
    """
    n, dev = scales4.shape[0], scales4.device
    m = _scaled_rotation_rows(quats_left, quats_right, scales4).reshape(4, 4, n)
    m_xyz, m_t = m[:3], m[3]
    time_var = (m_t * m_t).sum(0)
    inv_sd = torch.rsqrt(time_var)
    u = m_t * inv_sd  # [4, N]
    cross = (m_xyz * m_t[None]).sum(1)  # [3, N]: Sigma_xt, Sigma_yt, Sigma_zt
    proj = m_xyz - (cross * inv_sd)[:, None] * u[None]  # [3, 4, N]: P's rows
    sym6 = (proj.index_select(0, _index(_FIRST, dev)) * proj.index_select(0, _index(_SECOND, dev))).sum(1)
    covars = sym6.index_select(0, _index(_SYM3, dev)).T.reshape(n, 3, 3)
    velocities = (cross / time_var).T
    return TimeConditioned(covars=covars, velocities=velocities, time_variances=time_var)


def temporal_factor(dt: Tensor, time_variances: Tensor) -> Tensor:
    """exp(-0.5 dt^2 / Sigma_tt), elementwise ([N] each): the marginal of the 4D Gaussian at time
    mu_t + dt relative to its peak."""
    return torch.exp(-0.5 * dt * dt / time_variances)
