"""Dealing per-Gaussian work to the threads of a Numba parallel loop in blocks taken in turn.

Numba splits ``prange(n)`` into one contiguous run of iterations per thread. Per-Gaussian work is
uneven over memory (culled Gaussians cost nothing, densification appends its clones at the end, large
ones cluster), so contiguous halves of the Gaussians gave one of the two threads up to twice the
other's work (measured at 218k colmap_bird Gaussians: 243k vs 125k tile tests in binning). Dealt in
blocks, each thread gets blocks from all over the array:

    for it in prange(dealt_iterations(G, threads)):
        lo, hi = dealt_block(it, G, threads)
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
def _blocks_per_thread(G, threads):
    return ((G + DEAL_BLOCK - 1) // DEAL_BLOCK + threads - 1) // threads


@njit(cache=True, inline="always")
def dealt_iterations(G, threads):
    """Iterations of the parallel loop that deals G items in blocks of DEAL_BLOCK, block b to thread
    b % threads (some of the last ones empty)."""
    return _blocks_per_thread(G, threads) * threads


@njit(cache=True, inline="always")
def dealt_block(it, G, threads):
    """Item range [lo, hi) of parallel iteration it (see dealt_iterations); empty past the last block."""
    per_thread = _blocks_per_thread(G, threads)
    lo = ((it % per_thread) * threads + it // per_thread) * DEAL_BLOCK
    if lo >= G:
        return G, G
    return lo, min(G, lo + DEAL_BLOCK)
