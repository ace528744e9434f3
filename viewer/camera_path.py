"""Browser (viser) cameras <-> project cameras, and camera-path JSON files.

viser reports a client camera as ``wxyz`` (rotation ``R_world_cam``, i.e. cam-to-world, w-first),
``position`` (camera centre in world coordinates) and ``fov`` (vertical field of view, radians), with
OpenCV-like camera axes: +z looks into the scene, +x right, +y down. Our cameras (rasterizer/CONVENTIONS.md)
are ``world_to_cam`` [4, 4] (``x_cam = R x_world + t``) and ``K`` [3, 3] in pixels with the principal
point at the image centre (pixel centres at +0.5, so ``cx = W / 2``).

Camera-path file (JSON)::

    {"frames": [{"world_to_cam": [[4x4]], "K": [[3x3]], "width": W, "height": H}, ...], "fps": 30.0}

``save_camera_path`` / ``load_camera_path`` write and read it; its frames are float64
:class:`rasterizer.camera.Camera` records (``camera.to(dtype=torch.float32)`` to render one). The
conversions live in :mod:`rasterizer.camera`; the viser names below are aliases of them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rasterizer.camera import (Camera, camera_to_dict, intrinsics_from_vertical_fov, pose_from_world_to_cam,
                               world_to_cam_from_pose)

intrinsics_from_fov = intrinsics_from_vertical_fov  # viser reports the vertical fov
viser_to_world_to_cam = world_to_cam_from_pose  # viser: wxyz = R_world_cam, position = camera centre
world_to_cam_to_viser = pose_from_world_to_cam
from recon.core.atomic import atomic_write_bytes
from recon.core.errors import SplatforgeError
from recon.core.limits import MAX_IMAGE_PIXELS, load_json, with_path


class CameraPathError(SplatforgeError, ValueError):
    """A camera-path file is missing fields or holds malformed matrices; the message names the file."""


@dataclass
class CameraPath:
    """An ordered list of keyframe cameras (float64 :class:`Camera`) played back at ``fps`` frames per second."""

    frames: list[Camera] = field(default_factory=list)
    fps: float = 30.0


def viser_camera_to_frame(wxyz, position, fov_y: float, width: int, height: int) -> Camera:
    """The float64 :class:`Camera` of a viser camera rendered at ``width x height`` pixels."""
    return Camera.from_arrays(viser_to_world_to_cam(wxyz, position), intrinsics_from_fov(fov_y, width, height),
                              width, height)


# ---------------------------------------------------------------------------------------- file IO


def camera_path_to_dict(path: CameraPath) -> dict:
    """Plain JSON-ready dict of a camera path."""
    return {
        "frames": [camera_to_dict(f) for f in path.frames],
        "fps": float(path.fps),
    }


def save_camera_path(file: str | os.PathLike, path: CameraPath) -> Path:
    """Write ``path`` as JSON, replacing ``file`` atomically (:func:`recon.core.atomic.atomic_write_bytes`);
    returns the file."""
    file = Path(file)
    file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(file, json.dumps(camera_path_to_dict(path), indent=1).encode(), force=True)
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
    data = load_json(file, "camera path", with_path(CameraPathError))
    if not isinstance(data, dict) or not isinstance(data.get("frames"), list):
        raise CameraPathError(f"{file}: expected an object with a 'frames' list")
    frames = []
    for i, f in enumerate(data["frames"]):
        if not isinstance(f, dict) or not {"world_to_cam", "K", "width", "height"} <= set(f):
            raise CameraPathError(f"{file}: frame {i} needs world_to_cam, K, width and height")
        w, h = f["width"], f["height"]
        if not (isinstance(w, int) and isinstance(h, int) and w > 0 and h > 0):
            raise CameraPathError(f"{file}: frame {i}: width/height must be positive integers")
        if w * h > MAX_IMAGE_PIXELS:
            raise CameraPathError(f"{file}: frame {i}: {w}x{h} is {w * h:,} pixels, more than the "
                                  f"{MAX_IMAGE_PIXELS:,} splatforge renders; give a smaller width and height")
        frames.append(Camera.from_arrays(_matrix(file, i, f["world_to_cam"], "world_to_cam", (4, 4)),
                                         _matrix(file, i, f["K"], "K", (3, 3)), w, h))
    fps = data.get("fps", 30.0)
    if not isinstance(fps, (int, float)) or not fps > 0:
        raise CameraPathError(f"{file}: fps must be a positive number")
    return CameraPath(frames, float(fps))
