"""Images as 2D Gaussians (GaussianImage, Image-GS, GSASR): :func:`rasterize_image_gaussians` and the
coordinate conversions it uses (geometry.py). See rasterizer/DESIGN.md, "Image Gaussians"."""

from .api import ImageInputError, ImageRender, ImageRenderMeta, rasterize_image_gaussians
from .geometry import cholesky_to_covars, covars_to_pixels, means_to_pixels

__all__ = ["rasterize_image_gaussians", "ImageRender", "ImageRenderMeta", "ImageInputError", "cholesky_to_covars",
           "covars_to_pixels", "means_to_pixels"]
