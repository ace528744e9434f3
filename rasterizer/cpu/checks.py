"""Input checks as Numba kernels: one vectorised pass instead of PyTorch's isfinite (== , abs, !=) + all."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

CHUNK = 1 << 16


@njit(cache=True, parallel=True, error_model="numpy")
def count_non_finite(flat):
    """Number of NaN/Inf entries of a 1-D float array (x - x is 0 exactly for finite x, NaN otherwise)."""
    n = flat.shape[0]
    chunks = (n + CHUNK - 1) // CHUNK
    bad = np.zeros(chunks, np.int64)
    for c in prange(chunks):
        acc = 0
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            v = flat[i]
            acc += 0 if v - v == 0.0 else 1
        bad[c] = acc
    return bad.sum()
