"""The manifest of an LOD export (``DIR/manifest.json``; layout in docs/lod.md): write it, read it back, check it.

::

    {"format": "splatforge-lod", "version": 1,
     "frame": "opencv",                 # bounds and chunk boxes in the model's own frame (the numbers of its PLY)
     "leaves": N, "sh_degree": d, "antialiased": false, "opacity_rule": "coverage",
     "view_budget": B, "target": "quest3" | null,   # Gaussians a viewer should draw at once (device preset)
     "bounds": {"min": [x, y, z], "max": [x, y, z]},
     "octree": {"depth": D, "chunk_depth": k, "origin": [x, y, z], "size": s},
     "levels": [{"level": 0, "octree_depth": D + 1, "error": 0.0, "count": N, "chunks": c}, ...],
     "chunks": [{"file": "chunks/L00/d3_0001f.spz", "level": 0, "cell_depth": 3, "cell": 31,
                 "bounds": {"min": [...], "max": [...]}, "error": e, "count": n, "bytes": b, "parent": j}, ...]}

Level 0 is the model itself; level l + 1 is coarser than level l. ``error`` is in world units: the largest
bounding radius of a merged Gaussian in the chunk (0 for the model's own Gaussians): a viewer keeps a chunk
while ``focal * error / distance`` is small enough in pixels. ``parent`` is the index of the chunk of the next
coarser level covering the same Gaussians (-1 on the coarsest level); a chunk is exactly replaced by its
children, the chunks naming it as parent.

Every problem found reading a manifest is a :class:`LodManifestError` naming the file, the entry and what to
do (one line, ``splatforge`` exits 2).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from recon.core.atomic import atomic_write_bytes
from recon.core.errors import InputFileError
from recon.core.limits import load_json

FORMAT = "splatforge-lod"
VERSION = 1
MANIFEST = "manifest.json"
FILE_PATTERN = re.compile(r"^chunks/L\d{2}/d\d{1,2}_[0-9a-f]+\.spz$")  # no '..', no absolute paths
REDO = "export the model again (splatforge export RUN --format lod --out DIR --force)"


class LodManifestError(InputFileError):
    """An LOD export's manifest or one of its chunks cannot be used."""


@dataclass(frozen=True)
class Box:
    """Axis-aligned box: ``min``, ``max`` [3] (world units)."""

    min: tuple[float, float, float]
    max: tuple[float, float, float]


@dataclass(frozen=True)
class LevelInfo:
    """One level: its index (0 = the model), the octree depth of its cut, its error, Gaussians and chunks."""

    level: int
    octree_depth: int
    error: float
    count: int
    chunks: int


@dataclass(frozen=True)
class ChunkInfo:
    """One chunk file: the Gaussians of one level in one octree cell (see the module docstring)."""

    file: str
    level: int
    cell_depth: int
    cell: int
    bounds: Box
    error: float
    count: int
    bytes: int
    parent: int


@dataclass(frozen=True)
class OctreeInfo:
    """The octree the chunks' cells belong to: its depth, the chunk cells' depth, cube corner and side."""

    depth: int
    chunk_depth: int
    origin: tuple[float, float, float]
    size: float


@dataclass(frozen=True)
class LodManifest:
    """The whole manifest (see the module docstring)."""

    leaves: int
    sh_degree: int
    antialiased: bool
    opacity_rule: str
    view_budget: int
    target: str | None
    bounds: Box
    octree: OctreeInfo
    levels: tuple[LevelInfo, ...]
    chunks: tuple[ChunkInfo, ...]
    format: str = FORMAT
    version: int = VERSION
    frame: str = "opencv"

    def to_json(self) -> bytes:
        """The manifest as UTF-8 JSON bytes (floats as Python writes them: they read back exactly)."""
        return (json.dumps(asdict(self), indent=1, allow_nan=False) + "\n").encode("utf-8")

    def chunks_of_level(self, level: int) -> list[int]:
        """Indices of the chunks of ``level``."""
        return [i for i, c in enumerate(self.chunks) if c.level == level]

    def children(self) -> list[list[int]]:
        """Per chunk, the indices of the chunks naming it as parent."""
        out: list[list[int]] = [[] for _ in self.chunks]
        for i, c in enumerate(self.chunks):
            if c.parent >= 0:
                out[c.parent].append(i)
        return out


def write_manifest(folder: Path, manifest: LodManifest, force: bool = False) -> Path:
    """Write ``folder/manifest.json`` atomically; returns its path."""
    path = Path(folder) / MANIFEST
    atomic_write_bytes(path, manifest.to_json(), force=force)
    return path


# ------------------------------------------------------------------------------------------------ reading


class _Reader:
    """Typed field access with one-line errors naming the manifest and the entry."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, problem: str):
        raise LodManifestError(self.path, f"{where}: {problem}; the export is damaged: {REDO}")

    def get(self, obj, key: str, where: str):
        if not isinstance(obj, dict):
            self.fail(where, "is not a JSON object")
        if key not in obj:
            self.fail(where, f"has no {key!r}")
        return obj[key]

    def integer(self, obj, key: str, where: str, low: int = 0, high: int | None = None) -> int:
        v = self.get(obj, key, where)
        if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
            bound = f" in {low}..{high}" if high is not None else f" >= {low}"
            self.fail(where, f"{key!r} is {v!r}, not an integer{bound}")
        return v

    def number(self, obj, key: str, where: str, low: float | None = None) -> float:
        v = self.get(obj, key, where)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (low is not None and v < low):
            self.fail(where, f"{key!r} is {v!r}, not a finite number" + (f" >= {low}" if low is not None else ""))
        return float(v)

    def vec3(self, obj, key: str, where: str) -> tuple[float, float, float]:
        v = self.get(obj, key, where)
        if not isinstance(v, list) or len(v) != 3:
            self.fail(where, f"{key!r} is not a list of 3 numbers")
        return tuple(self.number({"x": x}, "x", f"{where}.{key}") for x in v)

    def box(self, obj, key: str, where: str) -> Box:
        b = self.get(obj, key, where)
        box = Box(self.vec3(b, "min", f"{where}.{key}"), self.vec3(b, "max", f"{where}.{key}"))
        if any(lo > hi for lo, hi in zip(box.min, box.max)):
            self.fail(where, f"{key!r} has a min above its max")
        return box

    def listing(self, obj, key: str, where: str) -> list:
        v = self.get(obj, key, where)
        if not isinstance(v, list):
            self.fail(where, f"{key!r} is not a list")
        return v


def _level(r: _Reader, obj, i: int) -> LevelInfo:
    where = f"levels[{i}]"
    return LevelInfo(r.integer(obj, "level", where), r.integer(obj, "octree_depth", where, 0, 22),
                     r.number(obj, "error", where, 0.0), r.integer(obj, "count", where, 1),
                     r.integer(obj, "chunks", where, 1))


def _chunk(r: _Reader, obj, i: int, n_chunks: int) -> ChunkInfo:
    where = f"chunks[{i}]"
    name = r.get(obj, "file", where)
    if not isinstance(name, str) or not FILE_PATTERN.match(name):
        r.fail(where, f"'file' is {name!r}, not a chunk path like chunks/L00/d3_1f.spz")
    return ChunkInfo(name, r.integer(obj, "level", where), r.integer(obj, "cell_depth", where, 0, 21),
                     r.integer(obj, "cell", where), r.box(obj, "bounds", where), r.number(obj, "error", where, 0.0),
                     r.integer(obj, "count", where, 1), r.integer(obj, "bytes", where, 1),
                     r.integer(obj, "parent", where, -1, n_chunks - 1))


def read_manifest(folder) -> LodManifest:
    """The manifest of the LOD export in ``folder``, checked (:class:`LodManifestError` for anything wrong:
    missing, not JSON, another format or version, a field missing or of the wrong type, counts that do not add
    up, a parent on the wrong level)."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.exists():
        raise LodManifestError(path, f"no manifest: {folder} is not an LOD export (or it is incomplete); {REDO}")
    raw = load_json(path, "LOD manifest", error=lambda p, problem: LodManifestError(p, problem))
    r = _Reader(path)
    fmt = r.get(raw, "format", "manifest")
    if fmt != FORMAT:
        r.fail("manifest", f"'format' is {fmt!r}, not {FORMAT!r}")
    version = r.integer(raw, "version", "manifest")
    if version != VERSION:
        raise LodManifestError(path, f"LOD manifest version {version}; this splatforge reads version {VERSION}: "
                                     f"upgrade splatforge, or {REDO}")
    frame = r.get(raw, "frame", "manifest")
    if frame != "opencv":
        r.fail("manifest", f"'frame' is {frame!r}, not 'opencv'")
    rule = r.get(raw, "opacity_rule", "manifest")
    target = r.get(raw, "target", "manifest")
    if not isinstance(rule, str) or not (target is None or isinstance(target, str)):
        r.fail("manifest", "'opacity_rule' or 'target' is not a string")
    aa = r.get(raw, "antialiased", "manifest")
    if not isinstance(aa, bool):
        r.fail("manifest", f"'antialiased' is {aa!r}, not true or false")
    oct_raw = r.get(raw, "octree", "manifest")
    octree = OctreeInfo(r.integer(oct_raw, "depth", "octree", 1, 21), r.integer(oct_raw, "chunk_depth", "octree", 0, 21),
                        r.vec3(oct_raw, "origin", "octree"), r.number(oct_raw, "size", "octree", 0.0))
    levels = tuple(_level(r, obj, i) for i, obj in enumerate(r.listing(raw, "levels", "manifest")))
    chunk_list = r.listing(raw, "chunks", "manifest")
    chunks = tuple(_chunk(r, obj, i, len(chunk_list)) for i, obj in enumerate(chunk_list))
    manifest = LodManifest(
        leaves=r.integer(raw, "leaves", "manifest", 1), sh_degree=r.integer(raw, "sh_degree", "manifest", 0, 3),
        antialiased=aa, opacity_rule=rule, view_budget=r.integer(raw, "view_budget", "manifest", 1), target=target,
        bounds=r.box(raw, "bounds", "manifest"), octree=octree, levels=levels, chunks=chunks, format=fmt,
        version=version, frame=frame)
    _check_consistency(r, manifest)
    return manifest


def _check_consistency(r: _Reader, m: LodManifest) -> None:
    """Levels numbered 0.., each level's chunks adding up to its count, level 0 holding every Gaussian, parents
    one level coarser, files unique."""
    if not m.levels:
        r.fail("levels", "is empty")
    for i, level in enumerate(m.levels):
        if level.level != i:
            r.fail(f"levels[{i}]", f"'level' is {level.level}, expected {i}")
        chunks = [c for c in m.chunks if c.level == i]
        if len(chunks) != level.chunks or sum(c.count for c in chunks) != level.count:
            r.fail(f"levels[{i}]", f"says {level.chunks} chunks and {level.count} Gaussians, the chunk list has "
                                   f"{len(chunks)} and {sum(c.count for c in chunks)}")
    if m.levels[0].count != m.leaves:
        r.fail("levels[0]", f"holds {m.levels[0].count} Gaussians, the model {m.leaves}")
    top = len(m.levels) - 1
    for i, c in enumerate(m.chunks):
        if c.level > top:
            r.fail(f"chunks[{i}]", f"level {c.level} is not in 'levels'")
        want_parent = c.level < top
        if want_parent != (c.parent >= 0) or (want_parent and m.chunks[c.parent].level != c.level + 1):
            r.fail(f"chunks[{i}]", f"'parent' {c.parent} is not a chunk of level {c.level + 1}")
    if len({c.file for c in m.chunks}) != len(m.chunks):
        r.fail("chunks", "name the same file twice")
