"""Numba kernels of the fused grid encoding + Gaussian RBF layer + read-out (:mod:`recon.nerf.grid_rbf`).

The threads take contiguous ranges of points, BLOCK points at a time. A block's grid features [BLOCK, D] are
interpolated into a scratch block that stays in the cache (level by level, the rows of
:func:`recon.nerf.hash_encoding.level_features`, the encoding kernel's own loop: the same sums in the same order) and are
never written out. The layer runs on the block as small matrix products (BLAS through Numba's ``np.dot``), the
quadratic form expanded as in :func:`recon.nerf.rbf.rbf_matmul`, with s2 = s^2 [K, D]:

    q   = (f * f) s2^T - 2 f (s2 c)^T + sum_d s2 c^2      [B, K], clamped at 0 (a sum of squares)
    phi = exp(-q),   y = phi W^T + b                       [B, O]

Forward writes y and phi [N, K] (kept for the backward: one number per neuron, not per feature). Backward, with
T = -2 (grad_y W) * phi [B, K] (the t_k of recon/nerf/rbf.py):

    dL/df      = f * (T s2) - T (s2 c)                     [B, D]
    dL/dc      = -s2 * (T^T f - c sum_n T)                 [K, D]  (sums over the points of every block)
    dL/drho    =  s2 * (T^T f^2 - 2 c T^T f + c^2 sum_n T) [K, D]
    dL/dW      =  grad_y^T phi                             [O, K]

The sums over points are per-thread accumulators reduced in thread order (the result does not depend on the
scheduling). dL/df [N, D] is then scattered into the grid's gradient by the encoding's backward kernel
(:func:`recon.nerf.hash_encoding._backward_kernel`: levels dealt to the threads, no colliding adds): the features
are never stored, their gradient is (the scatter needs every point's before any row is final). The blocks' matrix
products run in the table's dtype (float32: single-precision BLAS, the precision of the PyTorch paths), the sums
over blocks and threads in float64.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from recon.nerf.hash_encoding import CHUNK, level_features

BLOCK = 8 * CHUNK  # points per block of matrix products


@njit(cache=True)
def _scratch():
    """A thread's scratch for :func:`_block_features`: ``rows`` [CHUNK, 8] int64 and ``weights`` [CHUNK, 8]."""
    return np.empty((CHUNK, 8), np.int64), np.empty((CHUNK, 8))


@njit(cache=True)
def _block_features(x, lo, hi, table, resolutions, offsets, rows, weights):
    """feat [hi - lo, L F] in the table's dtype = the grid features of points x[lo:hi] (level-major, as the
    encoding's output): the encoding's own loop (:func:`recon.nerf.hash_encoding.level_features`) level after
    level; ``rows`` and ``weights`` are a thread's :func:`_scratch`."""
    F = table.shape[1]
    feat = np.empty((hi - lo, resolutions.shape[0] * F), table.dtype)
    for level in range(resolutions.shape[0]):
        level_features(x, lo, hi, table, resolutions, offsets, level, rows, weights, feat, level * F)
    return feat


EXP_Q_MAX = 64.0  # activations exp(-q) for q beyond this are taken as exp(-64) = 1.6e-28


@njit(cache=True, inline="always")
def _exp_neg(q):
    """exp(-q) for q >= 0 by exp(-q / 128) (Taylor, Horner, 14 terms) squared seven times (q clamped to
    EXP_Q_MAX). Straight-line arithmetic only (no inner loop, no call), so a loop of it vectorises: Numba's
    math.exp is one scalar call per value without Intel's SVML, and the exponentials were most of the layer's
    time; relative error < 1e-12 (tests/recon/nerf/test_grid_rbf.py)."""
    y = -min(q, EXP_Q_MAX) * (1.0 / 128.0)
    e = 1.0 + y * (1.0 / 13.0)
    e = 1.0 + y * (1.0 / 12.0) * e
    e = 1.0 + y * (1.0 / 11.0) * e
    e = 1.0 + y * (1.0 / 10.0) * e
    e = 1.0 + y * (1.0 / 9.0) * e
    e = 1.0 + y * (1.0 / 8.0) * e
    e = 1.0 + y * (1.0 / 7.0) * e
    e = 1.0 + y * (1.0 / 6.0) * e
    e = 1.0 + y * (1.0 / 5.0) * e
    e = 1.0 + y * (1.0 / 4.0) * e
    e = 1.0 + y * (1.0 / 3.0) * e
    e = 1.0 + y * (1.0 / 2.0) * e
    e = 1.0 + y * e
    e = e * e  # seven squarings: exp(y)^128
    e = e * e
    e = e * e
    e = e * e
    e = e * e
    e = e * e
    return e * e


@njit(cache=True)
def _block_activations(feat, a, b, const):
    """phi [B, K] = exp(-max(q, 0)) with q = (f * f) a + f b + const (a = s2^T, b = -2 (s2 c)^T [D, K])."""
    q = np.dot(feat * feat, a) + np.dot(feat, b)
    B, K = q.shape
    for i in range(B):
        for k in range(K):
            q[i, k] = _exp_neg(max(q[i, k] + const[k], 0.0))
    return q


@njit(cache=True, parallel=True)
def grid_rbf_forward_kernel(x, table, resolutions, offsets, centres, s, weight, bias, threads, phi, out):
    """out [N, O] and phi [N, K] of the RBF layer (``centres``, ``s`` = exp(log_precision) [K, D], ``weight``
    [O, K], ``bias`` [O], in the table's dtype; ``phi`` [N, K] or [0, K] when not wanted) on the grid features of
    points x [N, 3] in [0, 1]^3 (clamped), ``table``
    [P, F] laid out by ``resolutions`` [L] and ``offsets`` [L + 1]; D = L F."""
    N = x.shape[0]
    keep = phi.shape[0] == N  # an empty phi: not kept (no backward to come)
    s2 = s * s
    a = np.ascontiguousarray(s2.T)
    b = np.ascontiguousarray((-2.0 * s2 * centres).T).astype(s.dtype)
    const = (s2 * centres * centres).sum(axis=1)
    weight_t = np.ascontiguousarray(weight.T)
    for t in prange(threads):
        rows, weights = _scratch()
        end = (t + 1) * N // threads
        for lo in range(t * N // threads, end, BLOCK):
            hi = min(lo + BLOCK, end)
            feat = _block_features(x, lo, hi, table, resolutions, offsets, rows, weights)
            p = _block_activations(feat, a, b, const)
            y = np.dot(p, weight_t)
            for i in range(hi - lo):
                if keep:
                    for k in range(p.shape[1]):
                        phi[lo + i, k] = p[i, k]
                for o in range(y.shape[1]):
                    out[lo + i, o] = y[i, o] + bias[o]


@njit(cache=True, parallel=True)
def grid_rbf_layer_backward_kernel(x, table, resolutions, offsets, centres, s, weight, phi, grad_out, threads,
                                   grad_feat, grad_c, grad_rho, grad_w):
    """The layer's part of the backward (module docstring): grad_feat [N, D] = dL/df, grad_c, grad_rho [K, D],
    grad_w [O, K] (overwritten) for grad_out [N, O] float64 and the forward's ``phi`` [N, K]."""
    N = x.shape[0]
    K, D = centres.shape
    O = weight.shape[0]
    s2 = s * s
    s2c = s2 * centres
    acc_tf = np.zeros((threads, K, D))
    acc_tf2 = np.zeros((threads, K, D))
    acc_t = np.zeros((threads, K))
    acc_w = np.zeros((threads, O, K))
    for t in prange(threads):
        rows, weights = _scratch()
        end = (t + 1) * N // threads
        for lo in range(t * N // threads, end, BLOCK):
            hi = min(lo + BLOCK, end)
            feat = _block_features(x, lo, hi, table, resolutions, offsets, rows, weights)
            p = np.empty((hi - lo, K), table.dtype)
            for i in range(hi - lo):
                for k in range(K):
                    p[i, k] = phi[lo + i, k]
            go = np.ascontiguousarray(grad_out[lo:hi])
            tt = (-2.0 * np.dot(go, weight) * p).astype(p.dtype)
            acc_w[t] += np.dot(go.T.copy(), p)
            gf = feat * np.dot(tt, s2) - np.dot(tt, s2c)
            grad_feat[lo:hi] = gf
            tt_t = np.ascontiguousarray(tt.T)
            acc_tf[t] += np.dot(tt_t, feat)
            acc_tf2[t] += np.dot(tt_t, feat * feat)
            acc_t[t] += tt.sum(axis=0)
    tf = np.zeros((K, D))
    tf2 = np.zeros((K, D))
    tsum = np.zeros(K)
    grad_w[:] = 0.0
    for t in range(threads):  # in thread order
        tf += acc_tf[t]
        tf2 += acc_tf2[t]
        tsum += acc_t[t]
        grad_w += acc_w[t]
    for k in range(K):
        for d in range(D):
            c = centres[k, d]
            grad_c[k, d] = -s2[k, d] * (tf[k, d] - c * tsum[k])
            grad_rho[k, d] = s2[k, d] * (tf2[k, d] - 2.0 * c * tf[k, d] + c * c * tsum[k])
