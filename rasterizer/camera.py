"""Camera description shared by the rasterizer and everything that renders with it.

Conventions (see rasterizer/CONVENTIONS.md): OpenCV axes (x right, y down, z forward), ``world_to_cam``
4x4, intrinsics ``K`` 3x3 in pixels, pixel centres at (x + 0.5, y + 0.5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

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
