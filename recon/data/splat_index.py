"""``OUT/index.jsonl`` of ``splatforge mesh2splat`` (written by :mod:`recon.mesh2splat.batch`, read by it to resume
and by :mod:`recon.data.splat_dataset`): one JSON object per line, one line per finished object (done or failed).

Fields of a row (docs/mesh2splat.md): ``source`` (path relative to the mesh folder), ``output`` (the
splats' path relative to OUT, None when failed), ``label``, ``status`` ("done" / "failed"), ``reason``
(why it failed, else None), ``mesh_to_world`` (4x4, row-major: world = M [x, y, z, 1]), ``gaussians``,
``train_psnr``, ``test_psnr`` (held-out views), ``chamfer_pct`` (mean distance of the Gaussian centres to
the surface, % of the bounding-box diagonal), ``seconds`` (wall), ``cpu_seconds`` (the converting process's CPU
time), ``method``, ``steps``, ``views``, ``size``.

Rows are appended whole (one ``write`` of the line, then fsync), so a batch killed while writing leaves at
most a partial last line, which :func:`read_index` drops: that object is converted again on resume.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from recon.core.limits import read_bytes_limited

INDEX_FILE = "index.jsonl"
MAX_INDEX_BYTES = 1 << 30


def index_path(out: Path) -> Path:
    return Path(out) / INDEX_FILE


def read_index(out: Path) -> list[dict]:
    """The complete rows of ``OUT/index.jsonl`` in file order (none when it does not exist); a line that is
    not a JSON object with a ``source`` (a write cut short by a kill) is dropped. For a source listed more
    than once, the last row counts (see :func:`latest_rows`)."""
    path = index_path(out)
    if not path.is_file():
        return []
    rows = []
    for line in read_bytes_limited(path, MAX_INDEX_BYTES, "index").decode("utf-8", "replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("source"), str):
            rows.append(row)
    return rows


def latest_rows(rows: list[dict]) -> dict[str, dict]:
    """source -> its last row."""
    return {row["source"]: row for row in rows}


def append_row(out: Path, row: dict) -> None:
    """Append ``row`` as one line (a single write, fsync'd). A partial line left by a kill is ended first,
    so the new row starts on a line of its own."""
    path = index_path(out)
    line = (json.dumps(row, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
