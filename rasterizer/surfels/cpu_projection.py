"""Numba surfel projection for the cpu backend: ``project_surfels`` (the specification, projection.py)
forward, with a hand-written backward to means, quats and scales (cameras get no gradient, as in the 3D
cpu backend). One (camera, surfel) pair per iteration forward; the backward runs over surfels and
sums their cameras in order, so no two threads write one row. Float64 arithmetic, outputs stored in the
input dtype. The quaternion helpers are the 3D cpu projection's (``rasterizer.cpu.projection_kernels``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from ..cpu.launch import KERNEL_LOCK
from ..cpu.projection_kernels import NORM_EPS, _normalized_quat, _rotmat
from .projection import EXTENT_SIGMAS, MIN_HALF_EXTENT_SQ, SurfelProjection


@njit(cache=True, inline="always")
def _pair_frame(means, quats, scales, viewmats, Ks, c, n):
    """(K W H as 9 row-major values, camera-frame centre (3), raw normal R_c t_w (3), R (9), R_c (9))."""
    w, x, y, z, norm, den = _normalized_quat(quats, n)
    R = _rotmat(w, x, y, z)
    V = viewmats[c]
    Rc = np.empty(9)
    for i in range(3):
        for j in range(3):
            Rc[3 * i + j] = V[i, 0] * R[j] + V[i, 1] * R[3 + j] + V[i, 2] * R[6 + j]
    p = np.empty(3)
    for i in range(3):
        p[i] = V[i, 0] * means[n, 0] + V[i, 1] * means[n, 1] + V[i, 2] * means[n, 2] + V[i, 3]
    su, sv = np.float64(scales[n, 0]), np.float64(scales[n, 1])
    WH = np.empty(9)  # row-major: columns R_c s_u t_u, R_c s_v t_v, p_c
    for i in range(3):
        WH[3 * i] = Rc[3 * i] * su
        WH[3 * i + 1] = Rc[3 * i + 1] * sv
        WH[3 * i + 2] = p[i]
    KWH = np.empty(9)
    K = Ks[c]
    for i in range(3):
        for j in range(3):
            KWH[3 * i + j] = K[i, 0] * WH[j] + K[i, 1] * WH[3 + j] + K[i, 2] * WH[6 + j]
    return KWH, p, Rc, R


@njit(cache=True, parallel=True)
def project_forward_kernel(means, quats, scales, viewmats, Ks, width, height, near, far, KWH_out, means2d, depths,
                           normals, radii, flips):
    """Fill [C, N, ...] outputs (culled pairs: zeros, radii 0); flips [C, N] int8: -1 where the normal
    was turned to face the camera, else 1."""
    C, N = depths.shape
    for it in prange(C * N):
        c, n = it // N, it % N
        KWH, p, Rc, R = _pair_frame(means, quats, scales, viewmats, Ks, c, n)
        keep = p[2] > near and p[2] < far
        dist = KWH[6] * KWH[6] + KWH[7] * KWH[7] - KWH[8] * KWH[8]
        keep = keep and dist != 0.0
        mx = my = rx = ry = 0.0
        if keep:
            mx = (KWH[0] * KWH[6] + KWH[1] * KWH[7] - KWH[2] * KWH[8]) / dist
            my = (KWH[3] * KWH[6] + KWH[4] * KWH[7] - KWH[5] * KWH[8]) / dist
            hx = mx * mx - (KWH[0] * KWH[0] + KWH[1] * KWH[1] - KWH[2] * KWH[2]) / dist
            hy = my * my - (KWH[3] * KWH[3] + KWH[4] * KWH[4] - KWH[5] * KWH[5]) / dist
            rx = math.ceil(EXTENT_SIGMAS * math.sqrt(max(hx, MIN_HALF_EXTENT_SQ)))
            ry = math.ceil(EXTENT_SIGMAS * math.sqrt(max(hy, MIN_HALF_EXTENT_SQ)))
            keep = mx + rx > 0 and mx - rx < width and my + ry > 0 and my - ry < height
        if not keep:
            radii[c, n, 0] = radii[c, n, 1] = 0
            means2d[c, n, 0] = means2d[c, n, 1] = 0.0
            depths[c, n] = 0.0
            flips[c, n] = 1
            for i in range(3):
                normals[c, n, i] = 0.0
                for j in range(3):
                    KWH_out[c, n, i, j] = 0.0
            continue
        radii[c, n, 0], radii[c, n, 1] = int(rx), int(ry)
        means2d[c, n, 0], means2d[c, n, 1] = mx, my
        depths[c, n] = p[2]
        toward = -(Rc[2] * p[0] + Rc[5] * p[1] + Rc[8] * p[2]) > 0.0
        s = 1.0 if toward else -1.0
        flips[c, n] = 1 if toward else -1
        for i in range(3):
            normals[c, n, i] = s * Rc[3 * i + 2]
            for j in range(3):
                KWH_out[c, n, i, j] = KWH[3 * i + j]


@njit(cache=True, parallel=True)
def project_backward_kernel(means, quats, scales, viewmats, Ks, radii, flips, v_KWH, v_means2d, v_depths, v_normals,
                            g_means, g_quats, g_scales):
    """Gradients [N, .] (float64) of means, quats, scales from the cotangents [C, N, ...] of K W H,
    means2d, depths and normals; culled pairs add nothing."""
    C, N = radii.shape[0], radii.shape[1]
    for n in prange(N):
        gm = np.zeros(3)
        gR = np.zeros(9)
        gsu = gsv = 0.0
        w, x, y, z, norm, den = _normalized_quat(quats, n)
        for c in range(C):
            if radii[c, n, 0] <= 0 or radii[c, n, 1] <= 0:
                continue
            KWH, p, Rc, R = _pair_frame(means, quats, scales, viewmats, Ks, c, n)
            vK = np.empty(9)
            for i in range(9):
                vK[i] = v_KWH[c, n, i // 3, i % 3]
            # means2d = box centre of the dual conic (screen_boxes)
            dist = KWH[6] * KWH[6] + KWH[7] * KWH[7] - KWH[8] * KWH[8]
            mx = (KWH[0] * KWH[6] + KWH[1] * KWH[7] - KWH[2] * KWH[8]) / dist
            my = (KWH[3] * KWH[6] + KWH[4] * KWH[7] - KWH[5] * KWH[8]) / dist
            vmx, vmy = np.float64(v_means2d[c, n, 0]), np.float64(v_means2d[c, n, 1])
            sgn = (1.0, 1.0, -1.0)
            for j in range(3):
                vK[j] += vmx * sgn[j] * KWH[6 + j] / dist
                vK[3 + j] += vmy * sgn[j] * KWH[6 + j] / dist
                vK[6 + j] += sgn[j] * (vmx * KWH[j] + vmy * KWH[3 + j]
                                       - 2.0 * (vmx * mx + vmy * my) * KWH[6 + j]) / dist
            # K W H = K @ W H: v_WH = K^T v_KWH
            K = Ks[c]
            vWH = np.empty(9)
            for i in range(3):
                for j in range(3):
                    vWH[3 * i + j] = K[0, i] * vK[j] + K[1, i] * vK[3 + j] + K[2, i] * vK[6 + j]
            vp = np.empty(3)
            for i in range(3):
                vp[i] = vWH[3 * i + 2]
            vp[2] += np.float64(v_depths[c, n])
            V = viewmats[c]
            for j in range(3):  # p_c = V_R mean + t
                gm[j] += V[0, j] * vp[0] + V[1, j] * vp[1] + V[2, j] * vp[2]
            su, sv = np.float64(scales[n, 0]), np.float64(scales[n, 1])
            vRc = np.empty(9)
            f = np.float64(flips[c, n])
            for i in range(3):
                gsu += vWH[3 * i] * Rc[3 * i]
                gsv += vWH[3 * i + 1] * Rc[3 * i + 1]
                vRc[3 * i] = vWH[3 * i] * su
                vRc[3 * i + 1] = vWH[3 * i + 1] * sv
                vRc[3 * i + 2] = f * np.float64(v_normals[c, n, i])
            for i in range(3):  # R_c = V_R R: v_R = V_R^T v_Rc
                for j in range(3):
                    gR[3 * i + j] += V[0, i] * vRc[j] + V[1, i] * vRc[3 + j] + V[2, i] * vRc[6 + j]
        g_means[n, 0], g_means[n, 1], g_means[n, 2] = gm[0], gm[1], gm[2]
        g_scales[n, 0], g_scales[n, 1] = gsu, gsv
        # rotation matrix -> normalised quaternion -> quaternion (as the 3D cpu projection)
        gw = 2.0 * (-gR[1] * z + gR[2] * y + gR[3] * z - gR[5] * x - gR[6] * y + gR[7] * x)
        gx = 2.0 * (gR[1] * y + gR[2] * z + gR[3] * y - 2.0 * gR[4] * x - gR[5] * w + gR[6] * z + gR[7] * w
                    - 2.0 * gR[8] * x)
        gy = 2.0 * (-2.0 * gR[0] * y + gR[1] * x + gR[2] * w + gR[3] * x + gR[5] * z - gR[6] * w + gR[7] * z
                    - 2.0 * gR[8] * y)
        gz = 2.0 * (-2.0 * gR[0] * z - gR[1] * w + gR[2] * x + gR[3] * w - 2.0 * gR[4] * z + gR[5] * y
                    + gR[6] * x + gR[7] * y)
        rden = 1.0 / den
        gw, gx, gy, gz = gw * rden, gx * rden, gy * rden, gz * rden
        if norm >= NORM_EPS:
            dot = gw * w + gx * x + gy * y + gz * z
            gw, gx, gy, gz = gw - dot * w, gx - dot * x, gy - dot * y, gz - dot * z
        g_quats[n, 0], g_quats[n, 1], g_quats[n, 2], g_quats[n, 3] = gw, gx, gy, gz


def _np64(x):
    return np.ascontiguousarray(x.detach().numpy(), dtype=np.float64)


class SurfelProjectFunction(torch.autograd.Function):
    """(K W H [C,N,3,3], means2d [C,N,2], depths [C,N], normals [C,N,3], radii [C,N,2] int32) from means
    [N,3], quats [N,4], scales [N,2], viewmats [C,4,4], Ks [C,3,3]; gradients to means, quats, scales."""

    @staticmethod
    def forward(ctx, means, quats, scales, viewmats, Ks, width, height, near_plane, far_plane):
        C, N, dt = viewmats.shape[0], means.shape[0], means.dtype
        inputs = (_np64(means), _np64(quats), _np64(scales), _np64(viewmats), _np64(Ks))
        KWH, m2d, depths = np.empty((C, N, 3, 3)), np.empty((C, N, 2)), np.empty((C, N))
        normals, radii, flips = np.empty((C, N, 3)), np.empty((C, N, 2), np.int32), np.empty((C, N), np.int8)
        with KERNEL_LOCK:
            project_forward_kernel(*inputs, width, height, near_plane, far_plane, KWH, m2d, depths, normals, radii,
                                   flips)
        ctx.state = (inputs, radii, flips, dt)
        ctx.set_materialize_grads(False)
        radii_t = torch.from_numpy(radii)
        ctx.mark_non_differentiable(radii_t)
        return tuple(torch.from_numpy(a).to(dt) for a in (KWH, m2d, depths, normals)) + (radii_t,)

    @staticmethod
    def backward(ctx, v_KWH, v_means2d, v_depths, v_normals, v_radii):
        inputs, radii, flips, dt = ctx.state
        C, N = radii.shape[0], radii.shape[1]
        cot = lambda v, shape: np.zeros(shape) if v is None else _np64(v)  # noqa: E731
        g_means, g_quats, g_scales = np.empty((N, 3)), np.empty((N, 4)), np.empty((N, 2))
        with KERNEL_LOCK:
            project_backward_kernel(*inputs, radii, flips, cot(v_KWH, (C, N, 3, 3)), cot(v_means2d, (C, N, 2)),
                                    cot(v_depths, (C, N)), cot(v_normals, (C, N, 3)), g_means, g_quats, g_scales)
        out = [torch.from_numpy(a).to(dt) for a in (g_means, g_quats, g_scales)]
        return tuple(out) + (None,) * 6


def project_surfels_cpu(means, quats, scales, viewmats, Ks, width, height, *, near_plane=0.01,
                        far_plane=1e10) -> SurfelProjection:
    """``project_surfels`` on the cpu backend (same outputs; cameras get no gradient)."""
    KWH, m2d, depths, normals, radii = SurfelProjectFunction.apply(means, quats, scales, viewmats, Ks, width, height,
                                                                    near_plane, far_plane)
    return SurfelProjection(KWH, m2d, depths, normals, radii)
