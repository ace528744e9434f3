"""The machine's two roofs, measured in the run that uses them (scripts/roofline.py).

- Compute roof: float32 flop/s of a Numba FMA loop on ``threads`` threads. Each thread runs LANES
  independent multiply-add chains ``x = x * a + b`` (LANES float32 values, a few vector registers) for
  ``iters`` rounds; LLVM keeps them in registers and issues one fused multiply-add per vector per round.
  Counting rule: 2 flops (a multiply and an add) per lane per round.
- Memory roof: bytes/s of a stream copy ``dst[:] = src`` of arrays far larger than the caches, split
  over ``threads`` threads. Counting rule (STREAM's): 2 x the array's bytes (one read, one write; the
  write-allocate read is not counted).

Each is the best of ``repeats`` runs (a roof is what the machine can do; on a loaded shared machine the
best run is the nearest to it).
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit, prange

LANES = 128  # float32 chains per thread: 8 AVX-512 (16 AVX2) registers, enough to hide the FMA latency


@njit(cache=True, fastmath=True)
def fma_chains(iters, a, b, lanes):
    """Sum of LANES chains x <- x a + b after ``iters`` rounds (the sum keeps the work alive)."""
    x = np.empty(LANES, np.float32)
    for j in range(LANES):
        x[j] = lanes[j]
    for _ in range(iters):
        for j in range(LANES):
            x[j] = x[j] * a + b
    s = np.float32(0.0)
    for j in range(LANES):
        s += x[j]
    return s


@njit(cache=True, parallel=True, fastmath=True)
def fma_parallel(iters, a, b, lanes, threads, out):
    for t in prange(threads):
        out[t] = fma_chains(iters, a, b, lanes)


@njit(cache=True, parallel=True)
def copy_parallel(src, dst, threads):
    n = src.shape[0]
    for t in prange(threads):
        lo, hi = t * n // threads, (t + 1) * n // threads
        dst[lo:hi] = src[lo:hi]


def fma_flops(iters: int, threads: int) -> float:
    """Counting rule of the FMA loop: 2 flops per lane per round per thread."""
    return 2.0 * LANES * iters * threads


def peak_flops(threads: int, iters: int = 2_000_000, repeats: int = 5) -> dict:
    """{"flops_per_s", "seconds", "flops", "rule"}: the best of ``repeats`` timed FMA runs (one warm-up)."""
    lanes = np.linspace(0.1, 0.9, LANES).astype(np.float32)
    a, b = np.float32(0.999999), np.float32(1e-7)
    out = np.empty(threads, np.float32)
    fma_parallel(1000, a, b, lanes, threads, out)
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fma_parallel(iters, a, b, lanes, threads, out)
        best = min(best, time.perf_counter() - t)
    flops = fma_flops(iters, threads)
    return {"flops_per_s": flops / best, "seconds": best, "flops": flops,
            "rule": f"2 flops x {LANES} float32 FMA chains x {iters} rounds x {threads} threads"}


def peak_bandwidth(threads: int, mib: int = 256, repeats: int = 5) -> dict:
    """{"bytes_per_s", "seconds", "bytes", "rule"}: the best of ``repeats`` timed stream copies of ``mib``
    MiB (one warm-up that also faults the pages in)."""
    n = mib * (1 << 20) // 4
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    copy_parallel(src, dst, threads)
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        copy_parallel(src, dst, threads)
        best = min(best, time.perf_counter() - t)
    moved = 2.0 * src.nbytes
    return {"bytes_per_s": moved / best, "seconds": best, "bytes": moved,
            "rule": f"stream copy of {mib} MiB: 2 x {src.nbytes} bytes (read + write)"}


@njit(cache=True, parallel=True)
def empty_parallel(out, threads):
    for t in prange(threads):
        out[t] = t


def launch_overhead(threads: int, repeats: int = 200) -> dict:
    """{"seconds", "rule"}: the median time of a parallel Numba launch that does nothing, taken as every cpu
    kernel is launched (holding rasterizer.cpu.KERNEL_LOCK, which also places the workers): the floor under
    a kernel's time however small its work."""
    from rasterizer.cpu import KERNEL_LOCK

    out = np.empty(threads, np.int64)
    empty_parallel(out, threads)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        with KERNEL_LOCK:
            empty_parallel(out, threads)
        times.append(time.perf_counter() - t)
    times.sort()
    return {"seconds": times[len(times) // 2], "rule": f"median of {repeats} empty parallel launches"}
