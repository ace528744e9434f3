"""Numba kernels of the Gaussian RBF layer (:mod:`recon.nerf.rbf`: the formulas and their gradients).

Forward: each sample's K neuron activations phi [N, K] (kept for the backward) and outputs [N, O]; samples
are split between the threads in contiguous ranges. Backward: per sample the read-out gradient g_k, then
dL/df, and the parameter gradients summed into one accumulator per thread, reduced in thread order at the
end (the result does not depend on the scheduling; on the thread count by rounding only). Sums run in
float64 whatever the tensors' dtype.

The per-sample steps (:func:`rbf_point_forward`, :func:`rbf_point_backward`, :func:`reduce_threads`) are
inlined functions shared with the fused grid + RBF kernels (:mod:`recon.nerf.grid_rbf_kernels`).

Every inner loop runs along a contiguous axis with no reduction in it (the forward's over the neurons k with
the precisions and centres passed transposed [D, K]; the backward's over the features d), so LLVM vectorises
them without reassociating sums (no fastmath: the results are those of the written order).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange


@njit(cache=True, inline="always")
def rbf_point_forward(f, centres_t, s_t, weight_t, bias, q, phi, y):
    """One sample: phi [K] = exp(-sum_d (s_kd (f_d - c_kd))^2) and y [O] = W phi + b for features f [D];
    ``q`` [K] is scratch. ``centres_t``, ``s_t`` [D, K] (transposed), ``weight_t`` W^T [K, O]."""
    D = f.shape[0]
    K = centres_t.shape[1]
    O = weight_t.shape[1]
    q[:] = 0.0
    for d in range(D):
        fd = f[d]
        for k in range(K):
            z = s_t[d, k] * (fd - centres_t[d, k])
            q[k] += z * z
    for o in range(O):
        y[o] = bias[o]
    for k in range(K):
        p = math.exp(-q[k])
        phi[k] = p
        for o in range(O):
            y[o] += weight_t[k, o] * p


@njit(cache=True, inline="always")
def rbf_point_backward(f, centres, s2, weight, phi, go, g, gf, acc_c, acc_rho, acc_w):
    """One sample's gradients for upstream ``go`` [O]: dL/df into ``gf`` [D] (overwritten) and the parameter
    gradients added into ``acc_c``, ``acc_rho`` [K, D] and ``acc_w`` [O, K]; ``g`` [K] is scratch.
    ``centres``, ``s2`` (squared precisions) [K, D], ``weight`` [O, K], ``phi`` [K] the sample's activations.
    With t_k = -2 g_k phi_k and a = t_k s_kd^2 (f_d - c_kd): dL/df_d = sum_k a, dL/dc_kd = -a,
    dL/drho_kd = a (f_d - c_kd)."""
    D = f.shape[0]
    K = centres.shape[0]
    O = weight.shape[0]
    g[:] = 0.0
    for o in range(O):
        gov = go[o]
        for k in range(K):
            g[k] += gov * weight[o, k]
            acc_w[o, k] += gov * phi[k]
    gf[:] = 0.0
    for k in range(K):
        tk = -2.0 * g[k] * phi[k]
        if tk == 0.0:
            continue
        for d in range(D):
            diff = f[d] - centres[k, d]
            a = tk * s2[k, d] * diff
            gf[d] += a
            acc_c[k, d] -= a
            acc_rho[k, d] += a * diff


@njit(cache=True)
def reduce_threads(acc_c, acc_rho, acc_w, grad_c, grad_rho, grad_w):
    """grad_c, grad_rho [K, D] and grad_w [O, K] = the per-thread accumulators [T, ...] summed in thread order."""
    T, K, D = acc_c.shape
    O = acc_w.shape[1]
    for k in range(K):
        for d in range(D):
            c = 0.0
            r = 0.0
            for t in range(T):
                c += acc_c[t, k, d]
                r += acc_rho[t, k, d]
            grad_c[k, d] = c
            grad_rho[k, d] = r
    for o in range(O):
        for k in range(K):
            w = 0.0
            for t in range(T):
                w += acc_w[t, o, k]
            grad_w[o, k] = w


@njit(cache=True, parallel=True)
def rbf_forward_kernel(f, centres_t, s_t, weight_t, bias, threads, phi, out):
    """phi [N, K] and out [N, O] = phi W^T + b for features f [N, D] (:func:`rbf_point_forward`)."""
    N = f.shape[0]
    K = centres_t.shape[1]
    O = weight_t.shape[1]
    for t in prange(threads):
        q = np.empty(K)
        p = np.empty(K)
        y = np.empty(O)
        for n in range(t * N // threads, (t + 1) * N // threads):
            rbf_point_forward(f[n], centres_t, s_t, weight_t, bias, q, p, y)
            for k in range(K):
                phi[n, k] = p[k]
            for o in range(O):
                out[n, o] = y[o]


@njit(cache=True, parallel=True)
def rbf_backward_kernel(f, centres, s, weight, phi, grad_out, threads, grad_f, grad_c, grad_rho, grad_w):
    """grad_f [N, D], grad_c [K, D], grad_rho [K, D], grad_w [O, K] of the layer (module docstring of
    recon.nerf.rbf) for grad_out [N, O]; ``centres``, ``s`` [K, D], ``weight`` [O, K]; all outputs are
    overwritten (:func:`rbf_point_backward`, :func:`reduce_threads`)."""
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
            rbf_point_backward(f[n], centres, s2, weight, phi[n], grad_out[n], g, gf, acc_c[t], acc_rho[t],
                               acc_w[t])
            for d in range(D):
                grad_f[n, d] = gf[d]
    reduce_threads(acc_c, acc_rho, acc_w, grad_c, grad_rho, grad_w)
