"""Merging keeps each Gaussian of exactly one block; seam pixels are found from back-projected depth."""

import numpy as np
import pytest
import torch

from recon.distributed.merge import concatenate, core_part
from recon.distributed.partition import Block, Partition, RobustBox
from recon.distributed.seams import seam_mask, surface_points
from recon.core.splat_data import SplatData


def two_blocks() -> Partition:
    """Blocks split at ground x = 1 (ground axes = world x, y; up = z)."""
    box = RobustBox(np.array([-4.0, -4.0]), np.array([4.0, 4.0]), (0.0, 2.0))
    blocks = [Block(0, [[None, None], [1.0, None]], [[-4, -4], [1, 4]], [[-5, -5], [2, 5]], ["a"], [], 0),
              Block(1, [[1.0, None], [None, None]], [[1, -4], [4, 4]], [[0, -5], [5, 5]], ["b"], [], 0)]
    return Partition({}, np.array([0, 0, 1.0]), np.array([1.0, 0, 0]), np.array([0, 1.0, 0]), box, {}, blocks)


def splats(means: np.ndarray) -> SplatData:
    n = len(means)
    return SplatData(means, np.tile([1.0, 0, 0, 0], (n, 1)), np.zeros((n, 3)), np.zeros(n), np.zeros((n, 1, 3)))


def test_core_parts_partition_the_gaussians_half_open():
    part = two_blocks()
    means = np.array([[0.5, 0, 0], [1.0, 3, 0], [0.999, -2, 5], [7.0, 9, 1], [-30.0, 0, 0]])
    a, b = core_part(part, 0, splats(means)), core_part(part, 1, splats(means))
    np.testing.assert_array_equal(a.means[:, 0], np.float32([0.5, 0.999, -30.0]))
    np.testing.assert_array_equal(b.means[:, 0], [1.0, 7.0])  # x = 1 belongs to the block starting there
    both = concatenate([a, b])
    assert len(both.means) == len(means)


def test_seam_mask_marks_points_near_inner_borders_only():
    part = two_blocks()
    pts = np.array([[0.95, 0, 0], [1.04, 2, 3], [0.5, 0, 0], [3.9, 0, 0], [-3.99, 0, 0]])
    np.testing.assert_array_equal(seam_mask(part, pts, 0.1), [True, True, False, False, False])


def test_surface_points_invert_the_projection():
    K = torch.tensor([[40.0, 0, 16], [0, 40, 12], [0, 0, 1]], dtype=torch.float64)
    R = torch.tensor([[0.0, -1, 0], [0, 0, -1], [1, 0, 0]], dtype=torch.float64)  # looks along +x, z up
    w2c = torch.eye(4, dtype=torch.float64)
    w2c[:3, :3] = R
    w2c[:3, 3] = -R @ torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    depth = torch.full((24, 32), 3.0, dtype=torch.float64)
    pts = surface_points(depth, K, w2c)
    cam = pts.reshape(-1, 3) @ R.T + w2c[:3, 3]
    uv = cam @ K.T
    uv = uv[:, :2] / uv[:, 2:]
    v, u = torch.meshgrid(torch.arange(24.0) + 0.5, torch.arange(32.0) + 0.5, indexing="ij")
    torch.testing.assert_close(uv, torch.stack([u.reshape(-1), v.reshape(-1)], 1).double(), rtol=0, atol=1e-9)
    torch.testing.assert_close(cam[:, 2], torch.full((24 * 32,), 3.0, dtype=torch.float64), rtol=0, atol=1e-12)


def test_seams_against_a_whole_scene_model():
    from recon.distributed.merge import seams_against

    merged = {"seam_psnr": 22.0, "interior_psnr": 23.5, "seam_pixels": 10, "interior_pixels": 40, "width": 0.5}
    reference = {"seam_psnr": 21.0, "interior_psnr": 22.25, "seam_pixels": 12, "interior_pixels": 38, "width": 0.5}
    out = seams_against(merged, reference)
    assert out["gap_change"] == pytest.approx(-0.25)  # (22 - 23.5) - (21 - 22.25)
    assert out["reference"] == {"seam_psnr": 21.0, "interior_psnr": 22.25}
    assert out["seam_psnr"] == 22.0 and out["seam_pixels"] == 10
    assert seams_against(merged, {**reference, "seam_psnr": None})["gap_change"] is None
