"""Numba kernels of the `cpu` backend: fused EWA projection of 3D Gaussians and its hand-written backward.

Same numerics as ``rasterizer/reference/projection.py`` and ``covariance.py`` (the specification),
step for step, so that the backward reproduces PyTorch autograd of the reference exactly, including
its conventions at the non-differentiable points:

- ``F.normalize``: q / max(|q|, 1e-12) (the norm gets gradient only where |q| >= 1e-12);
- ``torch.clamp`` of x/z, y/z in the Jacobian: gradient passes where lo <= x/z <= hi (inclusive);
- ``det.clamp(min=1e-10)``: gradient passes where det >= 1e-10;
- ``sqrt(clamp(det_orig / det, min=0))``: gradient g / (2 sqrt(.)) where the ratio >= 0, else 0;
- culled pairs (a zero radius) output 0 and get no gradient (the reference's ``zero_culled``); the
  forward finds most of them before computing their covariances. Visible pairs whose cotangents are
  all zero (hidden in that view) are skipped in the backward: for finite inputs they add exactly zero;
  where the reference's autograd gives NaN from a zero cotangent times an infinite derivative (in
  antialiased mode a singular 2D covariance, ratio 0; or through ``torch.where`` for a culled pair at
  depth 0), the skip gives 0.

Both kernels run in parallel over Gaussians and loop over cameras inside, so the reduction over cameras
in the backward is race-free (each thread owns its Gaussians' gradient rows). Arithmetic runs in float64
whatever the storage dtype (values are widened with ``np.float64()`` when loaded: Numba's ``float()`` keeps
a float32 float32). ``error_model="numpy"``
gives IEEE semantics (x / 0 = inf or nan, as in PyTorch) instead of raising ZeroDivisionError. Repeated
divisions by z, det and |q| are multiplications by reciprocals, and per-camera constants (including the
clamp limits) are tabulated once per launch (``camera_table``): differences from the reference are
rounding only (agreement ~1e-13 relative in float64 in tests/rasterizer/test_cpu_projection.py).

3x3 matrices are 9-tuples in row-major order (kept in registers: no per-Gaussian heap allocation; the
small helpers are left to LLVM to inline: Numba's IR-level inline="always" trips its parfor array analysis).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .schedule import dealt_block, dealt_iterations

ALPHA_THRESHOLD = 1.0 / 255.0
MAX_EXTEND = 3.33
NORM_EPS = 1e-12  # F.normalize
DET_MIN = 1e-10  # add_blur_and_invert


# --------------------------------------------------------------------------------------------------
# small tuple helpers (inlined)


@njit(cache=True, error_model="numpy")
def _mul(A, B):
    """A @ B for 9-tuples."""
    return (A[0] * B[0] + A[1] * B[3] + A[2] * B[6], A[0] * B[1] + A[1] * B[4] + A[2] * B[7],
            A[0] * B[2] + A[1] * B[5] + A[2] * B[8],
            A[3] * B[0] + A[4] * B[3] + A[5] * B[6], A[3] * B[1] + A[4] * B[4] + A[5] * B[7],
            A[3] * B[2] + A[4] * B[5] + A[5] * B[8],
            A[6] * B[0] + A[7] * B[3] + A[8] * B[6], A[6] * B[1] + A[7] * B[4] + A[8] * B[7],
            A[6] * B[2] + A[7] * B[5] + A[8] * B[8])


@njit(cache=True, error_model="numpy")
def _t(A):
    """A^T for a 9-tuple."""
    return (A[0], A[3], A[6], A[1], A[4], A[7], A[2], A[5], A[8])


@njit(cache=True, error_model="numpy")
def _add(A, B):
    return (A[0] + B[0], A[1] + B[1], A[2] + B[2], A[3] + B[3], A[4] + B[4], A[5] + B[5],
            A[6] + B[6], A[7] + B[7], A[8] + B[8])


@njit(cache=True, error_model="numpy")
def _clamp(x, lo, hi):
    """torch.clamp(x, min=lo, max=hi) (NaN propagates) and its gradient mask lo <= x <= hi."""
    inside = (x >= lo) and (x <= hi)
    if x < lo:
        x = lo
    if x > hi:
        x = hi
    return x, inside


@njit(cache=True, error_model="numpy")
def _normalized_quat(quats, n):
    """(w, x, y, z) / max(|q|, 1e-12) and the norm."""
    qw, qx = np.float64(quats[n, 0]), np.float64(quats[n, 1])
    qy, qz = np.float64(quats[n, 2]), np.float64(quats[n, 3])
    norm = math.sqrt(qw * qw + qx * qx + qy * qy + qz * qz)
    den = norm
    if den < NORM_EPS:
        den = NORM_EPS
    r = 1.0 / den
    return qw * r, qx * r, qy * r, qz * r, norm, den


@njit(cache=True, error_model="numpy")
def _rotmat(w, x, y, z):
    return (1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y),
            2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x),
            2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y))


@njit(cache=True, error_model="numpy")
def _world_covar(quats, scales, covars, n, has_covars):
    """World covariance (9-tuple): covars[n], or R S S^T R^T from quats[n], scales[n]."""
    if has_covars:
        return (np.float64(covars[n, 0, 0]), np.float64(covars[n, 0, 1]), np.float64(covars[n, 0, 2]),
                np.float64(covars[n, 1, 0]), np.float64(covars[n, 1, 1]), np.float64(covars[n, 1, 2]),
                np.float64(covars[n, 2, 0]), np.float64(covars[n, 2, 1]), np.float64(covars[n, 2, 2]))
    w, x, y, z, _, _ = _normalized_quat(quats, n)
    R = _rotmat(w, x, y, z)
    s0, s1, s2 = np.float64(scales[n, 0]), np.float64(scales[n, 1]), np.float64(scales[n, 2])
    M = (R[0] * s0, R[1] * s1, R[2] * s2, R[3] * s0, R[4] * s1, R[5] * s2, R[6] * s0, R[7] * s1, R[8] * s2)
    return _mul(M, _t(M))


# camera table columns: R (9, row-major), t (3), K[:2, :3] (6), clamp limits lo_x, hi_x, lo_y, hi_y, and a bound
# on |R|_2^2 (RADIUS_BOUND_COL)
CAM_COLS = 23
RADIUS_BOUND_COL = 22


@njit(cache=True, error_model="numpy")
def camera_table(viewmats, Ks, width, height):
    """Per-camera constants [C, CAM_COLS] float64, computed once per launch (pinhole_jacobian's limits)."""
    C = viewmats.shape[0]
    cams = np.empty((C, CAM_COLS))
    for c in range(C):
        for i in range(3):
            for j in range(3):
                cams[c, 3 * i + j] = viewmats[c, i, j]
            cams[c, 9 + i] = viewmats[c, i, 3]
        for i in range(2):
            for j in range(3):
                cams[c, 12 + 3 * i + j] = Ks[c, i, j]
        fx, fy, cx, cy = Ks[c, 0, 0], Ks[c, 1, 1], Ks[c, 0, 2], Ks[c, 1, 2]
        cams[c, 18] = -(cx / fx + 0.3 * (0.5 * width / fx))
        cams[c, 19] = (width - cx) / fx + 0.3 * (0.5 * width / fx)
        cams[c, 20] = -(cy / fy + 0.3 * (0.5 * height / fy))
        cams[c, 21] = (height - cy) / fy + 0.3 * (0.5 * height / fy)
        # |R|_2^2 = largest eigenvalue of R^T R <= its largest absolute row sum (1 for a rotation; view
        # matrices are not checked to be rigid): the camera-space covariance's largest eigenvalue is at
        # most this times the world one's
        r2 = 0.0
        for i in range(3):
            row = 0.0
            for j in range(3):
                row += abs(viewmats[c, 0, i] * viewmats[c, 0, j] + viewmats[c, 1, i] * viewmats[c, 1, j]
                           + viewmats[c, 2, i] * viewmats[c, 2, j])
            r2 = max(r2, row)
        cams[c, RADIUS_BOUND_COL] = r2
    return cams


@njit(cache=True, error_model="numpy")
def _camera(cams, c):
    """(R 9-tuple, t 3-tuple, K[:2,:3] 6-tuple, (lo_x, hi_x, lo_y, hi_y)) of camera c."""
    R = (cams[c, 0], cams[c, 1], cams[c, 2], cams[c, 3], cams[c, 4], cams[c, 5], cams[c, 6], cams[c, 7], cams[c, 8])
    t = (cams[c, 9], cams[c, 10], cams[c, 11])
    K = (cams[c, 12], cams[c, 13], cams[c, 14], cams[c, 15], cams[c, 16], cams[c, 17])
    lim = (cams[c, 18], cams[c, 19], cams[c, 20], cams[c, 21])
    return R, t, K, lim


@njit(cache=True, error_model="numpy")
def _cov2d(j00, j02, j11, j12, S):
    """A = J S (rows a0, a1 as 3-tuples) and the 2x2 J S J^T (c00, c01, c10, c11); J = [[j00,0,j02],[0,j11,j12]]."""
    a0 = (j00 * S[0] + j02 * S[6], j00 * S[1] + j02 * S[7], j00 * S[2] + j02 * S[8])
    a1 = (j11 * S[3] + j12 * S[6], j11 * S[4] + j12 * S[7], j11 * S[5] + j12 * S[8])
    c00 = a0[0] * j00 + a0[2] * j02
    c01 = a0[1] * j11 + a0[2] * j12
    c10 = a1[0] * j00 + a1[2] * j02
    c11 = a1[1] * j11 + a1[2] * j12
    return a0, a1, c00, c01, c10, c11


# --------------------------------------------------------------------------------------------------
# forward


@njit(cache=True, error_model="numpy")
def _write_culled(means2d, conics, depths, radii, comps, antialiased, c, n):
    """Outputs of a culled pair (see reference zero_culled)."""
    means2d[c, n, 0] = means2d[c, n, 1] = 0.0
    conics[c, n, 0] = conics[c, n, 1] = conics[c, n, 2] = 0.0
    depths[c, n] = 0.0
    radii[c, n, 0] = radii[c, n, 1] = 0
    comps[c, n] = 0.0 if antialiased else 1.0


@njit(cache=True, error_model="numpy")
def _max_scale_sq(scales, n):
    """Largest squared scale of Gaussian n: the largest eigenvalue of its covariance R S S^T R^T."""
    s0, s1, s2 = np.float64(scales[n, 0]), np.float64(scales[n, 1]), np.float64(scales[n, 2])
    return max(s0 * s0, s1 * s1, s2 * s2)


@njit(cache=True, parallel=True, error_model="numpy")
def project_forward_kernel(means, quats, scales, covars, has_covars, viewmats, Ks, opac, has_opac, width, height,
                           eps2d, near_plane, far_plane, antialiased,
                           means2d, conics, depths, radii, comps, threads):
    """Writes means2d [C,N,2], conics [C,N,3], depths [C,N], radii [C,N,2] int32, comps [C,N].

    viewmats [C,4,4] and Ks [C,3,3] float64; opac [N] float64 (ignored unless has_opac); quats [N,4] +
    scales [N,3] or covars [N,3,3] (has_covars).

    Culled pairs (most of them in a large scene) are found early: outside the depth range from the
    camera-space mean alone, and, with quats + scales, off the image by a bound on the screen radius
    (radius <= ceil(3.33 sqrt(|J|_F^2 |R|^2 max scale^2 + eps2d)): the 2D covariance's largest
    eigenvalue is at most |J|^2 |R|^2 times the world one's, max scale^2; |R|^2 is bounded per camera,
    1 for a rigid view matrix); their covariances are then never computed.
    """
    C = viewmats.shape[0]
    N = means.shape[0]
    cams = camera_table(viewmats, Ks, width, height)
    for it in prange(dealt_iterations(N, threads)):
        lo, hi = dealt_block(it, N, threads)
        for n in range(lo, hi):
            have_S = False
            S = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            smax2 = 0.0 if has_covars else _max_scale_sq(scales, n)
            px, py, pz = np.float64(means[n, 0]), np.float64(means[n, 1]), np.float64(means[n, 2])
            for c in range(C):
                Rv, (t0, t1, t2), Kc, (lo_x, hi_x, lo_y, hi_y) = _camera(cams, c)
                tx = Rv[0] * px + Rv[1] * py + Rv[2] * pz + t0
                ty = Rv[3] * px + Rv[4] * py + Rv[5] * pz + t1
                tz = Rv[6] * px + Rv[7] * py + Rv[8] * pz + t2
                if not (tz > near_plane and tz < far_plane):  # (NaN depths too)
                    _write_culled(means2d, conics, depths, radii, comps, antialiased, c, n)
                    continue
                fx, fy = Kc[0], Kc[4]
                rz = 1.0 / tz
                mx = (Kc[0] * tx + Kc[1] * ty + Kc[2] * tz) * rz
                my = (Kc[3] * tx + Kc[4] * ty + Kc[5] * tz) * rz
                uc, _ = _clamp(tx * rz, lo_x, hi_x)
                vc, _ = _clamp(ty * rz, lo_y, hi_y)
                txc = tz * uc
                tyc = tz * vc
                j00 = fx * rz
                j02 = -fx * txc * (rz * rz)
                j11 = fy * rz
                j12 = -fy * tyc * (rz * rz)
                if not has_covars:
                    lam = (j00 * j00 + j02 * j02 + j11 * j11 + j12 * j12) * cams[c, RADIUS_BOUND_COL] * smax2
                    bound = MAX_EXTEND * math.sqrt(lam * (1.0 + 1e-6) + eps2d) + 1.0
                    if mx + bound <= 0.0 or mx - bound >= width or my + bound <= 0.0 or my - bound >= height:
                        _write_culled(means2d, conics, depths, radii, comps, antialiased, c, n)
                        continue
                if not have_S:
                    S = _world_covar(quats, scales, covars, n, has_covars)
                    have_S = True
                Sc = _mul(_mul(Rv, S), _t(Rv))
                _, _, c00, c01, c10, c11 = _cov2d(j00, j02, j11, j12, Sc)
                det_orig = c00 * c11 - c01 * c10
                b00 = c00 + eps2d
                b11 = c11 + eps2d
                det = b00 * b11 - c01 * c10
                if det < DET_MIN:
                    det = DET_MIN
                rdet = 1.0 / det
                comp = 1.0
                if antialiased:
                    ratio = det_orig * rdet
                    if ratio < 0.0:
                        ratio = 0.0
                    comp = math.sqrt(ratio)
                # screen_radii + cull_radii
                sx = math.sqrt(b00) if b00 >= 0.0 else math.nan
                sy = math.sqrt(b11) if b11 >= 0.0 else math.nan
                extend = MAX_EXTEND
                if has_opac:
                    o = opac[n] * comp
                    ratio_o = o * 255.0  # o / ALPHA_THRESHOLD
                    if ratio_o < 1.0:
                        ratio_o = 1.0
                    extend = math.sqrt(2.0 * math.log(ratio_o))
                    if extend > MAX_EXTEND:
                        extend = MAX_EXTEND
                    if o < ALPHA_THRESHOLD:
                        extend = 0.0
                rx = math.ceil(extend * sx)
                ry = math.ceil(extend * sy)
                if not ((mx + rx > 0.0) and (mx - rx < width) and (my + ry > 0.0) and (my - ry < height) and (rx > 0.0)
                        and (ry > 0.0)):
                    _write_culled(means2d, conics, depths, radii, comps, antialiased, c, n)
                    continue
                radii[c, n, 0] = int(rx)
                radii[c, n, 1] = int(ry)
                means2d[c, n, 0] = mx
                means2d[c, n, 1] = my
                conics[c, n, 0] = b11 * rdet
                conics[c, n, 1] = -0.5 * (c01 + c10) * rdet
                conics[c, n, 2] = b00 * rdet
                depths[c, n] = tz
                comps[c, n] = comp


# --------------------------------------------------------------------------------------------------
# backward


@njit(cache=True, error_model="numpy")
def _pair_has_cotangent(radii, v_means2d, v_conics, v_depths, v_comps, antialiased, c, n):
    """Visible pair (c, n) with a non-zero cotangent? (Culled pairs get no gradient; zero cotangents
    contribute exactly zero: either way the pair is skipped.)"""
    return radii[c, n, 0] > 0 and (v_means2d[c, n, 0] != 0.0 or v_means2d[c, n, 1] != 0.0 or v_conics[c, n, 0] != 0.0
            or v_conics[c, n, 1] != 0.0 or v_conics[c, n, 2] != 0.0 or v_depths[c, n] != 0.0
            or (antialiased and v_comps[c, n] != 0.0))


@njit(cache=True, error_model="numpy")
def _has_cotangent(radii, v_means2d, v_conics, v_depths, v_comps, antialiased, n):
    """Any visible pair of Gaussian n with a non-zero cotangent?"""
    for c in range(v_depths.shape[0]):
        if _pair_has_cotangent(radii, v_means2d, v_conics, v_depths, v_comps, antialiased, c, n):
            return True
    return False


@njit(cache=True, parallel=True, error_model="numpy")
def project_backward_kernel(means, quats, scales, covars, has_covars, viewmats, Ks, width, height, eps2d,
                            antialiased, radii, v_means2d, v_conics, v_depths, v_comps,
                            g_means, g_quats, g_scales, g_covars, threads):
    """Vector-Jacobian product of project_forward_kernel's means2d, conics, depths (and comps when
    antialiased) w.r.t. means [N,3] and quats [N,4] + scales [N,3] or covars [N,3,3], over the visible
    pairs (radii [C,N,2] from the forward; culled ones get no gradient). Gradients are written (not
    accumulated) into g_means and g_quats/g_scales or g_covars."""
    C = viewmats.shape[0]
    N = means.shape[0]
    cams = camera_table(viewmats, Ks, width, height)
    for it in prange(dealt_iterations(N, threads)):
        lo, hi = dealt_block(it, N, threads)
        for n in range(lo, hi):
            # culled or without cotangent in every camera (most Gaussians of a large scene): zero rows. Tested
            # here for one camera, written out: a helper call per Gaussian costs more than the test (measured)
            if C == 0 or ((radii[0, n, 0] == 0 or (v_means2d[0, n, 0] == 0.0 and v_means2d[0, n, 1] == 0.0
                                                    and v_conics[0, n, 0] == 0.0 and v_conics[0, n, 1] == 0.0
                                                    and v_conics[0, n, 2] == 0.0 and v_depths[0, n] == 0.0
                                                    and (not antialiased or v_comps[0, n] == 0.0)))
                          and (C == 1 or not _has_cotangent(radii, v_means2d, v_conics, v_depths, v_comps, antialiased,
                                                            n))):
                g_means[n, 0] = g_means[n, 1] = g_means[n, 2] = 0.0
                if has_covars:
                    for i in range(9):
                        g_covars[n, i // 3, i % 3] = 0.0
                else:
                    g_quats[n, 0] = g_quats[n, 1] = g_quats[n, 2] = g_quats[n, 3] = 0.0
                    g_scales[n, 0] = g_scales[n, 1] = g_scales[n, 2] = 0.0
                continue
            S = _world_covar(quats, scales, covars, n, has_covars)
            px, py, pz = np.float64(means[n, 0]), np.float64(means[n, 1]), np.float64(means[n, 2])
            gp0 = gp1 = gp2 = 0.0
            gS = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            for c in range(C):
                # ---- zero cotangents (culled or hidden in this view, the common case) add exactly zero: skip
                if not _pair_has_cotangent(radii, v_means2d, v_conics, v_depths, v_comps, antialiased, c, n):
                    continue
                ga, gb, gc = np.float64(v_conics[c, n, 0]), np.float64(v_conics[c, n, 1]), np.float64(v_conics[c, n, 2])
                vm0, vm1 = np.float64(v_means2d[c, n, 0]), np.float64(v_means2d[c, n, 1])
                g_depth = np.float64(v_depths[c, n])
                g_comp = np.float64(v_comps[c, n]) if antialiased else 0.0
                # ---- recompute the forward
                Rv, (t0, t1, t2), Kc, (lo_x, hi_x, lo_y, hi_y) = _camera(cams, c)
                tx = Rv[0] * px + Rv[1] * py + Rv[2] * pz + t0
                ty = Rv[3] * px + Rv[4] * py + Rv[5] * pz + t1
                tz = Rv[6] * px + Rv[7] * py + Rv[8] * pz + t2
                Sc = _mul(_mul(Rv, S), _t(Rv))
                fx, fy = Kc[0], Kc[4]
                rz = 1.0 / tz
                rz2 = rz * rz
                u = tx * rz
                v = ty * rz
                uc, in_u = _clamp(u, lo_x, hi_x)
                vc, in_v = _clamp(v, lo_y, hi_y)
                txc = tz * uc
                tyc = tz * vc
                j00 = fx * rz
                j02 = -fx * txc * rz2
                j11 = fy * rz
                j12 = -fy * tyc * rz2
                a0, a1, c00, c01, c10, c11 = _cov2d(j00, j02, j11, j12, Sc)
                uvw0 = Kc[0] * tx + Kc[1] * ty + Kc[2] * tz
                uvw1 = Kc[3] * tx + Kc[4] * ty + Kc[5] * tz
                b00 = c00 + eps2d
                b11 = c11 + eps2d
                det_raw = b00 * b11 - c01 * c10
                det = det_raw
                if det < DET_MIN:
                    det = DET_MIN
                rdet = 1.0 / det
                con_a = b11 * rdet
                con_b = -0.5 * (c01 + c10) * rdet
                con_c = b00 * rdet

                # ---- conics -> blurred covariance (b01 = c01, b10 = c10)
                g_det = -(ga * con_a + gb * con_b + gc * con_c) * rdet
                gb00 = gc * rdet
                gb11 = ga * rdet
                gb01 = -0.5 * gb * rdet
                gb10 = gb01
                gc00 = gc01 = gc10 = gc11 = 0.0
                if antialiased:
                    det_orig = c00 * c11 - c01 * c10
                    ratio = det_orig * rdet
                    g_ratio = 0.0
                    if ratio >= 0.0:
                        g_ratio = g_comp / (2.0 * math.sqrt(ratio))
                    g_do = g_ratio * rdet
                    g_det -= g_ratio * ratio * rdet
                    gc00 = g_do * c11
                    gc11 = g_do * c00
                    gc01 = -g_do * c10
                    gc10 = -g_do * c01
                if det_raw >= DET_MIN:
                    gb00 += g_det * b11
                    gb11 += g_det * b00
                    gb01 -= g_det * c10
                    gb10 -= g_det * c01
                gc00 += gb00
                gc01 += gb01
                gc10 += gb10
                gc11 += gb11

                # ---- covars2d = J Sc J^T -> Sc and J
                # P = gc J (2x3); gSc = J^T P
                p0 = (gc00 * j00, gc01 * j11, gc00 * j02 + gc01 * j12)
                p1 = (gc10 * j00, gc11 * j11, gc10 * j02 + gc11 * j12)
                gSc = (j00 * p0[0], j00 * p0[1], j00 * p0[2],
                       j11 * p1[0], j11 * p1[1], j11 * p1[2],
                       j02 * p0[0] + j12 * p1[0], j02 * p0[1] + j12 * p1[1], j02 * p0[2] + j12 * p1[2])
                # gJ = gc (J Sc^T) + gc^T (J Sc); A = J Sc (rows a0, a1), A' = J Sc^T (rows e0, e1)
                e0_0 = j00 * Sc[0] + j02 * Sc[2]
                e0_2 = j00 * Sc[6] + j02 * Sc[8]
                e1_0 = j11 * Sc[1] + j12 * Sc[2]
                e1_2 = j11 * Sc[7] + j12 * Sc[8]
                e0_1 = j00 * Sc[3] + j02 * Sc[5]
                e1_1 = j11 * Sc[4] + j12 * Sc[5]
                gJ00 = gc00 * e0_0 + gc01 * e1_0 + gc00 * a0[0] + gc10 * a1[0]
                gJ02 = gc00 * e0_2 + gc01 * e1_2 + gc00 * a0[2] + gc10 * a1[2]
                gJ11 = gc10 * e0_1 + gc11 * e1_1 + gc01 * a0[1] + gc11 * a1[1]
                gJ12 = gc10 * e0_2 + gc11 * e1_2 + gc01 * a0[2] + gc11 * a1[2]

                # ---- Jacobian -> camera-space mean
                g_tz = g_depth
                g_tz -= (gJ00 * fx + gJ11 * fy) * rz2
                g_tz += 2.0 * (gJ02 * fx * txc + gJ12 * fy * tyc) * (rz2 * rz)
                g_txc = -gJ02 * fx * rz2
                g_tyc = -gJ12 * fy * rz2
                g_tz += g_txc * uc + g_tyc * vc
                g_u = g_txc * tz if in_u else 0.0
                g_v = g_tyc * tz if in_v else 0.0
                g_tx = g_u * rz
                g_ty = g_v * rz
                g_tz -= (g_u * u + g_v * v) * rz

                # ---- means2d = K[:2] t / tz
                g0 = vm0 * rz
                g1 = vm1 * rz
                g_tx += Kc[0] * g0 + Kc[3] * g1
                g_ty += Kc[1] * g0 + Kc[4] * g1
                g_tz += Kc[2] * g0 + Kc[5] * g1
                g_tz -= (g0 * uvw0 + g1 * uvw1) * rz

                # ---- world_to_cam
                gp0 += Rv[0] * g_tx + Rv[3] * g_ty + Rv[6] * g_tz
                gp1 += Rv[1] * g_tx + Rv[4] * g_ty + Rv[7] * g_tz
                gp2 += Rv[2] * g_tx + Rv[5] * g_ty + Rv[8] * g_tz
                gS = _add(gS, _mul(_mul(_t(Rv), gSc), Rv))

            g_means[n, 0] = gp0
            g_means[n, 1] = gp1
            g_means[n, 2] = gp2
            if has_covars:
                for i in range(3):
                    for j in range(3):
                        g_covars[n, i, j] = gS[3 * i + j]
                continue
            # ---- Sigma = M M^T, M = R diag(s)
            w, x, y, z, norm, den = _normalized_quat(quats, n)
            R = _rotmat(w, x, y, z)
            s0, s1, s2 = np.float64(scales[n, 0]), np.float64(scales[n, 1]), np.float64(scales[n, 2])
            M = (R[0] * s0, R[1] * s1, R[2] * s2, R[3] * s0, R[4] * s1, R[5] * s2, R[6] * s0, R[7] * s1, R[8] * s2)
            gM = _mul(_add(gS, _t(gS)), M)
            g_scales[n, 0] = gM[0] * R[0] + gM[3] * R[3] + gM[6] * R[6]
            g_scales[n, 1] = gM[1] * R[1] + gM[4] * R[4] + gM[7] * R[7]
            g_scales[n, 2] = gM[2] * R[2] + gM[5] * R[5] + gM[8] * R[8]
            gR = (gM[0] * s0, gM[1] * s1, gM[2] * s2, gM[3] * s0, gM[4] * s1, gM[5] * s2,
                  gM[6] * s0, gM[7] * s1, gM[8] * s2)
            # rotation matrix -> normalised quaternion
            gw = 2.0 * (-gR[1] * z + gR[2] * y + gR[3] * z - gR[5] * x - gR[6] * y + gR[7] * x)
            gx = 2.0 * (gR[1] * y + gR[2] * z + gR[3] * y - 2.0 * gR[4] * x - gR[5] * w + gR[6] * z + gR[7] * w
                        - 2.0 * gR[8] * x)
            gy = 2.0 * (-2.0 * gR[0] * y + gR[1] * x + gR[2] * w + gR[3] * x + gR[5] * z - gR[6] * w + gR[7] * z
                        - 2.0 * gR[8] * y)
            gz = 2.0 * (-2.0 * gR[0] * z - gR[1] * w + gR[2] * x + gR[3] * w - 2.0 * gR[4] * z + gR[5] * y
                        + gR[6] * x + gR[7] * y)
            # q_n = q / max(|q|, eps)
            rden = 1.0 / den
            gw *= rden
            gx *= rden
            gy *= rden
            gz *= rden
            if norm >= NORM_EPS:
                dot = gw * w + gx * x + gy * y + gz * z  # (q_n . g_qn) / den
                gw -= dot * w
                gx -= dot * x
                gy -= dot * y
                gz -= dot * z
            g_quats[n, 0] = gw
            g_quats[n, 1] = gx
            g_quats[n, 2] = gy
            g_quats[n, 3] = gz
