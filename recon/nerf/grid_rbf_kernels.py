"""Numba kernels of the fused grid encoding + Gaussian RBF layer + read-out (:mod:`recon.nerf.grid_rbf`).

Forward: the threads take contiguous ranges of points; a thread interpolates the grid features of CHUNK points
at a time into a [CHUNK, D] scratch block (level by level, the rows of :func:`recon.nerf.hash_encoding._chunk_rows`,
same sums in the same order as the encoding's kernels), then runs the RBF layer on each point of the block
(:func:`recon.nerf.rbf_kernels.rbf_point_forward`); only the outputs [N, O] are written. Nothing else is kept:
the backward recomputes the block's features and activations.

Backward, two passes:
1. per point (threads over contiguous ranges): features and activations again, the layer's gradients
   (:func:`recon.nerf.rbf_kernels.rbf_point_backward`: centres, log precisions, weights into per-thread
   accumulators reduced in thread order; the bias gradient is the column sum of grad_out) and dL/df [N, D];
2. dL/df scattered into the grid's gradient through the same rows and weights by the encoding's backward kernel
   (:func:`recon.nerf.hash_encoding._backward_kernel`: levels dealt to the threads, no colliding adds).
The features are never stored; their gradient is (pass 2 needs every point's before any row is final).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from recon.nerf.hash_encoding import CHUNK, _chunk_rows, _level_constants
from recon.nerf.rbf_kernels import rbf_point_backward, rbf_point_forward, reduce_threads


@njit(cache=True, inline="always")
def _chunk_features(x, lo, hi, table, resolutions, offsets, rows, weights, feat):
    """feat[:hi - lo] [*, L F] = the grid features of points x[lo:hi] (level-major, as the encoding's output);
    ``rows`` [CHUNK, 8] int64 and ``weights`` [CHUNK, 8] are scratch."""
    L = resolutions.shape[0]
    F = table.shape[1]
    for level in range(L):
        r, start, size, dense, mask, pow2, n = _level_constants(resolutions, offsets, level)
        _chunk_rows(x, lo, hi, r, start, size, dense, mask, pow2, n, F, table, rows, weights)
        for j in range(hi - lo):
            for f in range(F):
                acc = 0.0
                for c in range(8):
                    acc += weights[j, c] * table[rows[j, c], f]
                feat[j, level * F + f] = acc


@njit(cache=True, parallel=True)
def grid_rbf_forward_kernel(x, table, resolutions, offsets, centres_t, s_t, weight_t, bias, threads, out):
    """out [N, O] = the RBF layer (``centres_t``, ``s_t`` [D, K] transposed, precisions exp(log_precision);
    ``weight_t`` W^T [K, O]; ``bias`` [O]) on the grid features of points x [N, 3] in [0, 1]^3 (clamped),
    ``table`` [P, F] laid out by ``resolutions`` [L] and ``offsets`` [L + 1]; D = L F."""
    N = x.shape[0]
    D = resolutions.shape[0] * table.shape[1]
    K = centres_t.shape[1]
    O = weight_t.shape[1]
    for t in prange(threads):
        rows = np.empty((CHUNK, 8), np.int64)
        weights = np.empty((CHUNK, 8))
        feat = np.empty((CHUNK, D))
        q = np.empty(K)
        phi = np.empty(K)
        y = np.empty(O)
        end = (t + 1) * N // threads
        for lo in range(t * N // threads, end, CHUNK):
            hi = min(lo + CHUNK, end)
            _chunk_features(x, lo, hi, table, resolutions, offsets, rows, weights, feat)
            for j in range(hi - lo):
                rbf_point_forward(feat[j], centres_t, s_t, weight_t, bias, q, phi, y)
                for o in range(O):
                    out[lo + j, o] = y[o]


@njit(cache=True, parallel=True)
def grid_rbf_layer_backward_kernel(x, table, resolutions, offsets, centres, s, weight, grad_out, threads,
                                   grad_feat, grad_c, grad_rho, grad_w):
    """Pass 1 of the backward (module docstring): grad_feat [N, D] = dL/df, grad_c, grad_rho [K, D] and
    grad_w [O, K] (overwritten) for grad_out [N, O]; ``centres``, ``s`` [K, D], ``weight`` [O, K]."""
    N = x.shape[0]
    D = resolutions.shape[0] * table.shape[1]
    K = centres.shape[0]
    O = weight.shape[0]
    acc_c = np.zeros((threads, K, D))
    acc_rho = np.zeros((threads, K, D))
    acc_w = np.zeros((threads, O, K))
    s2 = s * s
    centres_t = np.ascontiguousarray(centres.T)
    s_t = np.ascontiguousarray(s.T)
    weight_t = np.ascontiguousarray(weight.T)
    bias = np.zeros(O)
    for t in prange(threads):
        rows = np.empty((CHUNK, 8), np.int64)
        weights = np.empty((CHUNK, 8))
        feat = np.empty((CHUNK, D))
        q = np.empty(K)
        phi = np.empty(K)
        y = np.empty(O)
        g = np.empty(K)
        gf = np.empty(D)
        end = (t + 1) * N // threads
        for lo in range(t * N // threads, end, CHUNK):
            hi = min(lo + CHUNK, end)
            _chunk_features(x, lo, hi, table, resolutions, offsets, rows, weights, feat)
            for j in range(hi - lo):
                rbf_point_forward(feat[j], centres_t, s_t, weight_t, bias, q, phi, y)
                rbf_point_backward(feat[j], centres, s2, weight, phi, grad_out[lo + j], g, gf, acc_c[t],
                                   acc_rho[t], acc_w[t])
                for d in range(D):
                    grad_feat[lo + j, d] = gf[d]
    reduce_threads(acc_c, acc_rho, acc_w, grad_c, grad_rho, grad_w)
