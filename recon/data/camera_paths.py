"""Camera paths for videos, derived from a scene's training cameras: orbit, spiral, dataset order; and
smooth paths through keyframes (the viewer's camera-path JSON, :func:`interpolate_keyframes`).

Orbit/spiral centre = the least-squares point closest to all training optical axes; up = minus the
mean camera y axis (OpenCV y points down); radius and elevation = the training cameras' means.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from rasterizer import Camera
from rasterizer.quaternions import quat_to_rotmat_np, rotmat_to_quat
from recon.data.procedural import look_at_world_to_cam, orbit_basis
from recon.core.errors import UsageError

PATHS = ("orbit", "spiral", "dataset", "fixed")


def scene_rig(cameras: Sequence[Camera]) -> dict:
    """{"center" [3], "up" [3], "radius", "elevation" (rad)} of a set of cameras looking at something."""
    w2c = np.stack([c.world_to_cam.detach().cpu().double().numpy() for c in cameras])
    R, t = w2c[:, :3, :3], w2c[:, :3, 3]
    centers = -np.einsum("nji,nj->ni", R, t)
    dirs = R[:, 2, :]  # optical axes (camera z) in world
    A = np.zeros((3, 3))
    b = np.zeros(3)
    for c, d in zip(centers, dirs):
        P = np.eye(3) - np.outer(d, d)
        A += P
        b += P @ c
    center = np.linalg.lstsq(A, b, rcond=None)[0] if len(cameras) > 1 else centers[0] + dirs[0]
    up = -R[:, 1, :].mean(axis=0)
    up /= max(np.linalg.norm(up), 1e-12)
    offsets = centers - center
    radius = float(np.linalg.norm(offsets, axis=1).mean())
    sin_el = (offsets @ up) / np.linalg.norm(offsets, axis=1).clip(min=1e-12)
    return {"center": center, "up": up, "radius": radius, "elevation": float(np.arcsin(sin_el.mean()))}


def _ring_camera(rig: dict, template: Camera, azimuth: float, elevation: float, radius: float) -> Camera:
    e1, e2, up = orbit_basis(rig["up"])
    offset = math.cos(elevation) * (math.cos(azimuth) * e1 + math.sin(azimuth) * e2) + math.sin(elevation) * up
    w2c = look_at_world_to_cam(rig["center"] + radius * offset, rig["center"], up)
    return Camera(torch.tensor(w2c, dtype=torch.float32), template.K.clone(), template.width, template.height)


def camera_path(kind: str, cameras: Sequence[Camera], n_frames: int = 120) -> list[Camera]:
    """``n_frames`` cameras (intrinsics and size of ``cameras[0]``); "dataset" returns ``cameras`` as given,
    "fixed" ``cameras[0]`` ``n_frames`` times (a still view, for a 4D model moving in time)."""
    if kind not in PATHS:
        raise UsageError(f"unknown camera path {kind!r} (have {PATHS})")
    if not cameras:
        raise ValueError("camera_path: the scene has no cameras to derive a path from")
    if kind == "dataset":
        return list(cameras)
    if kind == "fixed":
        return [cameras[0]] * n_frames
    rig = scene_rig(cameras)
    out = []
    for i in range(n_frames):
        az = 2 * math.pi * i / n_frames
        el, r = rig["elevation"], rig["radius"]
        if kind == "spiral":
            el = el + math.radians(10.0) * math.sin(2 * az)
            r = r * (1.0 + 0.15 * math.sin(az))
        out.append(_ring_camera(rig, cameras[0], az, el, r))
    return out


# ------------------------------------------------------------------------------ keyframe paths


def slerp(q0: np.ndarray, q1: np.ndarray, u: float) -> np.ndarray:
    """Spherical linear interpolation of unit quaternions (shortest arc)."""
    d = float(q0 @ q1)
    if d < 0:
        q1, d = -q1, -d
    if d > 0.9995:
        q = q0 + u * (q1 - q0)
        return q / np.linalg.norm(q)
    theta = math.acos(min(d, 1.0))
    return (math.sin((1 - u) * theta) * q0 + math.sin(u * theta) * q1) / math.sin(theta)


def _catmull_rom(p0, p1, p2, p3, u: float) -> np.ndarray:
    """Uniform Catmull-Rom point between p1 (u=0) and p2 (u=1)."""
    u2, u3 = u * u, u * u * u
    return 0.5 * ((2 * p1) + (-p0 + p2) * u + (2 * p0 - 5 * p1 + 4 * p2 - p3) * u2 + (-p0 + 3 * p1 - 3 * p2 + p3) * u3)


def interpolate_keyframes(world_to_cams: Sequence[np.ndarray], Ks: Sequence[np.ndarray], width: int, height: int,
                          n_frames: int) -> list[Camera]:
    """``n_frames`` cameras through the keyframes (first and last frame = first and last keyframe).

    Camera centres follow a Catmull-Rom spline through the keyframe centres (a straight line for two
    keyframes), orientations are slerped per segment, intrinsics are blended linearly; ``Ks`` must be for
    ``width x height`` images already (:func:`resize_intrinsics` keeps the field of view of keyframes
    saved at other sizes). Keyframe time is uniform: each segment gets the same number of frames."""
    w2c = [np.asarray(m, dtype=np.float64) for m in world_to_cams]
    if not w2c:
        raise ValueError("interpolate_keyframes: no keyframes")
    if n_frames < 1:
        raise ValueError(f"n_frames must be >= 1, got {n_frames}")
    Ks = [np.asarray(k, dtype=np.float64) for k in Ks]
    centers = np.stack([-m[:3, :3].T @ m[:3, 3] for m in w2c])
    quats = [rotmat_to_quat(m[:3, :3]) for m in w2c]
    n_key = len(w2c)
    out = []
    for i in range(n_frames):
        s = 0.0 if n_frames == 1 or n_key == 1 else i * (n_key - 1) / (n_frames - 1)
        j = min(int(math.floor(s)), max(n_key - 2, 0))
        u = s - j
        if n_key == 1:
            c, R, K = centers[0], w2c[0][:3, :3], Ks[0]
        else:
            p = [centers[max(j - 1, 0)], centers[j], centers[j + 1], centers[min(j + 2, n_key - 1)]]
            if j == 0:
                p[0] = 2 * p[1] - p[2]  # reflected end points: no overshoot at the ends
            if j + 2 > n_key - 1:
                p[3] = 2 * p[2] - p[1]
            c = _catmull_rom(*p, u)
            R = quat_to_rotmat_np(slerp(quats[j], quats[j + 1], u))
            K = (1 - u) * Ks[j] + u * Ks[j + 1]
        m = np.eye(4)
        m[:3, :3] = R
        m[:3, 3] = -R @ c
        out.append(Camera(torch.tensor(m, dtype=torch.float32), torch.tensor(K, dtype=torch.float32),
                          int(width), int(height)))
    return out


def resize_intrinsics(K: np.ndarray, width: int, height: int, new_width: int, new_height: int) -> np.ndarray:
    """``K`` of a ``width x height`` image for the same view at ``new_width x new_height``."""
    K = np.array(K, dtype=np.float64)
    K[0] *= new_width / width
    K[1] *= new_height / height
    return K
