"""The reader rules: one place that states what every reader checks before it allocates.

Every reader of a user-given file (splat formats, .gimg, images, datasets, camera paths, run-folder
metadata) goes through these helpers, so the rules hold everywhere:

- **JSON** (:func:`load_json`, :func:`parse_json`): at most :data:`MAX_JSON_BYTES` bytes, decoded as
  UTF-8, nesting at most :data:`MAX_JSON_DEPTH` deep (checked by a linear scan *before* ``json.loads``,
  whose recursion a few hundred kB of ``[`` would exhaust), NaN/Infinity literals (and numbers too large for
  a float, ``1e400``, which read as infinity) refused on request.
- **Images** (:func:`open_image`, :func:`read_image_size`): a regular file (not ``/dev/zero`` or a FIFO),
  at most :data:`MAX_IMAGE_PIXELS` pixels read from the header before anything is decoded.
- **Numbers** (:func:`require_finite`): every float array read from a file is finite; indices
  (:func:`require_indices`, faces into vertices) lie within what they index.
- **numpy files** (:func:`check_npy_header`, :func:`check_npz`): the shape a header declares times its
  item size must equal the bytes present (before an array is made), under :data:`MAX_ARRAY_BYTES`.
- **Memory** (:func:`memory_guard`): a MemoryError (numpy's ``_ArrayMemoryError`` included) becomes one
  line naming the input.

Each check raises ``error(path, problem)``: by default :class:`~recon.core.errors.InputFileError`, whose
message is ``"<path>: <problem>"``; a reader passes its own class with :func:`with_path` (or a class taking
``(path, problem)`` itself, like ``SplatFileError``) so its callers keep catching what they caught.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import tokenize
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from recon.core.errors import InputFileError, memory_problem

MAX_JSON_BYTES = 256 << 20  # no JSON file splatforge reads comes near this (transforms of 100k frames: ~60 MB)
MAX_JSON_DEPTH = 512  # glTF, transforms, camera paths nest < 10 deep; json.loads recursion fails near 1000
MAX_IMAGE_PIXELS = 1 << 27  # 134M pixels (11585 x 11585): 2 GB as float32 RGBA
MAX_ARRAY_BYTES = 16 << 30  # one array read from a .npy/.npz file

ErrorFactory = Callable[[Any, str], Exception]

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCAN_CHUNK = 1 << 20


def with_path(cls: Callable[[str], Exception]) -> ErrorFactory:
    """An error factory ``(path, problem) -> cls("<path>: <problem>")`` for classes taking one message."""
    return lambda path, problem: cls(f"{os.fspath(path)}: {problem}")


def _raise(error: ErrorFactory, path, problem: str) -> None:
    raise error(path, " ".join(problem.split())) from None


# ------------------------------------------------------------------------------------- regular files


def require_regular_file(path, what: str = "file", error: ErrorFactory = InputFileError) -> int:
    """The size in bytes of ``path``, a regular file (symlinks followed); ``error`` for a missing path,
    a folder, a device (``/dev/zero``) or a FIFO, which would be read forever or block."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        _raise(error, path, f"{what} not found")
    except OSError as err:
        _raise(error, path, f"cannot read the {what}: {err.strerror}")
    if stat.S_ISDIR(st.st_mode):
        _raise(error, path, f"is a folder, not a {what}: give the {what} itself")
    if not stat.S_ISREG(st.st_mode):
        _raise(error, path, f"not a regular file (a device, pipe or socket); give a {what} on disk")
    return st.st_size


def read_bytes_limited(path, max_bytes: int, what: str = "file", error: ErrorFactory = InputFileError) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` bytes; ``error`` naming the file otherwise."""
    size = require_regular_file(path, what, error)
    if size > max_bytes:
        _raise(error, path, f"{size:,} bytes, more than the {max_bytes:,} a {what} may have; "
                            f"check that this is the right file")
    try:
        with open(path, "rb") as f:  # read what stat says (+1 to see growth): f.read(n) allocates n first
            data = f.read(size + 1)
    except OSError as err:
        _raise(error, path, f"cannot read the {what}: {err.strerror}")
    if len(data) > max_bytes:
        _raise(error, path, f"more than the {max_bytes:,} bytes a {what} may have")
    return data


# ---------------------------------------------------------------------------------------------- JSON


def json_depth(data: bytes) -> int:
    """The deepest nesting of ``[``/``{`` in JSON bytes, brackets inside strings not counted; one linear
    pass (strings blanked by a regex, brackets counted with numpy in chunks), never recursion."""
    blank = _STRING.sub(b'""', data)
    depth = deepest = 0
    for start in range(0, len(blank), _SCAN_CHUNK):
        chunk = np.frombuffer(blank[start:start + _SCAN_CHUNK], dtype=np.uint8)
        steps = ((chunk == ord("[")) | (chunk == ord("{"))).astype(np.int32)
        steps -= ((chunk == ord("]")) | (chunk == ord("}"))).astype(np.int32)
        steps = steps[steps != 0]
        if steps.size:
            running = depth + np.cumsum(steps)
            deepest = max(deepest, int(running.max()))
            depth = int(running[-1])
    return deepest


def _refuse_constant(path, error: ErrorFactory, what: str):
    def refuse(name: str):
        _raise(error, path, f"{what} holds {name}, which is not a number in JSON; write finite numbers")

    return refuse


def _finite_float(path, error: ErrorFactory, what: str):
    """``parse_float`` for json.loads: a literal too large for a float (``1e400`` reads as infinity) is refused
    like ``Infinity``."""
    def parse(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            _raise(error, path, f"{what} holds {text[:40]}, beyond the largest float (it reads as infinity), "
                                f"which is not a finite number; write finite numbers")
        return value

    return parse


MAX_JSON_INT_DIGITS = 308  # an integer beyond the float range: no field holds one, and float() of it overflows


def _bounded_int(path, error: ErrorFactory, what: str):
    """``parse_int`` for json.loads: more than :data:`MAX_JSON_INT_DIGITS` digits is refused (Python refuses
    4,300 with a bare ValueError; ``float()`` of anything past 10^308 raises OverflowError where it is read)."""
    def parse(text: str) -> int:
        if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
            _raise(error, path, f"{what} holds an integer of {len(text.lstrip('-')):,} digits, beyond any number "
                                f"splatforge reads; the file is damaged")
        return int(text)

    return parse


def parse_json(data: bytes | str, path, what: str = "JSON file", error: ErrorFactory = InputFileError,
               allow_nan: bool = False, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON from bytes read out of ``path`` (a file or a chunk of one): UTF-8, nesting at most ``max_depth``
    deep (checked before parsing), NaN/Infinity (and 1e400, which reads as infinity) refused unless
    ``allow_nan``, integers past the float range always; ``error`` naming ``path``
    for anything else."""
    if isinstance(data, str):
        text = data
        raw = data.encode("utf-8", "surrogatepass")
    else:
        raw = bytes(data)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            _raise(error, path, f"{what} is not UTF-8 text (byte {err.start} is {raw[err.start:err.start + 1]!r}); "
                                f"save it as UTF-8 JSON")
    depth = json_depth(raw)
    if depth > max_depth:
        _raise(error, path, f"{what} nests {depth} levels deep, more than the {max_depth} allowed; "
                            f"it is damaged or not a splatforge input")
    kwargs = {"parse_int": _bounded_int(path, error, what)}
    if not allow_nan:
        kwargs.update(parse_constant=_refuse_constant(path, error, what), parse_float=_finite_float(path, error, what))
    try:
        return json.loads(text, **kwargs)
    except json.JSONDecodeError as err:
        _raise(error, path, f"not valid JSON ({what}: {err})")
    except RecursionError:  # the depth scan should make this impossible; never a traceback
        _raise(error, path, f"{what} nests too deeply")


def load_json(path, what: str = "JSON file", error: ErrorFactory = InputFileError, allow_nan: bool = False,
              max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON value in file ``path`` under every JSON rule (:func:`parse_json`), read with a size
    ceiling; ``error`` naming the file when it is missing, not a regular file, too big or not JSON."""
    data = read_bytes_limited(path, max_bytes, what, error)
    return parse_json(data, path, what, error, allow_nan)


# -------------------------------------------------------------------------------------------- images


def _check_pixels(path, size: tuple[int, int], what: str, error: ErrorFactory, max_pixels: int) -> None:
    w, h = size
    if w * h > max_pixels:
        _raise(error, path, f"{what} is {w}x{h} = {w * h:,} pixels, more than the {max_pixels:,} splatforge "
                            f"decodes; downscale it first")


@contextlib.contextmanager
def _pillow_errors(path, what: str, error: ErrorFactory, max_pixels: int) -> Iterator[None]:
    import warnings

    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():  # splatforge's own pixel limit applies: Pillow's warning below it is noise
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # (two more stderr lines, issue 52)
            yield
    except Image.DecompressionBombError as err:
        _raise(error, path, f"{what} declares too many pixels to decode ({err}); downscale it first "
                            f"(at most {max_pixels:,} pixels)")
    except UnidentifiedImageError:
        _raise(error, path, f"not an image file that can be read (PNG, JPEG, ...); give an image")
    except MemoryError:
        _raise(error, path, f"out of memory while decoding the {what}; downscale it first")
    except (OSError, SyntaxError, ValueError, EOFError) as err:
        _raise(error, path, f"the {what} cannot be decoded ({err}); it may be cut short or damaged: "
                            f"re-save or re-download it")


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_png_crcs(data: bytes, path, what: str = "image", error: ErrorFactory = InputFileError) -> None:
    """``error`` naming the file when a chunk of PNG bytes ``data`` fails its CRC-32. Pillow checks the CRCs
    of the chunks before the pixels but not of the pixel data (IDAT), so a damaged PNG would decode to wrong
    pixels silently. A chunk running past the end is left to the decoder, which reports the file cut short."""
    pos = len(PNG_SIGNATURE)
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        end = pos + 8 + length
        if end + 4 > len(data):
            return
        if zlib.crc32(data[pos + 4:end]) != int.from_bytes(data[end:end + 4], "big"):
            kind = data[pos + 4:pos + 8].decode("latin-1")
            _raise(error, path, f"the {what}'s {kind!r} chunk at byte {pos:,} fails its CRC check: the file is "
                                f"damaged; re-save or re-download it")
        if data[pos + 4:pos + 8] == b"IEND":
            return
        pos = end + 4


def open_image(source, path=None, what: str = "image", error: ErrorFactory = InputFileError,
               max_pixels: int = MAX_IMAGE_PIXELS):
    """A decoded Pillow image from a file path (or a binary file object ``source`` read from ``path``):
    a regular file whose header declares at most ``max_pixels`` pixels (checked before decoding), a PNG's
    chunk CRCs checked (:func:`check_png_crcs`); ``error`` naming the file otherwise."""
    import io

    from PIL import Image

    path = source if path is None else path
    if isinstance(source, (str, os.PathLike)):
        require_regular_file(source, f"{what} file", error)
        with open(source, "rb") as f:
            png = f.read(len(PNG_SIGNATURE)) == PNG_SIGNATURE
        if png:  # read once: checked, then decoded from memory
            with open(source, "rb") as f:
                data = f.read()
            check_png_crcs(data, path, what, error)
            source = io.BytesIO(data)
            with _pillow_errors(path, what, error, max_pixels):
                im = Image.open(source)
                _check_pixels(path, im.size, what, error, max_pixels)
                im.load()
            return im
    with _pillow_errors(path, what, error, max_pixels):
        im = Image.open(source)
        try:
            _check_pixels(path, im.size, what, error, max_pixels)
            im.load()
            out = im.copy() if isinstance(source, (str, os.PathLike)) else im
        finally:
            if isinstance(source, (str, os.PathLike)):
                im.close()
    return out


def read_image_size(path, what: str = "image", error: ErrorFactory = InputFileError,
                    max_pixels: int = MAX_IMAGE_PIXELS) -> tuple[int, int]:
    """(width, height) of an image file from its header only; ``error`` naming the file when it is not
    a regular image file or declares more than ``max_pixels`` pixels."""
    from PIL import Image

    require_regular_file(path, f"{what} file", error)
    with _pillow_errors(path, what, error, max_pixels):
        with Image.open(path) as im:
            size = im.size
    _check_pixels(path, size, what, error, max_pixels)
    return size


# ------------------------------------------------------------------------------------------- numbers


def require_finite(array, path, field: str, error: ErrorFactory = InputFileError) -> None:
    """``error`` naming the file, the field and the first bad element unless ``array`` is all finite."""
    arr = np.asarray(array)
    if arr.dtype.kind not in "fc" or arr.size == 0:
        return
    bad = ~np.isfinite(arr)
    if bad.any():
        first = np.unravel_index(int(np.flatnonzero(bad)[0]), arr.shape) if arr.ndim else ()
        where = f" at index {tuple(int(i) for i in first)}" if arr.ndim else ""
        _raise(error, path, f"{field} holds {int(bad.sum()):,} non-finite value(s) (NaN or infinity){where}; "
                            f"the file is damaged or was written from a diverged model")


def require_indices(indices, count: int, path, field: str, error: ErrorFactory = InputFileError) -> None:
    """``error`` naming the file, the field and the first bad entry unless every entry of integer array
    ``indices`` lies in [0, count) (face indices into the vertices, track indices into images, ...)."""
    arr = np.asarray(indices)
    if arr.size == 0:
        return
    bad = (arr < 0) | (arr >= count)
    if bad.any():
        first = int(np.flatnonzero(bad.ravel())[0])
        _raise(error, path, f"{field} holds {int(bad.sum()):,} index(es) outside 0..{count - 1} (the first: "
                            f"{int(arr.ravel()[first])} at entry {first:,}); the file is damaged")


# --------------------------------------------------------------------------------------- numpy files


def _declared_bytes(shape, dtype: np.dtype) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n * dtype.itemsize


def _read_npy_header(f, path, what: str, error: ErrorFactory) -> tuple[tuple, np.dtype, int]:
    """(shape, dtype, header bytes) of the .npy stream ``f``, read with numpy's own header parser."""
    from numpy.lib import format as npformat

    try:
        version = npformat.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = npformat.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = npformat.read_array_header_2_0(f)
        else:  # (3, 0): a UTF-8 header; numpy >= 2 keeps its reader in numpy.lib._format_impl
            impl = getattr(npformat, "_read_array_header", None)
            if impl is None:
                from numpy.lib import _format_impl

                impl = _format_impl._read_array_header  # noqa: SLF001
            shape, _, dtype = impl(f, version)
    except (ValueError, OSError, EOFError, SyntaxError, TypeError, RecursionError, MemoryError,
            tokenize.TokenError) as err:  # TokenError: numpy's filter of a version 1 header cut mid-token
        _raise(error, path, f"{what} has a damaged .npy header ({err})")
    if dtype.hasobject:
        _raise(error, path, f"{what} holds Python objects, which splatforge does not load; save plain numbers")
    return shape, dtype, f.tell()


def _check_declared(path, what: str, shape, dtype, present: int, error: ErrorFactory, max_bytes: int) -> None:
    declared = _declared_bytes(shape, dtype)
    if declared > max_bytes:
        _raise(error, path, f"{what} declares an array of shape {tuple(shape)} ({declared:,} bytes), more than "
                            f"the {max_bytes:,} bytes splatforge reads; the file is damaged")
    if declared != present:
        _raise(error, path, f"{what} declares an array of shape {tuple(shape)} ({declared:,} bytes) but holds "
                            f"{present:,} bytes; the file is damaged or cut short")


def check_npy_header(path, what: str = ".npy file", error: ErrorFactory = InputFileError,
                     max_bytes: int = MAX_ARRAY_BYTES) -> tuple[tuple, np.dtype]:
    """(shape, dtype) of a .npy file after checking that its declared shape times item size is the data
    present (and under ``max_bytes``), before any array is allocated."""
    size = require_regular_file(path, what, error)
    with open(path, "rb") as f:
        shape, dtype, offset = _read_npy_header(f, path, what, error)
    _check_declared(path, what, shape, dtype, size - offset, error, max_bytes)
    return shape, dtype


# what reading a damaged zip member raises (bad directory, bad deflate stream, CRC mismatch, a compression
# method Python lacks)
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, NotImplementedError)
MAX_DEFLATE_RATIO = 1032  # deflate cannot compress better than this


def check_npz(path, what: str = ".npz file", error: ErrorFactory = InputFileError,
              max_bytes: int = MAX_ARRAY_BYTES) -> dict[str, tuple[tuple, np.dtype]]:
    """{name: (shape, dtype)} of a .npz archive after checking every member: its declared uncompressed
    size is one deflate can reach from its compressed size, and its .npy header's shape times item size
    is that size (so ``np.load`` allocates only what the file holds)."""
    require_regular_file(path, what, error)
    out = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                member = f"{what} member {info.filename!r}"
                if info.compress_type != zipfile.ZIP_STORED and \
                        info.file_size > max(info.compress_size, 1) * MAX_DEFLATE_RATIO:
                    _raise(error, path, f"{member} declares {info.file_size:,} bytes from {info.compress_size:,} "
                                        f"compressed: more than compression can give (a zip bomb)")
                if not info.filename.endswith(".npy"):
                    continue
                with zf.open(info) as f:
                    shape, dtype, offset = _read_npy_header(f, path, member, error)
                _check_declared(path, member, shape, dtype, info.file_size - offset, error, max_bytes)
                out[info.filename[:-4]] = (shape, dtype)
    except (*ZIP_ERRORS, OSError) as err:
        _raise(error, path, f"{what} is not a valid .npz (zip) archive ({type(err).__name__}: {err})")
    return out


# -------------------------------------------------------------------------------------------- memory


@contextlib.contextmanager
def memory_guard(inputs: str, error: Callable[[str], Exception] | None = None) -> Iterator[None]:
    """Turn a MemoryError (numpy's ``_ArrayMemoryError`` is one) raised inside into one line naming
    ``inputs`` (the file or files being read), raised as ``error(message)`` (default
    :class:`~recon.core.errors.InputFileError` with ``inputs`` as its path)."""
    try:
        yield
    except MemoryError as err:
        problem = memory_problem(err, "it")
        if error is None:
            raise InputFileError(inputs, problem) from None
        raise error(f"{inputs}: {problem}") from None
