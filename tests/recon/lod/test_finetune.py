"""Fine-tuning the merged levels (recon/lod/finetune.py)."""

import numpy as np
import pytest
import torch

from recon.lod.cut import select_cut, select_cut_reference
from recon.lod.finetune import FinetuneConfig, finetune_levels, level_camera
from recon.lod.hierarchy import build_hierarchy

from .scenes import camera_at, small_model


def _orbit(n=4, distance=4.0):
    cams = []
    for k in range(n):
        a = 2 * np.pi * k / n
        eye = np.array([distance * np.sin(a), 0.3, -distance * np.cos(a)])
        fwd = -eye / np.linalg.norm(eye)
        right = np.cross([0.0, 1.0, 0.0], fwd)
        right /= np.linalg.norm(right)
        w2c = np.eye(4)
        w2c[:3, :3] = np.stack([right, np.cross(fwd, right), fwd])
        w2c[:3, 3] = -w2c[:3, :3] @ eye
        cams.append(camera_at(1.0).__class__.from_arrays(w2c, [[60, 0, 32], [0, 60, 24], [0, 0, 1]], 64, 48,
                                                         dtype=torch.float32))
    return cams


def test_finetuning_raises_each_level_and_keeps_the_tree_valid():
    data = small_model(400, seed=3)
    h = build_hierarchy(data, depth=6, opacity_rule="coverage")
    leaves_before = h.nodes.subset(np.arange(h.num_leaves)).copy()
    results = finetune_levels(h, _orbit(), FinetuneConfig(steps=30, pixels=3.0, cameras=4, lr_scale=1.0))
    assert len(results) >= 3
    gains = np.array([r.psnr_after - r.psnr_before for r in results])
    assert np.median(gains) > 0.5, gains  # the levels move towards the full model's renders
    assert all(r.kept == (r.psnr_after > r.psnr_before) for r in results)
    assert sum(r.tuned for r in results) == h.num_nodes - h.num_leaves  # every merged node tuned once
    # the model itself is untouched; spheres still hold their children's, so the cut stays exact
    np.testing.assert_array_equal(h.nodes.means[: h.num_leaves], leaves_before.means)
    for node in range(h.num_leaves, h.num_nodes):
        kids = h.children[h.child_start[node - h.num_leaves]:h.child_start[node - h.num_leaves + 1]]
        gap = np.linalg.norm(h.nodes.means[kids].astype(np.float64) - h.nodes.means[node], axis=1) + h.radius[kids]
        assert (gap <= h.radius[node] * (1 + 1e-5) + 1e-7).all()
    cam = camera_at(3.0)
    np.testing.assert_array_equal(np.sort(select_cut(h, cam, budget=60)), select_cut_reference(h, cam, budget=60))


def test_level_camera_scale_and_bad_input():
    cam = _orbit(1)[0]
    small = level_camera(cam, radius=0.5, depth=4.0, pixels=2.0, max_side=256)  # 60 * 0.5 / 4 = 7.5 px -> 2 px
    assert small.width == round(64 * max(2.0 / 7.5, 16 / 48))
    assert level_camera(cam, radius=1e-4, depth=4.0, pixels=2.0, max_side=256) is cam
    h = build_hierarchy(small_model(50), depth=3)
    with pytest.raises(ValueError, match="camera"):
        finetune_levels(h, [])
    with pytest.raises(ValueError, match="steps"):
        finetune_levels(h, [cam], FinetuneConfig(steps=0))
