"""Launching the cpu backend's Numba kernels: the threading layer and :data:`KERNEL_LOCK`.

Numba's OpenMP layer and PyTorch's OpenMP runtime spin-wait against each other (PyTorch ops became
40x slower after a Numba parallel kernel in our measurements); the workqueue layer does not, so it is
selected here (unless ``NUMBA_THREADING_LAYER`` is set), before any parallel kernel is compiled. The
workqueue layer is not re-entrant: every parallel launch must hold :data:`KERNEL_LOCK` (the viewer
renders from another thread while training runs). Code outside ``rasterizer`` that launches its own
Numba parallel kernels in the same process (``recon.losses.ssim``) takes the same lock, imported as
``from rasterizer.cpu import KERNEL_LOCK``.

Taking the lock also keeps the workers of the coming launch on different CPUs (``placement.py``: on the
2-vCPU VM the scheduler otherwise ran both halves of most launches on one CPU, one after the other).
"""

from __future__ import annotations

import os
import threading
import types

import numba
import numpy as np
from numba.core.registry import CPUDispatcher
from torch import Tensor

from .placement import place_workers

if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"


class KernelLock:
    """A ``threading.Lock`` used through ``with`` only; entering it also places Numba's workers for the launch
    that follows (:func:`placement.place_workers`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> "KernelLock":
        self._lock.acquire()
        try:
            place_workers()
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, kind, err, tb) -> None:
        self._lock.release()


KERNEL_LOCK = KernelLock()
"""Held around every Numba parallel launch in the process (not re-entrant: take it once per launch)."""


def kernel_array(t: Tensor) -> np.ndarray:
    """A CPU tensor as the numpy array a Numba kernel takes: detached, C-contiguous (a copy only when ``t`` is not),
    sharing memory with ``t`` otherwise. Same shape and dtype."""
    return t.detach().contiguous().numpy()


_SERIAL: dict = {}


def serial_twin(kernel: CPUDispatcher) -> CPUDispatcher:
    """``kernel`` (a ``@njit(parallel=True)`` function) compiled without ``parallel``: its ``prange`` loops run as
    plain loops on the calling thread, with the same arithmetic (same options otherwise: fastmath, error
    model), so the same results. Compiled on first use, cached on disk under its own name (``NAME_serial``:
    Numba's cache key holds no compile options, so the twin of the same function object would read the
    parallel build from the cache)."""
    twin = _SERIAL.get(kernel)
    if twin is None:
        f = kernel.py_func
        g = types.FunctionType(f.__code__, f.__globals__, f.__name__ + "_serial", f.__defaults__, f.__closure__)
        g.__qualname__ = f.__qualname__ + "_serial"
        g.__doc__ = f.__doc__
        options = {k: v for k, v in kernel.targetoptions.items() if k not in ("parallel", "nopython")}
        twin = _SERIAL[kernel] = numba.njit(cache=True, **options)(g)
    return twin


def for_threads(kernel, threads: int):
    """The kernel to launch with ``threads`` threads: at one thread a parallel kernel's serial twin
    (:func:`serial_twin`), since a parallel launch on Numba's workqueue layer hands the loop to a worker
    thread and sleeps until it is done even when there is one: 41 us per launch on the 2-vCPU VM against
    0.4 us for a plain call. Used for the two binning passes and the forward compositing; the projection
    and SH kernels keep their parallel build: their serial twins ran slower per Gaussian (SH +8-21 %,
    projection up to +9 % on the full city and colmap_bird models), more than the launch they save.
    Anything else (more threads, a wrapped kernel as scripts/roofline.py times them) is returned as it is."""
    if threads == 1 and isinstance(kernel, CPUDispatcher) and kernel.targetoptions.get("parallel"):
        return serial_twin(kernel)
    return kernel
