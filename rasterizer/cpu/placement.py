"""Keeping Numba's workqueue worker threads on different CPUs while more than one is used.

What goes wrong without it (measured on the 2-vCPU VM, Linux, workqueue layer): the main thread wakes the
workers of a parallel launch and goes to sleep waiting for them; the scheduler places the woken workers on
the waker's CPU, so in 53 of 60 launches of a two-iteration ``prange`` both iterations ran on CPU 0, one
after the other (``sched_getcpu`` recorded inside the kernel), and the launch took twice as long (median
1.49 ms against 0.75 ms when they ran apart). The other CPU is idle meanwhile; the load balancer moves a
worker only at its next tick, after the work is done. The no-grad 500x500 image render (issue 19) went
from a median of 7.1 ms to 4.3 ms with the workers pinned; its kernel alone from 5.9 to 3.1 ms.

What this module does: when a parallel launch is about to use n >= 2 of Numba's threads
(``numba.get_num_threads()``), each of those n workers is pinned to its own CPU of the process's allowed
set (worker i to CPU i mod |allowed|); when it is about to use one thread, that worker is given the whole
allowed set back (so one-thread processes, e.g. the block-training workers, never pile onto one CPU). The
placement is redone only when n (or the process, after a fork) changes; the thread ids of the workers come
from a tiny parallel kernel that calls ``gettid`` in each iteration (iteration i runs on worker i: the
workqueue layer hands ``prange(n)`` to its n queues one iteration each).

Opt out with ``SPLATFORGE_PIN_THREADS=0`` (read once, when the process first launches a kernel). Failures
to set an affinity (a sandbox that forbids it) turn the placement off for the process, silently: it is a
speed measure, never a correctness one.
:func:`place_workers` runs inside :data:`rasterizer.cpu.launch.KERNEL_LOCK`, so no launch races with it.
"""

from __future__ import annotations

import os

import numba
import numpy as np
from numba import njit, prange, types

ENV = "SPLATFORGE_PIN_THREADS"

_gettid = types.ExternalFunction("gettid", types.int32())


@njit(parallel=True, cache=True)
def worker_thread_ids(out):
    """out[i] = the OS thread id of the worker that runs iteration i of a prange over len(out)."""
    for i in prange(out.shape[0]):
        out[i] = _gettid()


def enabled() -> bool:
    """Whether placement is on (``SPLATFORGE_PIN_THREADS`` unset or not 0/false/no/off) on a system with
    per-thread affinity (Linux), with the workqueue layer (other layers run iteration 0 on the calling
    thread, which must not be pinned)."""
    value = os.environ.get(ENV, "1").strip().lower()
    return (value not in ("0", "false", "no", "off") and hasattr(os, "sched_setaffinity")
            and numba.config.THREADING_LAYER == "workqueue")


class WorkerPlacement:
    """The placement state of one process (see the module docstring)."""

    def __init__(self) -> None:
        self.placed_for: tuple[int, int] | None = None  # (pid, threads) of the last placement
        self.active: bool | None = None  # decided at the first launch (enabled()); False after a failure
        self.pinned: dict[int, int] = {}  # worker thread id -> CPU, as last set

    def place(self) -> None:
        """Pin the workers the next launch uses (n >= 2) or free the one it uses (n = 1); no-op if unchanged."""
        if self.active is None:
            self.active = enabled()
        if not self.active:
            return
        n = numba.get_num_threads()
        key = (os.getpid(), n)
        if key == self.placed_for:
            return
        if self.placed_for is not None and self.placed_for[0] != key[0]:
            self.pinned = {}  # a forked child: new workers
        self.placed_for = key
        try:
            self._place(n)
        except OSError:
            self.active = False

    def _place(self, n: int) -> None:
        allowed = sorted(os.sched_getaffinity(0))
        if n >= 2 and len(allowed) >= 2:
            tids = np.zeros(n, np.int64)
            worker_thread_ids(tids)
            workers = list(dict.fromkeys(int(t) for t in tids))
            if len(workers) == n:
                for i, tid in enumerate(workers):
                    os.sched_setaffinity(tid, {allowed[i % len(allowed)]})
                    self.pinned[tid] = allowed[i % len(allowed)]
                return
        for tid in list(self.pinned):  # every worker pinned before goes back to the whole set
            os.sched_setaffinity(tid, set(allowed))
            del self.pinned[tid]


PLACEMENT = WorkerPlacement()


def place_workers() -> None:
    """Called by KERNEL_LOCK on entry (every parallel launch): :meth:`WorkerPlacement.place`, which returns at
    once while placement is off or the thread count is unchanged."""
    PLACEMENT.place()
