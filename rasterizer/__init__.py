"""splatforge's differentiable Gaussian rasterizer.

One API (:func:`rasterize_gaussians`), backends ``reference`` (plain PyTorch), ``cpu`` (Numba kernels
with hand-written backward) and ``cuda`` (gsplat's kernels). Conventions: docs/conventions.md.
Never imports recon or viewer.
"""

from .api import rasterize_gaussians, resolve_backend
from .camera import Camera, stack_cameras
from .tiles import TILE_SIZE, TileGrid
from .validate import RasterizerInputError

__all__ = ["rasterize_gaussians", "resolve_backend", "Camera", "stack_cameras", "TileGrid", "TILE_SIZE",
           "RasterizerInputError"]
