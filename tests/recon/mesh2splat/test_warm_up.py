"""Workers warm up one at a time (issue 49): with a cold kernel cache the first compiles the Numba kernels
and the others load them, instead of every worker compiling the same kernels at once (minutes of CPU each)."""

import fcntl
import subprocess
import sys

import pytest

from recon.mesh2splat.batch import warm_up_lock

HOLD_AND_TRY = """
import fcntl, sys
from recon.mesh2splat.batch import warm_up_lock
with warm_up_lock():
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_warm_up_lock_is_exclusive_across_processes_and_released(tmp_path, monkeypatch):
    from rasterizer.kernel_cache import key_numba_cache

    lock_file = key_numba_cache() / "mesh2splat-warm-up.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_AND_TRY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with open(lock_file, "a") as handle:  # another process's warm-up waits while it is held
            with pytest.raises(BlockingIOError):
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    with warm_up_lock():  # released with its holder: taken at once
        pass
