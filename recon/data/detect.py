"""Detect a dataset's format from its folder and load it as a :class:`Scene`.

Rules, in order: ``transforms_train.json`` -> Blender / D-NeRF; ``transforms.json`` -> nerfstudio /
instant-ngp; a COLMAP model in ``sparse/0/``, ``sparse/`` or the folder -> COLMAP.
Splits: the dataset's own test split where it has one (Blender), else every 8th image sorted by name.
"""

from __future__ import annotations

from pathlib import Path

from recon.data.blender import load_blender
from recon.data.colmap import ColmapFormatError, find_sparse_dir, load_colmap
from recon.data.nerfstudio import load_nerfstudio
from recon.data.scene import TEST_EVERY, WHITE, DataFormatError, Scene

FORMATS = ("blender", "nerfstudio", "colmap")


def detect_format(path: Path) -> str:
    """"blender", "nerfstudio" or "colmap"; DataFormatError naming the folder and what was looked for."""
    path = Path(path)
    if not path.is_dir():
        raise DataFormatError(f"dataset folder not found: {path}")
    if (path / "transforms_train.json").is_file():
        return "blender"
    if (path / "transforms.json").is_file():
        return "nerfstudio"
    try:
        find_sparse_dir(path)
        return "colmap"
    except ColmapFormatError:
        pass
    raise DataFormatError(
        f"{path}: unknown dataset format: found no transforms_train.json (Blender), no transforms.json "
        "(nerfstudio / instant-ngp) and no COLMAP model (sparse/0/, sparse/ with cameras, images and "
        "points3D as .bin or .txt)"
    )


def load_scene(
    path: Path | str,
    data_factor: int = 1,
    cache_dir: Path | str | None = None,
    format: str | None = None,
    test_every: int = TEST_EVERY,
    background: tuple[float, float, float] | None = None,
) -> Scene:
    """Load any supported dataset folder.

    Args:
        path: dataset folder.
        data_factor: downscale images by this integer (K scaled to match); copies are cached in
            ``<folder>_N/`` next to the data when writable, else under ``~/.cache/splatforge``.
        cache_dir: override where derived (downscaled, undistorted) images are written.
        format: force "blender", "nerfstudio" or "colmap" instead of detecting.
        test_every: every n-th image (sorted by name) is a test image for formats without a test split.
        background: RGB in [0, 1] for RGBA compositing (default white; COLMAP scenes default black).
    """
    path = Path(path)
    fmt = format or detect_format(path)
    cache = Path(cache_dir) if cache_dir is not None else None
    if fmt == "blender":
        return load_blender(path, data_factor, cache, background or WHITE)
    if fmt == "nerfstudio":
        return load_nerfstudio(path, data_factor, cache, test_every, background=background or WHITE)
    if fmt == "colmap":
        scene = load_colmap(path, data_factor, cache, test_every)
        if background is not None:
            scene.background = tuple(background)
        return scene
    raise DataFormatError(f"unknown dataset format {fmt!r} (have {FORMATS})")
