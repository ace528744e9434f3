"""splatforge's differentiable Gaussian rasterizer.

One API (:func:`rasterize_gaussians`), backends ``reference`` (plain PyTorch), ``cpu`` (Numba kernels
with hand-written backward) and ``cuda`` (gsplat's kernels). Conventions: rasterizer/CONVENTIONS.md.
Never imports recon or viewer.

OpenMP spinning: PyTorch's OpenMP threads (libgomp) spin after each parallel op, by default ~300k
iterations of ``pause``, several milliseconds on AMD cores, and on a 2-core machine they take the cores
from the Numba kernels that run next (the cpu backend's forward + backward measured 1.5x slower). When
this package is imported before torch, it sets ``GOMP_SPINCOUNT`` (unless the user set it) to
:data:`GOMP_SPINCOUNT_DEFAULT`; the ``splatforge`` command does this first thing. Library users who
import torch first can export ``GOMP_SPINCOUNT=10000`` themselves.
"""

import os as _os
import sys as _sys

GOMP_SPINCOUNT_DEFAULT = "10000"  # ~0.1 ms of spinning: short torch op sequences stay fast, kernels undisturbed
if "torch" not in _sys.modules:
    _os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT_DEFAULT)

from .api import rasterize_gaussians, resolve_backend
from .camera import Camera, stack_cameras
from .tiles import TILE_SIZE, TileGrid
from .validate import RasterizerInputError

__all__ = ["rasterize_gaussians", "resolve_backend", "Camera", "stack_cameras", "TileGrid", "TILE_SIZE",
           "RasterizerInputError"]
