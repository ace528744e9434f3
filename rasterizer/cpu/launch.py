"""Launching the cpu backend's Numba kernels: the threading layer and :data:`KERNEL_LOCK`.

Numba's OpenMP layer and PyTorch's OpenMP runtime spin-wait against each other (PyTorch ops became
40x slower after a Numba parallel kernel in our measurements); the workqueue layer does not, so it is
selected here (unless ``NUMBA_THREADING_LAYER`` is set), before any parallel kernel is compiled. The
workqueue layer is not re-entrant: every parallel launch must hold :data:`KERNEL_LOCK` (the viewer
renders from another thread while training runs). Code outside ``rasterizer`` that launches its own
Numba parallel kernels in the same process (``recon.fused_ssim``) takes the same lock, imported as
``from rasterizer.cpu import KERNEL_LOCK``.
"""

from __future__ import annotations

import os
import threading

import numba

if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"

KERNEL_LOCK = threading.Lock()
"""Held around every Numba parallel launch in the process (not re-entrant: take it once per launch)."""
