"""splatforge's differentiable Gaussian rasterizer.

One API per primitive: :func:`rasterize_gaussians` (3D Gaussians; 4D Gaussians are sliced at a time by
:func:`slice_gaussians_4d` first, rasterizer/spacetime/), :func:`rasterize_surfels` (2D surfels) and
:func:`rasterizer.image.rasterize_image_gaussians` (images as 2D Gaussians); backends ``reference`` (plain
PyTorch), ``cpu`` (Numba kernels with hand-written backward) and ``cuda`` (gsplat's kernels).
Conventions: rasterizer/CONVENTIONS.md.
Never imports recon or viewer.

Importing it applies the process settings of :mod:`rasterizer.runtime`: glibc keeps freed memory,
and, when imported before torch, the OpenMP spin count (the ``splatforge`` command imports it first;
imported after torch, the first cpu-backend render warns once with the fix); and it points Numba's
kernel cache at a folder named for the kernels' sources (:mod:`rasterizer.kernel_cache`).
"""

from . import runtime as _runtime

_runtime.apply()
GOMP_SPINCOUNT_DEFAULT = _runtime.GOMP_SPINCOUNT_DEFAULT

from .kernel_cache import key_numba_cache as _key_numba_cache  # before any kernel is defined

_key_numba_cache()

from .api import rasterize_gaussians, resolve_backend
from .camera import Camera, stack_cameras
from .spacetime import SlicedGaussians, slice_gaussians_4d
from .surfels import SurfelRender, rasterize_surfels
from .tiles import TILE_SIZE, TileGrid
from .validate import RasterizerInputError

__all__ = ["rasterize_gaussians", "rasterize_surfels", "SurfelRender", "slice_gaussians_4d", "SlicedGaussians",
           "resolve_backend", "Camera", "stack_cameras", "TileGrid", "TILE_SIZE", "RasterizerInputError"]
