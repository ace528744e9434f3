"""splatforge's differentiable Gaussian rasterizer.

One API (:func:`rasterize_gaussians`; 2D surfels: :func:`rasterize_surfels`), backends ``reference``
(plain PyTorch), ``cpu`` (Numba kernels with hand-written backward; 3D Gaussians only) and ``cuda``
(gsplat's kernels). Conventions: rasterizer/CONVENTIONS.md.
Never imports recon or viewer.

Importing it applies the process settings of :mod:`rasterizer.runtime`: glibc keeps freed memory,
and, when imported before torch, the OpenMP spin count (the ``splatforge`` command imports it first;
imported after torch, the first cpu-backend render warns once with the fix).
"""

from . import runtime as _runtime

_runtime.apply()
GOMP_SPINCOUNT_DEFAULT = _runtime.GOMP_SPINCOUNT_DEFAULT

from .api import rasterize_gaussians, resolve_backend
from .camera import Camera, stack_cameras
from .surfels import SurfelRender, rasterize_surfels
from .tiles import TILE_SIZE, TileGrid
from .validate import RasterizerInputError

__all__ = ["rasterize_gaussians", "rasterize_surfels", "SurfelRender", "resolve_backend", "Camera", "stack_cameras",
           "TileGrid", "TILE_SIZE", "RasterizerInputError"]
