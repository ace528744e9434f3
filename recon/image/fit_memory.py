"""How much memory `splatforge image fit` needs, estimated from an image's header before its pixels are decoded.

A PNG of a few MB can hold 96 megapixels of flat colour: decoded and fitted, that is gigabytes. `image fit`
reads the header (recon/image/io.py: ``read_image_header``: width, height, channels), estimates its peak with
:func:`fit_memory_bytes` and refuses above ``--max-memory-gb`` with one line naming the file, the estimate and
what to do (:func:`check_fit_memory`), before anything is decoded.

The estimate is linear in the image's values (W H C) and in the Gaussians: the decoded bytes and their float32
copy, the target, each step's render, its loss terms and gradient, the MS-SSIM of the final render (all
[H, W, C]); Adam's state and the tile lists per Gaussian. The constants were measured as the peak RSS of a forked
`image fit --steps 2` above a 16x16 fit's (516 MB: the imports), on 1000x1000, 2000x1500 and 3000x2000 RGB with
2,000 and 100,000 Gaussians (docs/fuzzing.md), and rounded up.
"""

from __future__ import annotations

from recon.core.errors import UsageError

FIT_BYTES_PER_VALUE = 88
"""peak bytes per image value (H W C): measured 84 between 2000x1500 (+725 MiB) and 3000x2000 (+1,444 MiB) RGB
(decode, target, render, loss, gradient, the final MS-SSIM), rounded up."""
FIT_BYTES_PER_GAUSSIAN = 512
"""peak bytes per Gaussian: parameters, gradients and Adam's moments, the rasterizer's per-Gaussian arrays and
tile lists; measured 340 (100,000 against 2,000 Gaussians on 1000x1000), rounded up."""
FIT_BASE_BYTES = 32 << 20
"""a margin for what does not grow with the image (kernels' buffers, torch's allocator pools)."""
DEFAULT_FIT_MAX_MEMORY_GB = 1.0


def fit_memory_bytes(width: int, height: int, channels: int, gaussians: int) -> int:
    """Estimated peak bytes of fitting a width x height x channels image with ``gaussians`` Gaussians (above the
    imports): :data:`FIT_BASE_BYTES` + W H C :data:`FIT_BYTES_PER_VALUE` + N :data:`FIT_BYTES_PER_GAUSSIAN`."""
    return FIT_BASE_BYTES + width * height * channels * FIT_BYTES_PER_VALUE + gaussians * FIT_BYTES_PER_GAUSSIAN


def check_fit_memory(path, width: int, height: int, channels: int, gaussians: int, max_gb: float) -> None:
    """UsageError naming ``path``, the estimate and the options when :func:`fit_memory_bytes` exceeds ``max_gb``
    GiB."""
    need = fit_memory_bytes(width, height, channels, gaussians)
    if need > max_gb * 2**30:
        raise UsageError(f"{path}: fitting this {width}x{height} image ({channels} channels, {gaussians:,} Gaussians) "
                         f"needs about {need / 2**30:.1f} GiB, over the --max-memory-gb {max_gb:g} limit; downscale "
                         f"the image (or give fewer Gaussians) or raise --max-memory-gb to at least "
                         f"{need / 2**30 + 0.05:.1f}")
