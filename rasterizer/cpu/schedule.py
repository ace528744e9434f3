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

Work items of very uneven cost, or threads that start late (on the 2-vCPU VM the second worker of a launch
sometimes starts 2.5 ms after the first, when its CPU was idle), are better claimed one at a time from a
shared counter (``claim``: an atomic fetch-and-add): each thread takes the next unclaimed item when it is free,

    for _ in prange(threads):  # counter = np.zeros(1, np.int64), passed in by the caller
        while True:
            item = claim(counter)
            if item >= n:
                break
            ...

The result must not depend on which thread does which item (each item writes its own outputs). The counter
comes from the caller: Numba does not know that ``claim`` writes it, and a kernel that allocated it and read it
after the loop was compiled to read the value before the loop.
"""

from __future__ import annotations

import numba
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

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


@intrinsic
def claim(typingctx, counter):
    """counter[0] += 1, atomically (sequentially consistent); returns the value before: the item this thread
    takes. ``counter``: a C-contiguous int64 array shared by the threads of a parallel loop."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64 and counter.layout == "C"):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.atomic_rmw("add", ary.data, ir.Constant(ir.IntType(64), 1), "seq_cst")

    return types.int64(counter), codegen
