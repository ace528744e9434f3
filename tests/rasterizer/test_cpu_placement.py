"""Numba's workqueue workers on different CPUs while a launch uses more than one (rasterizer/cpu/placement.py)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWO_CPUS = hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2
needs_two = pytest.mark.skipif(not TWO_CPUS, reason="needs at least two allowed CPUs and Linux affinity calls")

PROBE = """
import json, os, sys
import numba, numpy as np
from numba import njit, prange, types
from rasterizer.cpu.launch import KERNEL_LOCK
from rasterizer.cpu.placement import PLACEMENT, worker_thread_ids

getcpu = types.ExternalFunction("sched_getcpu", types.int32())

@njit(parallel=True)
def cpus_of_iterations(out):
    for i in prange(out.shape[0]):
        s = 0.0
        for k in range(200_000):  # long enough for the scheduler to see both workers
            s += np.sqrt(k + i)
        out[i] = getcpu() + 0 * int(s > -1.0)

threads = int(sys.argv[1])
numba.set_num_threads(threads)
apart = 0
for _ in range(20):
    out = np.zeros(threads, np.int64)
    with KERNEL_LOCK:
        cpus_of_iterations(out)
    apart += len(set(out.tolist())) == threads
tids = np.zeros(threads, np.int64)
with KERNEL_LOCK:
    worker_thread_ids(tids)
affinity = {int(t): sorted(os.sched_getaffinity(int(t))) for t in tids}
print(json.dumps({"apart": apart, "affinity": affinity, "allowed": sorted(os.sched_getaffinity(0)),
                  "pinned": {str(k): v for k, v in PLACEMENT.pinned.items()}}))
"""


def _probe(threads: int, code: str = PROBE, **env) -> dict:
    full = {k: v for k, v in os.environ.items() if k != "SPLATFORGE_PIN_THREADS"}
    full.update(env)
    full.setdefault("NUMBA_NUM_THREADS", "2")
    out = subprocess.run([sys.executable, "-c", code, str(threads)], env=full, cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_two
def test_two_workers_are_pinned_to_different_cpus_and_run_apart():
    r = _probe(2)
    cpus = [tuple(a) for a in r["affinity"].values()]
    assert all(len(c) == 1 for c in cpus), r
    assert len(set(cpus)) == 2, r
    assert r["apart"] == 20, r  # every launch ran its two iterations on two CPUs


@needs_two
def test_one_thread_keeps_the_whole_allowed_set():
    r = _probe(1)
    assert r["pinned"] == {}, r
    assert all(a == r["allowed"] for a in r["affinity"].values()), r


@needs_two
def test_opt_out_leaves_affinity_alone():
    r = _probe(2, SPLATFORGE_PIN_THREADS="0")
    assert r["pinned"] == {}, r
    assert all(a == r["allowed"] for a in r["affinity"].values()), r


@needs_two
def test_going_from_two_threads_to_one_frees_the_worker():
    code = PROBE.replace("threads = int(sys.argv[1])", "threads = 2\nnumba.set_num_threads(2)\n"
                         "with KERNEL_LOCK:\n    worker_thread_ids(np.zeros(2, np.int64))\n"
                         "assert len(PLACEMENT.pinned) == 2\nthreads = 1")
    r = _probe(1, code)
    assert r["pinned"] == {}, r
    assert all(a == r["allowed"] for a in r["affinity"].values()), r
