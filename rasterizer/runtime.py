"""Process settings that the cpu backend's speed depends on, applied when ``rasterizer`` is imported.

OpenMP spinning: PyTorch's OpenMP threads (libgomp) spin after each parallel op, by default ~300k
iterations of ``pause``, several milliseconds on AMD cores, and on a 2-core machine they take the cores
from the Numba kernels that run next (the cpu backend's forward + backward measured 1.5x slower).
libgomp reads ``GOMP_SPINCOUNT`` once, when it is loaded (``import torch`` loads it), and offers no call
to change it later. When ``rasterizer`` is imported before libgomp is loaded, ``GOMP_SPINCOUNT`` is set
(unless the user set it, or ``OMP_WAIT_POLICY``) to :data:`GOMP_SPINCOUNT_DEFAULT`; the ``splatforge``
command does this first thing. When libgomp was loaded first without either setting,
:data:`SPIN_SET_TOO_LATE` is True and the first cpu-backend render while PyTorch runs more than one
thread warns once (:func:`warn_if_spin_set_too_late`) with the fix: ``export GOMP_SPINCOUNT=10000``
before Python starts, or ``import rasterizer`` before torch, or ``torch.set_num_threads(1)``, the one
setting that works late (no OpenMP worker threads left to spin; measured as fast as the early spin
setting on the benchmark, but it changes PyTorch for the whole process, so it is only suggested).

Freed memory: a training step allocates and frees tens of MB of arrays (gradients of the SH
coefficients alone are 39 MB at 218k Gaussians). glibc serves blocks above its mmap threshold (at most
32 MiB, adjusted dynamically) with fresh ``mmap`` calls and unmaps them on free, so every step page-faults
them in again: 4,700 faults and ~20-40 ms of system time per colmap_bird step at 218k Gaussians,
measured. :func:`keep_freed_memory` raises the mmap and trim thresholds to 1 GiB with ``mallopt`` so
freed blocks are reused (~350 faults per step). It applies on glibc only, and not when the user set
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` / malloc ``GLIBC_TUNABLES`` or
``SPLATFORGE_KEEP_FREED_MEMORY=0``.
"""

from __future__ import annotations

import ctypes
import os
import sys
import warnings

GOMP_SPINCOUNT_DEFAULT = "10000"  # ~0.1 ms of spinning: short torch op sequences stay fast, kernels undisturbed
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
KEEP_FREED_BYTES = 1 << 30


def openmp_loaded() -> bool:
    """Whether libgomp is mapped into this process already (Linux: /proc/self/maps; False elsewhere)."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        return False


def default_gomp_spincount() -> bool:
    """Set GOMP_SPINCOUNT to the default unless the user chose a spin setting (GOMP_SPINCOUNT or
    OMP_WAIT_POLICY) or libgomp is loaded already (it read the environment when it loaded). Returns
    True in that last case: too late, PyTorch's threads spin for the default ~300k iterations."""
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return False
    if openmp_loaded():
        return True
    os.environ["GOMP_SPINCOUNT"] = GOMP_SPINCOUNT_DEFAULT
    return False


class SpinCountWarning(RuntimeWarning):
    """PyTorch's OpenMP threads were started without GOMP_SPINCOUNT: the cpu backend runs slower."""


SPIN_SET_TOO_LATE = False  # apply(): libgomp was loaded before rasterizer, without a spin setting
SPIN_WARNING = (
    "rasterizer: PyTorch's OpenMP runtime (libgomp) was loaded before `import rasterizer` could set "
    "GOMP_SPINCOUNT, so its threads spin for milliseconds after every op and slow the cpu backend (about "
    "1.5x measured). Fix: `export GOMP_SPINCOUNT=10000` before starting Python, or `import rasterizer` "
    "before torch; or, from here on, torch.set_num_threads(1) (PyTorch's own ops then use one thread). "
    "Any GOMP_SPINCOUNT value silences this warning.")
_spin_warned = False


def warn_if_spin_set_too_late() -> None:
    """Warn once per process (SpinCountWarning) when :data:`SPIN_SET_TOO_LATE` and PyTorch runs more
    than one thread (with one, no OpenMP thread is left spinning)."""
    global _spin_warned
    if SPIN_SET_TOO_LATE and not _spin_warned and _torch_threads() > 1:
        _spin_warned = True
        warnings.warn(SPIN_WARNING, SpinCountWarning, stacklevel=3)


def _torch_threads() -> int:
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else 1


def keep_freed_memory() -> bool:
    """Keep freed blocks of up to 1 GiB in the process (see module doc); True when applied."""
    env = os.environ
    if (env.get("SPLATFORGE_KEEP_FREED_MEMORY", "1") == "0"
            or any(k in env for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"))
            or "glibc.malloc." in env.get("GLIBC_TUNABLES", "")):
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    mmap_ok = bool(mallopt(M_MMAP_THRESHOLD, KEEP_FREED_BYTES))
    trim_ok = bool(mallopt(M_TRIM_THRESHOLD, KEEP_FREED_BYTES))
    return mmap_ok and trim_ok


KEEPS_FREED_MEMORY = False  # whether apply() kept freed memory


def apply() -> None:
    """Both settings (``import rasterizer`` calls this once); records :data:`SPIN_SET_TOO_LATE` and
    :data:`KEEPS_FREED_MEMORY`."""
    global KEEPS_FREED_MEMORY, SPIN_SET_TOO_LATE
    SPIN_SET_TOO_LATE = default_gomp_spincount()
    KEEPS_FREED_MEMORY = keep_freed_memory()
