"""The merge rule (recon/lod/merge.py): identities, moment matching, and the render at a distance."""

import numpy as np
import pytest

from recon.core.splat_data import SplatData
from recon.lod.merge import (area_proxy, covariances, merge_groups, merge_splats, moments_of, rotmats_to_quats,
                             quats_scales_of, to_splats, unpack_sym)
from rasterizer.quaternions import quat_to_rotmat_np

from .scenes import camera_at, opacities, render, small_model


def _same_gaussian(a: SplatData, b: SplatData, i: int = 0, j: int = 0):
    np.testing.assert_allclose(a.means[i], b.means[j], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(covariances(a.subset([i])), covariances(b.subset([j])), rtol=1e-4, atol=1e-12)
    np.testing.assert_allclose(opacities(a)[i], opacities(b)[j], rtol=1e-5)
    np.testing.assert_allclose(a.sh[i], b.sh[j], rtol=1e-6, atol=1e-7)


def test_merging_two_identical_gaussians_gives_the_same_gaussian():
    one = small_model(5, seed=3).subset([2])
    pair = one.subset([0, 0])
    _same_gaussian(merge_splats(pair), one)


def test_a_group_of_one_is_its_own_merge():
    data = small_model(7, seed=4)
    m = moments_of(data)
    merged = merge_groups(m, np.arange(7)).drawn
    np.testing.assert_allclose(merged.means, m.means, atol=1e-12)
    np.testing.assert_allclose(merged.covs, m.covs, rtol=1e-12, atol=1e-18)
    np.testing.assert_allclose(merged.opacities, m.opacities, rtol=1e-12)
    np.testing.assert_allclose(merged.sh, m.sh, atol=1e-7)


def test_moments_match_a_weighted_sample_of_the_children():
    """Draw points from the children in proportion to their weights w_i = a_i A_i: their mean and
    covariance are the merged Gaussian's (Monte Carlo, 400k samples)."""
    data = small_model(5, seed=7)
    data.means[:] *= 0.3
    m = moments_of(data)
    w = m.opacities * area_proxy(m.covs)
    rng = np.random.default_rng(0)
    pick = rng.choice(len(data), size=400_000, p=w / w.sum())
    chol = np.linalg.cholesky(unpack_sym(m.covs))
    pts = m.means[pick] + np.einsum("nij,nj->ni", chol[pick], rng.normal(size=(len(pick), 3)))
    merged = merge_groups(m, np.array([0])).drawn
    np.testing.assert_allclose(merged.means[0], pts.mean(axis=0), atol=3e-3)
    np.testing.assert_allclose(unpack_sym(merged.covs)[0], np.cov(pts.T), atol=2e-3, rtol=2e-2)
    # the exact formula, written out
    wn = w / w.sum()
    mu = (wn[:, None] * m.means).sum(0)
    d = m.means - mu
    cov = (wn[:, None, None] * (unpack_sym(m.covs) + d[:, :, None] * d[:, None, :])).sum(0)
    np.testing.assert_allclose(merged.means[0], mu, rtol=1e-12)
    np.testing.assert_allclose(unpack_sym(merged.covs)[0], cov, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(merged.sh[0], (wn[:, None, None] * m.sh).sum(0), rtol=1e-5, atol=1e-6)


def test_opacity_keeps_coverage_of_children_far_apart():
    """Two small discs far apart (merged footprint larger than both): the coverage a_i A_i is kept."""
    data = small_model(2, seed=1)
    data.means[:] = [[-0.5, 0, 0], [0.5, 0, 0]]
    m = moments_of(data)
    merged = merge_groups(m, np.array([0])).drawn
    a = area_proxy(m.covs)
    expect = (m.opacities * a).sum() / area_proxy(merged.covs)[0]
    assert area_proxy(merged.covs)[0] > a.sum()
    np.testing.assert_allclose(merged.opacities[0], expect, rtol=1e-12)


def test_covariance_to_quaternion_and_scales_round_trip():
    data = small_model(200, seed=2)
    covs = covariances(data)
    quats, log_scales = quats_scales_of(covs)
    back = covariances(SplatData(data.means, quats, log_scales, data.logit_opacities, data.sh))
    np.testing.assert_allclose(back, covs, rtol=1e-4, atol=1e-9)  # quats and log-scales stored as float32
    R = quat_to_rotmat_np(quats)
    np.testing.assert_allclose(rotmats_to_quats(R), quats, atol=1e-9)


def _tile(sep: float) -> SplatData:
    """8 flat discs (sigma 0.01) facing the camera on a 4 x 2 grid of spacing ``sep``: a piece of surface."""
    data = small_model(8, seed=0, extent=0.05, sh_degree=0)
    grid = np.stack(np.meshgrid(np.arange(4), np.arange(2)), -1).reshape(-1, 2) * sep
    data.means[:] = 0.0
    data.means[:, :2] = grid - grid.mean(0)
    data.quats[:] = [1, 0, 0, 0]
    data.log_scales[:] = [np.log(0.01), np.log(0.01), np.log(1e-4)]
    data.antialiased = True
    return data


@pytest.mark.parametrize("rule, light", [("coverage", 0.4), ("mass", 0.6)])
def test_a_merged_patch_renders_like_its_children_from_afar(rule, light):
    """The stated error of a node at its distance: a piece of surface spanning under a pixel (0.08 x 0.02 seen
    from 8 at focal 60, anti-aliased) renders within 0.02 of its children at every pixel. The light it sends
    is lower (one Gaussian of opacity <= 1 cannot carry the coverage of overlapping opaque children): at least
    40 % of the children's with the coverage rule, 60 % with the mass rule (measured 46 % and 70 %)."""
    data = _tile(0.02)
    merged = merge_splats(data, rule)
    cam = camera_at(8.0)
    a, b = render(data, cam), render(merged, cam)
    assert float((a - b).abs().max()) < 0.02
    assert light < float(b.sum()) / float(a.sum()) <= 1.0


def test_mass_rule_keeps_coverage_and_unknown_rule_is_refused():
    data = small_model(2, seed=1)
    data.means[:] = [[-0.5, 0, 0], [0.5, 0, 0]]
    m = moments_of(data)
    merged = merge_groups(m, np.array([0]), "mass").drawn
    expect = min(1 - 1e-6, (m.opacities * area_proxy(m.covs)).sum() / area_proxy(merged.covs)[0])
    np.testing.assert_allclose(merged.opacities[0], expect, rtol=1e-12)
    with pytest.raises(ValueError, match="opacity rule"):
        merge_groups(m, np.array([0]), "max")


def test_spread_draws_the_merge_narrower_and_keeps_its_coverage():
    """Spread t: the drawn covariance is S_in + t S_out (the children's own spread plus t x the spread of their
    means), its opacity the rule's for that footprint (mass: the coverage sum a_i A_i kept); the moments matched
    (what coarser merges read) are those without t; identical children and a group of one are unaffected."""
    data = small_model(3, seed=11)
    data.means[:] = [[-0.3, 0.0, 0.1], [0.25, 0.1, 0.0], [0.0, -0.2, 0.05]]
    data.logit_opacities[:] = -2.5  # faint: no opacity reaches 1, so the coverage is kept exactly
    m = moments_of(data)
    t = 0.4
    matched, drawn = merge_groups(m, np.array([0]), "mass", spread=t)
    plain = merge_groups(m, np.array([0]), "mass").matched
    np.testing.assert_allclose(matched.covs, plain.covs, rtol=1e-12)
    np.testing.assert_allclose(matched.opacities, plain.opacities, rtol=1e-12)
    w = m.opacities * area_proxy(m.covs)
    wn = w / w.sum()
    d = m.means - drawn.means[0]
    s_in = (wn[:, None, None] * unpack_sym(m.covs)).sum(0)
    s_out = (wn[:, None, None] * d[:, :, None] * d[:, None, :]).sum(0)
    np.testing.assert_allclose(unpack_sym(drawn.covs)[0], s_in + t * s_out, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(drawn.means, plain.means, rtol=1e-12)
    np.testing.assert_allclose(drawn.opacities[0] * area_proxy(drawn.covs)[0], w.sum(), rtol=1e-10)
    assert area_proxy(drawn.covs)[0] < 0.8 * area_proxy(plain.covs)[0]
    one = small_model(5, seed=3).subset([2])
    _same_gaussian(to_splats(merge_groups(moments_of(one.subset([0, 0])), np.array([0]), spread=t).drawn), one)
    _, alone = merge_groups(m, np.arange(3), "mass", spread=t)
    np.testing.assert_allclose(alone.covs, m.covs, rtol=1e-12, atol=1e-18)
    np.testing.assert_allclose(alone.opacities, m.opacities, rtol=1e-12)
    with pytest.raises(ValueError, match="spread"):
        merge_groups(m, np.array([0]), "mass", spread=0.0)


def test_a_spread_hierarchy_merges_the_moments_matched_not_the_drawn():
    """With t < 1 each node is drawn as the t-merge of its children's *matched* moments (those of all the leaves
    below it, merged in one group), not of its children as drawn: t trims once, it does not compound up the
    levels. Faint Gaussians (mass rule, no opacity at 1): the matched moments are exactly the leaves' mixture."""
    from recon.lod.hierarchy import build_hierarchy

    data = small_model(120, seed=9)
    data.logit_opacities[:] = -3.0
    t = 0.3
    h = build_hierarchy(data, depth=4, spread=t)
    assert h.spread == t
    leaves = moments_of(h.nodes.subset(np.arange(h.num_leaves)))

    def leaves_below(n):
        if n < h.num_leaves:
            return [n]
        k = n - h.num_leaves
        return [leaf for c in h.children[h.child_start[k]:h.child_start[k + 1]] for leaf in leaves_below(c)]

    checked = 0
    for n in range(h.num_leaves, h.num_nodes):
        kids = h.children[h.child_start[n - h.num_leaves]:h.child_start[n - h.num_leaves + 1]]
        if all(c < h.num_leaves for c in kids):
            continue  # children all leaves: nothing to compound
        groups = [leaves_below(c) for c in kids]
        matched = merge_groups(leaves.take(np.concatenate(groups)), np.cumsum([0] + [len(g) for g in groups[:-1]]),
                               "mass").matched
        want = merge_groups(matched, np.array([0]), "mass", spread=t).drawn
        np.testing.assert_allclose(covariances(h.nodes.subset([n]))[0], want.covs[0], rtol=2e-4, atol=1e-8)
        np.testing.assert_allclose(opacities(h.nodes)[n], want.opacities[0], rtol=1e-4)
        checked += 1
    assert checked >= 3
