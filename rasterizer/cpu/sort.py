"""Stable depth sort for the cpu backend: an LSD radix sort of float32 keys (3 passes of 11 bits).

Same result as ``torch.argsort(depths, dim=1, stable=True)`` (ties keep index order; -0.0 sorts as
+0.0), about 10x faster for 10^5 Gaussians on 2 cores than PyTorch's or NumPy's comparison sorts. Given
the radii, culled Gaussians are left out of the sort and appended (see depth_order).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

RADIX_BITS = 11
BUCKETS = 1 << RADIX_BITS


@njit(cache=True, inline="always")
def sortable_bits(value):
    """uint32 whose unsigned order is the float order of ``value`` (float32 bit pattern, -0.0 -> +0.0)."""
    u = np.float32(value + np.float32(0.0)).view(np.uint32)
    if u & np.uint32(0x80000000):
        return ~u
    return u | np.uint32(0x80000000)


@njit(cache=True)
def argsort_row(depths, radii):
    """Stable ascending order [N] int64 of float32 depths [N]. With radii [N, 2] (not empty), the
    Gaussians with a zero radius are left out of the sort and come last, in index order."""
    n = depths.shape[0]
    culling = radii.shape[0] > 0
    keys = np.empty(n, np.uint32)
    idx = np.empty(n, np.int64)
    m = 0  # sorted entries
    tail = n  # culled ones fill idx from the end, reversed below
    for i in range(n):
        if culling and (radii[i, 0] <= 0 or radii[i, 1] <= 0):
            tail -= 1
            idx[tail] = i
        else:
            keys[m] = sortable_bits(depths[i])
            idx[m] = i
            m += 1
    idx[m:] = idx[m:][::-1].copy()
    tmp_idx = np.empty(m, np.int64)
    tmp_keys = np.empty(m, np.uint32)
    count = np.empty(BUCKETS + 1, np.int64)
    src_idx, src_keys = idx[:m], keys[:m]
    for shift in range(0, 32, RADIX_BITS):
        count[:] = 0
        for i in range(m):
            count[((src_keys[i] >> shift) & (BUCKETS - 1)) + 1] += 1
        for b in range(BUCKETS):
            count[b + 1] += count[b]
        for i in range(m):
            d = (src_keys[i] >> shift) & (BUCKETS - 1)
            pos = count[d]
            count[d] = pos + 1
            tmp_idx[pos] = src_idx[i]
            tmp_keys[pos] = src_keys[i]
        src_idx, tmp_idx = tmp_idx, src_idx
        src_keys, tmp_keys = tmp_keys, src_keys
    idx[:m] = src_idx
    return idx


def depth_order(depths: np.ndarray, radii: np.ndarray | None = None) -> np.ndarray:
    """[C, N] int64: per camera, Gaussian indices sorted near to far (stable) from float32 depths [C, N]
    (cameras in parallel; one camera without a parallel launch, which costs more than it saves). With
    radii [C, N, 2] int32, culled Gaussians (a zero radius: they touch no tile) are not sorted and come
    last in index order; the others keep the order of the full sort."""
    if radii is None:
        radii = np.zeros((depths.shape[0], 0, 2), np.int32)
    if depths.shape[0] == 1:
        return argsort_row(depths[0], radii[0])[None]
    return depth_order_parallel(depths, radii)


@njit(cache=True, parallel=True)
def depth_order_parallel(depths, radii):
    """depth_order with cameras in parallel."""
    C, N = depths.shape
    out = np.empty((C, N), np.int64)
    for c in prange(C):
        out[c] = argsort_row(depths[c], radii[c])
    return out
