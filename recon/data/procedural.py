"""Procedural cameras for demos and tests: no files needed.

World frame follows OpenCV habits: by default "up" is -y (``up=(0, -1, 0)``), so a camera with no roll
has its image y axis (down) along world +y. Angles are in radians.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from rasterizer.camera import Camera


def look_at_world_to_cam(eye: np.ndarray, target: np.ndarray, up: np.ndarray) -> np.ndarray:
    """[4, 4] float64 OpenCV world-to-camera for a camera at ``eye`` looking at ``target``.

    Camera z (forward) points at the target, camera y (down) is as close to ``-up`` as possible, and
    x = y cross z (right). Rows of R are the camera axes in world coordinates; t = -R eye.
    """
    eye, target, up = (np.asarray(v, dtype=np.float64) for v in (eye, target, up))
    z = target - eye
    if np.linalg.norm(z) < 1e-12:
        raise ValueError("look_at: eye and target coincide")
    z /= np.linalg.norm(z)
    x = np.cross(-up, z)
    if np.linalg.norm(x) < 1e-9:
        raise ValueError("look_at: viewing direction is parallel to the up vector")
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    w2c = np.eye(4)
    w2c[:3, :3] = np.stack([x, y, z])
    w2c[:3, 3] = -w2c[:3, :3] @ eye
    return w2c


def orbit_basis(up: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(e1, e2, up_hat): an orthonormal basis with e1, e2 spanning the plane perpendicular to ``up``."""
    up_hat = np.asarray(up, dtype=np.float64)
    up_hat = up_hat / np.linalg.norm(up_hat)
    helper = np.array([0.0, 0.0, 1.0]) if abs(up_hat[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
    e1 = helper - up_hat * (helper @ up_hat)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(up_hat, e1)
    return e1, e2, up_hat


FULL_CIRCLE = 2.0 * math.pi - 1e-9  # an ``arc`` at least this wide is the whole circle


def azimuth_step(n: int, arc: float) -> float:
    """Azimuth between neighbouring cameras: ``arc / n`` on a full circle, ``arc / (n - 1)`` on a partial arc."""
    if arc >= FULL_CIRCLE:
        return 2.0 * math.pi / n
    return arc / max(n - 1, 1)


def orbit_cameras(
    n: int,
    radius: float,
    width: int,
    height: int,
    fov_x: float,
    look_at: Sequence[float] = (0.0, 0.0, 0.0),
    up: Sequence[float] = (0.0, -1.0, 0.0),
    elevation: float = math.radians(20.0),
    start_azimuth: float = 0.0,
    arc: float = 2.0 * math.pi,
) -> list[Camera]:
    """``n`` pinhole cameras evenly spaced in azimuth on a circle around ``look_at``, all looking at it.

    Args:
        n: number of cameras.
        radius: distance of every camera centre from ``look_at`` (world units).
        width, height: image size in pixels; principal point at the image centre, square pixels.
        fov_x: horizontal field of view in radians.
        look_at: [3] world point every camera looks at (projects to the image centre).
        up: [3] world up direction (OpenCV habit: -y); cameras have no roll about it.
        elevation: angle in radians above the plane through ``look_at`` perpendicular to ``up``
            (positive: cameras above, looking down).
        start_azimuth: azimuth of the first camera in radians.
        arc: azimuth span in radians: the full circle (default, ``n`` cameras ``2 pi / n`` apart), or
            a partial arc ``[start_azimuth, start_azimuth + arc]`` with both ends taken.
    Returns:
        Cameras with ``world_to_cam`` [4, 4] float32 (OpenCV axes) and ``K`` [3, 3] float32.
    """
    if n < 1:
        raise ValueError(f"orbit_cameras: n must be >= 1, got {n}")
    if abs(math.cos(elevation)) < 1e-6:
        raise ValueError("orbit_cameras: elevation of +-90 degrees looks along the up vector")
    target = np.asarray(look_at, dtype=np.float64)
    e1, e2, up_hat = orbit_basis(np.asarray(up, dtype=np.float64))
    cams = []
    for i in range(n):
        az = start_azimuth + (2.0 * math.pi * i / n if arc >= FULL_CIRCLE else azimuth_step(n, arc) * i)
        offset = math.cos(elevation) * (math.cos(az) * e1 + math.sin(az) * e2) + math.sin(elevation) * up_hat
        w2c = look_at_world_to_cam(target + radius * offset, target, up_hat)
        cams.append(Camera.from_fov(torch.tensor(w2c, dtype=torch.float32), width, height, fov_x))
    return cams
