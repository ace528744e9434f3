"""Browser (viser) cameras <-> project cameras, and camera-path JSON files.

viser reports a client camera as ``wxyz`` (rotation ``R_world_cam``, i.e. cam-to-world, w-first),
``position`` (camera centre in world coordinates) and ``fov`` (vertical field of view, radians), with
OpenCV-like camera axes: +z looks into the scene, +x right, +y down. Our cameras (rasterizer/CONVENTIONS.md)
are ``world_to_cam`` [4, 4] (``x_cam = R x_world + t``) and ``K`` [3, 3] in pixels with the principal
point at the image centre (pixel centres at +0.5, so ``cx = W / 2``).

Camera-path file (JSON)::

    {"frames": [{"world_to_cam": [[4x4]], "K": [[3x3]], "width": W, "height": H}, ...], "fps": 30.0}

``save_camera_path`` / ``load_camera_path`` write and read it; ``render --path FILE`` style commands can
turn each frame into a :class:`rasterizer.camera.Camera` with :func:`frame_to_camera`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recon.data.colmap import qvec_to_rotmat as quat_wxyz_to_matrix  # (w, x, y, z) <-> [3, 3], one implementation
from recon.data.colmap import rotmat_to_qvec as matrix_to_quat_wxyz
from recon.errors import SplatforgeError


class CameraPathError(SplatforgeError, ValueError):
    """A camera-path file is missing fields or holds malformed matrices; the message names the file."""


@dataclass
class CameraFrame:
    """One camera of a path: ``world_to_cam`` [4, 4] float64 (OpenCV), ``K`` [3, 3] float64 pixels."""

    world_to_cam: np.ndarray
    K: np.ndarray
    width: int
    height: int


@dataclass
class CameraPath:
    """An ordered list of :class:`CameraFrame` played back at ``fps`` frames per second."""

    frames: list[CameraFrame] = field(default_factory=list)
    fps: float = 30.0


# ------------------------------------------------------------------------------------- conversions


def intrinsics_from_fov(fov_y: float, width: int, height: int) -> np.ndarray:
    """[3, 3] float64 ``K`` of a pinhole camera with vertical fov ``fov_y`` (radians), square pixels and
    the principal point at the image centre ``(W / 2, H / 2)``."""
    fy = 0.5 * height / math.tan(0.5 * fov_y)
    return np.array([[fy, 0.0, 0.5 * width], [0.0, fy, 0.5 * height], [0.0, 0.0, 1.0]])


def viser_to_world_to_cam(wxyz, position) -> np.ndarray:
    """[4, 4] float64 ``world_to_cam`` (OpenCV) from viser's camera ``wxyz`` (R_world_cam) and
    ``position`` (camera centre, world)."""
    R_wc = quat_wxyz_to_matrix(wxyz)
    c = np.asarray(position, dtype=np.float64)
    w2c = np.eye(4)
    w2c[:3, :3] = R_wc.T
    w2c[:3, 3] = -R_wc.T @ c
    return w2c


def world_to_cam_to_viser(world_to_cam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`viser_to_world_to_cam`: (wxyz [4], position [3]) for viser."""
    w2c = np.asarray(world_to_cam, dtype=np.float64)
    R_wc = w2c[:3, :3].T
    return matrix_to_quat_wxyz(R_wc), -R_wc @ w2c[:3, 3]


def viser_camera_to_frame(wxyz, position, fov_y: float, width: int, height: int) -> CameraFrame:
    """A :class:`CameraFrame` for a viser camera rendered at ``width x height`` pixels."""
    return CameraFrame(viser_to_world_to_cam(wxyz, position), intrinsics_from_fov(fov_y, width, height),
                       int(width), int(height))


def frame_to_camera(frame: CameraFrame):
    """:class:`rasterizer.camera.Camera` (float32 tensors) of a path frame."""
    import torch

    from rasterizer.camera import Camera

    return Camera(world_to_cam=torch.as_tensor(frame.world_to_cam, dtype=torch.float32),
                  K=torch.as_tensor(frame.K, dtype=torch.float32), width=frame.width, height=frame.height)


# ---------------------------------------------------------------------------------------- file IO


def camera_path_to_dict(path: CameraPath) -> dict:
    """Plain JSON-ready dict of a camera path."""
    return {
        "frames": [{"world_to_cam": np.asarray(f.world_to_cam, dtype=float).tolist(),
                    "K": np.asarray(f.K, dtype=float).tolist(), "width": int(f.width),
                    "height": int(f.height)} for f in path.frames],
        "fps": float(path.fps),
    }


def save_camera_path(file: str | os.PathLike, path: CameraPath) -> Path:
    """Write ``path`` as JSON (atomically: temporary file + rename); returns the file."""
    file = Path(file)
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(file.name + ".tmp")
    tmp.write_text(json.dumps(camera_path_to_dict(path), indent=1))
    os.replace(tmp, file)
    return file


def _matrix(file, i: int, value, name: str, shape: tuple[int, int]) -> np.ndarray:
    try:
        m = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise CameraPathError(f"{file}: frame {i}: {name} is not numeric ({e})") from e
    if m.shape != shape or not np.all(np.isfinite(m)):
        raise CameraPathError(f"{file}: frame {i}: {name} must be a finite {shape[0]}x{shape[1]} matrix, "
                              f"got shape {m.shape}")
    return m


def load_camera_path(file: str | os.PathLike) -> CameraPath:
    """Read a camera-path JSON; CameraPathError (naming the file) for malformed content."""
    file = Path(file)
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise CameraPathError(f"{file}: not valid JSON ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("frames"), list):
        raise CameraPathError(f"{file}: expected an object with a 'frames' list")
    frames = []
    for i, f in enumerate(data["frames"]):
        if not isinstance(f, dict) or not {"world_to_cam", "K", "width", "height"} <= set(f):
            raise CameraPathError(f"{file}: frame {i} needs world_to_cam, K, width and height")
        w, h = f["width"], f["height"]
        if not (isinstance(w, int) and isinstance(h, int) and w > 0 and h > 0):
            raise CameraPathError(f"{file}: frame {i}: width/height must be positive integers")
        frames.append(CameraFrame(_matrix(file, i, f["world_to_cam"], "world_to_cam", (4, 4)),
                                  _matrix(file, i, f["K"], "K", (3, 3)), w, h))
    fps = data.get("fps", 30.0)
    if not isinstance(fps, (int, float)) or not fps > 0:
        raise CameraPathError(f"{file}: fps must be a positive number")
    return CameraPath(frames, float(fps))
