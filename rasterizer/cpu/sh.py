"""View-dependent SH colours on the CPU: one Numba kernel forward, a hand-written one backward.

Drop-in replacement for ``rasterizer.reference.sh.sh_to_color`` (same signature and numerics):
colour [C, N, 3] = max(SH(dir) + 0.5, 0) with dir = normalize(mean - camera centre) (``F.normalize``:
divided by max(|d|, 1e-12)), real SH up to degree 3 in the degree-major layout of ``sh [N, K, 3]``.

Backward (per camera c and Gaussian n, g = v_colour * [raw colour >= 0], as clamp_min's gradient):
v_coeffs[n, k] += basis_k g; v_dir = sum_k (coeffs[n, k] . g) d basis_k / d dir; through the
normalisation v_d = (v_dir - u (u . v_dir)) / |d| (v_dir / 1e-12 below that); v_means[n] += v_d.
Camera centres (viewmats) get no gradient, as in the cpu projection. Arithmetic in float64.

Skipped work: pairs culled by the optional ``radii`` (zero radius; about 60% of them in a colmap_bird
view) are neither evaluated (colour 0, as the reference gives) nor differentiated, and in the backward
a pair whose cotangent is zero (culled, or hidden behind others) is skipped: for finite means and
coefficients it adds exactly zero. (No
``inline="always"`` here: Numba 0.6x miscompiled the inlined per-Gaussian backward, clamped channels
received gradients; the test against the reference caught it.)
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..reference.sh import SH_C0, SH_C1, SH_C2, SH_C3, check_radii, num_sh_bases, split_sh
from . import forward_only
from .launch import KERNEL_LOCK
from .schedule import dealt_block, dealt_iterations, thread_count
from .vecmath import prefetch_span

NORM_EPS = 1e-12  # F.normalize's eps
AHEAD = 8  # Gaussians ahead whose coefficients are prefetched (see prefetch_coefficients)

C20, C21, C22, C23, C24 = SH_C2
C30, C31, C32, C33, C34, C35, C36 = SH_C3


@njit(cache=True)
def sh_basis_at(x, y, z, K, b):
    """b[:K] = SH basis at the unit direction (x, y, z) (K = 1, 4, 9 or 16)."""
    b[0] = SH_C0
    if K > 1:
        b[1] = -SH_C1 * y
        b[2] = SH_C1 * z
        b[3] = -SH_C1 * x
    if K > 4:
        xx, yy, zz = x * x, y * y, z * z
        b[4] = C20 * x * y
        b[5] = C21 * y * z
        b[6] = C22 * (2.0 * zz - xx - yy)
        b[7] = C23 * x * z
        b[8] = C24 * (xx - yy)
    if K > 9:
        b[9] = C30 * y * (3.0 * xx - yy)
        b[10] = C31 * x * y * z
        b[11] = C32 * y * (4.0 * zz - xx - yy)
        b[12] = C33 * z * (2.0 * zz - 3.0 * xx - 3.0 * yy)
        b[13] = C34 * x * (4.0 * zz - xx - yy)
        b[14] = C35 * z * (xx - yy)
        b[15] = C36 * x * (xx - 3.0 * yy)


@njit(cache=True)
def sh_basis_grad_at(x, y, z, K, w):
    """d/d(x, y, z) of sum_k w[k] basis_k at (x, y, z), x, y, z taken as independent."""
    gx = gy = gz = 0.0
    if K > 1:
        gx += -SH_C1 * w[3]
        gy += -SH_C1 * w[1]
        gz += SH_C1 * w[2]
    if K > 4:
        gx += C20 * y * w[4] + C23 * z * w[7] - 2.0 * C22 * x * w[6] + 2.0 * C24 * x * w[8]
        gy += C20 * x * w[4] + C21 * z * w[5] - 2.0 * C22 * y * w[6] - 2.0 * C24 * y * w[8]
        gz += C21 * y * w[5] + 4.0 * C22 * z * w[6] + C23 * x * w[7]
    if K > 9:
        xx, yy, zz = x * x, y * y, z * z
        gx += (6.0 * C30 * x * y * w[9] + C31 * y * z * w[10] - 2.0 * C32 * x * y * w[11]
               - 6.0 * C33 * x * z * w[12] + C34 * (4.0 * zz - 3.0 * xx - yy) * w[13]
               + 2.0 * C35 * x * z * w[14] + C36 * (3.0 * xx - 3.0 * yy) * w[15])
        gy += (C30 * (3.0 * xx - 3.0 * yy) * w[9] + C31 * x * z * w[10] + C32 * (4.0 * zz - xx - 3.0 * yy) * w[11]
               - 6.0 * C33 * y * z * w[12] - 2.0 * C34 * x * y * w[13] - 2.0 * C35 * y * z * w[14]
               - 6.0 * C36 * x * y * w[15])
        gz += (C31 * x * y * w[10] + 8.0 * C32 * y * z * w[11] + C33 * (6.0 * zz - 3.0 * xx - 3.0 * yy) * w[12]
               + 8.0 * C34 * x * z * w[13] + C35 * (xx - yy) * w[14])
    return gx, gy, gz


@njit(cache=True)
def unit_direction(means, centers, n, c, u):
    """u[:4] = (d / max(|d|, eps), |d|) with d = mean of Gaussian n - centre of camera c. (Written to a
    scratch array: returned as a tuple it is not inlined and the SH backward took ~10% longer, measured.)"""
    dx = np.float64(means[n, 0]) - centers[c, 0]
    dy = np.float64(means[n, 1]) - centers[c, 1]
    dz = np.float64(means[n, 2]) - centers[c, 2]
    norm = np.sqrt(dx * dx + dy * dy + dz * dz)
    inv = 1.0 / max(norm, NORM_EPS)
    u[0], u[1], u[2], u[3] = dx * inv, dy * inv, dz * inv, norm


@njit(cache=True, inline="always")
def prefetch_coefficients(shN, radii, K, n):
    """Prefetch the shN [N, K_all - 1, 3] coefficients the kernels will read for Gaussian n (none when it
    is culled in the first camera of several: most are, in a large scene). The visible Gaussians' rows
    are spread over the array with culled ones between them, which the hardware prefetcher does not
    follow: without this each row waited for memory (degree 1 took as long as degree 3, measured)."""
    if n < shN.shape[0] and K > 1 and (radii.shape[0] == 0 or (radii[0, n, 0] > 0 and radii[0, n, 1] > 0)
                                         or radii.shape[0] > 1):
        prefetch_span(shN, n * shN.shape[1] * 3, (K - 1) * 3)


@njit(cache=True)
def is_culled(radii, c, n):
    """Pair (c, n) has a zero radius (radii [C, N, 2] int32; an empty array: nothing is culled)."""
    return radii.shape[0] > 0 and (radii[c, n, 0] <= 0 or radii[c, n, 1] <= 0)


@njit(cache=True)
def sh_forward_one(means, centers, sh0, shN, K, radii, out, n, b):
    """Colours of Gaussian n in every camera (see sh_forward_kernel); b [16] scratch."""
    for c in range(out.shape[0]):
        if is_culled(radii, c, n):
            out[c, n, 0] = out[c, n, 1] = out[c, n, 2] = 0.0
            continue
        unit_direction(means, centers, n, c, b)  # b[:4] is scratch until sh_basis_at fills it
        x, y, z = b[0], b[1], b[2]
        sh_basis_at(x, y, z, K, b)
        # colour before the clamp, summed in k order (written out in both kernels: as a helper returning
        # a tuple it is not inlined and the forward took 2x longer, measured)
        r0 = 0.5 + b[0] * sh0[n, 0, 0]
        r1 = 0.5 + b[0] * sh0[n, 0, 1]
        r2 = 0.5 + b[0] * sh0[n, 0, 2]
        for k in range(1, K):
            r0 += b[k] * shN[n, k - 1, 0]
            r1 += b[k] * shN[n, k - 1, 1]
            r2 += b[k] * shN[n, k - 1, 2]
        out[c, n, 0] = max(r0, 0.0)
        out[c, n, 1] = max(r1, 0.0)
        out[c, n, 2] = max(r2, 0.0)


@njit(cache=True, parallel=True)
def sh_forward_kernel(means, centers, sh0, shN, K, radii, out, threads):
    """out [C, N, 3] = max(sum_k basis_k(u) coeffs[n, k] + 0.5, 0); coefficient 0 in sh0 [N, 1, 3], the
    others in shN [N, K_all - 1, 3]; 0 for pairs culled by radii [C, N, 2] (empty: none)."""
    C, N = out.shape[0], out.shape[1]
    for it in prange(dealt_iterations(N, threads)):
        b = np.empty(16)  # scratch per block of Gaussians (an allocation per Gaussian costs more than the work)
        lo, hi = dealt_block(it, N, threads)
        for n in range(lo, hi):
            prefetch_coefficients(shN, radii, K, n + AHEAD)
            if C == 1 and radii.shape[0] > 0 and (radii[0, n, 0] <= 0 or radii[0, n, 1] <= 0):
                # culled (the common case, tested here: a call per Gaussian costs ~15 ns, measured)
                out[0, n, 0] = out[0, n, 1] = out[0, n, 2] = 0.0
                continue
            sh_forward_one(means, centers, sh0, shN, K, radii, out, n, b)


@njit(cache=True)
def sh_backward_one(means, centers, sh0, shN, K, radii, v_colors, v_sh0, v_shN, v_means, n, b, w):
    """Gradients of Gaussian n summed over cameras (see sh_backward_kernel); b, w [16] scratch. The
    first camera with a non-zero cotangent writes the coefficient gradients of rows < K, later ones add;
    a culled pair, or one whose cotangent v_colors[c, n] is zero (hidden in that view), adds exactly
    zero and is skipped; rows never written are zeroed."""
    C = v_colors.shape[0]
    vm0 = vm1 = vm2 = 0.0
    first = True
    for c in range(C):
        if is_culled(radii, c, n) or (v_colors[c, n, 0] == 0.0 and v_colors[c, n, 1] == 0.0
                                      and v_colors[c, n, 2] == 0.0):
            continue
        unit_direction(means, centers, n, c, w)  # w[:4] is scratch until the coefficient loop fills it
        x, y, z, norm = w[0], w[1], w[2], w[3]
        sh_basis_at(x, y, z, K, b)
        r0 = 0.5 + b[0] * sh0[n, 0, 0]  # colour before the clamp (see sh_forward_one)
        r1 = 0.5 + b[0] * sh0[n, 0, 1]
        r2 = 0.5 + b[0] * sh0[n, 0, 2]
        for k in range(1, K):
            r0 += b[k] * shN[n, k - 1, 0]
            r1 += b[k] * shN[n, k - 1, 1]
            r2 += b[k] * shN[n, k - 1, 2]
        g0 = v_colors[c, n, 0] if r0 >= 0.0 else 0.0
        g1 = v_colors[c, n, 1] if r1 >= 0.0 else 0.0
        g2 = v_colors[c, n, 2] if r2 >= 0.0 else 0.0
        if first:
            v_sh0[n, 0, 0], v_sh0[n, 0, 1], v_sh0[n, 0, 2] = b[0] * g0, b[0] * g1, b[0] * g2
        else:
            v_sh0[n, 0, 0] += b[0] * g0
            v_sh0[n, 0, 1] += b[0] * g1
            v_sh0[n, 0, 2] += b[0] * g2
        w[0] = sh0[n, 0, 0] * g0 + sh0[n, 0, 1] * g1 + sh0[n, 0, 2] * g2
        for k in range(1, K):
            bk = b[k]
            if first:
                v_shN[n, k - 1, 0] = bk * g0
                v_shN[n, k - 1, 1] = bk * g1
                v_shN[n, k - 1, 2] = bk * g2
            else:
                v_shN[n, k - 1, 0] += bk * g0
                v_shN[n, k - 1, 1] += bk * g1
                v_shN[n, k - 1, 2] += bk * g2
            w[k] = shN[n, k - 1, 0] * g0 + shN[n, k - 1, 1] * g1 + shN[n, k - 1, 2] * g2
        first = False
        gx, gy, gz = sh_basis_grad_at(x, y, z, K, w)
        if norm > NORM_EPS:
            dot = x * gx + y * gy + z * gz
            vm0 += (gx - x * dot) / norm
            vm1 += (gy - y * dot) / norm
            vm2 += (gz - z * dot) / norm
        else:
            vm0 += gx / NORM_EPS
            vm1 += gy / NORM_EPS
            vm2 += gz / NORM_EPS
    if first:  # no camera wrote anything
        v_sh0[n, 0, 0] = v_sh0[n, 0, 1] = v_sh0[n, 0, 2] = 0.0
    for k in range(0 if first else K - 1, shN.shape[1]):
        v_shN[n, k, 0] = v_shN[n, k, 1] = v_shN[n, k, 2] = 0.0
    v_means[n, 0] = vm0
    v_means[n, 1] = vm1
    v_means[n, 2] = vm2


@njit(cache=True, parallel=True)
def sh_backward_kernel(means, centers, sh0, shN, K, radii, v_colors, v_sh0, v_shN, v_means, threads):
    """Gradients of sh_forward_kernel: v_sh0 [N, 1, 3], v_shN [N, K_all - 1, 3] (rows >= K - 1 are 0),
    v_means [N, 3]."""
    C, N = v_colors.shape[0], v_colors.shape[1]
    for it in prange(dealt_iterations(N, threads)):
        b = np.empty(16)
        w = np.empty(16)
        lo, hi = dealt_block(it, N, threads)
        for n in range(lo, hi):
            prefetch_coefficients(shN, radii, K, n + AHEAD)
            if C == 1 and (v_colors[0, n, 0] == 0.0 and v_colors[0, n, 1] == 0.0 and v_colors[0, n, 2] == 0.0):
                # no gradient reaches n (culled or hidden: the common case, tested here, see the forward)
                v_sh0[n, 0, 0] = v_sh0[n, 0, 1] = v_sh0[n, 0, 2] = 0.0
                for k in range(shN.shape[1]):
                    v_shN[n, k, 0] = v_shN[n, k, 1] = v_shN[n, k, 2] = 0.0
                v_means[n, 0] = v_means[n, 1] = v_means[n, 2] = 0.0
                continue
            sh_backward_one(means, centers, sh0, shN, K, radii, v_colors, v_sh0, v_shN, v_means, n, b, w)


def camera_centers(viewmats: Tensor) -> np.ndarray:
    """[C, 3] float64 camera centres -R^T t of world_to_cam matrices [C, 4, 4] (CPU), summed in row order
    (the same bits as PyTorch's float64 matmul, tested; a quarter of its time on these tiny arrays)."""
    vm = viewmats.detach().numpy().astype(np.float64)
    R, t = vm[:, :3, :3], vm[:, :3, 3]
    return -(R[:, 0, :] * t[:, 0, None] + R[:, 1, :] * t[:, 1, None] + R[:, 2, :] * t[:, 2, None])


class SHColorFunction(torch.autograd.Function):
    """colours [C, N, 3] from means [N, 3] and SH coefficients split as sh0 [N, 1, 3] and shN [N, K - 1, 3],
    0 for pairs culled by radii [C, N, 2] (or None) (see the module docstring)."""

    @staticmethod
    def forward(ctx, degree: int, means: Tensor, sh0: Tensor, shN: Tensor, viewmats: Tensor,
                radii: Tensor | None) -> Tensor:
        K = num_sh_bases(degree)
        m = means.detach().contiguous().numpy()
        a0, aN = sh0.detach().contiguous().numpy(), shN.detach().contiguous().numpy()
        centers = camera_centers(viewmats)
        r = np.zeros((0, 0, 2), np.int32) if radii is None else radii.contiguous().numpy()
        out = np.empty((viewmats.shape[0], m.shape[0], 3), m.dtype)
        with KERNEL_LOCK:
            sh_forward_kernel(m, centers, a0, aN, K, r, out, thread_count())
        ctx.arrays = (m, centers, a0, aN, K, r)
        ctx.save_for_backward(means, sh0, shN, radii)
        return torch.from_numpy(out)

    @staticmethod
    @once_differentiable
    def backward(ctx, v_colors: Tensor):
        ctx.saved_tensors  # noqa: B018  (raises if an input was modified in place since the forward)
        m, centers, a0, aN, K, r = ctx.arrays
        v_sh0, v_shN = np.empty(a0.shape, a0.dtype), np.empty(aN.shape, aN.dtype)
        v_means = np.empty(m.shape, m.dtype)
        with KERNEL_LOCK:
            sh_backward_kernel(m, centers, a0, aN, K, r,
                               np.ascontiguousarray(v_colors.detach().numpy(), dtype=m.dtype), v_sh0, v_shN, v_means,
                               thread_count())
        need = ctx.needs_input_grad
        grad = lambda a, i: torch.from_numpy(a) if need[i] else None  # noqa: E731
        return None, grad(v_means, 1), grad(v_sh0, 2), grad(v_shN, 3), None, None


def sh_to_color(degree: int, means: Tensor, coeffs: Tensor | tuple[Tensor, Tensor], viewmats: Tensor,
                radii: Tensor | None = None) -> Tensor:
    """Same contract as ``rasterizer.reference.sh.sh_to_color`` (CPU tensors; no gradient to viewmats).
    ``coeffs`` [N, K, 3] or split as (sh0 [N, 1, 3], shN [N, K - 1, 3]): the split form, as trainers
    store the coefficients, is read in place (no concatenation, gradients land in two arrays). Pairs
    culled by ``radii`` [C, N, 2] are not evaluated (colour 0, no gradient)."""
    sh0, shN = split_sh(coeffs)
    if 1 + shN.shape[1] < num_sh_bases(degree):
        raise ValueError(f"sh_degree {degree} needs {num_sh_bases(degree)} coefficients, got {1 + shN.shape[1]}")
    check_radii(radii, viewmats.shape[0], means.shape[0])
    return forward_only.apply(SHColorFunction, int(degree), means, sh0, shN, viewmats, radii)
