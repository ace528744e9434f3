"""Self-distillation of budgeted cuts (recon/lod/distill.py) and the sphere refresh it relies on."""

import numpy as np
import pytest

from recon.lod.cut import select_cut, select_cut_reference
from recon.lod.distill import DistillConfig, distill_cuts
from recon.lod.finetune import refresh_radius
from recon.lod.hierarchy import build_hierarchy, cut_splats

from .scenes import camera_at, render, small_model
from .test_finetune import _orbit


def _spheres_nested(h) -> bool:
    """Every child's bounding sphere inside its parent's."""
    for node in range(h.num_leaves, h.num_nodes):
        kids = h.children[h.child_start[node - h.num_leaves]:h.child_start[node - h.num_leaves + 1]]
        gap = np.linalg.norm(h.nodes.means[kids].astype(np.float64) - h.nodes.means[node], axis=1) + h.radius[kids]
        if not (gap <= h.radius[node] * (1 + 1e-5) + 1e-7).all():
            return False
    return True


def _mse(a, b) -> float:
    return float(((a.clamp(0, 1) - b.clamp(0, 1)) ** 2).mean())


def test_distillation_brings_the_cuts_closer_to_the_full_model():
    data = small_model(400, seed=3)
    h = build_hierarchy(data, depth=6, opacity_rule="mass")
    cams = _orbit(6)
    budget = 60
    full = [render(data, c) for c in cams]
    before = [_mse(render(cut_splats(h, select_cut(h, c, budget=budget)), c), f)
              for c, f in zip(cams, full)]
    leaves = h.nodes.means[: h.num_leaves].copy()
    result = distill_cuts(h, cams, budget, DistillConfig(steps=60, cameras=6, lr_scale=1.0))
    assert result.kept and result.tuned > 0 and result.psnr_after > result.psnr_before + 1.0, result
    # measured independently: the tuned hierarchy's own cuts (chosen again) render closer to the full model
    after = [_mse(render(cut_splats(h, select_cut(h, c, budget=budget)), c), f)
             for c, f in zip(cams, full)]
    # measured 0.73 x with the defaults since stop 66 (merge spread 0.3, metric error_area), below 0.7 x before
    assert np.mean(after) < 0.8 * np.mean(before), (before, after)
    np.testing.assert_array_equal(h.nodes.means[: h.num_leaves], leaves)  # the model is untouched
    assert _spheres_nested(h)
    cam = camera_at(3.0)
    np.testing.assert_array_equal(np.sort(select_cut(h, cam, budget=50)),
                                  select_cut_reference(h, cam, budget=50))


def test_refresh_radius_grows_the_ancestors_of_a_moved_node():
    h = build_hierarchy(small_model(300, seed=5), depth=6)
    deep = h.num_leaves + int(np.argmax(h.depth[h.num_leaves:]))  # a merged node deep in the tree
    assert h.parent[h.parent[deep]] >= 0
    h.nodes.means[deep] += 0.5  # moved away from its children and past its parent's sphere
    refresh_radius(h, [deep])
    assert _spheres_nested(h)


def test_bad_input():
    h = build_hierarchy(small_model(50), depth=3)
    with pytest.raises(ValueError, match="camera"):
        distill_cuts(h, [], 10)
    with pytest.raises(ValueError, match="steps"):
        distill_cuts(h, [camera_at(3.0)], 10, DistillConfig(steps=0))
    with pytest.raises(ValueError, match="budget"):
        distill_cuts(h, [camera_at(3.0)], 0)
