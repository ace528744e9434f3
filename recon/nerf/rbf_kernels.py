"""Numba kernels of the Gaussian RBF layer (:mod:`recon.nerf.rbf`: the formulas and their gradients), and the
block steps the fused grid + RBF kernels (:mod:`recon.nerf.grid_rbf_kernels`) share with them.

The threads take contiguous ranges of samples, BLOCK samples at a time, and run the layer on a block as small
matrix products (BLAS through Numba's ``np.dot``, in the features' dtype), the quadratic form expanded as in
:func:`recon.nerf.rbf.rbf_matmul`, with s2 = s^2 [K, D] (s = exp(log_precision)):

    q   = (f * f) s2^T - 2 f (s2 c)^T + sum_d s2 c^2      [B, K], clamped at 0 (a sum of squares)
    phi = exp(-q),   y = phi W^T + b                       [B, O]

Forward writes y and phi [N, K] (kept for the backward when asked: one number per neuron, not per feature).
Backward, with T = -2 (grad_y W) * phi [B, K] (the t_k of recon/nerf/rbf.py):

    dL/df      = f * (T s2) - T (s2 c)                     [B, D]
    dL/dc      = -s2 * (T^T f - c sum_n T)                 [K, D]  (sums over the samples of every block)
    dL/drho    =  s2 * (T^T f^2 - 2 c T^T f + c^2 sum_n T) [K, D]
    dL/dW      =  grad_y^T phi                             [O, K]

Precision: the expanded form cancels like rbf_matmul's. In float32, features centred near 0 keep a relative
error ~1e-6, but features far from 0 against narrow neurons lose digits (measured against float64, 4,096 x 16
features, 64 neurons: offset 2, s ~7.5: ~1e-3; offset 3, s ~25: ~2e-2, the same as rbf_matmul; float64 <= 4e-11).
The grids' features start near 0; a field whose features drift far should train in float64 or centre them.

The sums over samples are per-thread float64 accumulators reduced in thread order (the result does not depend
on the scheduling). Until stop 65 these kernels looped over samples, neurons and features one by one with a
scalar ``math.exp``: 2-3x slower than the matrix-product form in PyTorch at a NeRF step's 65,536 samples, so the
fields ran that instead (its [N, K] intermediates cost as much memory traffic as arithmetic).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

BLOCK = 256  # samples per block of matrix products (a block's [B, K] activations stay in the cache)
EXP_Q_MAX = 64.0  # activations exp(-q) for q beyond this are taken as exp(-64) = 1.6e-28


@njit(cache=True, inline="always")
def exp_neg(q):
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
def layer_constants(centres, s):
    """(a = s2^T [D, K], b = -2 (s2 c)^T [D, K], const = sum_d s2 c^2 [K]) of the quadratic form (module
    docstring), in the dtype of ``centres`` / ``s`` [K, D]."""
    s2 = s * s
    a = np.ascontiguousarray(s2.T)
    b = np.ascontiguousarray((-2.0 * s2 * centres).T).astype(s.dtype)
    const = (s2 * centres * centres).sum(axis=1)
    return a, b, const


@njit(cache=True)
def block_activations(feat, a, b, const):
    """phi [B, K] = exp(-max(q, 0)) with q = (f * f) a + f b + const for a block's features ``feat`` [B, D]
    (:func:`layer_constants`)."""
    q = np.dot(feat * feat, a) + np.dot(feat, b)
    B, K = q.shape
    for i in range(B):
        for k in range(K):
            q[i, k] = exp_neg(max(q[i, k] + const[k], 0.0))
    return q


@njit(cache=True)
def write_block_outputs(p, weight_t, bias, lo, phi, out):
    """out[lo:lo + B] = p W^T + b for a block's activations ``p`` [B, K] (``weight_t`` = W^T [K, O]); also
    phi[lo:lo + B] = p when ``phi`` is not empty (kept for a backward)."""
    y = np.dot(p, weight_t)
    keep = phi.shape[0] > 0
    for i in range(p.shape[0]):
        if keep:
            for k in range(p.shape[1]):
                phi[lo + i, k] = p[i, k]
        for o in range(y.shape[1]):
            out[lo + i, o] = y[i, o] + bias[o]


@njit(cache=True)
def block_layer_backward(feat, p, go, weight, s2, s2c, acc_tf, acc_tf2, acc_t, acc_w):
    """dL/df [B, D] of a block (module docstring) for its features ``feat`` [B, D], activations ``p`` [B, K]
    and output gradient ``go`` [B, O] (``weight`` [O, K], ``s2`` and ``s2c`` = s2 * c [K, D]); adds the block's
    sums T^T f, T^T f^2, sum_n T and grad_y^T phi to a thread's accumulators ``acc_tf``, ``acc_tf2`` [K, D],
    ``acc_t`` [K], ``acc_w`` [O, K]."""
    tt = (-2.0 * np.dot(go, weight) * p).astype(p.dtype)
    acc_w += np.dot(np.ascontiguousarray(go.T), p)
    tt_t = np.ascontiguousarray(tt.T)
    acc_tf += np.dot(tt_t, feat)
    acc_tf2 += np.dot(tt_t, feat * feat)
    acc_t += tt.sum(axis=0)
    return feat * np.dot(tt, s2) - np.dot(tt, s2c)


@njit(cache=True)
def reduce_layer_gradients(centres, s2, acc_tf, acc_tf2, acc_t, acc_w, grad_c, grad_rho, grad_w):
    """grad_c, grad_rho [K, D] and grad_w [O, K] (overwritten) from the threads' accumulators [T, ...] of
    :func:`block_layer_backward`, summed in thread order."""
    K, D = centres.shape
    tf = np.zeros((K, D))
    tf2 = np.zeros((K, D))
    tsum = np.zeros(K)
    grad_w[:] = 0.0
    for t in range(acc_t.shape[0]):
        tf += acc_tf[t]
        tf2 += acc_tf2[t]
        tsum += acc_t[t]
        grad_w += acc_w[t]
    for k in range(K):
        for d in range(D):
            c = centres[k, d]
            grad_c[k, d] = -s2[k, d] * (tf[k, d] - c * tsum[k])
            grad_rho[k, d] = s2[k, d] * (tf2[k, d] - 2.0 * c * tf[k, d] + c * c * tsum[k])


@njit(cache=True, parallel=True)
def rbf_forward_kernel(f, centres, s, weight, bias, threads, phi, out):
    """out [N, O] = the layer on features ``f`` [N, D] and phi [N, K] (or [0, K]: not kept); ``centres``, ``s``
    = exp(log_precision) [K, D], ``weight`` [O, K], ``bias`` [O], all in the dtype of ``f``."""
    N = f.shape[0]
    a, b, const = layer_constants(centres, s)
    weight_t = np.ascontiguousarray(weight.T)
    for t in prange(threads):
        end = (t + 1) * N // threads
        for lo in range(t * N // threads, end, BLOCK):
            hi = min(lo + BLOCK, end)
            write_block_outputs(block_activations(f[lo:hi], a, b, const), weight_t, bias, lo, phi, out)


@njit(cache=True, parallel=True)
def rbf_backward_kernel(f, centres, s, weight, phi, grad_out, threads, grad_f, grad_c, grad_rho, grad_w):
    """grad_f [N, D], grad_c [K, D], grad_rho [K, D], grad_w [O, K] (overwritten) of the layer for grad_out
    [N, O] and the forward's ``phi`` [N, K]; inputs as :func:`rbf_forward_kernel`'s, all in one dtype."""
    N = f.shape[0]
    K, D = centres.shape
    O = weight.shape[0]
    s2 = s * s
    s2c = s2 * centres
    acc_tf = np.zeros((threads, K, D))
    acc_tf2 = np.zeros((threads, K, D))
    acc_t = np.zeros((threads, K))
    acc_w = np.zeros((threads, O, K))
    for t in prange(threads):
        end = (t + 1) * N // threads
        for lo in range(t * N // threads, end, BLOCK):
            hi = min(lo + BLOCK, end)
            grad_f[lo:hi] = block_layer_backward(f[lo:hi], phi[lo:hi], grad_out[lo:hi], weight, s2, s2c,
                                                 acc_tf[t], acc_tf2[t], acc_t[t], acc_w[t])
    reduce_layer_gradients(centres, s2, acc_tf, acc_tf2, acc_t, acc_w, grad_c, grad_rho, grad_w)
