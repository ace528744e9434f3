"""A pose for any time in [0, 1] (recon.avatar.pose_time): exact at the captured poses, the slerp (shortest
arc) and lerp between them, one-line errors outside [0, 1] or without poses."""

from __future__ import annotations

import math

import pytest
import torch

from recon.avatar.pose_time import pose_at_time, slerp
from recon.avatar.quaternions import axis_angle, multiply, to_rotmat
from recon.core.errors import UsageError


def z_rot(angle: float) -> torch.Tensor:
    return axis_angle(torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64), torch.tensor(angle, dtype=torch.float64))


def poses(P: int = 5, J: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """[P, J, 4] random unit rotations and [P, 3] translations (float64)."""
    g = torch.Generator().manual_seed(seed)
    rot = torch.randn(P, J, 4, generator=g, dtype=torch.float64)
    return rot / rot.norm(dim=-1, keepdim=True), torch.randn(P, 3, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("P", [1, 2, 5, 50])
def test_exact_at_every_captured_pose(P):
    rot, trans = poses(P)
    for k in range(P):
        r, t = pose_at_time(rot, trans, k / max(P - 1, 1))
        assert torch.equal(r, rot[k]) and torch.equal(t, trans[k])


def test_midpoint_is_the_half_angle_rotation_and_the_mean_translation():
    rot = torch.stack([z_rot(0.2), z_rot(1.4)])[:, None]  # [2, 1, 4]: one joint about z
    trans = torch.tensor([[0.0, 0.0, 0.0], [2.0, -4.0, 1.0]], dtype=torch.float64)
    r, t = pose_at_time(rot, trans, 0.5)
    torch.testing.assert_close(r[0], z_rot(0.8))
    torch.testing.assert_close(t, torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
    r, _ = pose_at_time(rot, None, 0.25)  # a quarter: 0.2 + 0.25 * 1.2
    torch.testing.assert_close(r[0], z_rot(0.5))


def test_between_poses_k_and_k_plus_1_on_the_shortest_arc():
    rot, trans = poses(4)
    rot[2] = -rot[2]  # the same rotations, written with the other sign: must not take the long way round
    r, t = pose_at_time(rot, trans, (1 + 0.3) / 3)  # 30 % of the way from pose 1 to pose 2
    torch.testing.assert_close(r, slerp(rot[1], rot[2], 0.3))
    torch.testing.assert_close(t, 0.7 * trans[1] + 0.3 * trans[2])
    # the angle from pose 1 is 30 % of the (shortest) angle between poses 1 and 2, per joint
    angle = lambda a, b: 2 * torch.acos((a * b).sum(-1).abs().clamp(max=1))  # noqa: E731
    torch.testing.assert_close(angle(rot[1], r), 0.3 * angle(rot[1], rot[2]))
    assert (angle(rot[1], rot[2]) < math.pi + 1e-9).all()


def test_slerp_of_nearly_equal_rotations_is_finite_and_a_rotation():
    a = z_rot(0.3)
    b = multiply(a, z_rot(1e-7))
    q = slerp(a, b, 0.5)
    assert torch.isfinite(q).all()
    torch.testing.assert_close(to_rotmat(q), to_rotmat(a))


@pytest.mark.parametrize("t", [-0.01, 1.01, float("nan")])
def test_time_outside_0_1_is_one_line(t):
    rot, trans = poses(3)
    with pytest.raises(UsageError, match=r"outside \[0, 1\]") as err:
        pose_at_time(rot, trans, t)
    assert "\n" not in str(err.value)


def test_no_poses_is_one_line():
    with pytest.raises(UsageError, match="no captured poses") as err:
        pose_at_time(torch.zeros(0, 3, 4), torch.zeros(0, 3), 0.0)
    assert "\n" not in str(err.value)
