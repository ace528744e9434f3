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


def find_meshes(root: Path, out: Path | None = None) -> list[str]:
    """Sorted relative POSIX paths of the files under ``root`` ending in :data:`MESH_SUFFIXES` (any case);
    files under ``out`` (when it lies inside ``root``) and hidden folders are skipped."""
    root = Path(root)
    out_resolved = Path(out).resolve() if out is not None else None
    found = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or path.suffix.lower() not in MESH_SUFFIXES:
            continue
        if out_resolved is not None and out_resolved in path.resolve().parents:
            continue
        if path.is_file():
            found.append(rel.as_posix())
    return sorted(found)


def unread_meshes(root: Path, out: Path | None = None) -> dict[str, int]:
    """{suffix: count} of the files under ``root`` (hidden folders and ``out`` skipped, as :func:`find_meshes`)
    in a mesh format of :data:`OTHER_MESH_SUFFIXES`, which the batch does not convert."""
    root = Path(root)
    out_resolved = Path(out).resolve() if out is not None else None
    counts: dict[str, int] = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        suffix = path.suffix.lower()
        if suffix not in OTHER_MESH_SUFFIXES or any(part.startswith(".") for part in rel.parts):
            continue
        if out_resolved is not None and out_resolved in path.resolve().parents:
            continue
        if path.is_file():
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
