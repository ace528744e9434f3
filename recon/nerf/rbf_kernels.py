"""Numba kernels of the Gaussian RBF layer (:mod:`recon.nerf.rbf`: the formulas and their gradients).

Forward: each sample's K neuron activations phi [N, K] (kept for the backward) and outputs [N, O]; samples
are split between the threads in contiguous ranges. Backward: per sample the read-out gradient g_k, then
dL/df, and the parameter gradients summed into one accumulator per thread, reduced in thread order at the
end (the result does not depend on the scheduling; on the thread count by rounding only). Sums run in
float64 whatever the tensors' dtype.

Every inner loop runs along a contiguous axis with no reduction in it (the forward's over the neurons k with
the precisions and centres passed transposed [D, K]; the backward's over the features d), so LLVM vectorises
them without reassociating sums (no fastmath: the results are those of the written order).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange


@njit(cache=True, parallel=True)
def rbf_forward_kernel(f, centres_t, s_t, weight_t, bias, threads, phi, out):
    """phi [N, K] = exp(-sum_d (s_kd (f_nd - c_kd))^2); out [N, O] = phi W^T + b. ``centres_t`` and ``s_t``
    (the precisions exp(log_precision)) are [D, K] (transposed), ``weight_t`` is W^T [K, O]."""
    N, D = f.shape
    K = centres_t.shape[1]
    O = weight_t.shape[1]
    for t in prange(threads):
        q = np.empty(K)
        y = np.empty(O)
        for n in range(t * N // threads, (t + 1) * N // threads):
            q[:] = 0.0
            for d in range(D):
                fd = f[n, d]
                for k in range(K):
                    z = s_t[d, k] * (fd - centres_t[d, k])
                    q[k] += z * z
            for o in range(O):
                y[o] = bias[o]
            for k in range(K):
                p = math.exp(-q[k])
                phi[n, k] = p
                for o in range(O):
                    y[o] += weight_t[k, o] * p
            for o in range(O):
                out[n, o] = y[o]


@njit(cache=True, parallel=True)
def rbf_backward_kernel(f, centres, s, weight, phi, grad_out, threads, grad_f, grad_c, grad_rho, grad_w):
    """grad_f [N, D], grad_c [K, D], grad_rho [K, D], grad_w [O, K] of the layer (module docstring of
    recon.nerf.rbf) for grad_out [N, O]; ``centres``, ``s`` [K, D], ``weight`` [O, K]; all outputs are
    overwritten. With a = t_k s_kd^2 (f_d - c_kd): dL/df_d = sum_k a, dL/dc_kd = -a, dL/drho_kd = a (f_d - c_kd)."""
    N, D = f.shape
    K = centres.shape[0]
    O = weight.shape[0]
    acc_c = np.zeros((threads, K, D))
    acc_rho = np.zeros((threads, K, D))
    acc_w = np.zeros((threads, O, K))
    s2 = s * s
    for t in prange(threads):
        g = np.empty(K)
        gf = np.empty(D)
        for n in range(t * N // threads, (t + 1) * N // threads):
            g[:] = 0.0
            for o in range(O):
                go = grad_out[n, o]
                for k in range(K):
                    g[k] += go * weight[o, k]
                    acc_w[t, o, k] += go * phi[n, k]
            gf[:] = 0.0
            for k in range(K):
                tk = -2.0 * g[k] * phi[n, k]
                if tk == 0.0:
                    continue
                for d in range(D):
                    diff = f[n, d] - centres[k, d]
                    a = tk * s2[k, d] * diff
                    gf[d] += a
                    acc_c[t, k, d] -= a
                    acc_rho[t, k, d] += a * diff
            for d in range(D):
                grad_f[n, d] = gf[d]
    for k in range(K):
        for d in range(D):
            c = 0.0
            r = 0.0
            for t in range(threads):
                c += acc_c[t, k, d]
                r += acc_rho[t, k, d]
            grad_c[k, d] = c
            grad_rho[k, d] = r
    for o in range(O):
        for k in range(K):
            w = 0.0
            for t in range(threads):
                w += acc_w[t, o, k]
            grad_w[o, k] = w
