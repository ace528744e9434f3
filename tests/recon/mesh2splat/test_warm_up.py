"""Workers warm up one at a time (issue 49): with a cold kernel cache the first compiles the Numba kernels
and the others load them, instead of every worker compiling the same kernels at once (minutes of CPU each)."""

import errno
import fcntl
import subprocess
import sys

import pytest

from recon.mesh2splat.batch import warm_up_lock

HOLD_AND_TRY = """
import sys
from pathlib import Path
from recon.mesh2splat.batch import warm_up_lock
with warm_up_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_warm_up_lock_is_exclusive_across_processes_and_released(tmp_path):
    lock_file = tmp_path / "mesh2splat-warm-up.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_AND_TRY, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
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
    with warm_up_lock(tmp_path):  # released with its holder: taken at once
        pass


def test_warm_up_runs_unlocked_where_the_file_system_takes_no_locks(tmp_path, monkeypatch):
    """flock failing (ENOLCK on an NFS / FUSE cache folder) must not stop the worker: the body runs unlocked."""
    def no_locks(handle, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    ran = []
    with warm_up_lock(tmp_path):
        ran.append(True)
    assert ran == [True]


def test_warm_up_runs_unlocked_where_no_lock_file_can_be_made(tmp_path):
    ran = []
    with warm_up_lock(tmp_path / "absent" / "folder"):
        ran.append(True)
    assert ran == [True]
