"""Where random initial Gaussians go when a scene has no points: the region the cameras look at.

A capture without a point cloud (instant-ngp / nerfstudio ``transforms.json`` without ``ply_file_path``,
a COLMAP model whose ``points3D`` is empty, Blender / D-NeRF synthetic scenes, or ``--init-type random``)
starts from ``init_num_random`` Gaussians spread uniformly in an axis-aligned box. The box is chosen
from the training cameras alone, by these rules, in this order (:func:`random_init_region`):

1. ``--init-box cx,cy,cz,half``: the user's cube, as given.
2. Blender / D-NeRF: the 3DGS cube ``[-1.3, 1.3]^3`` around the origin, made for the NeRF-synthetic rig
   (cameras ~4.03 from the origin, looking at it). Two exceptions, for scenes in that format that are not
   that rig: when the optical axes converge (rule 3) on a point outside the cube, rule 3's region is used;
   when the cameras are more than ``BLENDER_LARGER_FACTOR`` times farther from the origin than the rig's,
   the cube is scaled by that ratio.
3. Convergence of the optical axes: the least-squares point ``p`` closest to every camera's optical axis
   (minimises ``sum_i |(I - d_i d_i^T)(p - c_i)|^2`` for centres ``c_i`` and unit viewing directions
   ``d_i``). It is used when the axes really converge: the 3x3 normal matrix
   ``A = sum_i (I - d_i d_i^T)`` has ``lambda_min / lambda_max >= MIN_CONDITIONING`` (parallel axes give
   0: a forward-facing capture), and ``p`` lies in front of at least ``MIN_IN_FRONT`` of the cameras. The
   box is the cube around ``p`` whose half-size is the median camera distance to ``p``: an inward-looking
   capture (a ring, an arc, a hemisphere) looks at its subject, and the subject lies within the cameras'
   distance of that point.
4. Otherwise (forward-facing captures, diverging axes): the bounding box of the camera frusta between the
   depths ``FRUSTUM_NEAR`` and ``FRUSTUM_FAR`` times the scene extent (nerfstudio's habit for such
   scenes: a box reaching a few scene extents in front of the cameras).

Frames: world coordinates, OpenCV cameras (+z looks forward), ``world_to_cam`` [4, 4].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from recon.data.rig import MIN_CONDITIONING, MIN_IN_FRONT, axes_convergence, axes_of, share_in_front  # noqa: F401
from recon.data.scene import Frame, camera_centers
from recon.core.errors import SplatforgeError

BLENDER_HALF_SIZE = 1.3  # 3DGS random init for synthetic scenes: cube [-1.3, 1.3]^3
NERF_SYNTHETIC_RADIUS = 4.0311  # camera distance from the origin in the NeRF-synthetic scenes
BLENDER_LARGER_FACTOR = 2.0  # cameras this much farther than the rig's: the cube is scaled with them
FRUSTUM_NEAR, FRUSTUM_FAR = 0.05, 3.0  # frustum box depths, in scene extents
SYNTHETIC_FORMATS = ("blender", "dnerf")


class InitBoxError(SplatforgeError, ValueError):
    """``--init-box`` is not four finite numbers with a positive half-size."""


@dataclass(frozen=True)
class InitRegion:
    """Axis-aligned box for random Gaussians: ``center`` [3] and ``half`` [3] (world units), and why."""

    center: np.ndarray
    half: np.ndarray
    reason: str

    def describe(self, n: int) -> str:
        """One line: how many random Gaussians go where, and why."""
        c = ", ".join(f"{v:.3g}" for v in self.center)
        h = self.half
        size = f"half-size {h[0]:.3g}" if np.allclose(h, h[0]) else "half-sizes " + ", ".join(f"{v:.3g}" for v in h)
        return f"random init: {n:,} Gaussians in a box at ({c}), {size}: {self.reason}"


# ------------------------------------------------------------------------------------ camera geometry


def optical_axes(frames: Sequence[Frame]) -> tuple[np.ndarray, np.ndarray]:
    """(centres [N, 3], unit viewing directions [N, 3]) in world coordinates (float64): the camera's +z axis
    (:func:`recon.data.rig.axes_of`)."""
    return axes_of(np.stack([f.camera.world_to_cam.detach().cpu().double().numpy() for f in frames]))


def convergence_region(frames: Sequence[Frame]) -> InitRegion | None:
    """Rule 3: the cube around the optical axes' convergence point, or None when they do not converge."""
    if len(frames) < 2:
        return None
    centers, dirs = optical_axes(frames)
    point, conditioning = axes_convergence(centers, dirs)
    if conditioning < MIN_CONDITIONING or share_in_front(point, centers, dirs) < MIN_IN_FRONT:
        return None
    half = float(np.median(np.linalg.norm(centers - point, axis=1)))
    if not math.isfinite(half) or half <= 0:
        return None
    return InitRegion(point, np.full(3, half),
                      f"where the {len(frames)} cameras' optical axes converge (half-size = median camera "
                      f"distance to it)")


def frustum_region(frames: Sequence[Frame], extent: float) -> InitRegion:
    """Rule 4: bounding box of the camera frusta between ``FRUSTUM_NEAR`` and ``FRUSTUM_FAR`` x ``extent``.

    ``extent``: the scene extent (camera spread); a single camera or coincident ones use 1 world unit.
    """
    scale = extent if extent > 0 and math.isfinite(extent) else 1.0
    corners = []
    for frame in frames:
        cam = frame.camera
        K = cam.K.detach().cpu().double().numpy()
        c2w = np.linalg.inv(cam.world_to_cam.detach().cpu().double().numpy())
        pix = np.array([[0.0, 0.0], [cam.width, 0.0], [0.0, cam.height], [cam.width, cam.height]])
        rays = np.stack([(pix[:, 0] - K[0, 2]) / K[0, 0], (pix[:, 1] - K[1, 2]) / K[1, 1], np.ones(4)], axis=1)
        for depth in (FRUSTUM_NEAR * scale, FRUSTUM_FAR * scale):
            corners.append((rays * depth) @ c2w[:3, :3].T + c2w[:3, 3])
    pts = np.concatenate(corners)
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    return InitRegion((lo + hi) / 2, (hi - lo) / 2,
                      f"the cameras' axes do not converge (forward-facing): the camera frusta from "
                      f"{FRUSTUM_NEAR:g} to {FRUSTUM_FAR:g} scene extents ({scale:.3g}) in front of them")


def blender_region(frames: Sequence[Frame]) -> InitRegion:
    """Rule 2: the 3DGS cube for synthetic scenes, unless the cameras show a scene that is not that rig."""
    converged = convergence_region(frames)
    if converged is not None and np.abs(converged.center).max() > BLENDER_HALF_SIZE:
        return InitRegion(converged.center, converged.half,
                          "synthetic scene whose cameras look at a point outside the 3DGS cube [-1.3, 1.3]^3: "
                          + converged.reason)
    distance = float(np.median(np.linalg.norm(camera_centers(frames), axis=1)))
    ratio = distance / NERF_SYNTHETIC_RADIUS
    if ratio > BLENDER_LARGER_FACTOR:
        return InitRegion(np.zeros(3), np.full(3, BLENDER_HALF_SIZE * ratio),
                          f"synthetic scene with cameras {ratio:.2g}x farther from the origin than NeRF-synthetic's: "
                          f"the 3DGS cube [-1.3, 1.3]^3 scaled by {ratio:.2g}")
    return InitRegion(np.zeros(3), np.full(3, BLENDER_HALF_SIZE),
                      "synthetic (Blender) scene: the 3DGS cube [-1.3, 1.3]^3 around the origin")


# ------------------------------------------------------------------------------------ the rule


def parse_init_box(text: str | None) -> InitRegion | None:
    """``"cx,cy,cz,half"`` -> the user's cube (rule 1); None for None / empty text."""
    if text is None or not str(text).strip():
        return None
    parts = str(text).split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 4 or not all(math.isfinite(v) for v in values) or values[3] <= 0:
        raise InitBoxError(f"--init-box {text!r}: expected four numbers cx,cy,cz,half with half > 0 "
                           f"(e.g. --init-box=0,0,0,1.5)")
    return InitRegion(np.array(values[:3]), np.full(3, values[3]), "the box given by --init-box")


def random_init_region(frames: Sequence[Frame], source_format: str, extent: float,
                       init_box: str | None = None) -> InitRegion:
    """The box for random initial Gaussians by the module's rules 1-4.

    Args:
        frames: the training frames (their cameras decide).
        source_format: the scene's format ("blender" and "dnerf" use rule 2).
        extent: scene extent (camera spread, :attr:`recon.data.scene.Scene.extent`) for rule 4.
        init_box: ``--init-box`` text, or None.
    """
    user = parse_init_box(init_box)
    if user is not None:
        return user
    if source_format in SYNTHETIC_FORMATS:
        return blender_region(frames)
    return convergence_region(frames) or frustum_region(frames, extent)


def box_contains(region: InitRegion, points: np.ndarray) -> np.ndarray:
    """[P] bool: which of ``points`` [P, 3] lie inside the region's box."""
    return np.all(np.abs(np.asarray(points, dtype=np.float64) - region.center) <= region.half, axis=1)
