"""Per-pixel depth limits (``depth_limit [C, H, W]``) and the final transmittance (``meta.transmittance``):
what an inserted mesh or a NeRF behind the Gaussians needs. The cpu backend against the reference."""

import math

import pytest
import torch

from rasterizer import RasterizerInputError, rasterize_gaussians
from tests.tolerances import TOL

from .scenes import random_scene
from .test_cpu_vs_reference import assert_grads_close, assert_images_close

PARAMS = ("means", "quats", "scales", "opacities", "colors")


def render_all(backend, p, viewmats, Ks, width, height, seed=7, **kw):
    """Render, then backpropagate random cotangents on render, alpha and transmittance; returns
    (render, alpha, transmittance, gradients of the parameters and of means2d)."""
    for v in p.values():
        v.grad = None
    render, alpha, meta = rasterize_gaussians(*(p[k] for k in PARAMS), viewmats, Ks, width, height, backend=backend,
                                              **kw)
    g = torch.Generator().manual_seed(seed)
    outs = (render, alpha, meta.transmittance)
    cots = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
    sum(((o * c).sum() for o, c in zip(outs, cots))).backward()
    grads = {k: p[k].grad.clone() for k in PARAMS if p[k].grad is not None}
    grads["means2d"] = meta.means2d.grad.clone()
    if kw.get("absgrad"):
        grads["absgrad"] = meta.absgrad.clone()
    return tuple(o.detach() for o in outs) + (grads,)


def cutting_limit(C, width, height, dtype):
    """A limit that cuts through the scenes of random_scene (depths 2.5..5): a ramp from 2.8 to 4.8
    across the image, tilted per camera, and no limit (+inf) in the first rows."""
    x = torch.arange(width, dtype=torch.float64) / width
    y = torch.arange(height, dtype=torch.float64) / height
    limit = 2.8 + 2.0 * x[None, None, :] + 0.3 * y[None, :, None] * torch.arange(1, C + 1)[:, None, None]
    limit[:, :3] = math.inf
    return limit.to(dtype)


def one_gaussian(z, x=0.0, dtype=torch.float64):
    """A single Gaussian at depth z near the optical axis (offset x) of a 32 x 24 camera at the origin;
    anisotropic and rotated, so that every parameter gets a gradient."""
    p = dict(means=torch.tensor([[x, 0.0, z]]), quats=torch.tensor([[0.9, 0.2, 0.1, 0.3]]),
             scales=torch.tensor([[0.15, 0.08, 0.1]]), opacities=torch.tensor([0.8]),
             colors=torch.tensor([[0.9, 0.4, 0.2]]))
    p = {k: v.to(dtype).requires_grad_(True) for k, v in p.items()}
    K = torch.tensor([[[30.0, 0.0, 16.0], [0.0, 30.0, 12.0], [0.0, 0.0, 1.0]]], dtype=dtype)
    return p, torch.eye(4, dtype=dtype)[None], K


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_gaussian_behind_the_limit_gives_no_colour_and_no_gradient(backend):
    p, viewmats, Ks = one_gaussian(4.0)
    free = render_all(backend, p, viewmats, Ks, 32, 24)
    assert free[1].max() > 0.5  # visible without a limit
    limit = torch.full((1, 24, 32), 3.5, dtype=torch.float64)
    render, alpha, T, grads = render_all(backend, p, viewmats, Ks, 32, 24, depth_limit=limit)
    assert (render == 0).all() and (alpha == 0).all() and (T == 1).all()
    for name, g in grads.items():
        assert (g == 0).all(), f"{name} got a gradient from a Gaussian behind the limit"


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_limit_between_two_gaussians_keeps_the_front_one(backend):
    """A limit between a front and a back Gaussian renders the front one alone, and the back one gets
    no gradient; transmittance is the light the front one lets through."""
    front, viewmats, Ks = one_gaussian(3.0, x=0.1)
    back, _, _ = one_gaussian(5.0, x=-0.1)
    both = {k: torch.cat([front[k], back[k]]).detach().requires_grad_(True) for k in PARAMS}
    limit = torch.full((1, 24, 32), 4.0, dtype=torch.float64)
    render, alpha, T, grads = render_all(backend, both, viewmats, Ks, 32, 24, depth_limit=limit)
    alone = render_all(backend, front, viewmats, Ks, 32, 24)
    torch.testing.assert_close(render, alone[0], **TOL[torch.float64])
    torch.testing.assert_close(T, 1.0 - alone[1], **TOL[torch.float64])
    assert T.min() < 0.5
    for name in PARAMS:
        assert (grads[name][1] == 0).all() and (grads[name][0] != 0).any(), name


CASES = {
    "rgb": dict(),
    "rgb+ed": dict(render_mode="RGB+ED"),
    "absgrad": dict(absgrad=True),
    "antialiased": dict(rasterize_mode="antialiased"),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_matches_reference_with_a_limit_through_the_scene(case, dtype):
    """Forward (render, alpha, transmittance) and the gradients of all three, with a limit that cuts
    through the scene, float64 to 1e-9 (as the other cpu-vs-reference tests)."""
    p, viewmats, Ks = random_scene(n=250, width=50, height=40, n_cams=2, dtype=dtype, seed=3)
    limit = cutting_limit(2, 50, 40, dtype)
    ref = render_all("reference", p, viewmats, Ks, 50, 40, depth_limit=limit, **CASES[case])
    cpu = render_all("cpu", p, viewmats, Ks, 50, 40, depth_limit=limit, **CASES[case])
    free = render_all("reference", p, viewmats, Ks, 50, 40, **CASES[case])
    cut = (ref[2] - free[2]).abs() > 1e-3  # pixels whose transmittance the limit changed
    assert 0.2 < cut.float().mean() < 0.9, "the limit should cut through the scene"
    for a, b in zip(cpu[:3], ref[:3]):
        assert_images_close(a, b, dtype)
    exact = None
    if dtype != torch.float64:
        p64, vm64, K64 = random_scene(n=250, width=50, height=40, n_cams=2, dtype=torch.float64, seed=3)
        exact = render_all("reference", p64, vm64, K64, 50, 40, depth_limit=cutting_limit(2, 50, 40, torch.float64),
                           **CASES[case])[3]
    assert_grads_close(cpu[3], ref[3], dtype, exact)


def test_cpu_many_channels_with_a_limit():
    p, viewmats, Ks = random_scene(n=150, width=36, height=36, n_cams=2, channels=5, seed=9)
    limit = cutting_limit(2, 36, 36, torch.float64)
    ref = render_all("reference", p, viewmats, Ks, 36, 36, depth_limit=limit)
    cpu = render_all("cpu", p, viewmats, Ks, 36, 36, depth_limit=limit)
    for a, b in zip(cpu[:3], ref[:3]):
        assert_images_close(a, b, torch.float64)
    assert_grads_close(cpu[3], ref[3], torch.float64)


def test_infinite_limit_is_no_limit_and_inference_matches_training():
    """+inf everywhere changes nothing (bit for bit); with a cutting limit, the no_grad forward (the
    [C*N, .] arrays) and the training forward (packed intersections) agree bit for bit."""
    p, viewmats, Ks = random_scene(n=300, width=40, height=36, n_cams=2, dtype=torch.float32, seed=3)
    args = [p[k] for k in PARAMS]
    free = rasterize_gaussians(*args, viewmats, Ks, 40, 36, backend="cpu")
    inf = rasterize_gaussians(*args, viewmats, Ks, 40, 36, backend="cpu",
                              depth_limit=torch.full((2, 36, 40), math.inf))
    assert torch.equal(free.render, inf.render) and torch.equal(free.meta.transmittance, inf.meta.transmittance)
    limit = cutting_limit(2, 40, 36, torch.float32)
    training = rasterize_gaussians(*args, viewmats, Ks, 40, 36, backend="cpu", depth_limit=limit)
    with torch.no_grad():
        inference = rasterize_gaussians(*args, viewmats, Ks, 40, 36, backend="cpu", depth_limit=limit)
    assert torch.equal(training.render.detach(), inference.render)
    assert torch.equal(training.meta.transmittance.detach(), inference.meta.transmittance)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_transmittance_is_one_minus_alpha(backend):
    p, viewmats, Ks = random_scene(n=200, width=40, height=30, seed=4)
    render, alpha, meta = rasterize_gaussians(*(p[k] for k in PARAMS), viewmats, Ks, 40, 30, backend=backend)
    assert meta.transmittance.shape == (1, 30, 40, 1) and meta["transmittance"] is meta.transmittance
    torch.testing.assert_close(meta.transmittance, 1.0 - alpha, rtol=0, atol=1e-12)
    assert alpha.max() > 0.5


def test_transmittance_cannot_be_changed_before_backward():
    """The cpu backward reads the transmittance it returned: changing it in place is an error, not a
    wrong gradient."""
    p, viewmats, Ks = random_scene(n=50, width=20, height=16, seed=1)
    out = rasterize_gaussians(*(p[k] for k in PARAMS), viewmats, Ks, 20, 16, backend="cpu")
    loss = out.render.sum()
    with torch.no_grad():
        out.meta.transmittance.mul_(0.5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("bad,match", [
    (torch.zeros(1, 24, 31), r"shape \[1, 24, 31\], expected \[1, 24, 32\]"),
    (torch.zeros(1, 24, 32, dtype=torch.int32), "floating-point"),
    (torch.full((1, 24, 32), math.nan), "NaN; use \\+inf"),
    ("3.0", "must be a torch.Tensor"),
])
def test_bad_depth_limits_are_named(bad, match):
    p, viewmats, Ks = one_gaussian(4.0)
    with pytest.raises(RasterizerInputError, match="`depth_limit` .*" + match):
        rasterize_gaussians(*(p[k] for k in PARAMS), viewmats, Ks, 32, 24, backend="cpu", depth_limit=bad)
