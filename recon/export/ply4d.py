"""The ply4d file: one 4D Gaussian model in a binary PLY (layout and meaning: recon/export/PLY4D.md).

``write_ply4d(path, data)`` writes a :class:`recon.core.spacetime_data.SpaceTimeData` atomically;
``read_ply4d(path)`` reads it back exactly (float32). ``ply4d_version(path)`` tells a ply4d file from a
3DGS PLY by its header alone (cheap: the readers of both call it to refuse the other kind with a clear
:class:`ModelKindError`).
"""

from __future__ import annotations

import math
import os

import numpy as np
from plyfile import PlyData, PlyElement

from recon.core.limits import require_finite
from recon.core.atomic import atomic_open
from recon.core.spacetime_data import SpaceTimeData
from recon.core.splat_data import num_sh_bases

from .ply import MAX_HEADER_BYTES, MIP_COMMENT, _columns, _is_mip, _load_plydata, sh_from_vertices
from .ply import check_float_properties, check_plausible_values, sh_rest_to_channel_major
from .splats import ModelKindError, SplatFileError, require_regular_file

PLY4D_MARKER = "splatforge_ply4d"
PLY4D_VERSION = 1
DURATION_MARKER = "splatforge_duration"  # header comment: seconds the normalised span lasts (optional)
FORMAT_NOTE = "recon/export/PLY4D.md"
FOREGROUND = "foreground"  # optional last property: SpaceTimeData.logit_foreground (absent: zeros)
_REQUIRED4 = ("x", "y", "z", "t", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", *(f"scale_{i}" for i in range(4)),
              *(f"rot_l_{i}" for i in range(4)), *(f"rot_r_{i}" for i in range(4)))


def property_names4(sh_degree: int, foreground: bool = False) -> list[str]:
    """ply4d vertex property names in file order for an SH degree (``foreground``: with the optional last
    property :data:`FOREGROUND`)."""
    n_rest = 3 * (num_sh_bases(sh_degree) - 1)
    return (["x", "y", "z", "t"] + [f"f_dc_{i}" for i in range(3)] + [f"f_rest_{i}" for i in range(n_rest)]
            + ["opacity"] + [f"scale_{i}" for i in range(4)] + [f"rot_l_{i}" for i in range(4)]
            + [f"rot_r_{i}" for i in range(4)] + ([FOREGROUND] if foreground else []))


def vertex_array4(data: SpaceTimeData) -> np.ndarray:
    """Structured float32 array [N] with the ply4d vertex properties of ``data`` in file order (the foreground
    logit last, when ``data`` has one)."""
    fg = data.logit_foreground
    names = property_names4(data.sh_degree, foreground=fg is not None)
    n = len(data)
    table = np.concatenate([data.means4, data.sh[:, 0, :], sh_rest_to_channel_major(data.sh),
                            data.logit_opacities[:, None], data.log_scales4, data.quats_left,
                            data.quats_right, *([fg[:, None]] if fg is not None else [])],
                           axis=1).astype("<f4", copy=False)
    vertex = np.empty(n, dtype=[(name, "<f4") for name in names])
    vertex.view("<f4").reshape(n, len(names))[:] = table
    return vertex


def write_ply4d(path: str | os.PathLike, data: SpaceTimeData, force: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (nothing appears on error). SplatFileError for an empty model
    or one holding NaN/Inf (drop them first: :meth:`SpaceTimeData.drop_nonfinite`); FileExistsError for
    an existing ``path`` without ``force``."""
    if len(data) == 0:
        raise SplatFileError(path, "refusing to write an empty 4D model (0 Gaussians)")
    bad = len(data) - int(np.count_nonzero(data.finite_mask()))
    if bad:
        raise SplatFileError(path, f"{bad} 4D Gaussian(s) hold NaN/Inf values; drop them first")
    comments = [f"{PLY4D_MARKER} {PLY4D_VERSION}"] + ([MIP_COMMENT] if data.antialiased else [])
    if data.duration is not None:
        comments.append(f"{DURATION_MARKER} {data.duration!r}")
    element = PlyElement.describe(vertex_array4(data), "vertex")
    with atomic_open(path, force=force) as f:
        PlyData([element], text=False, byte_order="<", comments=comments).write(f)


def _header_lines(path: str | os.PathLike) -> list[str] | None:
    """The header lines of a PLY file (None when ``path`` does not start like a PLY with a complete header)."""
    require_regular_file(path)
    with open(path, "rb") as f:
        head = f.read(MAX_HEADER_BYTES)
    end = head.find(b"end_header")
    if not head.startswith(b"ply") or end < 0:
        return None
    return head[:end].decode("ascii", "replace").splitlines()


def ply4d_version(path: str | os.PathLike) -> int | None:
    """The ply4d version of the file at ``path``, from its header: the marker comment's number; 0 when its
    vertices have the 4D properties (``t``, ``rot_l_0``) but no marker; None for any other file (a 3DGS
    PLY, another format, no PLY header). FileNotFoundError when missing."""
    if os.path.splitext(os.fspath(path))[1].lower() != ".ply":
        return None
    lines = _header_lines(path)
    if lines is None:
        return None
    props = set()
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] in ("comment", "obj_info") and words[1] == PLY4D_MARKER:
            try:
                return int(words[2])
            except (IndexError, ValueError):
                return -1
        if len(words) == 3 and words[0] == "property":
            props.add(words[2])
    return 0 if {"t", "rot_l_0"} <= props else None


def ply4d_duration(path: str | os.PathLike) -> float | None:
    """Seconds the normalised time span of the ply4d file at ``path`` lasts, from its header's
    ``comment splatforge_duration S`` (None when absent or not a positive number)."""
    for line in _header_lines(path) or []:
        words = line.split()
        if len(words) == 3 and words[0] == "comment" and words[1] == DURATION_MARKER:
            try:
                value = float(words[2])
            except ValueError:
                return None
            return value if math.isfinite(value) and value > 0 else None
    return None


def is_ply4d(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a (possibly unreadable-version) ply4d file."""
    return ply4d_version(path) is not None


def read_ply4d(path: str | os.PathLike) -> SpaceTimeData:
    """Read a ply4d file. ModelKindError for a 3DGS PLY (or any PLY without the 4D marker);
    SplatFileError for another version, missing properties, a bad SH count, no Gaussians, a damaged file."""
    version = ply4d_version(path)
    if version is None or version == 0:
        why = ("its vertices have 4D properties but the header lacks the 'comment splatforge_ply4d 1' marker"
               if version == 0 else "it holds 3D Gaussians (or is no PLY)")
        raise ModelKindError(path, f"not a ply4d (4D Gaussian) file: {why}; a 4D model comes from "
                                   f"`splatforge train --method 4dgs` (RUN/splats4d.ply) or "
                                   f"`splatforge export RUN --format ply4d` (see {FORMAT_NOTE})")
    if version != PLY4D_VERSION:
        raise SplatFileError(path, f"ply4d version {version} is not supported (this splatforge reads version "
                                   f"{PLY4D_VERSION}); re-export it with this version")
    ply = _load_plydata(path)
    try:
        v = ply["vertex"].data
    except KeyError:
        raise SplatFileError(path, "PLY has no 'vertex' element") from None
    missing = [p for p in _REQUIRED4 if p not in (v.dtype.names or ())]
    if missing:
        raise SplatFileError(path, f"ply4d file lacks vertex properties: {', '.join(missing)}")
    optional = [FOREGROUND] if FOREGROUND in v.dtype.names else []
    floats = [*_REQUIRED4, *optional, *(n for n in v.dtype.names if n.startswith("f_rest_"))]
    check_float_properties(path, v.dtype, floats)
    n = len(v)
    if n == 0:
        raise SplatFileError(path, "empty 4D model (0 Gaussians)")
    check_plausible_values(path, ply, v, floats)
    sh = sh_from_vertices(path, v)
    means4, log_scales4 = _columns(v, ["x", "y", "z", "t"]), _columns(v, [f"scale_{i}" for i in range(4)])
    require_finite(means4[:, 3], path, "vertex property t (time)", SplatFileError)
    require_finite(log_scales4, path, "vertex properties scale_0..scale_3", SplatFileError)
    return SpaceTimeData(
        means4=means4,
        log_scales4=log_scales4,
        quats_left=_columns(v, [f"rot_l_{i}" for i in range(4)]),
        quats_right=_columns(v, [f"rot_r_{i}" for i in range(4)]),
        logit_opacities=np.array(v["opacity"], dtype=np.float32),
        sh=sh, antialiased=_is_mip(ply), duration=ply4d_duration(path),
        logit_foreground=np.array(v[FOREGROUND], dtype=np.float32) if optional else None)


def read_ply4d_finite(path: str | os.PathLike) -> SpaceTimeData:
    """:func:`read_ply4d` without the Gaussians holding NaN/Inf, for building a model from the file (the reader
    leaves them to its callers; the 4D slicer refuses them: ``export --time`` of such a file was a traceback).
    SplatFileError when none is left."""
    data, dropped = read_ply4d(path).drop_nonfinite()
    if len(data) == 0:
        raise SplatFileError(path, f"all {dropped:,} 4D Gaussians hold NaN or infinite values; the file is damaged "
                                   f"or was written from a diverged model")
    return data
