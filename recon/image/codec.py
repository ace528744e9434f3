"""The arrays of a .gimg file: plain float32, or quantised and compressed (the GaussianImage codec idea).

Encodings (the .gimg header's ``encoding``):

- ``"float32"``: means [N, 2], cholesky [N, 3], colors [N, C], each row-major little-endian float32, one
  after the other; exact. Nominal size 32 (5 + C) bits per Gaussian.
- ``"quantized"``: attribute planes (column-major: means[:, 0], means[:, 1], cholesky[:, 0], ...) so that
  similar numbers sit together, then compressed as one zstandard frame (level :data:`ZSTD_LEVEL`):
  - means: float16, little-endian (2 x 16 bits; normalised coordinates in [-1, 1], so the error is at most
    2^-11 ~ 4.9e-4 normalised, 0.12 pixel at 500 pixels);
  - cholesky (l11, l21, l22) and colors: uniform quantisation to ``bits`` bits per number (default
    :data:`CHOLESKY_BITS` = 8 and :data:`COLOR_BITS` = 8) between the per-column minimum and maximum,
    which the header keeps (``quantization.cholesky.min`` / ``max``, one per column):
    q = round((x - min) / (max - min) (2^bits - 1)), x' = min + q (max - min) / (2^bits - 1), so
    |x' - x| <= (max - min) / (2 (2^bits - 1)) per column (:func:`quantization_error_bound`); stored as
    uint8 (bits <= 8) or little-endian uint16 (bits <= 16).
  Nominal size (before zstandard, which only shrinks it): 2 x 16 + 3 x 8 + C x 8 bits per Gaussian
  (80 for RGB); :func:`nominal_bits_per_gaussian` is what ``--bpp`` uses to choose N.

Bits per pixel of a file = file bytes x 8 / (W H) of the fitted image (header included):
:func:`bits_per_pixel`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from recon.core.limits import MAX_IMAGE_PIXELS

ENCODINGS = ("float32", "quantized")
CHOLESKY_BITS = 8
COLOR_BITS = 8
MEANS_DTYPE = "float16"
ZSTD_LEVEL = 19


def nominal_bits_per_gaussian(encoding: str, channels: int) -> int:
    """Bits one Gaussian takes in ``encoding`` before compression (header not counted)."""
    if encoding == "float32":
        return 32 * (2 + 3 + channels)
    if encoding == "quantized":
        return 2 * 16 + 3 * CHOLESKY_BITS + channels * COLOR_BITS
    raise ValueError(f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")


def gaussians_for_bpp(bpp: float, width: int, height: int, encoding: str, channels: int) -> int:
    """N for a target of ``bpp`` bits per pixel of a width x height image: floor(bpp W H / nominal bits per
    Gaussian). Quantised files come out smaller than the target (zstandard), float32 files about on it."""
    return int(bpp * width * height // nominal_bits_per_gaussian(encoding, channels))


def bits_per_pixel(file_bytes: int, width: int, height: int) -> float:
    """file bytes x 8 / (W H)."""
    return file_bytes * 8.0 / (width * height)


# ------------------------------------------------------------------------------------------ quantisation


def _storage(bits: int) -> np.dtype:
    if not 1 <= bits <= 16:
        raise ValueError(f"quantisation bits must be in 1..16, got {bits}")
    return np.dtype(np.uint8) if bits <= 8 else np.dtype("<u2")


def quantize(values: np.ndarray, bits: int) -> tuple[np.ndarray, dict]:
    """values [N, K] float -> (codes [K, N] planar, {"bits", "min" [K], "max" [K]})."""
    lo = values.min(axis=0) if len(values) else np.zeros(values.shape[1])
    hi = values.max(axis=0) if len(values) else np.zeros(values.shape[1])
    levels = (1 << bits) - 1
    span = np.where(hi > lo, hi - lo, 1.0)
    codes = np.rint((values - lo) / span * levels).clip(0, levels).astype(_storage(bits))
    return np.ascontiguousarray(codes.T), {"bits": bits, "min": [float(v) for v in lo], "max": [float(v) for v in hi]}


def dequantize(codes: np.ndarray, spec: dict) -> np.ndarray:
    """codes [K, N] planar -> values [N, K] float32 (see :func:`quantize`)."""
    lo = np.asarray(spec["min"], np.float64)
    hi = np.asarray(spec["max"], np.float64)
    levels = (1 << int(spec["bits"])) - 1
    values = lo[:, None] + codes.astype(np.float64) * ((hi - lo) / levels)[:, None]
    return np.ascontiguousarray(values.T.astype(np.float32))


def quantization_error_bound(spec: dict) -> np.ndarray:
    """Largest |x' - x| per column [K] of a quantisation ``spec``: (max - min) / (2 (2^bits - 1))."""
    return (np.asarray(spec["max"]) - np.asarray(spec["min"])) / (2.0 * ((1 << int(spec["bits"])) - 1))


# ------------------------------------------------------------------------------------------ payloads


def _numpy(t: Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).cpu().contiguous().numpy()


def encode_arrays(means: Tensor, cholesky: Tensor, colors: Tensor, encoding: str) -> tuple[dict, bytes]:
    """(header entries, payload bytes) of the arrays in ``encoding``."""
    m, l, c = _numpy(means), _numpy(cholesky), _numpy(colors)
    if encoding == "float32":
        return {}, b"".join(a.astype("<f4").tobytes() for a in (m, l, c))
    if encoding != "quantized":
        raise ValueError(f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")
    import zstandard

    chol_codes, chol_spec = quantize(l, CHOLESKY_BITS)
    color_codes, color_spec = quantize(c, COLOR_BITS)
    planes = np.ascontiguousarray(m.T.astype("<f2")).tobytes() + chol_codes.tobytes() + color_codes.tobytes()
    entries = {"quantization": {"means": {"dtype": MEANS_DTYPE}, "cholesky": chol_spec, "colors": color_spec},
               "compression": "zstd", "raw_bytes": len(planes)}
    return entries, zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(planes)


def decode_arrays(header: dict, payload: bytes | memoryview) -> tuple[Tensor, Tensor, Tensor]:
    """(means [N, 2], cholesky [N, 3], colors [N, C]) float32 from a payload; ValueError (with the reason)
    when the payload does not hold what the header says."""
    n, channels, encoding = int(header["n"]), int(header["channels"]), header["encoding"]
    if encoding == "float32":
        floats = np.frombuffer(payload, "<f4")
        if floats.size != n * (5 + channels):
            raise ValueError(f"the arrays hold {floats.size} numbers, {n * (5 + channels)} expected")
        m, l, c = np.split(floats, [2 * n, 5 * n])  # views of the payload, each copied once (native float32)
        return tuple(torch.from_numpy(a.reshape(n, k).astype(np.float32)) for a, k in ((m, 2), (l, 3), (c, channels)))
    if encoding != "quantized":
        raise ValueError(f"unknown encoding {encoding!r} (this splatforge knows {', '.join(ENCODINGS)})")
    import zstandard

    spec = header["quantization"]
    chol_dtype, color_dtype = _storage(int(spec["cholesky"]["bits"])), _storage(int(spec["colors"]["bits"]))
    sizes = [2 * n * 2, 3 * n * chol_dtype.itemsize, channels * n * color_dtype.itemsize]
    # sizes checked before inflating: a small file must not declare gigabytes (a zstd bomb)
    pixels = int(header["width"]) * int(header["height"])
    if n < 0 or channels < 1 or n > max(16, 4 * pixels) or pixels > MAX_IMAGE_PIXELS:
        raise ValueError(f"{n:,} Gaussians of {channels} channels for a {header['width']}x{header['height']} "
                         f"image is outside what a fit writes (at most 4 per pixel, {MAX_IMAGE_PIXELS:,} pixels)")
    if int(header["raw_bytes"]) != sum(sizes):
        raise ValueError(f"raw_bytes {header['raw_bytes']} is not the {sum(sizes)} bytes {n} Gaussians take")
    try:
        planes = zstandard.ZstdDecompressor().decompress(payload, max_output_size=sum(sizes))
    except zstandard.ZstdError as err:
        raise ValueError(f"the compressed arrays cannot be decompressed ({err})") from None
    if len(planes) != sum(sizes):
        raise ValueError(f"the arrays hold {len(planes)} bytes, {sum(sizes)} expected")
    a, b = sizes[0], sizes[0] + sizes[1]
    means = np.frombuffer(planes[:a], "<f2").reshape(2, n).T.astype(np.float32)
    chol = dequantize(np.frombuffer(planes[a:b], chol_dtype).reshape(3, n), spec["cholesky"])
    colors = dequantize(np.frombuffer(planes[b:], color_dtype).reshape(channels, n), spec["colors"])
    return torch.from_numpy(np.ascontiguousarray(means)), torch.from_numpy(chol), torch.from_numpy(colors)
