"""nerfstudio / instant-ngp ``transforms.json`` loader.

File convention: ``transform_matrix`` is camera-to-world in OpenGL axes (x right, y up, z back);
intrinsics ``fl_x fl_y cx cy w h`` at the top level or per frame (per frame wins); instant-ngp files
may give ``camera_angle_x`` (and ``camera_angle_y``) instead of focal lengths; distortion
``k1 k2 k3 k4 p1 p2`` with ``camera_model`` OPENCV (radial-tangential) or OPENCV_FISHEYE.
``applied_transform`` (3x4) is the transform nerfstudio's ``ns-process-data`` applied to the original
(e.g. COLMAP) world; by default it is undone, so cameras and points come back in the original world.

Conversion to ours happens once, in :func:`rasterizer.camera.opengl_cam_to_world_to_opencv_world_to_cam`
(imported here; also used by the Blender loader).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from rasterizer.camera import opengl_cam_to_world_to_opencv_world_to_cam
from recon.core.limits import require_finite, with_path
from recon.data.finalize import finalize_frames
from recon.data.scene import (
    WHITE,
    DataFormatError,
    Distortion,
    Frame,
    Scene,
    image_size,
    intrinsics_matrix,
    make_camera,
    read_json_object,
    split_every_nth,
)

PINHOLE_MODELS = ("PINHOLE", "SIMPLE_PINHOLE", "PERSPECTIVE")
DISTORTED_MODELS = ("OPENCV", "OPENCV_FISHEYE")


def read_json(path: Path) -> dict:
    """A transforms JSON file (an object with a non-empty ``frames`` list); DataFormatError naming the file
    otherwise."""
    expected = "an object with a non-empty 'frames' list"
    data = read_json_object(path, expected)
    if not isinstance(data.get("frames"), list) or not data["frames"]:
        raise DataFormatError(f"{path}: expected {expected}")
    return data


def matrix_4x4(value: Any, path: Path, what: str) -> np.ndarray:
    """[4, 4] float64 from a nested list (3x4 or 4x4); DataFormatError naming the file otherwise."""
    try:
        m = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise DataFormatError(f"{path}: {what} is not a numeric matrix") from e
    if m.shape not in ((3, 4), (4, 4)) or not np.isfinite(m).all():
        raise DataFormatError(f"{path}: {what} must be a finite 3x4 or 4x4 matrix, got shape {m.shape}")
    out = np.eye(4)
    out[: m.shape[0]] = m
    return out


def resolve_file(root: Path, file_path: str, default_ext: str = "") -> Path:
    """``root / file_path``; when that has no extension and does not exist, try ``default_ext``."""
    p = Path(root) / file_path
    if not p.suffix and default_ext and not p.exists():
        return p.with_name(p.name + default_ext)
    return p


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number",
               bool: "boolean", type(None): "null"}


def frame_entry(value: Any, index: int, path: Path) -> dict:
    """Frame ``index`` of a transforms file: an object with ``file_path`` and ``transform_matrix``;
    DataFormatError naming the file and the frame otherwise."""
    if not isinstance(value, dict):
        kind = _JSON_TYPES.get(type(value), type(value).__name__)
        raise DataFormatError(f"{path}: frame {index} is not an object (got {kind}); each entry of "
                              f"'frames' must be {{\"file_path\": ..., \"transform_matrix\": ...}}")
    if "file_path" not in value or "transform_matrix" not in value:
        raise DataFormatError(f"{path}: frame {index} lacks 'file_path' or 'transform_matrix'")
    return value


def json_number(value: Any, key: str, label: str, path: Path) -> float:
    """``value`` as a float; DataFormatError naming the file, the frame and the key otherwise."""
    if isinstance(value, bool):
        value = str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DataFormatError(f"{path}: frame {label!r}: {key!r} is not a number ({value!r})") from None
    if not math.isfinite(number):
        raise DataFormatError(f"{path}: frame {label!r}: {key!r} is {number} (NaN or infinite); write a finite number")
    return number


def _focal_from_angle(angle: float, size: int, key: str, label: str, path: Path) -> float:
    """Focal length in pixels from a field of view in radians, which must lie in (0, pi)."""
    if not 0.0 < angle < math.pi:
        raise DataFormatError(f"{path}: {key} {angle:g} of frame {label!r} must lie in (0, pi): it is "
                              f"the field of view in radians")
    return 0.5 * size / math.tan(0.5 * angle)


def frame_intrinsics(meta: dict, frame: dict, image_path: Path, path: Path) -> tuple[np.ndarray, int, int]:
    """(K [3, 3] float64, width, height) from per-frame keys, else top-level keys.

    Focal: ``fl_x``/``fl_y``, else ``camera_angle_x``/``camera_angle_y`` (fy = fx when absent).
    Size: ``w``/``h``, else read from the image header. Principal point defaults to the image centre.
    Values that are not numbers, and fields of view outside (0, pi), raise DataFormatError; the
    camera itself (positive size and focal lengths) is checked by :func:`recon.data.scene.check_cameras`.
    """
    label = str(frame.get("file_path"))

    def get(key: str):
        return frame.get(key, meta.get(key))

    def number(key: str) -> float | None:
        return None if get(key) is None else json_number(get(key), key, label, path)

    w, h = number("w"), number("h")
    if w is None or h is None:
        w, h = image_size(image_path)
    w, h = int(w), int(h)
    fx, fy = number("fl_x"), number("fl_y")
    if fx is None and get("camera_angle_x") is not None:
        fx = _focal_from_angle(number("camera_angle_x"), w, "camera_angle_x", label, path)
    if fy is None and get("camera_angle_y") is not None:
        fy = _focal_from_angle(number("camera_angle_y"), h, "camera_angle_y", label, path)
    if fx is None and fy is None:
        raise DataFormatError(f"{path}: frame {label!r} has no fl_x/fl_y or camera_angle_x")
    fx = fx if fx is not None else fy
    fy = fy if fy is not None else fx
    cx = number("cx") if get("cx") is not None else w / 2
    cy = number("cy") if get("cy") is not None else h / 2
    return intrinsics_matrix(fx, fy, cx, cy), w, h


def frame_distortion(meta: dict, frame: dict, path: Path) -> Distortion | None:
    """Distortion of a frame from ``camera_model`` and ``k1 k2 k3 k4 p1 p2`` (None when all zero).

    OPENCV -> coefficients (k1, k2, p1, p2, k3, k4) (k3, k4: r^6, r^8 terms as nerfstudio);
    OPENCV_FISHEYE -> (k1, k2, k3, k4). No ``camera_model`` with non-zero coefficients means OPENCV
    (instant-ngp files).
    """

    def coef(key: str) -> float:
        return float(frame.get(key, meta.get(key, 0.0)) or 0.0)

    model = str(frame.get("camera_model", meta.get("camera_model", "OPENCV"))).upper()
    if model in PINHOLE_MODELS:
        return None
    if model not in DISTORTED_MODELS:
        raise DataFormatError(
            f"{path}: camera_model {model!r} is not supported (supported: OPENCV, OPENCV_FISHEYE, PINHOLE)"
        )
    if model == "OPENCV_FISHEYE":
        coeffs = np.array([coef("k1"), coef("k2"), coef("k3"), coef("k4")])
    else:
        coeffs = np.array([coef("k1"), coef("k2"), coef("p1"), coef("p2"), coef("k3"), coef("k4")])
    return Distortion(model, coeffs) if np.any(coeffs != 0) else None


def undo_applied_transform_w2c(w2c: np.ndarray, applied: np.ndarray) -> np.ndarray:
    """World-to-camera in the original world: ``x_json = A x_orig`` so ``w2c_orig = w2c_json @ A``."""
    return w2c @ applied


def read_ply_points(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """(xyz [P, 3] float32, rgb [P, 3] uint8 or None) from a PLY's ``vertex`` element (plyfile)."""
    from plyfile import PlyData

    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"point cloud file not found: {path}")
    from recon.export.ply import PLY_PARSE_ERRORS, check_ply_counts
    from recon.export.splats import SplatFileError

    try:
        check_ply_counts(path)  # a header declaring more points than the file holds
        v = PlyData.read(str(path))["vertex"].data
        xyz = np.stack([v["x"], v["y"], v["z"]], axis=-1).astype(np.float32)
    except (*PLY_PARSE_ERRORS, SplatFileError, OSError) as e:  # what plyfile and the count check raise
        raise DataFormatError(f"{path}: cannot read vertices from PLY: {e}") from e
    require_finite(xyz, path, "vertex x, y, z", with_path(DataFormatError))
    names = v.dtype.names or ()
    rgb = None
    if all(c in names for c in ("red", "green", "blue")):
        rgb = np.stack([v["red"], v["green"], v["blue"]], axis=-1)
        rgb = rgb.astype(np.uint8) if rgb.dtype == np.uint8 else np.clip(np.rint(rgb * 255.0), 0, 255).astype(np.uint8)
    return xyz, rgb


def transform_points(points: np.ndarray, T: np.ndarray) -> np.ndarray:
    """[P, 3] points mapped by a [4, 4] affine transform."""
    return (points.astype(np.float64) @ T[:3, :3].T + T[:3, 3]).astype(np.float32)


def load_nerfstudio(
    root: Path,
    data_factor: int = 1,
    cache_dir: Path | None = None,
    test_every: int = 8,
    transforms_file: str = "transforms.json",
    undo_applied_transform: bool = True,
    background: tuple[float, float, float] = WHITE,
) -> Scene:
    """Load a nerfstudio / instant-ngp dataset folder as a :class:`Scene` (split: every ``test_every``-th)."""
    root = Path(root)
    path = root / transforms_file
    meta = read_json(path)
    applied = matrix_4x4(meta["applied_transform"], path, "applied_transform") if "applied_transform" in meta else None
    inv_applied = np.linalg.inv(applied) if (applied is not None and undo_applied_transform) else None
    raw = []
    for i, value in enumerate(meta["frames"]):
        fr = frame_entry(value, i, path)
        image_path = resolve_file(root, fr["file_path"], ".png")
        c2w_gl = matrix_4x4(fr["transform_matrix"], path, f"transform_matrix of frame {i}")
        w2c = opengl_cam_to_world_to_opencv_world_to_cam(c2w_gl)
        if inv_applied is not None:
            w2c = undo_applied_transform_w2c(w2c, applied)
        K, w, h = frame_intrinsics(meta, fr, image_path, path)
        mask = resolve_file(root, fr["mask_path"]) if fr.get("mask_path") else None
        time = json_number(fr["time"], "time", str(fr["file_path"]), path) if fr.get("time") is not None else None
        frame = Frame(str(fr["file_path"]), image_path, make_camera(w2c, K, w, h), mask, time)
        raw.append((frame, frame_distortion(meta, fr, path)))
    frames = finalize_frames(raw, root, path, data_factor, cache_dir)
    train, test = split_every_nth(frames, test_every)
    points = colors = None
    if meta.get("ply_file_path"):
        points, colors = read_ply_points(root / meta["ply_file_path"])
        if inv_applied is not None:
            points = transform_points(points, inv_applied)
    return Scene(train, test, points, colors, background, "nerfstudio", root)
