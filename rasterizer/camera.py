"""Camera description shared by the rasterizer and everything that renders with it.

Conventions (see rasterizer/CONVENTIONS.md): OpenCV axes (x right, y down, z forward), ``world_to_cam``
4x4, intrinsics ``K`` 3x3 in pixels, pixel centres at (x + 0.5, y + 0.5).

:class:`Camera` is the one camera record of the project (training views, export importance views,
viewer frustums and camera-path keyframes, sequence manifests). Records that carry more (a view's
name) hold a Camera. The conversions between conventions are written here once and called at the
boundary: :func:`rigid_inverse` (cam_to_world <-> world_to_cam), :func:`world_to_cam_from_pose` /
:func:`pose_from_world_to_cam` (an orientation quaternion and centre, as viser reports cameras),
:func:`opengl_cam_to_world_to_opencv_world_to_cam` (nerfstudio / Blender files),
:func:`intrinsics_from_vertical_fov`, and :func:`camera_to_dict` (the JSON camera of camera paths and
sequence manifests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from rasterizer.quaternions import quat_to_rotmat_np, rotmat_to_quat

CameraModel = Literal["pinhole", "ortho", "fisheye"]
SUPPORTED_CAMERA_MODELS = ("pinhole",)  # ortho/fisheye: the type has room, projection not yet written


@dataclass
class Camera:
    """One camera: extrinsics, intrinsics, image size and projection model.

    Attributes:
        world_to_cam: [4, 4] world-to-camera transform (OpenCV axes).
        K: [3, 3] intrinsics in pixels.
        width, height: image size in pixels.
        model: projection model; "pinhole" is implemented, "ortho"/"fisheye" are reserved names.
        distortion: optional model-specific coefficients (e.g. fisheye k1..k4); unused by pinhole.
    """

    world_to_cam: Tensor
    K: Tensor
    width: int
    height: int
    model: CameraModel = "pinhole"
    distortion: Tensor | None = field(default=None)

    @property
    def cam_to_world(self) -> Tensor:
        """[4, 4] camera-to-world transform."""
        return torch.linalg.inv(self.world_to_cam)

    @property
    def center(self) -> Tensor:
        """[3] camera centre in world coordinates."""
        return self.cam_to_world[:3, 3]

    def to(self, device=None, dtype: torch.dtype | None = None) -> "Camera":
        """Copy with ``world_to_cam``, ``K`` (and ``distortion``) moved to ``device`` / cast to ``dtype``."""
        def move(t):
            return None if t is None else t.to(device=device, dtype=dtype)

        return replace(self, world_to_cam=move(self.world_to_cam), K=move(self.K), distortion=move(self.distortion))

    def scaled(self, scale: float) -> "Camera":
        """The same view with the image scaled by ``scale``: size rounded (at least 1 px), K's first two rows
        x the actual width / height ratios (pixel centres stay at +0.5: an integer ``scale`` s maps each
        pixel onto an s x s block); extrinsics shared. ``scale`` 1 returns ``self``."""
        if scale == 1:
            return self
        W, H = max(1, round(self.width * scale)), max(1, round(self.height * scale))
        K = self.K.clone()
        K[0] *= W / self.width
        K[1] *= H / self.height
        return replace(self, K=K, width=W, height=H)

    def world_to_cam_numpy(self) -> np.ndarray:
        """[4, 4] float64 numpy copy of ``world_to_cam`` (on the CPU, detached)."""
        return self.world_to_cam.detach().cpu().double().numpy()

    def K_numpy(self) -> np.ndarray:
        """[3, 3] float64 numpy copy of ``K`` (on the CPU, detached)."""
        return self.K.detach().cpu().double().numpy()

    @staticmethod
    def from_arrays(world_to_cam, K, width: int, height: int, dtype: torch.dtype = torch.float64) -> "Camera":
        """Pinhole camera from array-likes (numpy, lists, tensors) ``world_to_cam`` [4, 4] and ``K`` [3, 3];
        float64 by default, so values read from or written to files keep their precision."""
        return Camera(world_to_cam=torch.as_tensor(np.asarray(world_to_cam, dtype=np.float64), dtype=dtype),
                      K=torch.as_tensor(np.asarray(K, dtype=np.float64), dtype=dtype),
                      width=int(width), height=int(height))

    @staticmethod
    def from_fov(
        world_to_cam: Tensor, width: int, height: int, fov_x: float, fov_y: float | None = None
    ) -> "Camera":
        """Pinhole camera with the principal point at the image centre, fov in radians."""
        fx = 0.5 * width / torch.tan(torch.tensor(fov_x / 2, dtype=torch.float64)).item()
        fy = fx if fov_y is None else 0.5 * height / torch.tan(torch.tensor(fov_y / 2)).item()
        K = torch.tensor(
            [[fx, 0.0, width / 2], [0.0, fy, height / 2], [0.0, 0.0, 1.0]],
            dtype=world_to_cam.dtype,
            device=world_to_cam.device,
        )
        return Camera(world_to_cam=world_to_cam, K=K, width=width, height=height)


def stack_cameras(cameras: list[Camera]) -> tuple[Tensor, Tensor, int, int]:
    """Batch cameras of one size into ``viewmats [C, 4, 4]`` and ``Ks [C, 3, 3]``.

    Returns (viewmats, Ks, width, height). Raises ValueError when sizes or models differ.
    """
    if not cameras:
        raise ValueError("stack_cameras: got an empty list of cameras")
    w, h = cameras[0].width, cameras[0].height
    for i, cam in enumerate(cameras):
        if (cam.width, cam.height) != (w, h):
            raise ValueError(
                f"stack_cameras: camera {i} is {cam.width}x{cam.height}, camera 0 is {w}x{h}; "
                "render cameras of different sizes in separate calls"
            )
        if cam.model not in SUPPORTED_CAMERA_MODELS:
            raise ValueError(f"camera {i}: model {cam.model!r} is not implemented yet (have {SUPPORTED_CAMERA_MODELS})")
    viewmats = torch.stack([c.world_to_cam for c in cameras])
    Ks = torch.stack([c.K for c in cameras])
    return viewmats, Ks, w, h


# ------------------------------------------------------------------------------------- conversions


def rigid_inverse(transform) -> np.ndarray:
    """[4, 4] float64 inverse of a rigid transform ([4, 4] or [3, 4]): ``R^T`` and ``-R^T t``.

    Turns cam_to_world into world_to_cam and back.
    """
    T = np.asarray(transform, dtype=np.float64)
    R, t = T[:3, :3], T[:3, 3]
    inv = np.eye(4)
    inv[:3, :3] = R.T
    inv[:3, 3] = -R.T @ t
    return inv


def world_to_cam_from_pose(wxyz, position) -> np.ndarray:
    """[4, 4] float64 ``world_to_cam`` of a camera whose orientation is the quaternion ``wxyz`` (w, x, y, z)
    of ``R_world_cam`` (cam-to-world rotation, OpenCV camera axes) and whose centre is ``position`` [3]."""
    c2w = np.eye(4)
    c2w[:3, :3] = quat_to_rotmat_np(wxyz)
    c2w[:3, 3] = np.asarray(position, dtype=np.float64)
    return rigid_inverse(c2w)


def pose_from_world_to_cam(world_to_cam) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`world_to_cam_from_pose`: (wxyz [4] of ``R_world_cam``, w >= 0; centre [3])."""
    c2w = rigid_inverse(world_to_cam)
    return rotmat_to_quat(c2w[:3, :3]), c2w[:3, 3]


GL_TO_CV = np.diag([1.0, -1.0, -1.0, 1.0])
"""OpenGL camera axes (x right, y up, z back) -> OpenCV (x right, y down, z forward): flip y and z."""


def opengl_cam_to_world_to_opencv_world_to_cam(cam_to_world_gl) -> np.ndarray:
    """OpenGL-axes camera-to-world [4, 4] (or [3, 4]) -> OpenCV-axes world-to-camera [4, 4] float64.

    ``cam_to_world_cv = cam_to_world_gl @ diag(1, -1, -1, 1)`` (flip the camera's y and z axes), then
    invert the rigid transform.
    """
    c2w = np.eye(4)
    c2w[: np.asarray(cam_to_world_gl).shape[0]] = np.asarray(cam_to_world_gl, dtype=np.float64)
    return rigid_inverse(c2w @ GL_TO_CV)


def intrinsics_from_vertical_fov(fov_y: float, width: int, height: int) -> np.ndarray:
    """[3, 3] float64 ``K`` of a pinhole camera with vertical fov ``fov_y`` (radians), square pixels and
    the principal point at the image centre ``(W / 2, H / 2)``."""
    fy = 0.5 * height / math.tan(0.5 * fov_y)
    return np.array([[fy, 0.0, 0.5 * width], [0.0, fy, 0.5 * height], [0.0, 0.0, 1.0]])


def camera_to_dict(camera: Camera) -> dict:
    """JSON-ready ``{"world_to_cam": [[4x4]], "K": [[3x3]], "width": W, "height": H}`` (floats as float64)."""
    return {"world_to_cam": camera.world_to_cam_numpy().tolist(), "K": camera.K_numpy().tolist(),
            "width": int(camera.width), "height": int(camera.height)}
