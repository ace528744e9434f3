"""How much memory `splatforge image fit` needs, estimated from an image's header before its pixels are decoded.

A PNG of a few MB can hold 96 megapixels of flat colour: decoded and fitted, that is gigabytes. `image fit`
reads the header (recon/image/io.py: ``read_image_header``: width, height, channels), estimates its peak with
:func:`fit_memory_bytes` and refuses above ``--max-memory-gb`` with one line naming the file, the estimate and
what to do (:func:`check_fit_memory`), before anything is decoded.

The estimate is of the whole process's peak resident memory: what the imports and kernels hold before any image
(:data:`FIT_PROCESS_BYTES`, the peak of a 16x16 fit), plus a part linear in the image's values (W H C) and in the
Gaussians: the decoded bytes and their float32 copy, the target, each step's render, its loss terms and
gradient, the MS-SSIM of the final render (all [H, W, C]); Adam's state and the tile lists per Gaussian. The
constants were measured as the peak RSS of a forked `image fit --steps 2` (scripts/bench_image_memory.py), on
1000x1000, 2000x1500 and 3000x2000 RGB with 2,000 and 100,000 Gaussians (docs/fuzzing.md), and rounded up.

The default limit (:func:`default_fit_max_memory_gb`) is the process's part plus the share of the machine's
available memory that the 4D frame cache's default budget uses the same function for
(recon/data/frame_images.py: ``default_cache_bytes``), here :data:`FIT_MEMORY_FRACTION` of it and at most
:data:`FIT_MEMORY_CAP`: a 12-megapixel photo (3.5 GiB) fits on a machine with 4.5 GiB available; a
96-megapixel PNG (24 GiB) is refused on any machine unless ``--max-memory-gb`` is raised.
"""

from __future__ import annotations

from recon.core.errors import UsageError

FIT_BYTES_PER_VALUE = 88
"""peak bytes per image value (H W C): measured 84 between 2000x1500 (+725 MiB) and 3000x2000 (+1,444 MiB) RGB
(decode, target, render, loss, gradient, the final MS-SSIM), rounded up."""
FIT_BYTES_PER_GAUSSIAN = 512
"""peak bytes per Gaussian: parameters, gradients and Adam's moments, the rasterizer's per-Gaussian arrays and
tile lists; measured 340 (100,000 against 2,000 Gaussians on 1000x1000), rounded up."""
FIT_PROCESS_BYTES = 640 << 20
"""the process before any image: the imports (torch, Numba, Pillow), the compiled kernels and torch's allocator
pools; the peak RSS of `image fit` of a 16x16 image with 16 Gaussians, 2 steps: measured 504 MB (and 516 MB in
an earlier session), rounded up for other machines' libraries."""
FIT_MEMORY_FRACTION = 0.8
"""of the memory available when the command starts: the default limit's working part."""
FIT_MEMORY_CAP = 16 << 30
"""the default limit's working part at most (a fit of 16 GiB of pixels takes days on a CPU)."""


def fit_memory_bytes(width: int, height: int, channels: int, gaussians: int) -> int:
    """Estimated peak resident bytes of the process fitting a width x height x channels image with ``gaussians``
    Gaussians: :data:`FIT_PROCESS_BYTES` + W H C :data:`FIT_BYTES_PER_VALUE` + N :data:`FIT_BYTES_PER_GAUSSIAN`."""
    return FIT_PROCESS_BYTES + width * height * channels * FIT_BYTES_PER_VALUE + gaussians * FIT_BYTES_PER_GAUSSIAN


def default_fit_max_memory_gb() -> float:
    """The default ``--max-memory-gb`` (GiB): :data:`FIT_PROCESS_BYTES` plus :data:`FIT_MEMORY_FRACTION` of the
    memory available now, at most :data:`FIT_MEMORY_CAP` (2 GiB when the available memory cannot be read)."""
    from recon.data.frame_images import default_cache_bytes

    return (FIT_PROCESS_BYTES + default_cache_bytes(FIT_MEMORY_FRACTION, FIT_MEMORY_CAP)) / 2**30


def check_fit_memory(path, width: int, height: int, channels: int, gaussians: int, max_gb: float | None) -> None:
    """UsageError naming ``path``, the estimate and the options when :func:`fit_memory_bytes` exceeds ``max_gb``
    GiB (None: :func:`default_fit_max_memory_gb`)."""
    need = fit_memory_bytes(width, height, channels, gaussians)
    limit = default_fit_max_memory_gb() if max_gb is None else max_gb
    if need > limit * 2**30:
        which = f"--max-memory-gb {max_gb:g} limit" if max_gb is not None else (
            f"default limit of {limit:.1f} GiB (--max-memory-gb: {FIT_MEMORY_FRACTION:.0%} of the memory available "
            f"now, at most {FIT_MEMORY_CAP / 2**30:g} GiB, plus the {FIT_PROCESS_BYTES >> 20} MB the program holds)")
        raise UsageError(f"{path}: fitting this {width}x{height} image ({channels} channels, {gaussians:,} Gaussians) "
                         f"needs about {need / 2**30:.1f} GiB, over the {which}; downscale the image (or give fewer "
                         f"Gaussians) or raise --max-memory-gb to at least {need / 2**30 + 0.05:.1f}")
