"""The hierarchy (recon/lod/hierarchy.py) and the cut (recon/lod/cut.py)."""

import numpy as np
import pytest
import torch

from recon.lod.cut import select_cut
from recon.lod.flat import DEFAULT_METRIC
from recon.lod.hierarchy import build_hierarchy, cut_splats
from recon.lod.merge import merge_groups, moments_of

from .scenes import camera_at, render, small_model


def _leaf_cover(h, cut):
    """[N] how many nodes of ``cut`` lie on each leaf's path to the root."""
    in_cut = np.zeros(h.num_nodes, dtype=np.int64)
    in_cut[cut] = 1
    cover = np.zeros(h.num_leaves, dtype=np.int64)
    node = np.arange(h.num_leaves)
    alive = np.ones(h.num_leaves, bool)
    while alive.any():
        cover[alive] += in_cut[node[alive]]
        nxt = h.parent[node]
        alive &= nxt >= 0
        node = np.where(alive, nxt, 0)
    return cover


@pytest.fixture(scope="module")
def model_and_tree():
    data = small_model(1500, seed=5)
    return data, build_hierarchy(data, depth=8)


def test_structure(model_and_tree):
    data, h = model_and_tree
    assert h.num_leaves == len(data)
    assert h.parent[h.root] == -1 and (h.parent[: h.root] >= 0).all()
    assert (h.parent[: h.root] > np.arange(h.root)).all()  # children before parents
    assert (h.child_counts()[h.num_leaves:] >= 2).all()  # no single-child chains
    np.testing.assert_array_equal(np.sort(h.leaf_ids), np.arange(len(data)))
    np.testing.assert_array_equal(h.nodes.means[: h.num_leaves], data.means[h.leaf_ids])
    # with spread 1 every interior node is the merge of its children (a spread t < 1 draws the nodes narrower:
    # test_merge.py); children's spheres lie inside the parent's
    h1 = build_hierarchy(data, depth=8, spread=1.0)
    mom = moments_of(h1.nodes)
    for node in range(h.num_leaves, h.num_nodes, 37):
        kids = h.children[h.child_start[node - h.num_leaves]:h.child_start[node - h.num_leaves + 1]]
        merged = merge_groups(mom.take(kids), np.array([0]), h1.opacity_rule).drawn
        np.testing.assert_allclose(h1.nodes.means[node], merged.means[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(mom.covs[node], merged.covs[0], rtol=1e-3, atol=1e-9)
        np.testing.assert_allclose(mom.opacities[node], merged.opacities[0], rtol=1e-4)
        gap = np.linalg.norm(h.nodes.means[kids] - h.nodes.means[node], axis=1) + h.radius[kids]
        assert (gap <= h.radius[node] * (1 + 1e-5)).all()
        assert (h.depth[kids] > h.depth[node]).all()


def test_level_cuts_cover_every_leaf_once(model_and_tree):
    _, h = model_and_tree
    sizes = []
    for depth in range(0, h.octree_depth + 2):
        cut = h.level_cut(depth)
        assert (_leaf_cover(h, cut) == 1).all()
        sizes.append(len(cut))
    assert sizes[0] == 1 and sizes[-1] == h.num_leaves
    assert sizes == sorted(sizes)


@pytest.mark.parametrize("budget", [1, 10, 150, 700, None])
def test_cut_covers_every_leaf_once_within_budget(model_and_tree, budget):
    _, h = model_and_tree
    cut = select_cut(h, camera_at(3.0), budget=budget)
    assert (_leaf_cover(h, cut) == 1).all()
    assert len(np.unique(cut)) == len(cut)
    if budget is not None:
        assert len(cut) <= budget
        assert len(cut) > budget - h.child_counts().max()  # it stops at the first split that does not fit
    else:
        assert len(cut) > 0.5 * h.num_leaves


def test_cut_is_fine_near_and_coarse_far(model_and_tree):
    _, h = model_and_tree
    near, far = select_cut(h, camera_at(1.2), pixels=2.0), select_cut(h, camera_at(30.0), pixels=2.0)
    assert len(near) > 4 * len(far)
    # within one cut, nodes near the camera are finer (smaller) than nodes far from it
    cut = select_cut(h, camera_at(1.2), budget=300)
    z = h.nodes.means[cut, 2]
    near_half = z < np.median(z)
    assert h.radius[cut][near_half].mean() < h.radius[cut][~near_half].mean()


def test_pixel_threshold_bounds_the_projected_size(model_and_tree):
    _, h = model_and_tree
    cam = camera_at(4.0)
    cut = select_cut(h, cam, pixels=3.0)
    interior = cut[cut >= h.num_leaves]
    p = h.nodes.means[interior].astype(np.float64) + [0.0, 0.0, 4.0]
    d = np.linalg.norm(p, axis=1)
    r = h.radius[interior]
    size = 60.0 * r / np.maximum(d - r, 0.01)
    in_view = (np.abs(p[:, 0] / p[:, 2]) < 32 / 60 + r / d * 2) & (np.abs(p[:, 1] / p[:, 2]) < 24 / 60 + r / d * 2)
    assert (size[in_view] <= 3.0 * (1 + 1e-4)).all()


def test_a_one_level_hierarchy_renders_the_model_unchanged():
    """All leaves (the cut without limits, every Gaussian in view) render exactly as the model does."""
    data = small_model(300, seed=9)
    h = build_hierarchy(data, depth=1)
    cam = camera_at(6.0)
    cut = select_cut(h, cam)
    assert sorted(cut.tolist()) == list(range(len(data)))
    torch.testing.assert_close(render(cut_splats(h, cut), cam), render(data, cam), rtol=0, atol=1e-6)


def test_one_gaussian_and_bad_input():
    data = small_model(1)
    h = build_hierarchy(data)
    assert h.num_nodes == 1
    np.testing.assert_array_equal(select_cut(h, camera_at(3.0), budget=5), [0])
    with pytest.raises(ValueError, match="no Gaussians"):
        build_hierarchy(data.subset(np.zeros(1, bool)))
    with pytest.raises(ValueError, match="depth"):
        build_hierarchy(data, depth=30)


def test_flat_tree_is_breadth_first_with_contiguous_children(model_and_tree):
    from recon.lod.flat import flatten

    _, h = model_and_tree
    flat = flatten(h, "opacity")
    assert flat.node[0] == h.root
    np.testing.assert_array_equal(np.sort(flat.node), np.arange(h.num_nodes))
    pos = flat.position
    for p in range(0, h.num_nodes, 7):
        n = flat.node[p]
        if n < h.num_leaves:
            assert flat.kids[p] == 0 and flat.first[p] == -1
            continue
        kids = h.children[h.child_start[n - h.num_leaves]:h.child_start[n - h.num_leaves + 1]]
        np.testing.assert_array_equal(flat.node[flat.first[p]:flat.first[p] + flat.kids[p]], kids)
        assert (pos[kids] > p).all()
        assert (flat.weight[flat.first[p]:flat.first[p] + flat.kids[p]] <= flat.weight[p]).all()
    np.testing.assert_array_equal(flat.packed[:, :4], flat.spheres)
    np.testing.assert_array_equal(flat.packed_int[:, 5], flat.first)


@pytest.mark.parametrize("metric", ["size", "opacity", "error", "error_area"])
def test_fast_cut_equals_the_plain_reference(model_and_tree, metric):
    """The scan-select-emit cut gives exactly the heap's largest-first cut, for budgets that bind or not, a
    pixel limit, cameras near, far and inside the root's sphere, one after another (each call starts from the
    previous call's bound)."""
    from recon.lod.cut import select_cut_reference

    _, h = model_and_tree
    for distance in (3.0, 0.2, 30.0, 1.2):
        for budget in (1, 10, 150, 700, 1499, None):
            for pixels in (None, 2.0):
                cam = camera_at(distance)
                fast = np.sort(select_cut(h, cam, budget=budget, pixels=pixels, metric=metric))
                ref = select_cut_reference(h, cam, budget=budget, pixels=pixels, metric=metric)
                np.testing.assert_array_equal(fast, ref, err_msg=f"{distance=} {budget=} {pixels=}")


def test_cut_with_a_stale_bound_and_a_bad_metric(model_and_tree):
    """A previous bound far too low or far too high (the camera jumped) still gives the reference's cut."""
    from recon.lod.cut import select_cut_reference

    _, h = model_and_tree
    cam = camera_at(2.0)
    want = select_cut_reference(h, cam, budget=300)
    for stale in (1e-9, 1e9):
        select_cut(h, cam, budget=300)
        h._cut_state.last[(DEFAULT_METRIC, 300)] = stale  # the key the default cut reads
        np.testing.assert_array_equal(np.sort(select_cut(h, cam, budget=300)), want)
    with pytest.raises(ValueError, match="cut metric"):
        select_cut(h, cam, budget=300, metric="nope")


def test_colour_spread_is_the_weighted_spread_of_the_leaves_below():
    from recon.lod.flat import SH_C0, colour_spread
    from recon.lod.hierarchy import build_hierarchy

    from .scenes import small_model

    h = build_hierarchy(small_model(200, seed=7), depth=5)
    spread = colour_spread(h)
    s = np.exp(h.nodes.log_scales[: h.num_leaves].astype(np.float64))
    w = np.sqrt((s[:, 0] * s[:, 1]) ** 2 + (s[:, 1] * s[:, 2]) ** 2 + (s[:, 0] * s[:, 2]) ** 2) / (
        1 + np.exp(-h.nodes.logit_opacities[: h.num_leaves].astype(np.float64)))
    c = SH_C0 * h.nodes.sh[: h.num_leaves, 0].astype(np.float64)
    below = np.zeros((h.num_nodes, h.num_leaves), dtype=bool)  # below[n, l]: leaf l under node n
    for leaf in range(h.num_leaves):
        n = leaf
        while n >= 0:
            below[n, leaf] = True
            n = h.parent[n]
    for n in range(h.num_leaves, h.num_nodes):
        m = below[n]
        mean = (w[m, None] * c[m]).sum(0) / w[m].sum()
        want = np.sqrt((w[m] * ((c[m] - mean) ** 2).sum(1)).sum() / w[m].sum())
        assert spread[n] == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert (spread[: h.num_leaves] == 0).all() and spread[h.root] > 0.05


def test_the_measured_best_settings_are_the_defaults(model_and_tree):
    """docs/lod.md, Targets: the `mass` rule, the `error_area` metric and the distillation measured best; the merge
    spread 0.3 trades a little PSNR for render time (colmap_bird 20.7 % at -1.16 dB against 22.2 % at -1.05 dB with
    t = 1; on the city within the noise): what a user gets without flags in the hierarchy, select_cut, the
    distillation, the export and bench_lod."""
    from recon.commands.export import ExportConfig
    from recon.lod.distill import DistillConfig

    data, h = model_and_tree
    assert h.opacity_rule == "mass" and build_hierarchy(data.subset(np.arange(50)), depth=4).opacity_rule == "mass"
    assert h.spread == 0.3
    cam = camera_at(1.2)
    default = np.sort(select_cut(h, cam, budget=150))
    np.testing.assert_array_equal(default, np.sort(select_cut(h, cam, budget=150, metric="error_area")))
    assert not np.array_equal(default, np.sort(select_cut(h, cam, budget=150, metric="size")))
    assert DistillConfig().metric == "error_area" and DistillConfig().steps > 0
    assert ExportConfig(input="x", out="y").lod_opacity == "mass"
    assert ExportConfig(input="x", out="y").lod_distill_steps == DistillConfig().steps


def test_area_growth_is_the_childrens_alpha_area_over_the_nodes():
    """The `error_area` metric's divisor: sum over the children of A(S) ln(255 a) over the node's own (recon/lod/
    flat.py). Two discs far apart: their merge's moment-matched tail covers more than they do (growth < 1, the
    split takes pixel work away); a disc and its copy: the merge is the same disc at twice the opacity (mass rule),
    so splitting it adds a second layer (growth > 1). `error_area` weighs a node as `error` over its growth."""
    from recon.lod.flat import area_growth, footprint_area, split_weights

    pair = small_model(2, seed=1)
    pair.logit_opacities[:] = -1.0
    apart = pair.copy()
    apart.means[:] = [[-0.5, 0, 0], [0.5, 0, 0]]
    stacked = pair.subset([0, 0])
    for data, low, high in ((apart, 0.0, 0.6), (stacked, 1.3, 2.0)):
        h = build_hierarchy(data, depth=4, spread=1.0)  # the merge's moment-matched tail drawn whole
        area = footprint_area(h)
        a = 1 / (1 + np.exp(-h.nodes.logit_opacities.astype(np.float64)))
        s = np.exp(h.nodes.log_scales.astype(np.float64))
        want = np.sqrt((s[:, 0] * s[:, 1]) ** 2 + (s[:, 1] * s[:, 2]) ** 2 + (s[:, 0] * s[:, 2]) ** 2) * np.log(255 * a)
        np.testing.assert_allclose(area, want, rtol=1e-12)
        growth = area_growth(h)
        assert growth[h.root] == pytest.approx(area[:2].sum() / area[h.root], rel=1e-12)
        assert low < growth[h.root] < high and (growth[:2] == 1).all()
        np.testing.assert_allclose(split_weights(h, "error_area"),
                                   (split_weights(h, "error") / growth).astype(np.float32), rtol=1e-6)
