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

from ..cpu.launch import KERNEL_LOCK, kernel_array
from ..cpu.projection import _np64
from ..cpu.projection_kernels import NORM_EPS, _add, _mul, _normalized_quat, _rotmat, _t
from .projection import EXTENT_SIGMAS, MIN_HALF_EXTENT_SQ, SurfelProjection


@njit(cache=True, inline="always")
def _mat3(A):
    """The 3x3 block A[:3, :3] of a 2D array as a row-major 9-tuple of float64."""
    return (np.float64(A[0, 0]), np.float64(A[0, 1]), np.float64(A[0, 2]), np.float64(A[1, 0]),
            np.float64(A[1, 1]), np.float64(A[1, 2]), np.float64(A[2, 0]), np.float64(A[2, 1]),
            np.float64(A[2, 2]))


@njit(cache=True, inline="always")
def _pair_frame(means, quats, scales, viewmats, Ks, c, n):
    """(K W H, R_c = V_R R, the camera-frame centre p (3-tuple)) of pair (c, n), row-major 9-tuples
    (float64). W H has the columns R_c s_u t_u, R_c s_v t_v, p."""
    w, x, y, z, _, _ = _normalized_quat(quats, n)
    V = viewmats[c]
    Rc = _mul(_mat3(V), _rotmat(w, x, y, z))
    p = (V[0, 0] * means[n, 0] + V[0, 1] * means[n, 1] + V[0, 2] * means[n, 2] + V[0, 3],
         V[1, 0] * means[n, 0] + V[1, 1] * means[n, 1] + V[1, 2] * means[n, 2] + V[1, 3],
         V[2, 0] * means[n, 0] + V[2, 1] * means[n, 1] + V[2, 2] * means[n, 2] + V[2, 3])
    su, sv = np.float64(scales[n, 0]), np.float64(scales[n, 1])
    WH = (Rc[0] * su, Rc[1] * sv, p[0], Rc[3] * su, Rc[4] * sv, p[1], Rc[6] * su, Rc[7] * sv, p[2])
    return _mul(_mat3(Ks[c]), WH), Rc, p


@njit(cache=True, parallel=True)
def project_forward_kernel(means, quats, scales, viewmats, Ks, width, height, near, far, KWH_out, means2d, depths,
                           normals, radii, flips):
    """Fill [C, N, ...] outputs (culled pairs: zeros, radii 0); flips [C, N] int8: -1 where the normal
    was turned to face the camera, else 1."""
    C, N = depths.shape
    for it in prange(C * N):
        c, n = it // N, it % N
        KWH, Rc, p = _pair_frame(means, quats, scales, viewmats, Ks, c, n)
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
        normals[c, n, 0], normals[c, n, 1], normals[c, n, 2] = s * Rc[2], s * Rc[5], s * Rc[8]
        for i in range(3):
            for j in range(3):
                KWH_out[c, n, i, j] = KWH[3 * i + j]


@njit(cache=True, inline="always")
def _kwh_cotangent(KWH, v_KWH, vmx, vmy):
    """d loss / d K W H (9-tuple): its own cotangent plus the means2d one's, means2d being the box
    centre of the dual conic (screen_boxes): m = (M_u . M_w', M_v . M_w') / dist with
    ' = diag(1, 1, -1) and dist = M_w . M_w'."""
    dist = KWH[6] * KWH[6] + KWH[7] * KWH[7] - KWH[8] * KWH[8]
    mx = (KWH[0] * KWH[6] + KWH[1] * KWH[7] - KWH[2] * KWH[8]) / dist
    my = (KWH[3] * KWH[6] + KWH[4] * KWH[7] - KWH[5] * KWH[8]) / dist
    r = 1.0 / dist
    t = 2.0 * (vmx * mx + vmy * my)
    return (v_KWH[0, 0] + vmx * KWH[6] * r, v_KWH[0, 1] + vmx * KWH[7] * r, v_KWH[0, 2] - vmx * KWH[8] * r,
            v_KWH[1, 0] + vmy * KWH[6] * r, v_KWH[1, 1] + vmy * KWH[7] * r, v_KWH[1, 2] - vmy * KWH[8] * r,
            v_KWH[2, 0] + (vmx * KWH[0] + vmy * KWH[3] - t * KWH[6]) * r,
            v_KWH[2, 1] + (vmx * KWH[1] + vmy * KWH[4] - t * KWH[7]) * r,
            v_KWH[2, 2] - (vmx * KWH[2] + vmy * KWH[5] - t * KWH[8]) * r)


@njit(cache=True, parallel=True)
def project_backward_kernel(means, quats, scales, viewmats, Ks, radii, flips, v_KWH, v_means2d, v_depths, v_normals,
                            g_means, g_quats, g_scales):
    """Gradients [N, .] (float64) of means, quats, scales from the cotangents [C, N, ...] of K W H,
    means2d, depths and normals; culled pairs add nothing."""
    C, N = radii.shape[0], radii.shape[1]
    for n in prange(N):
        gm0 = gm1 = gm2 = gsu = gsv = 0.0
        gR = (0.0,) * 9
        w, x, y, z, norm, den = _normalized_quat(quats, n)
        su, sv = np.float64(scales[n, 0]), np.float64(scales[n, 1])
        for c in range(C):
            if radii[c, n, 0] <= 0 or radii[c, n, 1] <= 0:
                continue
            KWH, Rc, p = _pair_frame(means, quats, scales, viewmats, Ks, c, n)
            vK = _kwh_cotangent(KWH, v_KWH[c, n], np.float64(v_means2d[c, n, 0]), np.float64(v_means2d[c, n, 1]))
            vWH = _mul(_t(_mat3(Ks[c])), vK)  # K W H = K @ W H: v_WH = K^T v_KWH
            vp0, vp1, vp2 = vWH[2], vWH[5], vWH[8] + np.float64(v_depths[c, n])
            V = viewmats[c]
            gm0 += V[0, 0] * vp0 + V[1, 0] * vp1 + V[2, 0] * vp2  # p_c = V_R mean + t
            gm1 += V[0, 1] * vp0 + V[1, 1] * vp1 + V[2, 1] * vp2
            gm2 += V[0, 2] * vp0 + V[1, 2] * vp1 + V[2, 2] * vp2
            gsu += vWH[0] * Rc[0] + vWH[3] * Rc[3] + vWH[6] * Rc[6]
            gsv += vWH[1] * Rc[1] + vWH[4] * Rc[4] + vWH[7] * Rc[7]
            f = np.float64(flips[c, n])
            vRc = (vWH[0] * su, vWH[1] * sv, f * np.float64(v_normals[c, n, 0]),
                   vWH[3] * su, vWH[4] * sv, f * np.float64(v_normals[c, n, 1]),
                   vWH[6] * su, vWH[7] * sv, f * np.float64(v_normals[c, n, 2]))
            gR = _add(gR, _mul(_t(_mat3(V)), vRc))  # R_c = V_R R: v_R = V_R^T v_Rc
        g_means[n, 0], g_means[n, 1], g_means[n, 2] = gm0, gm1, gm2
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


class SurfelProjectFunction(torch.autograd.Function):
    """(K W H [C,N,3,3], means2d [C,N,2], depths [C,N], normals [C,N,3], radii [C,N,2] int32) from means
    [N,3], quats [N,4], scales [N,2], viewmats [C,4,4], Ks [C,3,3]; gradients to means, quats, scales.
    The kernels read means, quats, scales and the cotangents in their dtype (every value is widened
    to float64 before arithmetic) and store into arrays of that dtype (float64 values rounded once, as
    ``.to(dtype)`` would): no float64 copies; cameras are copied to float64 (small)."""

    @staticmethod
    def forward(ctx, means, quats, scales, viewmats, Ks, width, height, near_plane, far_plane):
        C, N = viewmats.shape[0], means.shape[0]
        inputs = (kernel_array(means), kernel_array(quats), kernel_array(scales), _np64(viewmats), _np64(Ks))
        npdt = inputs[0].dtype
        KWH, m2d, depths = np.empty((C, N, 3, 3), npdt), np.empty((C, N, 2), npdt), np.empty((C, N), npdt)
        normals, radii, flips = np.empty((C, N, 3), npdt), np.empty((C, N, 2), np.int32), np.empty((C, N), np.int8)
        with KERNEL_LOCK:
            project_forward_kernel(*inputs, width, height, near_plane, far_plane, KWH, m2d, depths, normals, radii,
                                   flips)
        ctx.save_for_backward(means, quats, scales)  # the backward reads their memory: in-place changes are caught
        ctx.state = (inputs, radii, flips)
        ctx.set_materialize_grads(False)
        radii_t = torch.from_numpy(radii)
        ctx.mark_non_differentiable(radii_t)
        return tuple(torch.from_numpy(a) for a in (KWH, m2d, depths, normals)) + (radii_t,)

    @staticmethod
    def backward(ctx, v_KWH, v_means2d, v_depths, v_normals, v_radii):
        ctx.saved_tensors  # noqa: B018  (raises if an input was modified in place since the forward)
        inputs, radii, flips = ctx.state
        C, N = radii.shape[0], radii.shape[1]
        npdt = inputs[0].dtype
        # the cotangents as they come (often strided column views of the compositing's gradient rows: the
        # kernel reads them in place, no copies)
        def cot(v, shape):
            return np.zeros(shape, npdt) if v is None else np.asarray(v.detach().numpy(), npdt)

        g_means, g_quats, g_scales = np.empty((N, 3), npdt), np.empty((N, 4), npdt), np.empty((N, 2), npdt)
        with KERNEL_LOCK:
            project_backward_kernel(*inputs, radii, flips, cot(v_KWH, (C, N, 3, 3)), cot(v_means2d, (C, N, 2)),
                                    cot(v_depths, (C, N)), cot(v_normals, (C, N, 3)), g_means, g_quats, g_scales)
        return tuple(torch.from_numpy(a) for a in (g_means, g_quats, g_scales)) + (None,) * 6


def project_surfels_cpu(means, quats, scales, viewmats, Ks, width, height, *, near_plane=0.01,
                        far_plane=1e10) -> SurfelProjection:
    """``project_surfels`` on the cpu backend (same outputs; cameras get no gradient)."""
    KWH, m2d, depths, normals, radii = SurfelProjectFunction.apply(means, quats, scales, viewmats, Ks, width, height,
                                                                    near_plane, far_plane)
    return SurfelProjection(KWH, m2d, depths, normals, radii)
