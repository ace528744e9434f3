"""4D covariances and their conditioning on time (the time-independent half of slicing).

Sigma4 = R S S^T R^T with R = L(q_l) R(q_r) (:mod:`.rotation`) and S = diag(scales4), axes
(x, y, z, t). Conditioning the 4D Gaussian on a time t gives a 3D Gaussian with

    mean3(t) = mu_xyz + v (t - mu_t),   v = Sigma_xyz,t / Sigma_tt   (the velocity, [N, 3])
    Sigma3   = Sigma_xyz,xyz - Sigma_xyz,t Sigma_t,xyz / Sigma_tt       (independent of t)

and a temporal factor exp(-0.5 (t - mu_t)^2 / Sigma_tt) (:mod:`.slicing` applies these at a time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

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


def _table(x: Tensor) -> Tensor:
    return BILINEAR.to(device=x.device, dtype=x.dtype)


class _RotationParts(NamedTuple):
    """Intermediates of M = R S, one component per row: a, p [4, N] the raw quaternions, s [4, N] the
    scales, norm2 [2, N] |q_l|^2 and |q_r|^2 clamped at 1e-24, ``active`` [2, N] 1 where not clamped
    (else 0), inv [N] 1 / (|q_l| |q_r|), rot [k, 4, N] rows of R(q_l, q_r) from the raw quaternions,
    scaled [4, N] s * inv, m [k, 4, N] rows of M."""

    a: Tensor
    p: Tensor
    s: Tensor
    norm2: Tensor
    active: Tensor
    inv: Tensor
    rot: Tensor
    scaled: Tensor
    m: Tensor


def _rotation_parts(quats_left: Tensor, quats_right: Tensor, scales4: Tensor, first_row: int = 0) -> _RotationParts:
    """Rows ``first_row``..3 of M = R S (M_ik = R_ik s_k) for quaternions [N, 4] (any non-zero norm)
    and scales [N, 4].

    R comes from the raw quaternions' 16 products and :data:`BILINEAR` (one small matrix product), the
    normalisation q / max(|q|, 1e-12) folded into the scales: L(a) R(p) is bilinear, so
    R(a / |a|, p / |p|) = R(a, p) / (|a| |p|). The [N, 4] inputs become rows by ``stack(unbind)``
    (``.T.contiguous()`` copies several times slower here)."""
    n = scales4.shape[0]
    cols = torch.stack([*quats_left.unbind(-1), *quats_right.unbind(-1), *scales4.unbind(-1)])  # [12, N]
    a, p, s = cols[0:4], cols[4:8], cols[8:12]
    raw2 = (cols[0:8] * cols[0:8]).reshape(2, 4, n).sum(1)
    norm2 = raw2.clamp_min(1e-24)
    inv = torch.rsqrt(norm2)
    inv = inv[0] * inv[1]
    products = (a[:, None, :] * p[None, :, :]).reshape(16, n)
    rot = (_table(scales4)[4 * first_row:] @ products).reshape(4 - first_row, 4, n)
    scaled = s * inv
    return _RotationParts(a, p, s, norm2, (raw2 > 1e-24).to(s.dtype), inv, rot, scaled, rot * scaled[None])


def time_variances(quats_left: Tensor, quats_right: Tensor, scales4: Tensor) -> Tensor:
    """Sigma_tt [N] alone (what culling needs): the squared norm of row t of M = R S. CPU float tensors
    without gradient go through the fused kernel (:func:`.cpu_kernels.time_variances_cpu`)."""
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (quats_left, quats_right, scales4))
    if quats_left.device.type == "cpu" and scales4.dtype in (torch.float32, torch.float64) and not needs_grad:
        from .cpu_kernels import time_variances_cpu

        return time_variances_cpu(quats_left, quats_right, scales4)
    m_t = _rotation_parts(quats_left, quats_right, scales4, first_row=3).m[0]  # [4, N]
    return (m_t * m_t).sum(0)


def _condition_rows(m: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(Sigma3 [N, 3, 3], velocities [3, N], Sigma_tt [N]) from M's rows m [4, 4, N] (the formulas of
    :func:`condition_on_time`)."""
    n, dev = m.shape[2], m.device
    m_xyz, m_t = m[:3], m[3]
    time_var = (m_t * m_t).sum(0)
    inv_sd = torch.rsqrt(time_var)
    u = m_t * inv_sd  # [4, N]
    cross = (m_xyz * m_t[None]).sum(1)  # [3, N]: Sigma_xt, Sigma_yt, Sigma_zt
    proj = m_xyz - (cross * inv_sd)[:, None] * u[None]  # [3, 4, N]: P's rows
    sym6 = (proj.index_select(0, _index(_FIRST, dev)) * proj.index_select(0, _index(_SECOND, dev))).sum(1)
    covars = sym6.index_select(0, _index(_SYM3, dev)).T.reshape(n, 3, 3)
    return covars, cross / time_var, time_var


CONDITIONING_BACKENDS = ("auto", "cpu", "torch")


def condition_on_time(quats_left: Tensor, quats_right: Tensor, scales4: Tensor, *,
                      backend: str = "auto") -> TimeConditioned:
    """Sigma3, velocity and Sigma_tt of N 4D Gaussians (quaternions [N, 4], any non-zero norm;
    activated scales [N, 4]), without forming Sigma4.

    With M = R S (rows m_x, m_y, m_z, m_t; Sigma4 = M M^T) and u = m_t / |m_t|: Sigma_tt = |m_t|^2,
    Sigma_it = m_i . m_t, and the Schur complement Sigma3 = Sigma_xyz - Sigma_xyz,t Sigma_t,xyz / Sigma_tt
    = P P^T with P = M_xyz (I - u u^T), the rows of M_xyz with their component along u removed. As a
    Gram matrix it stays positive semi-definite in float32 where the subtraction does not (a long,
    thin Gaussian tilted in time: spatial scales 1e-4 of the time scale made most float32 Schur
    complements indefinite).

    Computed one component per row ([k, N] tensors: every operation streams contiguous memory) and in
    few, large operations (:func:`_rotation_parts`); no batched 4x4 matmul and no advanced indexing
    (index_select only): PyTorch runs those several times slower here (rasterizer/DESIGN.md, 4D
    Gaussians). The backward is hand-written (:class:`_ConditionOnTime`);
    :func:`condition_on_time_reference` is the same with autograd, and the tests hold them together.

    backend: "torch" (the above, any device), "cpu" (:mod:`.cpu_kernels`: the same formulas fused in Numba
    kernels, float32/float64 CPU tensors; about 2x faster), "auto" (cpu for CPU float tensors, else torch).
    """
    if backend not in CONDITIONING_BACKENDS:
        raise ValueError(f"condition_on_time: backend must be one of {CONDITIONING_BACKENDS}, got {backend!r}")
    on_cpu = quats_left.device.type == "cpu" and scales4.dtype in (torch.float32, torch.float64)
    if backend == "cpu" and not on_cpu:
        raise ValueError(f"condition_on_time: backend 'cpu' needs float32/float64 CPU tensors, got "
                         f"{scales4.dtype} on {scales4.device}")
    if backend == "cpu" or (backend == "auto" and on_cpu):
        from .cpu_kernels import condition_on_time_cpu

        covars, velocities, time_var = condition_on_time_cpu(quats_left, quats_right, scales4)
        return TimeConditioned(covars=covars, velocities=velocities, time_variances=time_var)
    covars, velocities, time_var = _ConditionOnTime.apply(quats_left, quats_right, scales4)
    return TimeConditioned(covars=covars, velocities=velocities, time_variances=time_var)


def condition_on_time_reference(quats_left: Tensor, quats_right: Tensor, scales4: Tensor) -> TimeConditioned:
    """:func:`condition_on_time` differentiated by PyTorch's autograd (the reference of its backward)."""
    covars, velocities, time_var = _condition_rows(_rotation_parts(quats_left, quats_right, scales4).m)
    return TimeConditioned(covars=covars, velocities=velocities.T, time_variances=time_var)


class _ConditionOnTime(torch.autograd.Function):
    """The forward of :func:`condition_on_time_reference` with a hand-written backward: fewer, larger
    operations than autograd's (conditioning + backward of 165k Gaussians ~30% faster). Not twice
    differentiable."""

    @staticmethod
    def forward(ctx, quats_left: Tensor, quats_right: Tensor, scales4: Tensor):
        parts = _rotation_parts(quats_left, quats_right, scales4)
        covars, velocities, time_var = _condition_rows(parts.m)
        ctx.save_for_backward(parts.a, parts.p, parts.s, parts.norm2, parts.active, parts.inv, parts.rot,
                              parts.scaled, parts.m, time_var, velocities)
        return covars, velocities.T, time_var

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_covars, grad_velocities, grad_time_var):
        """With Gs the symmetric part of d/dSigma3 and v the velocity: d/dSigma_xyz = Gs,
        d/dSigma_xyz,t = -2 Gs v + g_v / Sigma_tt, d/dSigma_tt = v' Gs v - g_v . v / Sigma_tt + g_tt.
        With S-bar the symmetric 4x4 of these (the cross terms halved on both sides), d/dM = 2 S-bar M;
        then M = R(a, p) s / (|a| |p|) and R = BILINEAR (a p^T)."""
        a, p, s, norm2, active, inv, rot, scaled, m, time_var, vel = ctx.saved_tensors
        n = time_var.shape[0]
        sbar = m.new_zeros(4, 4, n)
        if grad_covars is not None:
            g = torch.stack(grad_covars.reshape(n, 9).unbind(-1)).reshape(3, 3, n)
            sbar[:3, :3] = 0.5 * (g + g.transpose(0, 1))
        gs_v = (sbar[:3, :3] * vel[None]).sum(1)  # [3, N]: Gs v
        grad_cross = -2.0 * gs_v
        grad_tt = (vel * gs_v).sum(0)
        if grad_velocities is not None:
            g_v = torch.stack(grad_velocities.unbind(-1)) / time_var  # [3, N]: g_v / Sigma_tt
            grad_cross = grad_cross + g_v
            grad_tt = grad_tt - (g_v * vel).sum(0)
        if grad_time_var is not None:
            grad_tt = grad_tt + grad_time_var
        sbar[:3, 3] = 0.5 * grad_cross
        sbar[3, :3] = 0.5 * grad_cross
        sbar[3, 3] = grad_tt
        grad_m = sbar[:, 0, None, :] * m[0][None]  # [4, 4, N]: S-bar M, doubled below
        for j in range(1, 4):
            grad_m.addcmul_(sbar[:, j, None, :], m[j][None])
        grad_m *= 2.0
        grad_scaled = (grad_m * rot).sum(0)  # [4, N]
        grad_inv = (grad_scaled * s).sum(0)
        grad_products = (_table(s).T @ (grad_m * scaled[None]).reshape(16, n)).reshape(4, 4, n)
        grad_a = (grad_products * p[None]).sum(1)
        grad_p = (grad_products * a[:, None]).sum(0)
        k = -grad_inv * inv * active / norm2  # [2, N]: d inv / d q = -inv q / |q|^2 (0 where clamped)
        return (grad_a + k[0] * a).T, (grad_p + k[1] * p).T, (grad_scaled * inv).T


def temporal_factor(dt: Tensor, time_variances: Tensor) -> Tensor:
    """exp(-0.5 dt^2 / Sigma_tt), elementwise ([N] each): the marginal of the 4D Gaussian at time
    mu_t + dt relative to its peak."""
    return torch.exp(-0.5 * dt * dt / time_variances)
