"""Process settings of rasterizer.runtime: freed memory kept on glibc (fewer page faults), opt-outs."""

import os
import platform
import subprocess
import sys

import pytest

from rasterizer import runtime

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
MALLINFO2 = GLIBC and tuple(int(x) for x in platform.libc_ver()[1].split(".")[:2]) >= (2, 33)


def _run(code: str, **env) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "SPLATFORGE_KEEP"))}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, check=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))).stdout


PAGE_FAULTS = """
import ctypes, resource, numpy as np, rasterizer
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
print(rasterizer.runtime.KEEPS_FREED_MEMORY)
for _ in range(3):
    a = np.ones(40 << 20, np.uint8); del a  # 40 MB: above glibc's largest default mmap threshold
a = np.ones(40 << 20, np.uint8)
print(libc.mallinfo2().hblkhd)  # bytes in blocks of their own mmap (unmapped again on free)
del a
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    a = np.ones(40 << 20, np.uint8); del a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0)
"""


@pytest.mark.skipif(not MALLINFO2, reason="mallopt tuning applies to glibc only; the test reads mallinfo2 (2.33+)")
def test_freed_memory_is_reused():
    """On: a 40 MB array comes from the heap and its pages are reused (few page faults). Off: glibc gives
    it a mapping of its own, unmapped on free, so every new array faults its pages in again (10 x 40 MB:
    > 2,000 faults with 4 KiB pages, ~210 where numpy's arrays get transparent huge pages)."""
    kept, mapped, faults = _run(PAGE_FAULTS).split()
    assert kept == "True" and int(mapped) < (40 << 20) and int(faults) < 200
    off, mapped_off, faults_off = _run(PAGE_FAULTS, SPLATFORGE_KEEP_FREED_MEMORY="0").split()
    assert off == "False" and int(mapped_off) >= (40 << 20) and int(faults_off) > 2 * int(faults)


def test_user_settings_win(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert runtime.keep_freed_memory() is False
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv("SPLATFORGE_KEEP_FREED_MEMORY", "0")
    assert runtime.keep_freed_memory() is False


SPIN = """
import sys, warnings
first = sys.argv[1]
if first.startswith("torch"):
    import torch, rasterizer
    if first == "torch-1-thread":
        torch.set_num_threads(1)
else:
    import rasterizer, torch
import os
from rasterizer import rasterize_gaussians
from tests.rasterizer.scenes import random_scene
p, viewmats, Ks = random_scene(n=20, width=16, height=16, dtype=torch.float32)
args = [p[k].detach() for k in ("means", "quats", "scales", "opacities", "colors")]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for backend in ("reference", "cpu", "cpu"):
        rasterize_gaussians(*args, viewmats, Ks, 16, 16, backend=backend)
spin = [w for w in caught if issubclass(w.category, rasterizer.runtime.SpinCountWarning)]
print(rasterizer.runtime.SPIN_SET_TOO_LATE, os.environ.get("GOMP_SPINCOUNT"), len(spin))
print(spin[0].message if spin else "")
"""


def _spin_run(first: str, **env) -> list[str]:
    keep = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    keep.update(env)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    keep["PYTHONPATH"] = root + os.pathsep + keep.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", SPIN, first], env=keep, capture_output=True, text=True, check=True,
                          cwd=root).stdout.splitlines()


@pytest.mark.skipif(not GLIBC, reason="libgomp (PyTorch's OpenMP on Linux) is what reads GOMP_SPINCOUNT")
def test_spin_count_set_before_torch_and_a_late_import_warns_once_with_the_fix():
    """rasterizer first: GOMP_SPINCOUNT is set, no warning. torch first: too late (libgomp read the
    environment when torch loaded it); the first cpu render (not the reference's) warns, once, with
    the export line. A spin setting of the user's own, or PyTorch on one thread (no OpenMP threads to
    spin): no warning."""
    state, message = _spin_run("rasterizer")
    assert state == f"False {runtime.GOMP_SPINCOUNT_DEFAULT} 0" and message == ""
    state, message = _spin_run("torch")
    assert state == "True None 1" and "export GOMP_SPINCOUNT=10000" in message
    assert _spin_run("torch", GOMP_SPINCOUNT="5000")[0] == "False 5000 0"
    assert _spin_run("torch", OMP_WAIT_POLICY="passive")[0] == "False None 0"
    assert _spin_run("torch-1-thread")[0] == "True None 0"
