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
