"""The reference backend against gsplat's pure-PyTorch functions (an outside oracle, CPU-safe)."""

import pytest
import torch

from rasterizer.reference import covariance_from_quat_scale, eval_sh, project_gaussians
from rasterizer.tiles import TileGrid, intersect_tiles

from .scenes import random_scene

gs = pytest.importorskip("gsplat.cuda._torch_impl", reason="gsplat not installed")


def test_covariance_matches_gsplat():
    p, _, _ = random_scene(n=100)
    ours = covariance_from_quat_scale(p["quats"], p["scales"])
    theirs, _ = gs._quat_scale_to_covar_preci(p["quats"], p["scales"], compute_preci=False)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("antialiased", [False, True])
def test_projection_matches_gsplat(antialiased):
    # spread 2.5 puts some Gaussians outside the view, exercising the Jacobian clamp and culling
    p, viewmats, Ks = random_scene(n=400, n_cams=3, spread=2.5)
    covars = covariance_from_quat_scale(p["quats"], p["scales"])
    ours = project_gaussians(p["means"], covars, viewmats, Ks, 64, 48, antialiased=antialiased)
    radii, means2d, depths, conics, comp = gs._fully_fused_projection(
        p["means"], covars, viewmats, Ks, 64, 48, calc_compensations=antialiased)
    assert torch.equal(ours.radii, radii.to(torch.int32))
    assert (radii == 0).any() and (radii > 0).any(), "scene should have both culled and visible Gaussians"
    # gsplat's PyTorch version computes culled pairs too; ours zeroes them (as gsplat's CUDA kernel skips them)
    vis = (radii > 0).all(-1)
    torch.testing.assert_close(ours.means2d[vis], means2d[vis], rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(ours.conics[vis], conics[vis], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours.depths[vis], depths[vis])
    if antialiased:
        torch.testing.assert_close(ours.compensations[vis], comp[vis])
    for t in (ours.means2d, ours.conics):
        assert float(t.detach()[~vis].abs().max()) == 0.0


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_sh_matches_gsplat(degree):
    g = torch.Generator().manual_seed(degree)
    dirs = torch.randn(500, 3, generator=g, dtype=torch.float64)
    coeffs = torch.randn(500, 16, 3, generator=g, dtype=torch.float64)
    torch.testing.assert_close(eval_sh(degree, dirs, coeffs), gs._spherical_harmonics(degree, dirs, coeffs))


def test_tile_intersection_matches_gsplat():
    p, viewmats, Ks = random_scene(n=60, n_cams=2, width=70, height=50, spread=1.5)
    covars = covariance_from_quat_scale(p["quats"], p["scales"])
    proj = project_gaussians(p["means"], covars, viewmats, Ks, 70, 50)
    grid = TileGrid.for_image(70, 50)
    ours = intersect_tiles(proj.means2d, proj.radii, proj.depths.float(), grid)
    tiles_per_gauss, isect_ids, flatten_ids = gs._isect_tiles(
        proj.means2d.float(), proj.radii, proj.depths.float(), 16, grid.tiles_x, grid.tiles_y)
    offsets = gs._isect_offset_encode(isect_ids, 2, grid.tiles_x, grid.tiles_y)
    assert torch.equal(ours.tiles_per_gauss, tiles_per_gauss)
    assert torch.equal(ours.flatten_ids, flatten_ids.to(torch.int64))
    assert torch.equal(ours.offsets, offsets.to(torch.int64))
    # same depth bits in the low word of the keys
    assert torch.equal(ours.isect_ids & 0xFFFFFFFF, isect_ids & 0xFFFFFFFF)
