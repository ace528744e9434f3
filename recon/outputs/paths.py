"""Checks on output paths, made before any slow work so that a bad ``--out`` costs nothing.

Each raises :class:`recon.core.errors.OutputError` naming the flag and the path, what is wrong and what to do.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Sequence

from recon.core.errors import OutputError, os_hint


def ensure_writable_folder(folder: str | os.PathLike, flag: str = "--out") -> Path:
    """Create ``folder`` (and its parents) if needed and check that a file can be created in it (a
    temporary file, removed again); returns it as a Path."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{flag} {folder}: exists and is not a folder; choose another path")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".splatforge_write_test.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        hint = os_hint(err) or "choose another location"
        raise OutputError(f"{flag} {folder}: cannot write there ({err.strerror or err}); {hint}") from None
    return folder


def check_output_file(path: str | os.PathLike, force: bool = False, flag: str = "--out",
                      suffixes: Sequence[str] = ()) -> Path:
    """``path`` must not be a folder, must end in one of ``suffixes`` (when given, e.g. ``(".mp4",)``),
    must not exist unless ``force``, and its folder must be writable (:func:`ensure_writable_folder`)."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a folder; give a file path such as {path / ('out' + (suffixes[0] if suffixes else ''))}")
    if suffixes and path.suffix.lower() not in suffixes:
        raise OutputError(f"{flag} {path}: must end in {' or '.join(suffixes)} (the file written is a "
                          f"{suffixes[0].lstrip('.').upper()})")
    if os.path.lexists(path) and not force:
        raise OutputError(f"{flag} {path}: already exists; pass --force to overwrite it")
    ensure_writable_folder(path.parent if str(path.parent) else Path("."), flag=f"{flag} {path}: folder")
    return path
