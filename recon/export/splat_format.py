"""antimatter15 ``.splat``: 32 bytes per splat, no header, no SH beyond the DC colour.

Per splat, little-endian::

    offset  0  position   3 x float32   OpenCV world (same frame as ours, no conversion)
    offset 12  scale      3 x float32   linear: exp(log_scales)
    offset 24  RGBA       4 x uint8     RGB = 0.5 + SH_C0 * DC, A = sigmoid(opacity), x 255
    offset 28  rotation   4 x uint8     (w, x, y, z) of q / |q|, as round(q * 128 + 128), clipped

Writers order splats by exp(sum log_scales) * opacity, largest first (what web viewers expect for
progressive loading). Reading gives a degree-0 model; 8-bit quantisation loses colour/opacity and
rotation precision, and SH degrees > 0 are dropped.
"""

from __future__ import annotations

import os

import numpy as np

from recon.core.atomic import atomic_open
from recon.core.splat_data import SplatData, dc_to_rgb, normalized_quats, rgb_to_dc, sigmoid

from .splats import SplatFileError, logit_clamped, read_regular_file, require_writable

RECORD_DTYPE = np.dtype([("position", "<f4", (3,)), ("scale", "<f4", (3,)),
                         ("rgba", "u1", (4,)), ("rotation", "u1", (4,))])
RECORD_SIZE = 32
STORED_SH_DEGREE = 0  # colour (the DC term) only
assert RECORD_DTYPE.itemsize == RECORD_SIZE


def _to_u8(x: np.ndarray) -> np.ndarray:
    """Round half away from zero and clip into uint8."""
    x = np.asarray(x, dtype=np.float64)
    return np.clip(np.sign(x) * np.floor(np.abs(x) + 0.5), 0, 255).astype(np.uint8)


# ------------------------------------------------------------------------------------------ writing


def splat_sort_order(data: SplatData) -> np.ndarray:
    """Indices [N] sorting by exp(sum log_scales) * sigmoid(opacity), descending (stable).

    Computed in the log domain, sum(log_scales) + log(sigmoid(o)), so large scales do not overflow.
    """
    log_volume = data.log_scales.astype(np.float64).sum(axis=1)
    log_alpha = -np.logaddexp(0.0, -data.logit_opacities.astype(np.float64))
    return np.argsort(-(log_volume + log_alpha), kind="stable")


def encode_records(data: SplatData) -> np.ndarray:
    """Structured records [N] (:data:`RECORD_DTYPE`) in the order of ``data`` (no sorting)."""
    rec = np.empty(len(data), dtype=RECORD_DTYPE)
    rec["position"] = data.means
    rec["scale"] = np.exp(data.log_scales.astype(np.float64))
    rgb = dc_to_rgb(data.sh[:, 0, :]) * 255.0
    alpha = sigmoid(data.logit_opacities) * 255.0
    rec["rgba"] = _to_u8(np.concatenate([rgb, alpha[:, None]], axis=1))
    rec["rotation"] = _to_u8(normalized_quats(data.quats) * 128.0 + 128.0)
    return rec


def encode_splat(data: SplatData) -> bytes:
    """``.splat`` bytes for ``data``, sorted largest-first."""
    return encode_records(data.subset(splat_sort_order(data))).tobytes()


def write_splat(path: str | os.PathLike, data: SplatData, force: bool = False) -> None:
    """Write ``data`` to ``path`` as ``.splat`` atomically. SH beyond DC is not stored.

    Empty models and NaN/Inf values are refused.
    """
    require_writable(path, data)
    payload = encode_splat(data)
    with atomic_open(path, force=force) as f:
        f.write(payload)


# ------------------------------------------------------------------------------------------ reading


def decode_records(path, buf: bytes) -> np.ndarray:
    """Structured records [N] from raw bytes; errors for empty or truncated data."""
    if len(buf) == 0:
        raise SplatFileError(path, "empty model (0 bytes, no splats)")
    if len(buf) % RECORD_SIZE:
        raise SplatFileError(
            path, f"truncated or corrupt .splat: {len(buf)} bytes is not a multiple of "
                  f"{RECORD_SIZE} (one splat = {RECORD_SIZE} bytes)")
    if not np.frombuffer(buf, dtype=np.uint8).any():
        raise SplatFileError(path, f"holds only zero bytes ({len(buf):,}): no splat has a size or an opacity; "
                                   f"the file is damaged or not a .splat")
    return np.frombuffer(buf, dtype=RECORD_DTYPE)


def records_to_splats(path, rec: np.ndarray) -> SplatData:
    """Invert the ``.splat`` encoding into a degree-0 :class:`SplatData`."""
    scale = rec["scale"].astype(np.float64)
    negative = np.any(scale < 0, axis=1)
    if negative.any():
        raise SplatFileError(
            path, f"corrupt .splat: {int(negative.sum())} splat(s) with negative scales")
    # Zero scales (underflowed exp) become the smallest normal float32; NaN stays NaN.
    log_scales = np.log(np.where(scale == 0, np.finfo(np.float32).tiny, scale))
    rgba = rec["rgba"].astype(np.float64) / 255.0
    quats = (rec["rotation"].astype(np.float64) - 128.0) / 128.0
    return SplatData(
        means=rec["position"],
        quats=normalized_quats(quats),
        log_scales=log_scales,
        logit_opacities=logit_clamped(rgba[:, 3]),
        sh=rgb_to_dc(rgba[:, None, :3]),
        antialiased=False,
    )


def read_splat(path: str | os.PathLike) -> SplatData:
    """Read an antimatter15 ``.splat`` file (DC-only model, quaternions normalised)."""
    return records_to_splats(path, decode_records(path, read_regular_file(path)))
