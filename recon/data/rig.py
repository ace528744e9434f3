"""Camera-rig geometry from poses alone: where optical axes converge, and which way a file's matrices point.

A synchronised multi-view rig (Panoptic dome, a ring of cameras in a room) films one subject: the cameras'
optical axes pass near a common point that lies in front of (nearly) all of them. That fact decides two
things without looking at pixels:

- :func:`axes_convergence` / :func:`share_in_front`: the least-squares meeting point of the axes (used by
  :mod:`recon.models.init_region` to place random initial Gaussians);
- :func:`rig_pose_direction`: whether 4x4 matrices a file labels world-to-camera are really
  camera-to-world. Read the wrong way, the cameras of an inward-looking rig point *away* from each other
  (the meeting point lies behind most of them), so nothing ties the views together and a model fits each
  camera on its own. Found on the shared classroom capture (HFU's Dynamic 3D Gaussians test data, whose
  ``w2c`` entries are camera-to-world): as written, the axes' meeting point lies behind 2 of the 3 cameras;
  inverted, in front of all 3, and the person's segmentation centroids triangulate to a point 1 m above the
  floor with 3.6 px median reprojection error (issue 55).

Frames: world coordinates, OpenCV cameras (+z looks forward), ``world_to_cam`` [4, 4].
"""

from __future__ import annotations

import numpy as np

MIN_CONDITIONING = 0.01  # lambda_min / lambda_max of sum (I - d d^T): axes converge above it
MIN_IN_FRONT = 0.75  # share of cameras the convergence point must lie in front of


def axes_convergence(centers: np.ndarray, dirs: np.ndarray) -> tuple[np.ndarray, float]:
    """Least-squares point closest to all lines ``c_i + s d_i`` and the conditioning of the system.

    Args:
        centers: [N, 3] points on the lines; dirs: [N, 3] unit directions.
    Returns:
        (point [3], lambda_min / lambda_max of ``A = sum_i (I - d_i d_i^T)``; 0 when the lines are parallel).
    """
    projectors = np.eye(3)[None] - dirs[:, :, None] * dirs[:, None, :]  # [N, 3, 3]
    A = projectors.sum(axis=0)
    b = np.einsum("nij,nj->i", projectors, centers)
    eig = np.linalg.eigvalsh(A)
    conditioning = float(eig[0] / eig[-1]) if eig[-1] > 0 else 0.0
    point = np.linalg.lstsq(A, b, rcond=None)[0]
    return point, conditioning


def share_in_front(point: np.ndarray, centers: np.ndarray, dirs: np.ndarray) -> float:
    """Share of cameras that see ``point`` [3] in front of them (positive depth along their axis)."""
    return float(np.mean(np.einsum("ni,ni->n", point[None] - centers, dirs) > 0))


def axes_of(world_to_cam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(centres [N, 3], unit viewing directions [N, 3]) of world-to-camera matrices [N, 4, 4] (float64).

    The centre is ``-R^T t``; the viewing direction the camera's +z axis, the third row of R."""
    w2c = np.asarray(world_to_cam, dtype=np.float64)
    R, t = w2c[:, :3, :3], w2c[:, :3, 3]
    dirs = R[:, 2, :]
    return -np.einsum("nji,nj->ni", R, t), dirs / np.linalg.norm(dirs, axis=1, keepdims=True)


SINGULAR_DET = 1e-6  # a rotation block with |det| below this is not a camera pose (left to the camera checks)


def converges(world_to_cam: np.ndarray) -> bool:
    """True when the optical axes of the cameras [N, 4, 4] meet in front of them: conditioning at least
    :data:`MIN_CONDITIONING` and the meeting point in front of at least :data:`MIN_IN_FRONT` of them."""
    if len(world_to_cam) < 2:
        return False
    centers, dirs = axes_of(world_to_cam)
    point, conditioning = axes_convergence(centers, dirs)
    return conditioning >= MIN_CONDITIONING and share_in_front(point, centers, dirs) >= MIN_IN_FRONT


def rig_pose_direction(matrices: np.ndarray) -> str:
    """"world_to_cam" or "cam_to_world": how to read a rig's matrices [N, 4, 4] (one per distinct camera) that a
    file labels world-to-camera. "cam_to_world" only when, read as labelled, the axes do not meet in front of
    the cameras and, inverted, they do (module docstring); every other case (a forward-facing rig, one camera,
    both or neither converging) keeps the label."""
    matrices = np.asarray(matrices, dtype=np.float64)
    if len(matrices) < 2 or not np.isfinite(matrices).all():
        return "world_to_cam"  # damaged matrices are refused, naming the file, by the scene's camera checks
    if (np.abs(np.linalg.det(matrices[:, :3, :3])) < SINGULAR_DET).any():
        return "world_to_cam"
    try:
        if converges(matrices):
            return "world_to_cam"
        return "cam_to_world" if converges(np.linalg.inv(matrices)) else "world_to_cam"
    except np.linalg.LinAlgError:
        return "world_to_cam"
