"""A complete demo/test scene made without any files: coloured objects on a checkered ground.

Ground-truth 3D Gaussians (flat discs on surfaces: a checkered ground square, a banded red sphere, a
striped green sphere and a blue box) are rendered with our rasterizer from :func:`orbit_cameras`
into in-memory RGBA images (:class:`InMemoryFrame`), 40 train views on two rings and 8 test views
between them. World frame: OpenCV habit, up = -y; the ground is the plane y = +0.5 (below the origin).
Generation takes well under a second at 128 x 128.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rasterizer import Camera, rasterize_gaussians, stack_cameras
from rasterizer.quaternions import quat_z_to
from recon.data.procedural import azimuth_step, orbit_cameras
from recon.data.scene import WHITE, Frame, Scene
from recon.core.errors import UsageError

GROUND_Y = 0.5
LOOK_AT = (0.0, GROUND_Y - 0.25, 0.0)  # cameras aim a little above the ground centre
OPAQUE = 0.95
NAME = "procedural"


@dataclass
class InMemoryFrame(Frame):
    """A :class:`Frame` whose image lives in memory: ``rgba`` uint8 [H, W, 4] straight alpha.

    ``image_path`` is a descriptive pseudo path (``<procedural>/train_000.png``); nothing is on disk.
    Readers use ``recon.data.frame_images.frame_rgba``, which prefers ``rgba`` when present.
    """

    rgba: np.ndarray | None = None


@dataclass
class Surfels:
    """Ground-truth Gaussians as numpy arrays: means [N, 3], quats [N, 4] wxyz, scales [N, 3],
    colors [N, 3] RGB in [0, 1]."""

    means: np.ndarray
    quats: np.ndarray
    scales: np.ndarray
    colors: np.ndarray

    @staticmethod
    def cat(parts: list["Surfels"]) -> "Surfels":
        return Surfels(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("means", "quats", "scales", "colors")))


def _discs(points: np.ndarray, normals: np.ndarray, spacing: float, colors: np.ndarray) -> Surfels:
    """Flat Gaussians (0.6 spacing wide, 0.08 spacing thick) tangent to a surface."""
    n = len(points)
    scales = np.tile([0.6 * spacing, 0.6 * spacing, 0.08 * spacing], (n, 1))
    return Surfels(points, quat_z_to(normals), scales, colors)


def ground(half: float = 1.3, n: int = 36, tile: float = 0.325) -> Surfels:
    """Checkered square [-half, half]^2 in x/z at y = GROUND_Y."""
    t = (np.arange(n) + 0.5) / n * 2 * half - half
    x, z = np.meshgrid(t, t, indexing="ij")
    pts = np.stack([x.ravel(), np.full(x.size, GROUND_Y), z.ravel()], axis=1)
    checker = (np.floor(pts[:, 0] / tile) + np.floor(pts[:, 2] / tile)) % 2
    colors = np.where(checker[:, None] > 0, [0.85, 0.82, 0.74], [0.25, 0.3, 0.42])
    normals = np.tile([0.0, -1.0, 0.0], (len(pts), 1))
    return _discs(pts, normals, 2 * half / n, colors)


def sphere(center, radius: float, n: int, pattern: str) -> Surfels:
    """Fibonacci-sampled sphere; ``pattern`` "bands" (red/orange by latitude) or "stripes" (green)."""
    i = np.arange(n) + 0.5
    phi = np.arccos(1 - 2 * i / n)
    theta = math.pi * (1 + 5**0.5) * i
    normals = np.stack([np.cos(theta) * np.sin(phi), np.cos(phi), np.sin(theta) * np.sin(phi)], axis=1)
    pts = np.asarray(center) + radius * normals
    if pattern == "bands":
        band = np.floor(phi / (math.pi / 6)) % 2
        colors = np.where(band[:, None] > 0, [0.9, 0.15, 0.1], [0.98, 0.6, 0.1])
    else:
        stripe = np.floor((theta % (2 * math.pi)) / (math.pi / 4)) % 2
        colors = np.where(stripe[:, None] > 0, [0.15, 0.7, 0.25], [0.85, 0.95, 0.3])
    return _discs(pts, normals, radius * math.sqrt(4 * math.pi / n), colors)


def box(center, half: float, per_side: int) -> Surfels:
    """Axis-aligned cube surface, faces shaded in blues (a white cross on the top face)."""
    t = (np.arange(per_side) + 0.5) / per_side * 2 - 1
    u, v = (a.ravel() for a in np.meshgrid(t, t, indexing="ij"))
    parts = []
    shades = [0.55, 0.7, 0.85, 1.0, 0.6, 0.75]
    for f, (axis, sign) in enumerate([(a, s) for a in range(3) for s in (-1.0, 1.0)]):
        local = np.zeros((u.size, 3))
        others = [k for k in range(3) if k != axis]
        local[:, axis] = sign
        local[:, others[0]], local[:, others[1]] = u, v
        normals = np.zeros_like(local)
        normals[:, axis] = sign
        colors = np.tile(np.array([0.1, 0.25, 0.8]) * shades[f] + [0.0, 0.05, 0.1], (u.size, 1))
        if axis == 1 and sign < 0:  # top face (up is -y): white cross
            cross = (np.abs(u) < 0.25) | (np.abs(v) < 0.25)
            colors[cross] = (0.95, 0.95, 0.95)
        parts.append(_discs(np.asarray(center) + half * local, normals, 2 * half / per_side, colors))
    return Surfels.cat(parts)


def ground_truth_surfels() -> Surfels:
    """All ground-truth Gaussians of the demo scene (about 3,400)."""
    return Surfels.cat([
        ground(),
        sphere((-0.45, GROUND_Y - 0.38, 0.15), 0.38, 900, "bands"),
        sphere((0.5, GROUND_Y - 0.25, -0.45), 0.25, 450, "stripes"),
        box((0.35, GROUND_Y - 0.26, 0.55), 0.26, 10),
    ])


def render_surfels(s: Surfels, cameras: list[Camera]) -> np.ndarray:
    """uint8 [C, H, W, 4] straight-alpha RGBA renders of ``s`` (cameras of one size)."""
    viewmats, Ks, W, H = stack_cameras(cameras)
    t = {k: torch.as_tensor(getattr(s, k), dtype=torch.float32) for k in ("means", "quats", "scales", "colors")}
    with torch.no_grad():
        rgb, alpha, _ = rasterize_gaussians(t["means"], t["quats"], t["scales"],
                                            torch.full((len(s.means),), OPAQUE), t["colors"], viewmats, Ks, W, H)
    straight = torch.where(alpha > 1e-6, rgb / alpha.clamp(min=1e-6), torch.zeros_like(rgb)).clamp(0, 1)
    rgba = torch.cat([straight, alpha.clamp(0, 1)], dim=-1)
    return (rgba * 255.0).round().to(torch.uint8).numpy()


def procedural_scene(width: int = 128, height: int = 128, n_train: int = 40, n_test: int = 8,
                     radius: float = 3.0, fov_deg: float = 50.0, n_points: int = 1500, seed: int = 0,
                     data_factor: int = 1, arc_deg: float = 360.0) -> Scene:
    """The demo scene as a :class:`Scene` with in-memory frames.

    Args:
        width, height: image size before ``data_factor`` (integer downscale, like a dataset's).
        n_train: train views, half on a ring 15 degrees above the ground, half at 35 degrees.
        n_test: test views at 25 degrees, azimuths between the train views.
        radius: camera distance from LOOK_AT; fov_deg: horizontal field of view.
        n_points: "SfM" points (ground-truth centres jittered by 2 cm) with colours, for initialisation.
        arc_deg: azimuth span of the cameras: 360 (rings all around), or a partial arc (e.g. 90: a
            capture from one side; test views lie inside the arc, between train views).
    Returns:
        Scene with ``points`` [P, 3] float32, ``point_colors`` [P, 3] uint8, white background,
        ``source_format`` "procedural".
    """
    if data_factor < 1 or int(data_factor) != data_factor:
        raise UsageError(f"--data-factor {data_factor!r}: must be a positive integer")
    W, H = max(1, width // data_factor), max(1, height // data_factor)
    fov = math.radians(fov_deg)
    half = n_train // 2
    arc = math.radians(arc_deg)
    full = arc_deg >= 360.0
    # second ring and test views sit between the first ring's cameras (half a step on a partial arc)
    shift_train = math.pi / max(n_train - half, 1) if full else 0.5 * azimuth_step(half, arc)
    shift_test = math.pi / max(n_test, 1) / 2 + 0.1 if full else 0.5 * azimuth_step(n_test + 1, arc)
    arc_train2 = arc if full else arc - 2 * shift_train
    arc_test = arc if full else arc - 2 * shift_test
    train = (orbit_cameras(half, radius, W, H, fov, LOOK_AT, elevation=math.radians(15.0), arc=arc)
             + orbit_cameras(n_train - half, radius, W, H, fov, LOOK_AT, elevation=math.radians(35.0),
                             start_azimuth=shift_train, arc=arc_train2))
    test = orbit_cameras(n_test, radius, W, H, fov, LOOK_AT, elevation=math.radians(25.0),
                         start_azimuth=shift_test, arc=arc_test)
    s = ground_truth_surfels()
    images = render_surfels(s, train + test)

    def frames(cams: list[Camera], offset: int, split: str) -> list[Frame]:
        return [InMemoryFrame(f"{split}_{i:03d}", Path(f"<{NAME}>/{split}_{i:03d}.png"), cam,
                              rgba=images[offset + i]) for i, cam in enumerate(cams)]

    rng = np.random.default_rng(seed)
    pick = rng.choice(len(s.means), size=min(n_points, len(s.means)), replace=False)
    points = (s.means[pick] + rng.normal(0.0, 0.02, size=(len(pick), 3))).astype(np.float32)
    point_colors = np.clip(s.colors[pick] * 255 + rng.normal(0, 8, size=(len(pick), 3)), 0, 255).astype(np.uint8)
    return Scene(frames_train=frames(train, 0, "train"), frames_test=frames(test, len(train), "test"),
                 points=points, point_colors=point_colors, background=WHITE, source_format=NAME, root=None)
