"""Numba kernels of the fused grid encoding + Gaussian RBF layer + read-out (:mod:`recon.nerf.grid_rbf`).

The threads take contiguous ranges of points, BLOCK points at a time. A block's grid features [BLOCK, D] are
interpolated into a scratch block that stays in the cache (level by level, the rows of
:func:`recon.nerf.hash_encoding.level_features`, the encoding kernel's own loop: the same sums in the same order) and are
never written out. The layer then runs on the block through the block steps of the plain layer's kernels
(:mod:`recon.nerf.rbf_kernels`: the quadratic form expanded into small matrix products, the vectorised exponential,
the read-out; backward: dL/df of the block and the per-thread sums of the parameters' gradients), so the two
kernels compute the same sums in the same order.

Forward writes y [N, O] and phi [N, K] (kept for the backward: one number per neuron, not per feature). Backward
recomputes each block's features and writes dL/df [N, D], which is then scattered into the grid's gradient by the
encoding's backward kernel (:func:`recon.nerf.hash_encoding._backward_kernel`: levels dealt to the threads, no
colliding adds): the features are never stored, their gradient is (the scatter needs every point's before any row
is final). The blocks' matrix products run in the table's dtype (float32: single-precision BLAS, the precision of
the PyTorch paths), the sums over blocks and threads in float64.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from recon.nerf.hash_encoding import CHUNK, level_features
from recon.nerf.rbf_kernels import (block_activations, block_layer_backward, layer_constants, reduce_layer_gradients,
                                     write_block_outputs)

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


@njit(cache=True, parallel=True)
def grid_rbf_forward_kernel(x, table, resolutions, offsets, centres, s, weight, bias, threads, phi, out):
    """out [N, O] and phi [N, K] of the RBF layer (``centres``, ``s`` = exp(log_precision) [K, D], ``weight``
    [O, K], ``bias`` [O], in the table's dtype; ``phi`` [N, K] or [0, K] when not wanted) on the grid features of
    points x [N, 3] in [0, 1]^3 (clamped), ``table``
    [P, F] laid out by ``resolutions`` [L] and ``offsets`` [L + 1]; D = L F."""
    N = x.shape[0]
    a, b, const = layer_constants(centres, s)
    weight_t = np.ascontiguousarray(weight.T)
    for t in prange(threads):
        rows, weights = _scratch()
        end = (t + 1) * N // threads
        for lo in range(t * N // threads, end, BLOCK):
            hi = min(lo + BLOCK, end)
            feat = _block_features(x, lo, hi, table, resolutions, offsets, rows, weights)
            write_block_outputs(block_activations(feat, a, b, const), weight_t, bias, lo, phi, out)


@njit(cache=True, parallel=True)
def grid_rbf_layer_backward_kernel(x, table, resolutions, offsets, centres, s, weight, phi, grad_out, threads,
                                   grad_feat, grad_c, grad_rho, grad_w):
    """The layer's part of the backward (module docstring): grad_feat [N, D] = dL/df, grad_c, grad_rho [K, D],
    grad_w [O, K] (overwritten) for grad_out [N, O] in the table's dtype and the forward's ``phi`` [N, K]."""
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
            grad_feat[lo:hi] = block_layer_backward(feat, phi[lo:hi], grad_out[lo:hi], weight, s2, s2c,
                                                    acc_tf[t], acc_tf2[t], acc_t[t], acc_w[t])
    reduce_layer_gradients(centres, s2, acc_tf, acc_tf2, acc_t, acc_w, grad_c, grad_rho, grad_w)
