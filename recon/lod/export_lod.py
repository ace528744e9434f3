"""LOD export: a hierarchy's level cuts written as SPZ chunks by octree cell and level, plus the manifest; the
reader of such a folder.

Levels (:func:`choose_levels`): level 0 is the model's own Gaussians (the leaves); each coarser level is the
hierarchy's cut at an octree depth (:meth:`Hierarchy.level_cut`: one merged Gaussian per occupied cell), taken
when it holds at most ``LEVEL_RATIO`` of the previous level's Gaussians, down to a single Gaussian.

Chunks (:func:`plan_chunks`): the chunk depth k is the shallowest octree depth whose fullest cell holds at most
``chunk_size`` of the model's Gaussians. A level whose cut depth is d >= k is split by the depth-k cells (every
node of that cut lies inside one); a coarser level (d < k) by its own depth-d cells. Each chunk is one SPZ file
(:func:`recon.export.spz.write_spz`: quantised, in SPZ's own axes; read back into the model's frame).
Every chunk of level l + 1 holds exactly the merges of the Gaussians of its children chunks on level l.

Writing (:func:`write_lod`) goes to a temporary folder beside ``out``, manifest last, then renamed onto
``out`` in one step: an interrupted export leaves no folder that looks complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recon.core.atomic import refuse_overwrite
from recon.core.splat_data import SplatData
from recon.export.splats import SplatFileError
from recon.export.spz import read_spz, write_spz

from .hierarchy import Hierarchy
from .manifest import MANIFEST, REDO, Box, ChunkInfo, LevelInfo, LodManifest, LodManifestError, OctreeInfo, \
    read_manifest, write_manifest

LEVEL_RATIO = 0.5  # a coarser level holds at most this fraction of the previous level's Gaussians
CHUNK_SIZE = 65_536  # most model Gaussians per chunk cell (chooses the chunk depth)
WRITE_THREADS = 2  # gzip and numpy release the GIL: chunks are encoded two at a time


@dataclass(frozen=True)
class PlannedChunk:
    """A chunk before writing: its level, cell and node ids."""

    level: int
    cell_depth: int
    cell: int
    nodes: np.ndarray


def choose_levels(h: Hierarchy, ratio: float = LEVEL_RATIO) -> list[tuple[int, np.ndarray]]:
    """[(octree depth, node ids)] per level, level 0 (the leaves, depth ``octree_depth + 1``) first."""
    levels = [(h.octree_depth + 1, np.arange(h.num_leaves, dtype=np.int32))]
    for depth in range(h.octree_depth, -1, -1):
        if len(levels[-1][1]) == 1:
            break
        cut = h.level_cut(depth)
        if len(cut) <= ratio * len(levels[-1][1]) or len(cut) == 1:
            levels.append((depth, cut))
    return levels


def chunk_depth(h: Hierarchy, chunk_size: int = CHUNK_SIZE) -> int:
    """Shallowest octree depth whose fullest cell holds at most ``chunk_size`` leaves."""
    leaf_codes = h.code[: h.num_leaves]
    for depth in range(0, h.octree_depth + 1):
        cells = leaf_codes >> np.uint64(3 * (h.octree_depth - depth))
        if np.unique(cells, return_counts=True)[1].max() <= chunk_size:
            return depth
    return h.octree_depth


def plan_chunks(h: Hierarchy, levels: list[tuple[int, np.ndarray]], k: int) -> list[PlannedChunk]:
    """The chunks of every level, by cell (see the module docstring), level 0 first, cells in Morton order."""
    out = []
    for level, (depth, nodes) in enumerate(levels):
        e = min(depth, k)
        cells = h.code[nodes] >> np.uint64(3 * (h.octree_depth - e))
        order = np.argsort(cells, kind="stable")
        nodes, cells = nodes[order], cells[order]
        starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
        for a, b in zip(starts, np.append(starts[1:], len(nodes))):
            out.append(PlannedChunk(level, e, int(cells[a]), nodes[a:b]))
    return out


def chunk_parents(chunks: list[PlannedChunk]) -> list[int]:
    """Index of each chunk's parent: the chunk of the next level whose cell contains its cell (-1 on top)."""
    index = {(c.level, c.cell_depth, c.cell): i for i, c in enumerate(chunks)}
    depth_of_level = {c.level: c.cell_depth for c in chunks}
    out = []
    for c in chunks:
        up = c.level + 1
        if up not in depth_of_level:
            out.append(-1)
            continue
        e = depth_of_level[up]
        out.append(index[(up, e, c.cell >> (3 * (c.cell_depth - e)))])
    return out


def chunk_file(c: PlannedChunk) -> str:
    """Relative path of a chunk's file: chunks/L<level>/d<cell depth>_<cell in hex>.spz."""
    return f"chunks/L{c.level:02d}/d{c.cell_depth}_{c.cell:x}.spz"


def _box(lo, hi) -> Box:
    return Box(tuple(float(x) for x in lo), tuple(float(x) for x in hi))


def node_error(h: Hierarchy, nodes: np.ndarray) -> float:
    """Largest bounding radius of the merged Gaussians among ``nodes`` (0 when all are the model's own)."""
    merged = nodes[nodes >= h.num_leaves]
    return float(h.radius[merged].max()) if len(merged) else 0.0


def write_lod(h: Hierarchy, out: Path, *, sh_degree: int | None = None, view_budget: int, target: str | None = None,
              chunk_size: int = CHUNK_SIZE, force: bool = False, progress: bool = True) -> LodManifest:
    """Write the LOD export of ``h`` to the folder ``out`` (see the module docstring); returns its manifest.
    ``sh_degree`` truncates the SH of every chunk (None: the model's). An existing ``out`` is refused unless
    ``force``; on any error nothing appears at ``out``."""
    out = Path(out)
    refuse_overwrite(out, force)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a folder; choose another --out")
    degree = h.nodes.sh_degree if sh_degree is None else min(sh_degree, h.nodes.sh_degree)
    levels = choose_levels(h)
    k = chunk_depth(h, chunk_size)
    planned = plan_chunks(h, levels, k)
    parents = chunk_parents(planned)
    parent_dir = out.parent if str(out.parent) else Path(".")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent_dir))
    try:
        sizes = _write_chunks(h, planned, tmp, degree, progress)
        chunks = []
        for c, parent, size in zip(planned, parents, sizes):
            lo = (h.nodes.means[c.nodes] - h.radius[c.nodes, None]).min(axis=0)
            hi = (h.nodes.means[c.nodes] + h.radius[c.nodes, None]).max(axis=0)
            chunks.append(ChunkInfo(chunk_file(c), c.level, c.cell_depth, c.cell, _box(lo, hi), node_error(h, c.nodes),
                                    len(c.nodes), size, parent))
        level_infos = tuple(
            LevelInfo(i, int(depth), node_error(h, nodes), len(nodes), sum(1 for c in planned if c.level == i))
            for i, (depth, nodes) in enumerate(levels))
        leaves = h.nodes.means[: h.num_leaves]
        manifest = LodManifest(
            leaves=h.num_leaves, sh_degree=degree, antialiased=h.nodes.antialiased, opacity_rule=h.opacity_rule,
            view_budget=int(view_budget), target=target, bounds=_box(leaves.min(axis=0), leaves.max(axis=0)),
            octree=OctreeInfo(h.octree_depth, k, tuple(float(x) for x in h.origin), float(h.size)),
            levels=level_infos, chunks=tuple(chunks))
        write_manifest(tmp, manifest)
        os.chmod(tmp, 0o777 & ~_umask())
        _publish_folder(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_chunks(h: Hierarchy, planned: list[PlannedChunk], folder: Path, degree: int, progress: bool) -> list[int]:
    """Write every chunk's SPZ file under ``folder``; their sizes in bytes."""
    for level in sorted({c.level for c in planned}):
        (folder / "chunks" / f"L{level:02d}").mkdir(parents=True)

    def write(c: PlannedChunk) -> int:
        path = folder / chunk_file(c)
        data = h.nodes.subset(c.nodes)
        write_spz(path, data.with_sh_degree(degree) if degree != data.sh_degree else data)
        return path.stat().st_size

    with ThreadPoolExecutor(WRITE_THREADS) as pool:
        jobs = pool.map(write, planned)
        if not progress:
            return list(jobs)
        from rich.progress import Progress

        sizes = []
        with Progress(transient=True) as bar:
            task = bar.add_task("writing LOD chunks", total=len(planned))
            for size in jobs:
                sizes.append(size)
                bar.advance(task)
        return sizes


def _publish_folder(tmp: Path, out: Path, force: bool) -> None:
    """Rename the finished folder onto ``out``; an old ``out`` (``force``) is moved aside first and removed
    after."""
    if out.exists():
        if not force:
            raise FileExistsError(f"{out} already exists; pass --force to overwrite it")
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=tmp.parent))
        os.rename(out, old / "x")
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out)


# ------------------------------------------------------------------------------------------------ reading


class LodExport:
    """An LOD export folder opened for reading: its checked manifest and its chunks on demand."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)

    def chunk_path(self, index: int) -> Path:
        return self.folder / self.manifest.chunks[index].file

    def read_chunk(self, index: int) -> SplatData:
        """The Gaussians of chunk ``index`` (model frame). :class:`LodManifestError` for a missing or short
        file, or one holding another count than the manifest says."""
        info = self.manifest.chunks[index]
        path = self.chunk_path(index)
        if not path.is_file():
            raise LodManifestError(path, f"missing chunk {index} (level {info.level}) listed in {MANIFEST}; the "
                                         f"export is incomplete: {REDO}")
        try:
            data = read_spz(path)
        except SplatFileError as err:
            raise LodManifestError(path, f"chunk {index} cannot be read ({err.args[0] if err.args else err}); "
                                         f"{REDO}") from None
        if len(data) != info.count or data.sh_degree != self.manifest.sh_degree:
            raise LodManifestError(path, f"chunk {index} holds {len(data)} Gaussians of SH degree {data.sh_degree}, "
                                         f"{MANIFEST} says {info.count} of degree {self.manifest.sh_degree}; {REDO}")
        return data

    def read_level(self, level: int) -> SplatData:
        """All Gaussians of ``level`` (0: the model, quantised by SPZ), chunk by chunk."""
        parts = [self.read_chunk(i) for i in self.manifest.chunks_of_level(level)]
        return SplatData(*(np.concatenate([getattr(p, f) for p in parts])
                           for f in ("means", "quats", "log_scales", "logit_opacities", "sh")),
                         antialiased=self.manifest.antialiased)

    def check_files(self) -> None:
        """:class:`LodManifestError` for the first chunk file missing or of another size than listed."""
        for i, info in enumerate(self.manifest.chunks):
            path = self.chunk_path(i)
            if not path.is_file():
                raise LodManifestError(path, f"missing chunk {i} (level {info.level}) listed in {MANIFEST}; {REDO}")
            if path.stat().st_size != info.bytes:
                raise LodManifestError(path, f"chunk {i} has {path.stat().st_size} bytes, {MANIFEST} says "
                                             f"{info.bytes}; {REDO}")


def is_lod_export(path) -> bool:
    """True for a folder holding an LOD manifest (checked only when read)."""
    return Path(path).is_dir() and (Path(path) / MANIFEST).is_file()
