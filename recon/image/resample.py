"""Rendering an image model at another size: the output size, the anti-aliasing prefilter, the memory check.

The default fit's models are area-sampled (``ImageGaussians.pixel_variance``): every render averages its own
output pixels' areas, which is the anti-aliasing, and nothing here is added (recon/image/FORMAT.md). For
point-sampled models (GaussianImage's; ``pixel_variance`` 0), anti-aliasing when downsampling (scale s < 1): a
render point-samples the continuous Gaussian image at the
output pixel centres, while a box-downsampled image averages the 1/s x 1/s fitted pixels that an output
pixel covers. A box of n = 1/s fitted-pixel samples has variance (n^2 - 1) / 12 per axis in fitted pixels
(a discrete uniform of n points), so the Gaussian low-pass that approximates it has variance
(1/s^2 - 1) / 12 fitted pixels^2 = (1 - s^2) / 12 output pixels^2. Measured on fitted kodak crops, 1.2 times
that (:data:`ANTIALIAS_GAIN`) is 0.4 to 1.9 dB closer to the box-downsampled image (recon/image/FORMAT.md), so
the variance used is 1.2 (1 - s^2) / 12 = (1 - s^2) / 10 output pixels^2 (:func:`prefilter_variance`), which
the rasterizer adds to every Gaussian's covariance (``prefilter_variance``, integral kept). With a different
scale per axis (--size with another aspect ratio) the smaller scale decides (the isotropic low-pass is
sized for the more strongly downsampled axis). Measured: see recon/image/FORMAT.md, "Rendering at any size".
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import Tensor

from recon.core.errors import UsageError
from recon.losses.image import psnr  # noqa: F401  (re-exported: the PSNR image commands report)

RENDER_MEMORY_FACTOR = 3
"""peak bytes of `splatforge image render` per output value (H W C) over its 4 float32 bytes: the render (and, for
a render drawn in chunks of Gaussians, the chunk's; rasterizer/image/api.py), the 8- or 16-bit samples converted a
block of rows at a time (io.png_samples) and the PNG encoder's buffers: measured about 10 bytes per value,
rounded up to 3 x 4."""
RENDER_BYTES_PER_GAUSSIAN = 512
"""peak bytes per Gaussian of reading and rendering a model: the decoded arrays (float64 while dequantised), the
rasterizer's per-Gaussian arrays (pixel means, covariances, conics, colours, extents, boxes); measured about
300, rounded up. The tile lists are bounded on their own (rasterizer/cpu/image_sum.MAX_TILE_ENTRIES: 32 MB)."""
RENDER_TILE_LIST_BYTES = 4 << 23  # MAX_TILE_ENTRIES int32 ids
DEFAULT_MAX_MEMORY_GB = 4.0
ANTIALIAS_GAIN = 1.2
"""measured factor on the derived box variance (1 - s^2) / 12 (best of 1.0 ... 1.4 in 5 of 6 cases: kodim05 and
kodim03 crops at s = 1/2, 1/4, 1/8, fitted with 0.1 Gaussians per pixel; see FORMAT.md)."""


def parse_size(text: str) -> tuple[int, int]:
    """"WxH" -> (W, H), both positive; UsageError otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not match or int(match.group(1)) <= 0 or int(match.group(2)) <= 0:
        raise UsageError(f"--size {text!r}: give the output size as WIDTHxHEIGHT with positive numbers, e.g. 1920x1080")
    return int(match.group(1)), int(match.group(2))


def output_size(width: int, height: int, scale: float | None, size: str | None) -> tuple[int, int]:
    """Output (W, H) of a render of a width x height model at ``scale`` or ``size`` ("WxH"); without either,
    the fitted size. Refuses both at once, scale <= 0, and a scale that leaves no pixel."""
    if scale is not None and size is not None:
        raise UsageError("--scale and --size: give one of them, not both")
    if size is not None:
        return parse_size(size)
    if scale is None:
        return width, height
    if not math.isfinite(scale) or scale <= 0:
        raise UsageError(f"--scale {scale}: must be a positive number (e.g. 0.5 to halve, 3.5 to enlarge)")
    out = (max(1, round(width * scale)), max(1, round(height * scale)))
    if width * scale < 0.5 or height * scale < 0.5:
        raise UsageError(f"--scale {scale}: the {width}x{height} model would render smaller than one pixel; use a "
                         f"larger scale")
    return out


def prefilter_variance(width: int, height: int, out_width: int, out_height: int,
                       gain: float = ANTIALIAS_GAIN) -> float:
    """Variance (output pixels^2) of the anti-aliasing low-pass for a width x height model rendered at
    out_width x out_height: gain (1 - s^2) / 12 with s the smaller of the two axis scales, 0 when s >= 1
    (gain 1: the derived box variance; the default :data:`ANTIALIAS_GAIN` is the measured one)."""
    s = min(out_width / width, out_height / height)
    return gain * (1.0 - s * s) / 12.0 if s < 1.0 else 0.0


def render_memory_bytes(out_width: int, out_height: int, channels: int, gaussians: int = 0) -> int:
    """Estimated peak bytes of rendering and writing an out_width x out_height x channels image of a model of
    ``gaussians`` Gaussians: H W C x 4 bytes x :data:`RENDER_MEMORY_FACTOR`, plus N x
    :data:`RENDER_BYTES_PER_GAUSSIAN` and the tile lists' ceiling when N > 0."""
    image = out_width * out_height * channels * 4 * RENDER_MEMORY_FACTOR
    return image + (gaussians * RENDER_BYTES_PER_GAUSSIAN + RENDER_TILE_LIST_BYTES if gaussians > 0 else 0)


def check_memory(out_width: int, out_height: int, channels: int, max_gb: float, gaussians: int = 0) -> None:
    """UsageError with the numbers when :func:`render_memory_bytes` exceeds ``max_gb`` GiB."""
    need = render_memory_bytes(out_width, out_height, channels, gaussians)
    if need > max_gb * 2**30:
        model = f" and {gaussians:,} Gaussians x {RENDER_BYTES_PER_GAUSSIAN} bytes" if gaussians > 0 else ""
        raise UsageError(f"{out_width}x{out_height} x {channels} channels needs about {need / 2**30:.1f} GiB "
                         f"({out_width}*{out_height}*{channels}*4 bytes x {RENDER_MEMORY_FACTOR}{model}), over the "
                         f"--max-memory-gb {max_gb:g} limit; choose a smaller --scale/--size or raise the limit")


def box_downsample(image: Tensor, out_width: int, out_height: int) -> Tensor:
    """[H, W, C] -> [out_height, out_width, C] by area averaging (a box filter; for an integer factor, the
    mean of each factor x factor block)."""
    chw = image.permute(2, 0, 1)[None]
    return F.adaptive_avg_pool2d(chw, (out_height, out_width))[0].permute(1, 2, 0).contiguous()
