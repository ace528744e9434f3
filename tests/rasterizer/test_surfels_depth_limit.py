"""Per-pixel depth limits for surfels (``rasterize_surfels(..., depth_limit=[C, H, W])``) and the final
transmittance: what an inserted mesh in front of / behind a 2DGS scene needs (issue 21). The cpu backend
against the reference (float64 1e-9, forward and backward), and closed-form single surfels."""

import math

import pytest
import torch

from rasterizer import RasterizerInputError, rasterize_surfels
from rasterizer.surfels.composite import limit_depths, ray_splat_uv

from .test_surfels import OUTPUTS, one_surfel, surfel_scene
from .test_surfels_cpu import _assert_match, _weights

PARAMS = ("means", "quats", "scales", "opacities", "colors")


def render_all(backend, p, viewmats, Ks, width, height, weights, **kw):
    """Render with fresh leaves, backpropagate sum(weight * output) over every output and the
    transmittance; returns (outputs incl. "transmittance", gradients incl. means2d / ray_transforms, meta)."""
    leaves = {k: p[k].detach().clone().requires_grad_(True) for k in PARAMS}
    out = rasterize_surfels(*(leaves[k] for k in PARAMS), viewmats, Ks, width, height, backend=backend, **kw)
    T = out.meta.transmittance
    loss = sum((w * getattr(out, k)).sum() for w, k in zip(weights, OUTPUTS)) + (weights[-1] * T).sum()
    loss.backward()
    grads = {k: leaves[k].grad for k in PARAMS}
    grads["means2d"] = out.meta.means2d.grad
    grads["ray_transforms"] = out.meta.ray_transforms.grad
    outs = {k: getattr(out, k).detach() for k in OUTPUTS}
    outs["transmittance"] = T.detach()
    return outs, grads, out.meta


def cutting_limit(C, width, height, dtype=torch.float64):
    """A limit through the surfel scenes (centres at depths 2.5..5, tilted discs): a ramp from 2.8 to 4.8
    across the image, tilted per camera, +inf in the first rows."""
    x = torch.arange(width, dtype=torch.float64) / width
    y = torch.arange(height, dtype=torch.float64) / height
    limit = 2.8 + 2.0 * x[None, None, :] + 0.3 * y[None, :, None] * torch.arange(1, C + 1)[:, None, None]
    limit[:, :3] = math.inf
    return limit.to(dtype)


@pytest.mark.parametrize("surfel_depth", ["centre", "intersection"])
@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense"])
def test_cpu_matches_reference_with_a_limit_through_the_scene(surfel_depth, dense):
    p, viewmats, Ks = surfel_scene(n=150, width=45, height=35, n_cams=2, seed=21)
    if dense:  # opaque, large surfels: pixels reach T < 1e-4 and stop early
        p["opacities"] = torch.full_like(p["opacities"].detach(), 0.97)
        p["scales"] = p["scales"].detach() * 3
    limit = cutting_limit(2, 45, 35)
    w = _weights(2, 35, 45)
    ref = render_all("reference", p, viewmats, Ks, 45, 35, w, surfel_depth=surfel_depth, depth_limit=limit)
    cpu = render_all("cpu", p, viewmats, Ks, 45, 35, w, surfel_depth=surfel_depth, depth_limit=limit)
    free = render_all("reference", p, viewmats, Ks, 45, 35, w, surfel_depth=surfel_depth)
    cut = (ref[0]["transmittance"] - free[0]["transmittance"]).abs() > 1e-3  # pixels the limit changed
    assert 0.1 < cut.float().mean() < 0.9, "the limit should cut through the scene"
    _assert_match(cpu, ref)
    torch.testing.assert_close(ref[0]["transmittance"], 1.0 - ref[0]["alpha"], rtol=0, atol=1e-12)
    torch.testing.assert_close(cpu[0]["transmittance"], 1.0 - cpu[0]["alpha"], rtol=0, atol=1e-12)


def test_cpu_float32_close_to_reference_with_a_limit():
    p, viewmats, Ks = surfel_scene(n=150, width=45, height=35, n_cams=2, seed=5, dtype=torch.float32)
    limit = cutting_limit(2, 45, 35, torch.float32)
    w = [x.float() for x in _weights(2, 35, 45)]
    ref = render_all("reference", p, viewmats, Ks, 45, 35, w, surfel_depth="intersection", depth_limit=limit)
    cpu = render_all("cpu", p, viewmats, Ks, 45, 35, w, surfel_depth="intersection", depth_limit=limit)
    for name in ("render", "alpha", "transmittance"):
        torch.testing.assert_close(cpu[0][name], ref[0][name], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_infinite_limit_is_no_limit(backend):
    p, viewmats, Ks = surfel_scene(n=120, width=40, height=32, n_cams=2, seed=3)
    w = _weights(2, 32, 40)
    free = render_all(backend, p, viewmats, Ks, 40, 32, w)
    inf = render_all(backend, p, viewmats, Ks, 40, 32, w, depth_limit=torch.full((2, 32, 40), math.inf))
    for name in free[0]:
        assert torch.equal(free[0][name], inf[0][name]), name
    for name in free[1]:
        assert torch.equal(free[1][name], inf[1][name]), name


def tilted_surfel():
    """One surfel tilted 50 degrees about x at z = 3: its intersection depth varies across the image."""
    half = math.radians(50) / 2
    return one_surfel([math.cos(half), math.sin(half), 0.0, 0.0], scales=(0.3, 0.25))


def surfel_hit_depths(p, viewmats, Ks, size):
    """[H, W] the intersection depth of the single surfel at each pixel centre (reference projection)."""
    from rasterizer.surfels import project_surfels

    proj = project_surfels(p["means"], p["quats"], p["scales"], viewmats, Ks, size, size)
    ys, xs = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    centres = torch.stack([xs.reshape(-1), ys.reshape(-1)], -1).double() + 0.5
    KWH = proj.ray_transforms[0].detach()
    u, v, _ = ray_splat_uv(centres, KWH)
    zl = limit_depths(u, v, torch.ones_like(u, dtype=torch.bool), KWH, proj.depths[0].detach())
    return zl.reshape(size, size)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_surfel_behind_the_limit_gives_no_colour_and_no_gradient(backend):
    p, viewmats, Ks, size = tilted_surfel()
    w = _weights(1, size, size)
    free = render_all(backend, p, viewmats, Ks, size, size, w)
    assert free[0]["alpha"].max() > 0.5
    limit = torch.full((1, size, size), 2.0, dtype=torch.float64)  # the surfel lies at depths ~2.6..3.4
    outs, grads, _ = render_all(backend, p, viewmats, Ks, size, size, w, depth_limit=limit)
    assert (outs["render"] == 0).all() and (outs["alpha"] == 0).all() and (outs["transmittance"] == 1).all()
    for name, g in grads.items():
        assert g is None or (g == 0).all(), f"{name} got a gradient from a surfel behind the limit"


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_surfel_in_front_dims_by_one_minus_alpha_and_the_cut_follows_its_intersection(backend):
    """A limit just behind the surfel everywhere: nothing changes, and the mesh behind it is dimmed by
    exactly 1 - alpha. A limit at the centre's depth 3 cuts the tilted surfel where its intersection depth
    is >= 3: those pixels alone go transparent (intersection depth, not centre depth, is compared)."""
    p, viewmats, Ks, size = tilted_surfel()
    w = _weights(1, size, size)
    free = render_all(backend, p, viewmats, Ks, size, size, w)
    behind = render_all(backend, p, viewmats, Ks, size, size, w,
                        depth_limit=torch.full((1, size, size), 3.6, dtype=torch.float64))
    for name in free[0]:
        assert torch.equal(free[0][name], behind[0][name]), name
    a = free[0]["alpha"]
    torch.testing.assert_close(behind[0]["transmittance"], 1.0 - a, rtol=0, atol=1e-15)
    mesh = torch.tensor([0.1, 0.7, 0.3], dtype=torch.float64)
    pixel = behind[0]["render"] + behind[0]["transmittance"] * mesh
    torch.testing.assert_close(pixel, free[0]["render"] + (1.0 - a) * mesh)

    z = surfel_hit_depths(p, viewmats, Ks, size)
    cut = render_all(backend, p, viewmats, Ks, size, size, w,
                     depth_limit=torch.full((1, size, size), 3.0, dtype=torch.float64))
    seen = a[0, ..., 0] > 0
    far, near = seen & (z >= 3.0), seen & (z < 3.0)
    assert far.sum() > 20 and near.sum() > 20
    # only exact-term pixels have their intersection depth compared; the fallback is sub-pixel here
    assert (cut[0]["alpha"][0, ..., 0][far] == 0).all()
    torch.testing.assert_close(cut[0]["alpha"][0, ..., 0][near], a[0, ..., 0][near], rtol=0, atol=0)


def test_cuda_backend_refuses_a_limit():
    p, viewmats, Ks, size = tilted_surfel()
    with pytest.raises(RasterizerInputError, match="`depth_limit` is not supported by the cuda backend"):
        rasterize_surfels(*(p[k] for k in PARAMS), viewmats, Ks, size, size, backend="cuda",
                          depth_limit=torch.full((1, size, size), 3.0, dtype=torch.float64))


@pytest.mark.parametrize("bad,match", [
    (torch.zeros(1, 48, 47), r"shape \[1, 48, 47\], expected \[1, 48, 48\]"),
    (torch.zeros(1, 48, 48, dtype=torch.int32), "floating-point"),
    (torch.full((1, 48, 48), math.nan), "NaN; use \\+inf"),
    ("3.0", "must be a torch.Tensor"),
])
def test_bad_depth_limits_are_named(bad, match):
    p, viewmats, Ks, size = tilted_surfel()
    with pytest.raises(RasterizerInputError, match="rasterize_surfels: `depth_limit` .*" + match):
        rasterize_surfels(*(p[k] for k in PARAMS), viewmats, Ks, size, size, backend="cpu", depth_limit=bad)
