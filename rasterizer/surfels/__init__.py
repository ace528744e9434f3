"""2D Gaussian surfels (2DGS): :func:`rasterize_surfels` and its records. See the surfel section of
rasterizer/DESIGN.md."""

from .api import rasterize_surfels
from .projection import SurfelProjection, project_surfels
from .records import SurfelComposited, SurfelMeta, SurfelRender, SurfelSplats

__all__ = ["rasterize_surfels", "project_surfels", "SurfelProjection", "SurfelSplats", "SurfelComposited",
           "SurfelMeta", "SurfelRender"]
