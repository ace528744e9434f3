"""The meshes of a folder: discovery, output paths, labels.

An object is named by its path relative to the mesh folder (POSIX separators), e.g. ``chair/c_003.obj``;
its splats go to ``OUT/chair/c_003.obj.ply`` and its label is its first folder (``chair``; "" for a mesh
at the top level).
"""

from __future__ import annotations

from pathlib import Path

MESH_SUFFIXES = (".obj", ".ply", ".glb", ".off")
OTHER_MESH_SUFFIXES = (".stl", ".gltf", ".fbx", ".dae", ".3ds", ".blend", ".usd", ".usda", ".usdc", ".usdz",
                       ".x3d", ".wrl", ".3mf", ".abc")  # mesh formats not read here: named, not silently passed over
WORK_DIR = ".work"  # OUT/.work/<source>/: an object's rendered views and training run while it is converted


def folder_files(root: Path, out: Path | None = None):
    """(relative POSIX path, suffix in lower case) of every file under ``root``, hidden folders and the files
    under ``out`` (when it lies inside ``root``) skipped: what :func:`find_meshes` and :func:`unread_meshes`
    look through."""
    root = Path(root)
    out_resolved = Path(out).resolve() if out is not None else None
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        suffix = path.suffix.lower()
        if suffix not in MESH_SUFFIXES and suffix not in OTHER_MESH_SUFFIXES:
            continue  # before resolving: most files of a folder are not meshes
        if out_resolved is not None and out_resolved in path.resolve().parents:
            continue
        if path.is_file():
            yield rel.as_posix(), suffix


def find_meshes(root: Path, out: Path | None = None) -> list[str]:
    """Sorted relative POSIX paths of the files under ``root`` ending in :data:`MESH_SUFFIXES` (any case);
    files under ``out`` (when it lies inside ``root``) and hidden folders are skipped."""
    return sorted(rel for rel, suffix in folder_files(root, out) if suffix in MESH_SUFFIXES)


def unread_meshes(root: Path, out: Path | None = None) -> dict[str, int]:
    """{suffix: count} of the files under ``root`` (skipped as by :func:`find_meshes`) in a mesh format of
    :data:`OTHER_MESH_SUFFIXES`, which the batch does not convert."""
    counts: dict[str, int] = {}
    for _, suffix in folder_files(root, out):
        if suffix in OTHER_MESH_SUFFIXES:
            counts[suffix] = counts.get(suffix, 0) + 1
    return dict(sorted(counts.items()))


def output_path(out: Path, source: str) -> Path:
    """``OUT/<source>.ply``: the object's splats."""
    return Path(out) / f"{source}.ply"


def work_path(out: Path, source: str) -> Path:
    """``OUT/.work/<source>``: the object's scratch folder (removed when it is done)."""
    return Path(out) / WORK_DIR / source


def label_of(source: str) -> str:
    """The object's label: its first folder name ("" at the top level)."""
    parts = source.split("/")
    return parts[0] if len(parts) > 1 else ""
