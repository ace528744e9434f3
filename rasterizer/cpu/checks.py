"""Input checks as Numba kernels: one vectorised pass instead of PyTorch's isfinite (== , abs, !=) + all."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

CHUNK = 1 << 16
PARALLEL_MIN = 1 << 21  # below this many entries one thread is faster than a parallel launch (~0.3 ms here)


def count_non_finite(flat: np.ndarray) -> int:
    """Number of NaN/Inf entries of a 1-D float array (x - x is 0 exactly for finite x, NaN otherwise)."""
    if flat.shape[0] < PARALLEL_MIN:
        return int(count_non_finite_serial(flat))
    return int(count_non_finite_parallel(flat))


@njit(cache=True, error_model="numpy")
def count_non_finite_serial(flat):
    """count_non_finite on one thread."""
    acc = 0
    for i in range(flat.shape[0]):
        v = flat[i]
        acc += 0 if v - v == 0.0 else 1
    return acc


@njit(cache=True, parallel=True, error_model="numpy")
def count_non_finite_parallel(flat):
    """count_non_finite over chunks in parallel."""
    n = flat.shape[0]
    chunks = (n + CHUNK - 1) // CHUNK
    bad = np.zeros(chunks, np.int64)
    for c in prange(chunks):
        bad[c] = count_non_finite_serial(flat[c * CHUNK:min(n, (c + 1) * CHUNK)])
    return bad.sum()


@njit(cache=True, error_model="numpy")
def count_zero_rows(rows):
    """Number of all-zero rows of a 2-D float array (zero-norm quaternions)."""
    bad = 0
    for i in range(rows.shape[0]):
        nonzero = False
        for j in range(rows.shape[1]):
            nonzero |= rows[i, j] != 0.0
        bad += 0 if nonzero else 1
    return bad


@njit(cache=True, error_model="numpy")
def count_outside(flat, lo, hi):
    """Number of entries of a 1-D float array below lo or above hi (NaN counts as inside: the finite
    check reports it)."""
    bad = 0
    for i in range(flat.shape[0]):
        v = flat[i]
        bad += 1 if (v < lo) | (v > hi) else 0
    return bad


@njit(cache=True, error_model="numpy")
def gaussian_value_problems(means, quats, scales, opac):
    """Number of Gaussians with a value ``rasterize_gaussians`` refuses, in one pass over means [N, 3], quats
    [N, 4], scales [N, 3] and opac [N] (one float dtype): a NaN/Inf anywhere, a quaternion of zeros, a
    negative scale, an opacity outside [0, 1] (the conditions of validate.check_gaussians, which names the
    problem when this is not 0)."""
    bad = 0
    for i in range(means.shape[0]):
        ok = True
        nonzero = False
        for j in range(3):
            m = means[i, j]
            s = scales[i, j]
            ok &= (m - m == 0.0) & (s - s == 0.0) & (s >= 0.0)
        for j in range(4):
            q = quats[i, j]
            ok &= q - q == 0.0
            nonzero |= q != 0.0
        o = opac[i]
        ok &= (o - o == 0.0) & (o >= 0.0) & (o <= 1.0)
        bad += 1 if not (ok and nonzero) else 0
    return bad


@njit(cache=True, error_model="numpy")
def camera_value_problems(viewmats, Ks):
    """Number of cameras with a NaN/Inf in viewmats [C, 4, 4] or Ks [C, 3, 3] or a focal length K[0,0] or
    K[1,1] <= 0 (the conditions of validate.check_cameras, which names the problem when this is not 0)."""
    bad = 0
    for c in range(viewmats.shape[0]):
        ok = (Ks[c, 0, 0] > 0.0) & (Ks[c, 1, 1] > 0.0)
        for i in range(4):
            for j in range(4):
                v = viewmats[c, i, j]
                ok &= v - v == 0.0
        for i in range(3):
            for j in range(3):
                k = Ks[c, i, j]
                ok &= k - k == 0.0
        bad += 0 if ok else 1
    return bad
