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
