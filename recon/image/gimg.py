"""The .gimg model file: an image fitted with 2D Gaussians (:class:`recon.image.model.ImageGaussians`).

Layout, format version 1 (all integers little-endian):

====== ============ =====================================================================================
offset size         content
====== ============ =====================================================================================
0      8            magic ``b"GIMG\\r\\n\\x1a\\n"`` (a text-mode transfer that mangles line ends breaks it)
8      2            uint16 format version (:data:`FORMAT_VERSION`)
10     4            uint32 J, the length of the JSON header in bytes
14     J            JSON header, UTF-8 (below)
14 + J P            payload: the arrays, P = header["payload_bytes"] (recon/image/codec.py)
====== ============ =====================================================================================

The file ends right after the payload. JSON header keys: ``width``, ``height`` (fitted size in pixels,
scale 1), ``layout`` ("L", "RGB", "RGBA": what the channels are), ``n`` (Gaussians), ``channels`` (C),
``encoding`` ("float32" or "quantized"), ``payload_bytes``, ``source`` (facts about the fitted image:
name, format, mode, bit_depth, note; free-form), ``coordinates`` (a reminder: "normalised [-1, 1], x right,
y down, pixel centres at (2i+1)/W - 1; cholesky (l11, l21, l22) in normalised units"), and for
"quantized" ``quantization`` / ``compression`` / ``raw_bytes`` (codec.py). Readers ignore keys they do
not know; a file with a higher format version is refused with the version this splatforge reads.
The float32 arrays are exactly the model's tensors (means = tanh of the fitted parameters, cholesky
normalised), so a model read back renders bit-identically to the one fitted.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from recon.core.atomic import atomic_write_bytes
from recon.core.errors import DamagedFileError
from recon.core.limits import parse_json, require_finite, require_regular_file, with_path

from . import codec
from .model import ImageGaussians

MAGIC = b"GIMG\r\n\x1a\n"
FORMAT_VERSION = 1
PREAMBLE = struct.Struct("<8sHI")  # magic, version, JSON header length
SUFFIX = ".gimg"
COORDINATES = ("normalised [-1, 1], x right, y down, pixel centres at (2i+1)/W - 1; cholesky (l11, l21, l22) "
               "in normalised units, Sigma = L L^T")


class GimgError(DamagedFileError):
    """A .gimg file cannot be read: not one, cut short, damaged, or from a newer splatforge."""


def encode_gimg(model: ImageGaussians, encoding: str = "float32") -> bytes:
    """The bytes of a .gimg file holding ``model`` in ``encoding`` ("float32" exact, "quantized")."""
    entries, payload = codec.encode_arrays(model.means, model.cholesky, model.colors, encoding)
    header = {"width": model.width, "height": model.height, "layout": model.layout, "n": model.n,
              "channels": model.channels, "encoding": encoding, "payload_bytes": len(payload),
              "source": dict(model.source), "coordinates": COORDINATES, "pixel_variance": model.pixel_variance,
              **entries}
    text = json.dumps(header, sort_keys=True).encode("utf-8")
    return PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(text)) + text + payload


def write_gimg(path: str | Path, model: ImageGaussians, encoding: str = "float32", force: bool = False) -> int:
    """Write ``model`` to ``path`` atomically (recon.core.atomic); returns the file size in bytes."""
    data = encode_gimg(model, encoding)
    atomic_write_bytes(path, data, force=force)
    return len(data)


def read_gimg(path: str | Path) -> ImageGaussians:
    """The model in the .gimg file ``path``; :class:`GimgError` naming the file and the problem."""
    path = Path(path)
    if path.is_dir():
        raise GimgError(f"{path}: is a folder; give a .gimg file written by `splatforge image fit`")
    if path.exists():  # a missing file: FileNotFoundError names it
        require_regular_file(path, ".gimg file", with_path(GimgError))  # not /dev/zero or a FIFO
    return decode_gimg(path.read_bytes(), str(path))


def declared_size(path: str | Path) -> tuple[int, int, int, int] | None:
    """(width, height, channels, n) that the .gimg file ``path`` declares in its header, read before its arrays
    are decoded (`image render` sizes its memory by them); None when the file is not a .gimg whose header
    reads (read_gimg then says what is wrong)."""
    path = Path(path)
    try:
        require_regular_file(path, ".gimg file", with_path(GimgError))
        with open(path, "rb") as fh:
            head = fh.read(PREAMBLE.size)
            if len(head) < PREAMBLE.size:
                return None
            header_bytes = PREAMBLE.unpack(head)[2]
            head += fh.read(min(header_bytes, 1 << 20))  # the header, not the arrays (headers are a few hundred bytes)
        header, _ = read_header(head, str(path))
        size = tuple(int(header[k]) for k in ("width", "height", "channels", "n"))
        return size if min(size) > 0 else None
    except (GimgError, OSError, ValueError, TypeError, OverflowError):
        return None


def read_preamble(data: bytes, name: str, magic: bytes, kind: str, version_max: int, error, redo: str) -> int:
    """End offset of the JSON header of a file of this container (magic, uint16 version, uint32 header length,
    JSON header, payload: .gimg and .grbf); ``error`` (an exception class) for a bad magic, a future or impossible
    version, a cut-short file. ``kind`` names the file type (".gimg"), ``redo`` says how to write it again."""
    if len(data) < PREAMBLE.size:
        if magic.startswith(data[:len(magic)]) and data:
            raise error(f"{name}: truncated: {len(data)} bytes, shorter than the {PREAMBLE.size}-byte preamble; "
                        f"{redo}")
        raise error(f"{name}: not a {kind} file (too short, {len(data)} bytes); give a model written by "
                    f"`splatforge image fit`")
    found, version, header_bytes = PREAMBLE.unpack_from(data)
    if found != magic:
        raise error(f"{name}: not a {kind} file (it starts with {found[:8]!r}, a {kind} file with {magic!r}); "
                    f"give a model written by `splatforge image fit`")
    if version > version_max:
        raise error(f"{name}: {kind} format version {version} was written by a newer splatforge; this "
                    f"splatforge reads format version {version_max} and older: upgrade splatforge")
    if version < 1:
        raise error(f"{name}: {kind} format version {version} does not exist (damaged file); {redo}")
    end = PREAMBLE.size + header_bytes
    if len(data) < end:
        raise error(f"{name}: truncated: the header needs {end} bytes, the file has {len(data)}; {redo}")
    return end


def read_header(data: bytes, name: str) -> tuple[dict, int]:
    """(JSON header, offset of the payload) of .gimg bytes; :class:`GimgError` for a bad magic, a future
    version, a cut-short or damaged header."""
    redo = "write it again with `splatforge image fit`"
    end = read_preamble(data, name, MAGIC, ".gimg", FORMAT_VERSION, GimgError, redo)
    header = parse_json(data[PREAMBLE.size:end], name, "header",
                        lambda p, problem: GimgError(f"{p}: damaged header ({problem}); {redo}"))
    try:
        needed = {k: header[k] for k in ("width", "height", "layout", "n", "channels", "encoding", "payload_bytes")}
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise GimgError(f"{name}: damaged header ({type(err).__name__}: {err}); {redo}") from None
    if needed["encoding"] not in codec.ENCODINGS:
        raise GimgError(f"{name}: unknown encoding {needed['encoding']!r} (this splatforge reads "
                        f"{', '.join(codec.ENCODINGS)}); upgrade splatforge")
    return header, end


def decode_gimg(data: bytes, name: str = "<bytes>") -> ImageGaussians:
    """The model in .gimg bytes (``name`` is used in error messages)."""
    header, start = read_header(data, name)
    expected = start + int(header["payload_bytes"])
    if len(data) < expected:
        raise GimgError(f"{name}: truncated: {len(data)} bytes, the header says {expected}; write it again with "
                        f"`splatforge image fit`")
    if len(data) > expected:
        raise GimgError(f"{name}: {len(data) - expected} unexpected bytes after the arrays (damaged or not a "
                        f".gimg file); write it again with `splatforge image fit`")
    try:
        means, cholesky, colors = codec.decode_arrays(header, memoryview(data)[start:expected])  # not a copy
    except (ValueError, KeyError, TypeError) as err:
        raise GimgError(f"{name}: damaged arrays ({err}); write it again with `splatforge image fit`") from None
    for field, array in (("means", means), ("cholesky", cholesky), ("colors", colors)):
        require_finite(array.detach().cpu().numpy() if hasattr(array, "detach") else array, name,
                       f"payload array {field!r}", with_path(GimgError))
    return ImageGaussians(means, cholesky, colors, int(header["width"]), int(header["height"]), header["layout"],
                          dict(header.get("source") or {}), float(header.get("pixel_variance", 0.0)))


def file_bits_per_pixel(file_bytes: int, model: ImageGaussians) -> float:
    """Bits per pixel of a .gimg file of ``file_bytes`` for ``model`` (its fitted size)."""
    return codec.bits_per_pixel(file_bytes, model.width, model.height)
