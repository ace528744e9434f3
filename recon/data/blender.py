"""Blender / NeRF-synthetic and D-NeRF loader (``transforms_{train,val,test}.json``).

File convention: ``camera_angle_x`` (horizontal field of view, radians), ``frames[].file_path``
usually without extension (``.png`` appended), ``transform_matrix`` camera-to-world in OpenGL axes,
RGBA images composited on a background (white by default, the standard protocol). D-NeRF adds a
per-frame ``time`` already in [0, 1], stored in :attr:`Frame.time`.
"""

from __future__ import annotations

from pathlib import Path

from rasterizer.camera import opengl_cam_to_world_to_opencv_world_to_cam
from recon.data.finalize import finalize_frames
from recon.data.nerfstudio import (
    frame_entry,
    frame_intrinsics,
    json_number,
    matrix_4x4,
    read_json,
    resolve_file,
)
from recon.data.scene import (
    WHITE,
    DataFormatError,
    Frame,
    MissingImageError,
    Scene,
    image_size,
    make_camera,
)

SPLITS = ("train", "val", "test")


def split_file(root: Path, split: str) -> Path:
    """``root / transforms_<split>.json``."""
    return Path(root) / f"transforms_{split}.json"


def load_split(root: Path, split: str, data_factor: int, cache_dir: Path | None) -> list[Frame]:
    """Frames of one split, in file order; image size read from the first image (all frames share it)."""
    path = split_file(root, split)
    meta = read_json(path)
    if "camera_angle_x" not in meta and "fl_x" not in meta:
        raise DataFormatError(f"{path}: no 'camera_angle_x' (Blender format)")
    raw = []
    size = None
    for i, value in enumerate(meta["frames"]):
        fr = frame_entry(value, i, path)
        image_path = resolve_file(root, fr["file_path"], ".png")
        if size is None and "w" not in meta:
            try:
                size = image_size(image_path)
            except MissingImageError as e:
                raise MissingImageError(f"{e} (listed in {path})") from e
        sized = dict(fr, w=size[0], h=size[1]) if size is not None else fr
        K, w, h = frame_intrinsics(meta, sized, image_path, path)
        c2w = matrix_4x4(fr["transform_matrix"], path, f"transform_matrix of frame {i}")
        w2c = opengl_cam_to_world_to_opencv_world_to_cam(c2w)
        time = json_number(fr["time"], "time", str(fr["file_path"]), path) if fr.get("time") is not None else None
        name = str(fr["file_path"]).removeprefix("./")
        raw.append((Frame(name, image_path, make_camera(w2c, K, w, h), None, time), None))
    return finalize_frames(raw, root, path, data_factor, cache_dir)


def load_blender(
    root: Path,
    data_factor: int = 1,
    cache_dir: Path | None = None,
    background: tuple[float, float, float] = WHITE,
    include_val_in_train: bool = False,
) -> Scene:
    """Load a Blender / D-NeRF folder: train split (optionally + val) and the dataset's own test split.

    ``source_format`` is "dnerf" when frames carry ``time``, else "blender". No initial points.
    """
    root = Path(root)
    train = load_split(root, "train", data_factor, cache_dir)
    if include_val_in_train and split_file(root, "val").is_file():
        train += load_split(root, "val", data_factor, cache_dir)
    test = load_split(root, "test", data_factor, cache_dir) if split_file(root, "test").is_file() else []
    dynamic = any(f.time is not None for f in train + test)
    return Scene(train, test, None, None, tuple(background), "dnerf" if dynamic else "blender", root)
