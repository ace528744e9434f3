"""Splat file IO: the 3DGS PLY, antimatter15 ``.splat`` and Niantic SPZ (v3) formats.

``read_splats(path)`` / ``write_splats(path, data)`` pick the format from the file suffix
(``.ply``, ``.splat``, ``.spz``); 4D models have their own PLY layout (``read_ply4d`` / ``write_ply4d``,
recon/export/PLY4D.md), which the 3D readers refuse with :class:`ModelKindError`. Everything in memory is a :class:`SplatData` in the project's
conventions (OpenCV world, wxyz quaternions, raw log-scales / logit-opacities, degree-major SH);
each format module converts at its boundary. Bad files raise :class:`SplatFileError` (a
``ValueError``) naming the file and the problem; writes are atomic and refuse to overwrite unless
``force``.

Layer 2: may import layer 1 (recon.core) and rasterizer; never the trainer, evaluation or run folders.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from recon.core.atomic import atomic_open, atomic_write_bytes, refuse_overwrite
from recon.core.splat_data import SplatData, empty_splats, random_splats

from .ply import read_ply, write_ply
from .splat_format import read_splat, write_splat
from .splats import ModelKindError, SplatFileError
from .spz import read_spz, write_spz
from .ply4d import is_ply4d, read_ply4d, write_ply4d

__all__ = [
    "SplatData", "SplatFileError", "ExportResult", "FORMATS", "read_splats", "write_splats",
    "format_for_path", "atomic_open", "atomic_write_bytes", "empty_splats", "random_splats",
    "ModelKindError", "is_ply4d", "read_ply4d", "write_ply4d", "read_ply", "write_ply", "read_splat", "write_splat", "read_spz", "write_spz",
]

_Reader = Callable[[str | os.PathLike], SplatData]
_Writer = Callable[..., None]

FORMATS: dict[str, tuple[_Reader, _Writer]] = {
    "ply": (read_ply, write_ply),
    "splat": (read_splat, write_splat),
    "spz": (read_spz, write_spz),
}


@dataclass(frozen=True)
class ExportResult:
    """What :func:`write_splats` wrote: the file, its format, splats written and dropped (NaN/Inf)."""

    path: Path
    format: str
    written: int
    dropped: int


def _normalise_format(path, fmt: str) -> str:
    """'ply', '.PLY' -> 'ply'; error naming the file for unknown formats."""
    key = fmt.lower().lstrip(".")
    if key not in FORMATS:
        known = ", ".join(f".{k}" for k in FORMATS)
        raise SplatFileError(path, f"unknown splat format {fmt!r} (known: {known})")
    return key


def format_for_path(path: str | os.PathLike) -> str:
    """Format key ('ply', 'splat', 'spz') from the file suffix; SplatFileError if unknown."""
    suffix = Path(path).suffix
    if not suffix:
        raise SplatFileError(path, "no file suffix to pick a splat format from "
                                   "(use .ply, .splat or .spz)")
    return _normalise_format(path, suffix)


def read_splats(path: str | os.PathLike) -> SplatData:
    """Read a splat model, format by suffix. Raises SplatFileError for bad or empty files and
    FileNotFoundError for missing ones."""
    reader, _ = FORMATS[format_for_path(path)]
    return reader(path)


def write_splats(path: str | os.PathLike, data: SplatData, format: str | None = None,
                 force: bool = False) -> ExportResult:
    """Write ``data`` to ``path`` atomically; the format comes from ``format`` or the suffix.

    Splats holding NaN/Inf are dropped (counted in the result). An empty model (before or after
    dropping) raises SplatFileError; an existing file raises FileExistsError unless ``force``.
    On any error no file is created or changed.
    """
    key = _normalise_format(path, format) if format else format_for_path(path)
    refuse_overwrite(path, force)
    clean, dropped = data.drop_nonfinite()
    if len(clean) == 0:
        why = f" (all {dropped} splats had NaN/Inf values)" if dropped else ""
        raise SplatFileError(path, f"refusing to write an empty model{why}")
    _, writer = FORMATS[key]
    writer(path, clean, force=force)
    return ExportResult(Path(path), key, len(clean), dropped)
