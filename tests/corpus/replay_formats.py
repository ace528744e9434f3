"""Which fuzz format (reader) a file of an external corpus goes to: ``scripts/fuzz_readers.py --replay DIR``.

The choice, first match wins:

1. an explicit prefix: ``<format>__anything`` (``ply4d__bad-times.ply``, ``config-yaml__cut.yaml``) names the
   format of ``scripts/fuzz_readers.py``'s table;
2. the file names splatforge and the datasets use (``config.yaml``, ``history.json``, ``metrics.json``,
   ``blocks.json``, ``transforms.json``, ``transforms_train.json``, ``train_meta.json``, ``poses_bounds.npy``,
   ``init_pt_cld.npz``, ``cameras.bin``, ``images.txt``, ``points3D.bin``, ``proxy.ply``, ``ckpt_*.pt``, ...);
3. the extension, with a look at the first bytes where one extension has several readers: a ``.ply`` whose
   header has ``t`` and ``rot_l_0`` is ply4d, one with ``opacity`` a 3DGS PLY, else a mesh; a ``.glb`` naming
   ``KHR_gaussian_splatting`` is a splat GLB, else a mesh; a ``.json`` with ``keyframes`` is an asset's
   keyframes, with ``levels`` and ``chunks`` an LOD manifest, with ``camera_angle_x`` D-NeRF, with ``fl_x`` /
   ``frames`` nerfstudio transforms, else a camera path.

A file none of these place is listed as unplaced (not run). See docs/fuzzing.md for keeping such a corpus.
"""

from __future__ import annotations

import re
from pathlib import Path

BY_NAME = {
    "config.yaml": "config-yaml", "history.json": "history-json", "metrics.json": "metrics-json",
    "blocks.json": "blocks-json", "transforms.json": "transforms", "transforms_train.json": "dnerf-transforms",
    "transforms_test.json": "dnerf-transforms", "train_meta.json": "panoptic-meta", "test_meta.json": "panoptic-meta",
    "poses_bounds.npy": "n3dv-poses", "init_pt_cld.npz": "panoptic-npz", "proxy.ply": "proxy-ply",
    **{f"{name}{ext}": f"colmap-{name}{ext}" for name in ("cameras", "images", "points3D") for ext in (".bin", ".txt")},
}
BY_SUFFIX = {".spz": "spz", ".splat": "splat", ".gimg": "gimg", ".png": "png", ".jpg": "png", ".jpeg": "png",
             ".obj": "mesh-obj", ".mp4": "n3dv-video", ".pt": "checkpoint", ".yaml": "config-yaml",
             ".npz": "panoptic-npz", ".npy": "n3dv-poses"}
SNIFF_BYTES = 65536


def _sniff_ply(head: bytes) -> str:
    header = head.split(b"end_header", 1)[0]
    names = set(re.findall(rb"property\s+\S+\s+(\S+)", header))
    if {b"t", b"rot_l_0"} <= names:
        return "ply4d"
    if b"opacity" in names and b"f_dc_0" in names:
        return "ply"
    return "mesh-ply"


def _sniff_json(head: bytes) -> str:
    if b'"keyframes"' in head:
        return "keyframes"
    if b'"levels"' in head and b'"chunks"' in head:
        return "lod-manifest"
    if b'"camera_angle_x"' in head:
        return "dnerf-transforms"
    if b'"fl_x"' in head or (b'"frames"' in head and b'"transform_matrix"' in head):
        return "transforms"
    return "camera-path"


def choose_format(path: Path, known: set[str]) -> str | None:
    """The format (a key of ``known``, the fuzz table's formats) whose reader ``path`` goes to, or None."""
    name = path.name
    prefix = name.split("__", 1)[0] if "__" in name else None
    if prefix in known:
        return prefix
    if name in BY_NAME:
        return BY_NAME[name]
    if re.fullmatch(r"ckpt_\d+\.pt", name):
        return "checkpoint"
    suffix = path.suffix.lower()
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    if suffix == ".ply":
        return _sniff_ply(head)
    if suffix == ".glb":
        return "glb" if b"KHR_gaussian_splatting" in head else "mesh-glb"
    if suffix == ".json":
        return _sniff_json(head)
    return BY_SUFFIX.get(suffix)


def corpus_files(folder: Path) -> list[Path]:
    """Every regular file under ``folder`` (recursively, sorted; links not followed, special files skipped)."""
    return sorted(p for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink())
