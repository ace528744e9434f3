"""Conditioning 4D Gaussians on time on the CPU: fused Numba kernels, forward and hand-written backward.

Drop-in for :func:`rasterizer.spacetime.covariance.condition_on_time` on CPU tensors (same signature and
formulas, see the docstring there): R = L(a) R(p) / (|a| |p|) from the raw quaternions (|q|^2 clamped at
1e-24), M = R diag(s), Sigma_tt = |m_t|^2, Sigma_it = m_i . m_t, Sigma3 = P P^T with
P = M_xyz - (Sigma_xyz,t / Sigma_tt) m_t^T, velocity Sigma_xyz,t / Sigma_tt. The backward recomputes the
forward per Gaussian (only the inputs are saved) and applies covariance.py's ``_ConditionOnTime.backward``.

Layout: Gaussians are processed in blocks of :data:`BLOCK`, every intermediate a row [BLOCK] of a per-block
scratch array (structure of arrays), and every step a loop over the block: LLVM vectorises those loops,
and the intermediates stay in cache instead of being streamed through memory as PyTorch's [k, N] rows are.
(A per-Gaussian scalar kernel was tried first: no faster than PyTorch, rasterizer/DESIGN.md.) Arithmetic in
float64 whatever the storage dtype; blocks run in parallel (``prange``) under
:data:`rasterizer.cpu.launch.KERNEL_LOCK`.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..cpu.launch import KERNEL_LOCK, kernel_array
from .rotation import LEFT_INDEX, LEFT_SIGN, RIGHT_INDEX, RIGHT_SIGN

BLOCK = 256  # Gaussians per work item
NORM2_MIN = 1e-24  # |q|^2 clamp, as covariance.py (|q| >= 1e-12)


def _product_terms() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rot[i, j] = sum over 4 terms t of sign * a[ia] * p[ip]: arrays [16, 4] (entry 4 i + j) of ia, ip, sign,
    from L(a)[i, k] = LEFT_SIGN[i][k] a[LEFT_INDEX[i][k]] and R(p)[k, j] likewise."""
    ia, ip, sign = np.zeros((16, 4), np.int64), np.zeros((16, 4), np.int64), np.zeros((16, 4))
    for i in range(4):
        for j in range(4):
            for k in range(4):
                ia[4 * i + j, k] = LEFT_INDEX[i][k]
                ip[4 * i + j, k] = RIGHT_INDEX[k][j]
                sign[4 * i + j, k] = LEFT_SIGN[i][k] * RIGHT_SIGN[k][j]
    return ia, ip, sign


TERM_A, TERM_P, TERM_SIGN = _product_terms()

# scratch rows of one block (structure of arrays)
A, P, S = 0, 4, 8  # raw quaternions and scales, 4 rows each
ROT, M = 12, 28  # L(a) R(p) and M = rot s inv, 16 rows each (entry 4 i + j)
NA2, NP2, INV, ACT_A, ACT_P, TV = 44, 45, 46, 47, 48, 49
VEL = 50  # 3 rows
FORWARD_ROWS = 53


@njit(cache=True, fastmath=True)
def _forward_block(x, n, term_a, term_p, term_sign):
    """Rows of scratch x [rows, BLOCK] for its first n Gaussians (A, P, S loaded): norms, rot, M, Sigma_tt and
    velocities."""
    for b in range(n):
        na2 = x[A, b] * x[A, b] + x[A + 1, b] * x[A + 1, b] + x[A + 2, b] * x[A + 2, b] + x[A + 3, b] * x[A + 3, b]
        np2 = x[P, b] * x[P, b] + x[P + 1, b] * x[P + 1, b] + x[P + 2, b] * x[P + 2, b] + x[P + 3, b] * x[P + 3, b]
        x[ACT_A, b] = 1.0 if na2 > NORM2_MIN else 0.0
        x[ACT_P, b] = 1.0 if np2 > NORM2_MIN else 0.0
        x[NA2, b] = max(na2, NORM2_MIN)
        x[NP2, b] = max(np2, NORM2_MIN)
        x[INV, b] = 1.0 / np.sqrt(x[NA2, b]) / np.sqrt(x[NP2, b])
    for e in range(16):
        for b in range(n):
            x[ROT + e, b] = 0.0
        for t in range(4):
            ra, rp, sg = A + term_a[e, t], P + term_p[e, t], term_sign[e, t]
            for b in range(n):
                x[ROT + e, b] += sg * x[ra, b] * x[rp, b]
        col = e % 4
        for b in range(n):
            x[M + e, b] = x[ROT + e, b] * x[S + col, b] * x[INV, b]
    for b in range(n):
        x[TV, b] = x[M + 12, b] ** 2 + x[M + 13, b] ** 2 + x[M + 14, b] ** 2 + x[M + 15, b] ** 2
    for i in range(3):
        for b in range(n):
            cross = (x[M + 4 * i, b] * x[M + 12, b] + x[M + 4 * i + 1, b] * x[M + 13, b]
                     + x[M + 4 * i + 2, b] * x[M + 14, b] + x[M + 4 * i + 3, b] * x[M + 15, b])
            x[VEL + i, b] = cross / x[TV, b]


@njit(cache=True, fastmath=True)
def _load_block(ql, qr, s4, start, n, x):
    for b in range(n):
        for k in range(4):
            x[A + k, b] = ql[start + b, k]
            x[P + k, b] = qr[start + b, k]
            x[S + k, b] = s4[start + b, k]


@njit(parallel=True, cache=True, fastmath=True)
def condition_forward_kernel(ql, qr, s4, term_a, term_p, term_sign, covars, velocities, time_vars):
    """covars [N, 3, 3], velocities [N, 3], time_vars [N] (any float dtype) of quaternions/scales [N, 4]."""
    N = ql.shape[0]
    for blk in prange((N + BLOCK - 1) // BLOCK):
        x = np.empty((FORWARD_ROWS + 12, BLOCK))
        start = blk * BLOCK
        n = min(N, start + BLOCK) - start
        _load_block(ql, qr, s4, start, n, x)
        _forward_block(x, n, term_a, term_p, term_sign)
        proj = FORWARD_ROWS  # 12 rows: P = M_xyz - v m_t^T (P's rows, entry 4 i + k)
        for i in range(3):
            for k in range(4):
                for b in range(n):
                    x[proj + 4 * i + k, b] = x[M + 4 * i + k, b] - x[VEL + i, b] * x[M + 12 + k, b]
        for i in range(3):
            for j in range(i, 3):
                for b in range(n):
                    acc = (x[proj + 4 * i, b] * x[proj + 4 * j, b] + x[proj + 4 * i + 1, b] * x[proj + 4 * j + 1, b]
                           + x[proj + 4 * i + 2, b] * x[proj + 4 * j + 2, b]
                           + x[proj + 4 * i + 3, b] * x[proj + 4 * j + 3, b])
                    covars[start + b, i, j] = acc
                    covars[start + b, j, i] = acc
        for b in range(n):
            time_vars[start + b] = x[TV, b]
            for i in range(3):
                velocities[start + b, i] = x[VEL + i, b]


# backward scratch rows, after the forward's
SBAR = FORWARD_ROWS  # 16 rows: S-bar (entry 4 r + c)
GROT = SBAR + 16  # 16 rows: d/drot
GSC = GROT + 16  # 4 rows: d/d(scaled)
GA, GP = GSC + 4, GSC + 8  # 4 rows each
BACKWARD_ROWS = GP + 4


@njit(parallel=True, cache=True, fastmath=True)
def condition_backward_kernel(ql, qr, s4, g_cov, g_vel, g_tv, term_a, term_p, term_sign, grad_ql, grad_qr,
                              grad_s4):
    """Gradients [N, 4] of the quaternions and scales from the cotangents g_cov [N, 3, 3], g_vel [N, 3] and
    g_tv [N] (zeros where an output got none)."""
    N = ql.shape[0]
    for blk in prange((N + BLOCK - 1) // BLOCK):
        x = np.empty((BACKWARD_ROWS, BLOCK))
        start = blk * BLOCK
        n = min(N, start + BLOCK) - start
        _load_block(ql, qr, s4, start, n, x)
        _forward_block(x, n, term_a, term_p, term_sign)
        # S-bar: d/dSigma4 with the cross terms halved on both sides (covariance.py's backward)
        for i in range(3):
            for j in range(3):
                for b in range(n):
                    x[SBAR + 4 * i + j, b] = 0.5 * (g_cov[start + b, i, j] + g_cov[start + b, j, i])
        for b in range(n):
            x[SBAR + 15, b] = g_tv[start + b]
        for i in range(3):
            for b in range(n):
                gs_v = (x[SBAR + 4 * i, b] * x[VEL, b] + x[SBAR + 4 * i + 1, b] * x[VEL + 1, b]
                        + x[SBAR + 4 * i + 2, b] * x[VEL + 2, b])
                g_v = g_vel[start + b, i] / x[TV, b]
                x[SBAR + 15, b] += x[VEL + i, b] * (gs_v - g_v)
                x[SBAR + 4 * i + 3, b] = 0.5 * g_v - gs_v
                x[SBAR + 12 + i, b] = x[SBAR + 4 * i + 3, b]
        # d/dM = 2 S-bar M; d/drot = d/dM s inv; d/d(scaled) = sum over rows of d/dM rot
        for c in range(4):
            for b in range(n):
                x[GSC + c, b] = 0.0
        for r in range(4):
            for c in range(4):
                for b in range(n):
                    gm = 2.0 * (x[SBAR + 4 * r, b] * x[M + c, b] + x[SBAR + 4 * r + 1, b] * x[M + 4 + c, b]
                                + x[SBAR + 4 * r + 2, b] * x[M + 8 + c, b] + x[SBAR + 4 * r + 3, b] * x[M + 12 + c, b])
                    x[GROT + 4 * r + c, b] = gm * x[S + c, b] * x[INV, b]
                    x[GSC + c, b] += gm * x[ROT + 4 * r + c, b]
        # rot[e] = sum_t sign a[ia] p[ip]
        for k in range(4):
            for b in range(n):
                x[GA + k, b] = 0.0
                x[GP + k, b] = 0.0
        for e in range(16):
            for t in range(4):
                ra, rp, sg = term_a[e, t], term_p[e, t], term_sign[e, t]
                for b in range(n):
                    g = sg * x[GROT + e, b]
                    x[GA + ra, b] += g * x[P + rp, b]
                    x[GP + rp, b] += g * x[A + ra, b]
        for b in range(n):
            grad_inv = (x[GSC, b] * x[S, b] + x[GSC + 1, b] * x[S + 1, b] + x[GSC + 2, b] * x[S + 2, b]
                        + x[GSC + 3, b] * x[S + 3, b])
            ka = -grad_inv * x[INV, b] * x[ACT_A, b] / x[NA2, b]  # d inv / d a = -inv a / |a|^2 (0 if clamped)
            kp = -grad_inv * x[INV, b] * x[ACT_P, b] / x[NP2, b]
            for c in range(4):
                grad_ql[start + b, c] = x[GA + c, b] + ka * x[A + c, b]
                grad_qr[start + b, c] = x[GP + c, b] + kp * x[P + c, b]
                grad_s4[start + b, c] = x[GSC + c, b] * x[INV, b]


@njit(parallel=True, cache=True, fastmath=True)
def time_variances_kernel(ql, qr, s4, term_a, term_p, term_sign, out):
    """out [N] = Sigma_tt = |row t of M|^2 (what culling needs; no gradient)."""
    N = ql.shape[0]
    for blk in prange((N + BLOCK - 1) // BLOCK):
        x = np.empty((S + 4 + 5, BLOCK))  # A, P, S rows, then m_t [4] and the normalisation
        start = blk * BLOCK
        n = min(N, start + BLOCK) - start
        _load_block(ql, qr, s4, start, n, x)
        inv = S + 8
        for b in range(n):
            na2 = x[A, b] ** 2 + x[A + 1, b] ** 2 + x[A + 2, b] ** 2 + x[A + 3, b] ** 2
            np2 = x[P, b] ** 2 + x[P + 1, b] ** 2 + x[P + 2, b] ** 2 + x[P + 3, b] ** 2
            x[inv, b] = 1.0 / np.sqrt(max(na2, NORM2_MIN)) / np.sqrt(max(np2, NORM2_MIN))
        for c in range(4):
            e = 12 + c  # row t of rot
            row = S + 4 + c
            for b in range(n):
                x[row, b] = 0.0
            for t in range(4):
                ra, rp, sg = A + term_a[e, t], P + term_p[e, t], term_sign[e, t]
                for b in range(n):
                    x[row, b] += sg * x[ra, b] * x[rp, b]
        for b in range(n):
            acc = 0.0
            for c in range(4):
                m = x[S + 4 + c, b] * x[S + c, b] * x[inv, b]
                acc += m * m
            out[start + b] = acc


def time_variances_cpu(quats_left: Tensor, quats_right: Tensor, scales4: Tensor) -> Tensor:
    """Sigma_tt [N] of CPU float tensors [N, 4], without gradient (the kernel above)."""
    out = torch.empty(scales4.shape[0], dtype=scales4.dtype)
    with KERNEL_LOCK:
        time_variances_kernel(*_arrays(quats_left, quats_right, scales4), TERM_A, TERM_P, TERM_SIGN, out.numpy())
    return out


def _arrays(*tensors: Tensor) -> list[np.ndarray]:
    return [kernel_array(t) for t in tensors]


class _ConditionOnTimeCPU(torch.autograd.Function):
    """:func:`condition_on_time_cpu`'s forward and backward (the Numba kernels). Not twice differentiable."""

    @staticmethod
    def forward(ctx, quats_left: Tensor, quats_right: Tensor, scales4: Tensor):
        n, dtype = scales4.shape[0], scales4.dtype
        covars = torch.empty(n, 3, 3, dtype=dtype)
        velocities = torch.empty(n, 3, dtype=dtype)
        time_vars = torch.empty(n, dtype=dtype)
        with KERNEL_LOCK:
            condition_forward_kernel(*_arrays(quats_left, quats_right, scales4), TERM_A, TERM_P, TERM_SIGN,
                                     covars.numpy(), velocities.numpy(), time_vars.numpy())
        ctx.save_for_backward(quats_left, quats_right, scales4)
        return covars, velocities, time_vars

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_covars, grad_velocities, grad_time_vars):
        ql, qr, s4 = ctx.saved_tensors
        n, dtype = s4.shape[0], s4.dtype
        g_cov = torch.zeros(n, 3, 3, dtype=dtype) if grad_covars is None else grad_covars
        g_vel = torch.zeros(n, 3, dtype=dtype) if grad_velocities is None else grad_velocities
        g_tv = torch.zeros(n, dtype=dtype) if grad_time_vars is None else grad_time_vars
        grads = [torch.empty(n, 4, dtype=dtype) for _ in range(3)]
        with KERNEL_LOCK:
            condition_backward_kernel(*_arrays(ql, qr, s4, g_cov, g_vel, g_tv), TERM_A, TERM_P, TERM_SIGN,
                                      *(g.numpy() for g in grads))
        return tuple(grads)


def condition_on_time_cpu(quats_left: Tensor, quats_right: Tensor, scales4: Tensor
                          ) -> tuple[Tensor, Tensor, Tensor]:
    """(covars [N, 3, 3], velocities [N, 3], time variances [N]) of CPU tensors [N, 4] (float32 or float64),
    differentiable: the Numba kernels above."""
    return _ConditionOnTimeCPU.apply(quats_left, quats_right, scales4)
