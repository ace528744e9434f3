"""Process settings of rasterizer.runtime: freed memory kept on glibc (fewer page faults), opt-outs."""

import os
import platform
import subprocess
import sys

import pytest

from rasterizer import runtime

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def _run(code: str, **env) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "SPLATFORGE_KEEP"))}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, check=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))).stdout


PAGE_FAULTS = """
import resource, numpy as np, rasterizer
print(rasterizer.runtime.KEEPS_FREED_MEMORY)
for _ in range(3):
    a = np.ones(40 << 20, np.uint8); del a  # 40 MB: above glibc's largest default mmap threshold
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    a = np.ones(40 << 20, np.uint8); del a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0)
"""


@pytest.mark.skipif(not GLIBC, reason="mallopt tuning applies to glibc only")
def test_freed_memory_is_reused():
    kept, faults = _run(PAGE_FAULTS).split()
    assert kept == "True" and int(faults) < 200  # reused heap: no fresh pages
    off, faults_off = _run(PAGE_FAULTS, SPLATFORGE_KEEP_FREED_MEMORY="0").split()
    assert off == "False" and int(faults_off) > 2000  # a fresh mmap each time (>= 500 faults even with huge pages)


def test_user_settings_win(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert runtime.keep_freed_memory() is False
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv("SPLATFORGE_KEEP_FREED_MEMORY", "0")
    assert runtime.keep_freed_memory() is False
