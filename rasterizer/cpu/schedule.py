"""Dealing per-Gaussian work to the threads of a Numba parallel loop in blocks taken in turn.

Numba splits ``prange(n)`` into one contiguous run of iterations per thread. Per-Gaussian work is
uneven over memory (culled Gaussians cost nothing, densification appends its clones at the end, large
ones cluster), so contiguous halves of the Gaussians gave one of the two threads up to twice the
other's work (measured at 218k colmap_bird Gaussians: 243k vs 125k tile tests in binning). Dealt in
blocks, each thread gets blocks from all over the array:

    n_blocks, per_thread = dealt_blocks(G, threads)
    for it in prange(per_thread * threads):
        lo, hi = dealt_block(it, n_blocks, per_thread, threads, G)
        for g in range(lo, hi):
            ...

``threads`` comes from the caller (``thread_count()``): Numba cannot cache a kernel that asks for it.
"""

from __future__ import annotations

import numba
from numba import njit

DEAL_BLOCK = 512  # items per block


def thread_count() -> int:
    """Threads of Numba's parallel loops (the ``threads`` argument of the dealing kernels)."""
    return max(1, numba.get_num_threads())


@njit(cache=True, inline="always")
def dealt_blocks(G, threads):
    """(number of blocks, blocks per thread) for dealing G items in blocks of DEAL_BLOCK, block b to
    thread b % threads."""
    n_blocks = (G + DEAL_BLOCK - 1) // DEAL_BLOCK
    return n_blocks, (n_blocks + threads - 1) // threads


@njit(cache=True, inline="always")
def dealt_block(it, n_blocks, per_thread, threads, G):
    """Item range [lo, hi) of parallel iteration it (see dealt_blocks); empty past the last block."""
    b = (it % per_thread) * threads + it // per_thread
    if b >= n_blocks:
        return G, G
    return b * DEAL_BLOCK, min(G, (b + 1) * DEAL_BLOCK)
