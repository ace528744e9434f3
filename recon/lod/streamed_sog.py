"""An LOD export as PlayCanvas' Streamed SOG (``lod-meta.json``), the LOD format SuperSplat and the PlayCanvas
engine stream; written with PlayCanvas' own tool, splat-transform, and checked against the format's spec.

Streamed SOG version 1 (https://developer.playcanvas.com/user-manual/gaussian-splatting/formats/streamed-sog/):
a folder holding ``lod-meta.json`` (version, total ``count``, per-level ``counts``, ``lodLevels``,
``filenames`` of the chunks, and a spatial ``tree`` whose nodes carry a ``bound`` and, per LOD level, the
``file`` / ``offset`` / ``count`` of their Gaussians) plus one unbundled SOG dataset per chunk (``meta.json`` and
WebP textures of quantised, codebook-compressed attributes). Level 0 is the finest, as ours.

splatforge has no SOG encoder (WebP textures, k-means codebooks for scales, colours and SH), so the chunks are
encoded by splat-transform (``@playcanvas/splat-transform``, scripts/js, ``bash scripts/install_outside_readers.sh``):
each of our levels is written as a PLY (model frame, as every splatforge PLY) tagged with its level
(``splat-transform L0.ply -l 0 L1.ply -l 1 ... out/lod-meta.json``); splat-transform builds its own spatial tree
and chunks. Then :func:`check_lod_meta` reads ``lod-meta.json`` back: version 1, one level per level of ours,
the per-level counts equal ours, every listed chunk's ``meta.json`` present, every tree entry inside its file's
count. The folder is written beside the output and renamed onto it when complete.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from recon.core.errors import SplatforgeError
from recon.core.limits import load_json, with_path
from recon.export import write_splats

from .export_lod import LodExport, _publish_folder

LOD_META = "lod-meta.json"
ENV_TOOL = "SPLATFORGE_SPLAT_TRANSFORM"
REPO_TOOL = Path(__file__).resolve().parents[2] / "scripts" / "js" / "node_modules" / ".bin" / "splat-transform"
INSTALL = "install it with `bash scripts/install_outside_readers.sh` (npm ci in scripts/js) or set $" + ENV_TOOL
TIMEOUT_S = 3600


class StreamedSogError(SplatforgeError, ValueError):
    """The Streamed SOG could not be written or does not read back as written (one line)."""


def find_splat_transform() -> Path | None:
    """splat-transform's CLI: ``$SPLATFORGE_SPLAT_TRANSFORM``, else scripts/js's, else on PATH; None if none
    (or no ``node``)."""
    if shutil.which("node") is None:
        return None
    for cand in (os.environ.get(ENV_TOOL), REPO_TOOL, shutil.which("splat-transform")):
        if cand and Path(cand).is_file():
            return Path(cand)
    return None


def level_files(export: LodExport, folder: Path) -> list[tuple[int, Path]]:
    """Each level of ``export`` as ``folder/L<n>.ply``: [(level, path)], finest first."""
    out = []
    for info in export.manifest.levels:
        path = folder / f"L{info.level}.ply"
        write_splats(path, export.read_level(info.level))
        out.append((info.level, path))
    return out


def run_splat_transform(tool: Path, levels: list[tuple[int, Path]], meta: Path, gpu: str) -> None:
    """``splat-transform -g GPU L0.ply -l 0 ... meta`` (StreamedSogError with its last line on failure)."""
    args = [str(tool), "-q", "-w", "-g", gpu]
    for level, path in levels:
        args += [str(path), "-l", str(level)]
    proc = subprocess.run(args + [str(meta)], capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        raise StreamedSogError(f"{tool}: splat-transform failed (exit {proc.returncode}): "
                               f"{lines[-1] if lines else 'no output'}")


def check_lod_meta(folder: Path, counts: list[int]) -> dict:
    """Read ``folder/lod-meta.json`` back against the spec and our per-level ``counts``; the parsed index."""
    path = folder / LOD_META
    meta = load_json(path, "Streamed SOG index", error=with_path(StreamedSogError))

    def fail(problem: str):
        raise StreamedSogError(f"{path}: {problem}")

    if not isinstance(meta, dict) or meta.get("version") != 1:
        fail("not a Streamed SOG version 1 index")
    if meta.get("lodLevels") != len(counts) or meta.get("counts") != counts:
        fail(f"levels {meta.get('lodLevels')} with counts {meta.get('counts')}; the LOD export has {counts}")
    if meta.get("count") != sum(counts):
        fail(f"count {meta.get('count')}, the levels hold {sum(counts)}")
    files = meta.get("filenames")
    if not isinstance(files, list) or not files:
        fail("no chunk filenames")
    for name in files:
        if not isinstance(name, str) or not (folder / name).is_file() or ".." in Path(name).parts:
            fail(f"chunk {name!r} listed but not inside the folder")
    totals = [0] * len(counts)
    stack = [meta.get("tree")]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or "bound" not in node:
            fail("a tree node without a bound")
        lods, children = node.get("lods") or {}, node.get("children") or []
        if not isinstance(lods, dict) or not isinstance(children, list):
            fail("a tree node whose 'lods' is not an object or 'children' not a list")
        for level, entry in lods.items():
            try:
                k, file, count = int(level), entry["file"], int(entry["count"])
            except (TypeError, ValueError, KeyError, OverflowError):
                fail(f"a tree entry of level {level!r} without an integer level, 'file' and 'count'")
            if not (0 <= k < len(counts)) or not isinstance(file, int) or not 0 <= file < len(files) or count < 0:
                fail(f"a tree entry of level {level} points outside the levels or files")
            totals[k] += count
        stack.extend(children)
    if totals != counts:
        fail(f"the tree's entries add up to {totals} Gaussians per level, the levels hold {counts}")
    return meta


def write_streamed_sog(export_dir: Path, out: Path, *, force: bool = False, gpu: str = "cpu",
                       tool: Path | None = None) -> dict:
    """Write the LOD export at ``export_dir`` as Streamed SOG into the folder ``out`` (module docstring);
    ``gpu``: splat-transform's ``-g`` (``cpu`` or an adapter index). Returns the checked ``lod-meta.json``."""
    tool = tool or find_splat_transform()
    if tool is None:
        raise StreamedSogError(f"Streamed SOG needs PlayCanvas' splat-transform and node, not found; {INSTALL}")
    export = LodExport(export_dir)
    export.check_files()
    if out.exists() and not force:
        raise FileExistsError(f"{out} already exists; pass --force to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        levels = level_files(export, work)
        folder = work / "sog"
        run_splat_transform(tool, levels, folder / LOD_META, gpu)
        meta = check_lod_meta(folder, [lv.count for lv in export.manifest.levels])
        _publish_folder(folder, out, force)
        return meta
    finally:
        shutil.rmtree(work, ignore_errors=True)


def describe(meta: dict) -> str:
    """One line about a written Streamed SOG."""
    return (f"Streamed SOG: {meta['lodLevels']} levels, {len(meta['filenames'])} chunks "
            f"({json.dumps(meta['counts'])} Gaussians)")
