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
from typing import BinaryIO

import numpy as np
from plyfile import PlyData, PlyElement

from .atomic import atomic_open
from .splats import SplatData, SplatFileError, num_sh_bases, require_writable

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


def _load_plydata(path: str | os.PathLike) -> PlyData:
    """Parse the file with plyfile. Binary vertex data is memory-mapped (plyfile's stream reader
    is ~1000x slower); plyfile checks the file is long enough, so truncation fails here."""
    try:
        with open(path, "rb") as f:
            return PlyData.read(f, mmap="c")
    except OSError:
        raise
    except Exception as exc:  # plyfile raises PlyParseError, ValueError, EOFError, struct.error...
        raise SplatFileError(path, f"not a readable PLY file ({type(exc).__name__}: {exc})") from exc


def _vertex_element(path, ply: PlyData) -> PlyElement:
    """The ``vertex`` element; errors for a missing element or missing properties."""
    try:
        vertex = ply["vertex"]
    except KeyError:
        raise SplatFileError(path, "PLY has no 'vertex' element") from None
    names = set(vertex.data.dtype.names or ())
    missing = [p for p in _REQUIRED if p not in names]
    if missing:
        raise SplatFileError(path, f"not a 3DGS PLY: vertex properties missing: {', '.join(missing)}")
    return vertex


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
    m = _rest_count(path, v.dtype.names)
    sh = np.empty((n, 1 + m // 3, 3), dtype=np.float32)
    sh[:, 0] = _columns(v, [f"f_dc_{i}" for i in range(3)])
    if m:
        sh[:, 1:] = sh_rest_from_channel_major(_columns(v, [f"f_rest_{i}" for i in range(m)]))
    return SplatData(
        means=_columns(v, ["x", "y", "z"]),
        quats=_columns(v, [f"rot_{i}" for i in range(4)]),
        log_scales=_columns(v, [f"scale_{i}" for i in range(3)]),
        logit_opacities=np.array(v["opacity"], dtype=np.float32),
        sh=sh,
        antialiased=_is_mip(ply),
    )
