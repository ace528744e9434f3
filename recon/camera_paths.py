"""Camera paths for videos, derived from a scene's training cameras: orbit, spiral, dataset order.

Orbit/spiral centre = the least-squares point closest to all training optical axes; up = minus the
mean camera y axis (OpenCV y points down); radius and elevation = the training cameras' means.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from rasterizer import Camera
from recon.data.procedural import look_at_world_to_cam, orbit_basis

PATHS = ("orbit", "spiral", "dataset")


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
    """``n_frames`` cameras (intrinsics and size of ``cameras[0]``); "dataset" returns ``cameras`` as given."""
    if kind not in PATHS:
        raise ValueError(f"unknown camera path {kind!r} (have {PATHS})")
    if not cameras:
        raise ValueError("camera_path: the scene has no cameras to derive a path from")
    if kind == "dataset":
        return list(cameras)
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
