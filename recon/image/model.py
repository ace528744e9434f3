"""An image as 2D Gaussians: the in-memory model that `splatforge image` fits, stores (.gimg) and renders.

Coordinates are the rasterizer's normalised image coordinates (rasterizer/image/geometry.py: [-1, 1], x right,
y down), so a model renders at any size; ``width`` x ``height`` is the size it was fitted at (scale 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from rasterizer.image import rasterize_image_gaussians

CHANNEL_LAYOUTS = {1: "L", 3: "RGB", 4: "RGBA"}  # channel count -> what the channels are


@dataclass(frozen=True)
class ImageGaussians:
    """N image Gaussians. means [N, 2] normalised; cholesky [N, 3] (l11, l21, l22) normalised, Sigma = L L^T;
    colors [N, C] (opacity folded in: GaussianImage's sum); width, height: fitted size in pixels; layout:
    "L", "RGB" or "RGBA" (what the C channels mean; values in [0, 1] as fitted from the source);
    source: free-form facts about the source image (name, bit depth), kept in the file."""

    means: Tensor
    cholesky: Tensor
    colors: Tensor
    width: int
    height: int
    layout: str = "RGB"
    source: dict = field(default_factory=dict)
    pixel_variance: float = 0.0
    """output pixels^2 of the low-pass every render adds (rasterizer ``prefilter_variance``): the fit models a
    pixel as the area average of the continuous image over the pixel, approximated by a Gaussian of this
    variance (a 1-pixel box has 1/12); 0: point samples at pixel centres (GaussianImage)."""

    @property
    def n(self) -> int:
        return self.means.shape[0]

    @property
    def channels(self) -> int:
        return self.colors.shape[1]

    def detached(self) -> "ImageGaussians":
        """The same model with parameters detached and contiguous (what is saved)."""
        return replace(self, means=self.means.detach().contiguous(), cholesky=self.cholesky.detach().contiguous(),
                       colors=self.colors.detach().contiguous())

    def to(self, device) -> "ImageGaussians":
        """The same model with its tensors on ``device``."""
        return replace(self, means=self.means.to(device), cholesky=self.cholesky.to(device),
                       colors=self.colors.to(device))

    def render(self, width: int | None = None, height: int | None = None, *, prefilter_variance: float = 0.0,
               backend: str = "auto") -> Tensor:
        """[H, W, C] sum-mode render at width x height (default: the fitted size), not clamped; each output pixel
        is an area sample (``pixel_variance``) plus ``prefilter_variance`` (output pixels^2, anti-aliasing)."""
        return rasterize_image_gaussians(self.means, self.colors, width or self.width, height or self.height,
                                         cholesky=self.cholesky,
                                         prefilter_variance=self.pixel_variance + prefilter_variance,
                                         backend=backend).render


def render_image(model: ImageGaussians, width: int | None = None, height: int | None = None, **kw) -> Tensor:
    """Render clamped to [0, 1] without gradients: what is written to an image file."""
    with torch.no_grad():
        return model.render(width, height, **kw).clamp_(0.0, 1.0)  # in place: no second image in memory
