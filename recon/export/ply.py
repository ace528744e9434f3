"""The original 3DGS PLY layout (what the INRIA code, gsplat, SuperSplat and most viewers read).

One ``vertex`` element, binary little-endian, float32 properties in this order::

    x y z [nx ny nz] f_dc_0..2 f_rest_0..(3M-1) opacity scale_0..2 rot_0..3

with M = K - 1 higher-order SH coefficients per channel (0, 3, 8 or 15 for degrees 0-3). Values are
raw: ``opacity`` is the logit, ``scale_*`` the log scales, ``rot_*`` the quaternion (w, x, y, z) as
trained (not normalised). ``f_rest`` is channel-major: all red coefficients, then green, then blue,
i.e. ``f_rest[c * M + j] = sh[:, 1 + j, c]``. Positions are in the OpenCV world frame, like ours, so
no axis conversion happens. Writers always emit normals (zeros) for compatibility with old readers;
readers accept files with or without them. A header line ``comment SplatRenderMode: mip`` marks an
anti-aliased model.
"""

from __future__ import annotations

import os
import re
import struct
from typing import BinaryIO

import numpy as np
from plyfile import PlyData, PlyElement, PlyParseError

from recon.core.atomic import atomic_open
from recon.core.splat_data import SplatData, num_sh_bases

from .splats import ModelKindError, SplatFileError, require_regular_file, require_writable

# what plyfile raises for a malformed file (header or body); OSError (no permission, a folder) propagates
PLY_PARSE_ERRORS = (PlyParseError, ValueError, EOFError, struct.error, IndexError, KeyError)

MIP_COMMENT = "SplatRenderMode: mip"
_REST_COUNT_TO_DEGREE = {3 * (num_sh_bases(d) - 1): d for d in range(4)}  # {0: 0, 9: 1, 24: 2, 45: 3}
_REQUIRED = ("x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
             "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3")


# ------------------------------------------------------------------------------------------ writing


def property_names(sh_degree: int, normals: bool = True) -> list[str]:
    """PLY vertex property names, in file order, for an SH degree."""
    n_rest = 3 * (num_sh_bases(sh_degree) - 1)
    names = ["x", "y", "z"] + (["nx", "ny", "nz"] if normals else [])
    names += [f"f_dc_{i}" for i in range(3)] + [f"f_rest_{i}" for i in range(n_rest)]
    names += ["opacity"] + [f"scale_{i}" for i in range(3)] + [f"rot_{i}" for i in range(4)]
    return names


def sh_rest_to_channel_major(sh: np.ndarray) -> np.ndarray:
    """sh [N, K, 3] degree-major -> f_rest [N, 3 (K-1)] channel-major (R coeffs, G coeffs, B coeffs)."""
    n = sh.shape[0]
    return sh[:, 1:, :].transpose(0, 2, 1).reshape(n, -1)


def sh_rest_from_channel_major(f_rest: np.ndarray) -> np.ndarray:
    """f_rest [N, 3 M] channel-major -> [N, M, 3] (coefficients 1..K-1 of ``sh``)."""
    n = f_rest.shape[0]
    return f_rest.reshape(n, 3, -1).transpose(0, 2, 1)


def splats_to_vertex_array(data: SplatData, normals: bool = True) -> np.ndarray:
    """Structured float32 array [N] with the PLY vertex properties of ``data`` in file order."""
    names = property_names(data.sh_degree, normals)
    n = len(data)
    columns = [data.means]
    if normals:
        columns.append(np.zeros((n, 3), np.float32))
    columns += [data.sh[:, 0, :], sh_rest_to_channel_major(data.sh),
                data.logit_opacities[:, None], data.log_scales, data.quats]
    table = np.concatenate(columns, axis=1).astype("<f4", copy=False)
    vertex = np.empty(n, dtype=[(name, "<f4") for name in names])
    vertex.view("<f4").reshape(n, len(names))[:] = table
    return vertex


def write_ply_stream(f: BinaryIO, data: SplatData, normals: bool = True) -> None:
    """Write ``data`` as a binary little-endian 3DGS PLY to an open binary file object."""
    comments = [MIP_COMMENT] if data.antialiased else []
    element = PlyElement.describe(splats_to_vertex_array(data, normals), "vertex")
    PlyData([element], text=False, byte_order="<", comments=comments).write(f)


def write_ply(path: str | os.PathLike, data: SplatData, force: bool = False,
              normals: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (see :mod:`recon.export.atomic`).

    Empty models and NaN/Inf values are refused (``recon.export.write_splats`` drops those first).
    """
    require_writable(path, data)
    with atomic_open(path, force=force) as f:
        write_ply_stream(f, data, normals)


# ------------------------------------------------------------------------------------------ reading


_PLY_TYPE_BYTES = {"char": 1, "int8": 1, "uchar": 1, "uint8": 1, "short": 2, "int16": 2, "ushort": 2,
                   "uint16": 2, "int": 4, "int32": 4, "uint": 4, "uint32": 4, "float": 4,
                   "float32": 4, "double": 8, "float64": 8}
MAX_HEADER_BYTES = 1 << 20  # a header (comments included) longer than this is refused, not handed to plyfile
ASCII_MIN_VALUE_BYTES = 2  # one digit and one separator


def _min_row_bytes(fmt: str, properties: list[list[str]]) -> int | None:
    """Fewest bytes one row of an element can take (lists empty); None for an unknown type."""
    if fmt == "ascii":
        return ASCII_MIN_VALUE_BYTES * len(properties)
    total = 0
    for words in properties:  # ["float", "x"] or ["list", "uchar", "int", "vertex_indices"]
        size = _PLY_TYPE_BYTES.get(words[1] if words[0] == "list" and len(words) > 1 else words[0])
        if size is None:
            return None
        total += size
    return total


def parse_ply_counts(head: bytes) -> tuple[int, str, list[tuple[str, int, int | None]]] | None:
    """(header length in bytes, format, [(element, count, min bytes per row)]) from the start of a
    PLY file, or None when ``head`` holds no complete header this simple parse understands (plyfile
    then reports the problem)."""
    end = head.find(b"end_header")
    newline = head.find(b"\n", end) if end >= 0 else -1
    if not head.startswith(b"ply") or newline < 0:
        return None
    fmt, elements = "", []
    for line in head[:end].decode("ascii", "replace").splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "format":
            fmt = words[1]
        elif len(words) == 3 and words[0] == "element" and words[2].lstrip("-").isdigit():
            elements.append((words[1], int(words[2]), []))
        elif len(words) >= 3 and words[0] == "property" and elements:
            elements[-1][2].append(words[1:])
    return newline + 1, fmt, [(name, count, _min_row_bytes(fmt, props)) for name, count, props in elements]


def check_ply_counts(path: str | os.PathLike, exact: bool = False) -> None:
    """SplatFileError when the header declares more elements than the file's bytes can hold (``exact``: or
    when a binary file whose rows all have a fixed size holds bytes after its last element, which a splat
    file never does: a byte inserted or a count edited would shift every later value).

    plyfile allocates every element's array from the declared count before reading it, so a
    header saying 4 billion vertices in a 1 KB ASCII file would ask for 200 GB.
    """
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        head = f.read(MAX_HEADER_BYTES)
    parsed = parse_ply_counts(head)
    if parsed is None:
        if head.startswith(b"ply") and len(head) == MAX_HEADER_BYTES:  # counts unchecked: plyfile would trust them
            raise SplatFileError(path, f"PLY header has no end_header in its first {MAX_HEADER_BYTES:,} bytes "
                                       f"(a header this long is damaged or not a splat file)")
        return
    remaining = size - parsed[0] + (1 if parsed[1] == "ascii" else 0)  # last value may end the file
    for name, count, row in parsed[2]:
        if row is None or row == 0:
            continue
        if count < 0 or count * row > remaining:
            what = "vertices" if name == "vertex" else f"'{name}' elements"
            raise SplatFileError(
                path, f"PLY header declares {count:,} {what} (at least {row} bytes each), but the "
                      f"{max(remaining, 0):,} bytes after the header hold at most "
                      f"{max(remaining, 0) // row:,}; the file is truncated or its header is corrupt")
        remaining -= count * row
    fixed = parsed[1].startswith("binary") and all(r is not None and not _has_lists(h) for h, r in
                                                   zip(_element_headers(head), (r for _, _, r in parsed[2])))
    if exact and fixed and remaining != 0:
        raise SplatFileError(
            path, f"{remaining:,} bytes follow the last element the PLY header declares (rows of fixed size); "
                  f"the file was changed after it was written or its header is corrupt: re-export it")


def _element_headers(head: bytes) -> list[list[list[str]]]:
    """The property lines (split into words) of each element of a PLY header, in order."""
    end = head.find(b"end_header")
    elements: list[list[list[str]]] = []
    for line in head[:max(end, 0)].decode("ascii", "replace").splitlines():
        words = line.split()
        if words[:1] == ["element"]:
            elements.append([])
        elif words[:1] == ["property"] and elements:
            elements[-1].append(words[1:])
    return elements


def _has_lists(properties: list[list[str]]) -> bool:
    return any(words[:1] == ["list"] for words in properties)


def _load_plydata(path: str | os.PathLike) -> PlyData:
    """Parse the file with plyfile after checking the declared counts against the file size.
    Binary vertex data is memory-mapped (plyfile's stream reader is ~1000x slower); plyfile checks
    the file is long enough, so truncation fails here."""
    require_regular_file(path)
    check_ply_counts(path, exact=True)
    try:
        with open(path, "rb") as f:
            return PlyData.read(f, mmap="c")
    except PLY_PARSE_ERRORS as exc:
        raise SplatFileError(path, f"not a readable PLY file ({type(exc).__name__}: {exc})") from exc


def _vertex_element(path, ply: PlyData) -> PlyElement:
    """The ``vertex`` element; errors for a missing element or missing properties."""
    try:
        vertex = ply["vertex"]
    except KeyError:
        raise SplatFileError(path, "PLY has no 'vertex' element") from None
    names = set(vertex.data.dtype.names or ())
    if {"t", "rot_l_0"} <= names:
        raise ModelKindError(path, "a 4D Gaussian (ply4d) file, not a 3DGS PLY: it cannot be used where 3D "
                                   "Gaussians are needed; make a 3D slice with `splatforge export "
                                   f"{os.fspath(path)} --time T --out slice.ply` (T in [0, 1])")
    missing = [p for p in _REQUIRED if p not in names]
    if missing:
        raise SplatFileError(path, f"not a 3DGS PLY: vertex properties missing: {', '.join(missing)}")
    check_float_properties(path, vertex.data.dtype, [*_REQUIRED, *(n for n in names if n.startswith("f_rest_"))])
    return vertex


def check_float_properties(path, dtype: np.dtype, names) -> None:
    """SplatFileError unless every property in ``names`` is float or double: an integer opacity or scale
    (``property uchar opacity``) would be read as a logit of 0..255, silently wrong."""
    bad = [f"{n} ({dtype[n]})" for n in names if n in (dtype.names or ()) and dtype[n].kind != "f"]
    if bad:
        raise SplatFileError(path, f"vertex properties must be float or double; these are integers: "
                                   f"{', '.join(bad[:6])}; re-export the file from its source")


def _rest_count(path, names) -> int:
    """Number of f_rest_* properties; they must be f_rest_0..f_rest_{M-1} and M in {0, 9, 24, 45}."""
    idx = sorted(int(m.group(1)) for n in names if (m := re.fullmatch(r"f_rest_(\d+)", n)))
    if idx != list(range(len(idx))):
        raise SplatFileError(path, f"f_rest properties are not numbered 0..{len(idx) - 1}")
    if len(idx) not in _REST_COUNT_TO_DEGREE:
        raise SplatFileError(
            path, f"{len(idx)} f_rest properties: SH count mismatch (expected 0, 9, 24 or 45)")
    return len(idx)


def _columns(v: np.ndarray, names) -> np.ndarray:
    """Stack named fields of a structured array into a new float32 array [N, len(names)]."""
    return np.stack([np.array(v[n], dtype=np.float32) for n in names], axis=1)


def _is_mip(ply: PlyData) -> bool:
    """True if a header comment says ``SplatRenderMode: mip``."""
    for c in list(ply.comments) + list(getattr(ply, "obj_info", [])):
        key, _, value = c.partition(":")
        if key.strip().lower() == "splatrendermode" and value.strip().lower() == "mip":
            return True
    return False



def sh_from_vertices(path: str | os.PathLike, v: np.ndarray) -> np.ndarray:
    """SH coefficients [N, K, 3] float32 from a PLY vertex array's f_dc_0..2 and channel-major f_rest_* (Inria
    layout); SplatFileError naming ``path`` for an f_rest count that is no SH degree."""
    m = _rest_count(path, v.dtype.names)
    sh = np.empty((len(v), 1 + m // 3, 3), dtype=np.float32)
    sh[:, 0] = _columns(v, [f"f_dc_{i}" for i in range(3)])
    if m:
        sh[:, 1:] = sh_rest_from_channel_major(_columns(v, [f"f_rest_{i}" for i in range(m)]))
    return sh

# Plausibility of the values (a header whose byte order is not the data's loads garbage without an error):
# a float32 read in the wrong byte order takes its exponent from a mantissa byte, so its magnitude is about
# log-uniform over 1e-45..3e38 (about half of such values fall outside the band below; 1.0 becomes 4.6e-41).
# Trained models stay far inside it: means within a few km, log scales and opacity logits within tens.
PLAUSIBLE_MAX_ABS = 1e10
PLAUSIBLE_MIN_ABS = 1e-30  # exact zeros are plausible (normals, SH of degree-0 models padded)
IMPLAUSIBLE_FRACTION = 0.1  # byte-swapped data: about 0.45; real models: 0
PLAUSIBILITY_ROWS = 65_536  # rows looked at (evenly spaced); enough to tell garbage from a model
_BYTE_ORDER_NAMES = {"<": "binary_little_endian", ">": "binary_big_endian"}


def implausible_fraction(values: np.ndarray) -> float:
    """Fraction of the finite values of ``values`` (any float dtype and byte order) whose magnitude is
    above :data:`PLAUSIBLE_MAX_ABS` or non-zero below :data:`PLAUSIBLE_MIN_ABS` (0 when none is finite);
    NaN/Inf are left to the readers' callers (``drop_nonfinite`` counts them)."""
    with np.errstate(invalid="ignore", over="ignore"):  # NaN payloads and swapped halves cast quietly
        a = np.abs(np.asarray(values, dtype=np.float64)).ravel()
    a = a[np.isfinite(a)]
    if a.size == 0:
        return 0.0
    return float(np.count_nonzero((a > PLAUSIBLE_MAX_ABS) | ((a > 0) & (a < PLAUSIBLE_MIN_ABS))) / a.size)


def check_plausible_values(path, ply: PlyData, v: np.ndarray, names) -> None:
    """SplatFileError naming ``path`` when more than :data:`IMPLAUSIBLE_FRACTION` of the vertex values of
    properties ``names`` (at most :data:`PLAUSIBILITY_ROWS` rows) are implausible for Gaussian splats
    (:func:`implausible_fraction`): the header's byte order does not match the data (the message says
    so when the other order reads plausibly), or the data is damaged."""
    rows = v[:: max(1, len(v) // PLAUSIBILITY_ROWS)]
    columns = {n: np.asarray(rows[n]) for n in names if n in (rows.dtype.names or ())}
    if not columns:
        return
    fractions = {n: implausible_fraction(c) for n, c in columns.items()}
    total = sum(f * c.size for f, c in zip(fractions.values(), columns.values())) / sum(c.size for c in columns.values())
    if total <= IMPLAUSIBLE_FRACTION:
        return
    worst = max(fractions, key=fractions.get)
    with np.errstate(invalid="ignore", over="ignore"):
        col = np.abs(columns[worst].astype(np.float64))
    example = float(col[np.isfinite(col) & ((col > PLAUSIBLE_MAX_ABS) | ((col > 0) & (col < PLAUSIBLE_MIN_ABS)))][0])
    head = (f"{100 * total:.0f}% of its vertex values are implausible for Gaussian splats (e.g. |{worst}| = "
            f"{example:.3g}; a model's values are 0 or of magnitude {PLAUSIBLE_MIN_ABS:g}..{PLAUSIBLE_MAX_ABS:g})")
    declared = None if ply.text else _BYTE_ORDER_NAMES.get(ply.byte_order)
    if declared is None:
        raise SplatFileError(path, f"{head}: the data is damaged; re-export the file from its source")
    other = _BYTE_ORDER_NAMES[">" if ply.byte_order == "<" else "<"]
    swapped = [implausible_fraction(c.view(c.dtype.newbyteorder())) * c.size for c in columns.values()]
    if sum(swapped) / sum(c.size for c in columns.values()) <= IMPLAUSIBLE_FRACTION:
        raise SplatFileError(path, f"{head}: the header says {declared} but the data reads as {other}: the byte "
                                   f"order in its 'format' line is wrong; re-export the file (or fix that line)")
    raise SplatFileError(path, f"{head}: the data does not match the header's byte order ({declared}) or is "
                               f"damaged; re-export the file from its source")


def read_ply(path: str | os.PathLike) -> SplatData:
    """Read a 3DGS PLY (with or without normals, SH degree 0-3) into :class:`SplatData`.

    Raises :class:`SplatFileError` for unreadable/truncated files, missing properties, an f_rest
    count that is not 0/9/24/45, or zero splats.
    """
    ply = _load_plydata(path)
    vertex = _vertex_element(path, ply)
    v = vertex.data
    n = len(v)
    if n == 0:
        raise SplatFileError(path, "empty model (0 splats)")
    check_plausible_values(path, ply, v, [*_REQUIRED, *(n for n in v.dtype.names if n.startswith("f_rest_"))])
    sh = sh_from_vertices(path, v)
    return SplatData(
        means=_columns(v, ["x", "y", "z"]),
        quats=_columns(v, [f"rot_{i}" for i in range(4)]),
        log_scales=_columns(v, [f"scale_{i}" for i in range(3)]),
        logit_opacities=np.array(v["opacity"], dtype=np.float32),
        sh=sh,
        antialiased=_is_mip(ply),
    )
