"""Detect a dataset's format from its folder and load it as a :class:`Scene`.

Rules, in order: ``poses.json`` -> avatar capture (docs/avatars.md); ``transforms_train.json`` -> Blender / D-NeRF; ``transforms.json`` -> nerfstudio /
instant-ngp; ``train_meta.json`` -> CMU Panoptic (Dynamic 3D Gaussians' layout); ``poses_bounds.npy`` with
``camNN.mp4`` videos -> Neural 3D Video; a COLMAP model in ``sparse/0/``, ``sparse/`` or the folder -> COLMAP.
Splits: the dataset's own test split where it has one (Blender, Panoptic; N3DV: cam00), else every 8th image
sorted by name.
"""

from __future__ import annotations

from pathlib import Path

from recon.data.avatar import is_avatar, load_avatar
from recon.data.blender import load_blender
from recon.data.colmap import ColmapFormatError, find_sparse_dir, load_colmap
from recon.data.frame_cache import FrameCache
from recon.data.holdout import hold_out
from recon.data.n3dv import is_n3dv, load_n3dv
from recon.data.nerfstudio import load_nerfstudio
from recon.data.panoptic import is_panoptic, load_panoptic
from recon.data.scene import TEST_EVERY, WHITE, DataFormatError, Scene

FORMATS = ("avatar", "blender", "nerfstudio", "panoptic", "n3dv", "colmap")


DATASET_FILES = ("poses.json", "transforms_train.json", "transforms.json", "train_meta.json", "poses_bounds.npy")
COLMAP_FILES = tuple(f"{n}{e}" for e in (".bin", ".txt") for n in ("cameras", "images", "points3D"))


def not_regular_dataset_file(path: Path) -> Path | None:
    """The first file a format is detected by (``transforms.json``, ``sparse/0/cameras.bin``, ...) that
    exists in ``path`` but is a folder or special file, or None: detection skips such entries, and the
    error should name them rather than say "unknown format"."""
    candidates = [path / n for n in DATASET_FILES]
    for sparse in (path / "sparse" / "0", path / "sparse", path):
        candidates += [sparse / n for n in COLMAP_FILES]
    for p in candidates:
        if p.exists() and not p.is_file():
            return p
    return None


def detect_format(path: Path) -> str:
    """One of FORMATS; DataFormatError naming the folder and what was looked for."""
    path = Path(path)
    if not path.is_dir():
        raise DataFormatError(f"dataset folder not found: {path}")
    if is_avatar(path):
        return "avatar"
    if (path / "transforms_train.json").is_file():
        return "blender"
    if (path / "transforms.json").is_file():
        return "nerfstudio"
    if is_panoptic(path):
        return "panoptic"
    if is_n3dv(path):
        return "n3dv"
    try:
        find_sparse_dir(path)
        return "colmap"
    except ColmapFormatError:
        pass
    odd = not_regular_dataset_file(path)
    if odd is not None:
        raise DataFormatError(f"{odd}: is a folder or special file, not a dataset file; replace it with the file "
                              f"itself (or remove it)")
    raise DataFormatError(
        f"{path}: unknown dataset format: found no poses.json (avatar), no transforms_train.json (Blender), "
        "no transforms.json "
        "(nerfstudio / instant-ngp), no train_meta.json (Panoptic), no poses_bounds.npy with camNN.mp4 videos "
        "(Neural 3D Video) and no COLMAP model (sparse/0/, sparse/ with cameras, images and "
        "points3D as .bin or .txt)"
    )


def load_scene(
    path: Path | str,
    data_factor: int = 1,
    cache_dir: Path | str | None = None,
    format: str | None = None,
    test_every: int = TEST_EVERY,
    background: tuple[float, float, float] | None = None,
    frame_stride: int = 1,
    time_range: str | None = None,
    test_cameras: str | None = None,
    test_time_every: int = 0,
    frame_cache: FrameCache | None = None,
) -> Scene:
    """Load any supported dataset folder.

    Args:
        path: dataset folder.
        data_factor: downscale images by this integer (K scaled to match); copies are cached in
            ``<folder>_N/`` next to the data when writable, else under ``~/.cache/splatforge``.
        cache_dir: override where derived (downscaled, undistorted) images are written.
        format: force "blender", "nerfstudio" or "colmap" instead of detecting.
        test_every: every n-th image (sorted by name) is a test image for formats without a test split.
        background: RGB in [0, 1] for RGBA compositing (default white; COLMAP, Panoptic and N3DV: black).
        frame_stride, time_range: videos (N3DV) only: keep every n-th frame, within "START:END" seconds.
        test_cameras, test_time_every: multi-view video (Panoptic, N3DV) only: hold out these cameras ("A,B")
            and / or every n-th time step as test frames (:func:`recon.data.holdout.hold_out`).
        frame_cache: the on-disk frame cache (:mod:`recon.data.frame_cache`) videos (N3DV) are decoded into.
    """
    scene = _load_format(path, data_factor, cache_dir, format, test_every, background, frame_stride, time_range,
                         frame_cache)
    return hold_out(scene, test_cameras, test_time_every)


def _load_format(path, data_factor, cache_dir, format, test_every, background, frame_stride, time_range,
                 frame_cache=None) -> Scene:
    """The scene of ``path`` as its format's loader gives it (arguments as :func:`load_scene`)."""
    path = Path(path)
    fmt = format or detect_format(path)
    cache = Path(cache_dir) if cache_dir is not None else None
    if fmt != "n3dv" and (frame_stride != 1 or time_range is not None):
        raise DataFormatError(f"{path}: --frame-stride and --time-range apply to videos (Neural 3D Video), "
                              f"not to a {fmt} dataset")
    if fmt == "avatar":
        return load_avatar(path, data_factor, cache, background or WHITE)
    if fmt == "blender":
        return load_blender(path, data_factor, cache, background or WHITE)
    if fmt == "nerfstudio":
        return load_nerfstudio(path, data_factor, cache, test_every, background=background or WHITE)
    if fmt == "panoptic":
        return load_panoptic(path, data_factor, cache, background)
    if fmt == "n3dv":
        return load_n3dv(path, data_factor, cache, frame_stride, time_range, background, frame_cache)
    if fmt == "colmap":
        scene = load_colmap(path, data_factor, cache, test_every)
        if background is not None:
            scene.background = tuple(background)
        return scene
    raise DataFormatError(f"unknown dataset format {fmt!r} (have {FORMATS})")
