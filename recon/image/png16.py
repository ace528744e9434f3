"""16-bit PNG files: read and write them at full depth (Pillow reads 16-bit RGB / RGBA PNGs as 8-bit).

Only what `splatforge image` needs: non-interlaced PNGs of bit depth 16 and colour type 0 (grey), 2 (RGB),
4 (grey + alpha) or 6 (RGBA). Arrays are uint16 [H, W, C] (C = 1, 3, 2, 4; samples big-endian in the
file, as the PNG specification says). Writing uses filter type 0 (none) on every row and zlib level 6.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
from numba import njit

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS_OF_COLOR_TYPE = {0: 1, 2: 3, 4: 2, 6: 4}
COLOR_TYPE_OF_CHANNELS = {c: t for t, c in CHANNELS_OF_COLOR_TYPE.items()}


class PngError(ValueError):
    """A PNG file this module cannot decode (damaged, interlaced, not 16-bit); the message says why."""


def png_header(data: bytes) -> tuple[int, int, int, int, int] | None:
    """(width, height, bit depth, colour type, interlace) from a PNG's IHDR, or None for a non-PNG."""
    if len(data) < 29 or not data.startswith(SIGNATURE) or data[12:16] != b"IHDR":
        return None
    width, height, depth, color_type, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    return width, height, depth, color_type, interlace


def _chunks(data: bytes):
    pos = len(SIGNATURE)
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if len(body) < length:
            raise PngError("the file ends inside a chunk (truncated)")
        yield kind, body
        if kind == b"IEND":
            return
        pos += 12 + length
    raise PngError("no IEND chunk (truncated)")


@njit(cache=True)
def _unfilter(raw: np.ndarray, height: int, stride: int, bpp: int) -> np.ndarray:
    """PNG scanline unfiltering (filters 0-4) of ``raw`` (height rows of 1 + stride bytes) -> [height, stride].
    Returns an empty array for an unknown filter type."""
    out = np.zeros((height, stride), np.uint8)
    for y in range(height):
        f = raw[y * (stride + 1)]
        row = raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)]
        for i in range(stride):
            a = np.int32(out[y, i - bpp]) if i >= bpp else np.int32(0)
            b = np.int32(out[y - 1, i]) if y > 0 else np.int32(0)
            c = np.int32(out[y - 1, i - bpp]) if (y > 0 and i >= bpp) else np.int32(0)
            if f == 0:
                p = 0
            elif f == 1:
                p = a
            elif f == 2:
                p = b
            elif f == 3:
                p = (a + b) // 2
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                p = a if (pa <= pb and pa <= pc) else (b if pb <= pc else c)
            else:
                return np.zeros((0, 0), np.uint8)
            out[y, i] = (np.int32(row[i]) + p) & 255
    return out


def read_png16(data: bytes) -> np.ndarray:
    """uint16 [H, W, C] of a 16-bit PNG's bytes; :class:`PngError` for anything else or damage."""
    header = png_header(data)
    if header is None:
        raise PngError("not a PNG file")
    width, height, depth, color_type, interlace = header
    if depth != 16 or color_type not in CHANNELS_OF_COLOR_TYPE:
        raise PngError(f"bit depth {depth}, colour type {color_type}: not a 16-bit grey/RGB/RGBA PNG")
    if interlace:
        raise PngError("interlaced (Adam7) 16-bit PNGs are not supported; save it without interlacing")
    idat = b"".join(body for kind, body in _chunks(data) if kind == b"IDAT")
    try:
        raw = zlib.decompress(idat)
    except zlib.error as err:
        raise PngError(f"damaged image data ({err})") from None
    channels = CHANNELS_OF_COLOR_TYPE[color_type]
    stride = width * channels * 2
    if len(raw) < height * (stride + 1):
        raise PngError(f"image data holds {len(raw)} bytes, {height * (stride + 1)} expected (truncated)")
    rows = _unfilter(np.frombuffer(raw, np.uint8), height, stride, channels * 2)
    if rows.size == 0 and height * stride > 0:
        raise PngError("a row has an unknown filter type (damaged)")
    return rows.view(">u2").reshape(height, width, channels).astype(np.uint16)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def encode_png16(image: np.ndarray) -> bytes:
    """PNG bytes (bit depth 16) of uint16 [H, W, C], C in 1 (grey), 2 (grey + alpha), 3 (RGB), 4 (RGBA)."""
    height, width, channels = image.shape
    if channels not in COLOR_TYPE_OF_CHANNELS:
        raise ValueError(f"encode_png16: {channels} channels; expected 1, 2, 3 or 4")
    rows = np.ascontiguousarray(image.astype(">u2")).reshape(height, width * channels).view(np.uint8)
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rows], axis=1)
    ihdr = struct.pack(">IIBBBBB", width, height, 16, COLOR_TYPE_OF_CHANNELS[channels], 0, 0, 0)
    return SIGNATURE + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)) + _chunk(b"IEND", b"")
