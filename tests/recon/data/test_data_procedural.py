"""Procedural orbit cameras: OpenCV axes, looking at the target, no roll about the up vector."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from recon.data import orbit_cameras
from recon.data.procedural import look_at_world_to_cam


def project(cam, p):
    p = torch.as_tensor(p, dtype=torch.float64)
    xc = cam.world_to_cam.double()[:3, :3] @ p + cam.world_to_cam.double()[:3, 3]
    uv = cam.K.double() @ xc
    return xc, uv[:2] / uv[2]


@pytest.mark.parametrize("look_at", [(0.0, 0.0, 0.0), (1.0, -2.0, 0.5)])
def test_orbit_cameras_look_at_target(look_at):
    cams = orbit_cameras(12, 3.0, 64, 48, math.radians(60), look_at=look_at, elevation=math.radians(25))
    assert len(cams) == 12
    centers = []
    for cam in cams:
        assert cam.world_to_cam.dtype == torch.float32 and cam.world_to_cam.shape == (4, 4)
        R = cam.world_to_cam.double()[:3, :3]
        torch.testing.assert_close(R @ R.T, torch.eye(3, dtype=torch.float64), atol=1e-6, rtol=0)
        assert torch.linalg.det(R).item() == pytest.approx(1.0, abs=1e-6)
        xc, uv = project(cam, look_at)
        assert xc[2].item() == pytest.approx(3.0, abs=1e-5)  # straight ahead at the orbit radius
        np.testing.assert_allclose(uv.numpy(), [32.0, 24.0], atol=1e-4)
        centers.append(cam.center.double().numpy())
    centers = np.array(centers)
    np.testing.assert_allclose(np.linalg.norm(centers - look_at, axis=1), 3.0, atol=1e-5)
    # elevation 25 deg above the plane perpendicular to up = (0, -1, 0): centres have y = -3 sin(25)
    np.testing.assert_allclose(centers[:, 1] - look_at[1], -3.0 * math.sin(math.radians(25)), atol=1e-5)


def test_up_is_up_in_the_image_and_no_roll():
    cams = orbit_cameras(8, 4.0, 64, 64, math.radians(50), elevation=0.0)
    for cam in cams:
        _, uv_up = project(cam, (0.0, -0.5, 0.0))  # a point above the target (up = -y)
        assert uv_up[1] < 32.0 and abs(uv_up[0] - 32.0) < 1e-4  # straight up in the image
        # camera x axis is horizontal (perpendicular to up): no roll
        assert abs(cam.world_to_cam[0, 1].item()) < 1e-6


def test_focal_from_fov():
    cam = orbit_cameras(1, 2.0, 100, 50, math.radians(90))[0]
    assert cam.K[0, 0].item() == pytest.approx(50.0, rel=1e-5)
    assert cam.K[1, 1].item() == pytest.approx(50.0, rel=1e-5)


def test_look_at_errors():
    with pytest.raises(ValueError):
        look_at_world_to_cam(np.zeros(3), np.zeros(3), np.array([0, -1.0, 0]))
    with pytest.raises(ValueError):
        orbit_cameras(4, 2.0, 32, 32, 1.0, elevation=math.pi / 2)
