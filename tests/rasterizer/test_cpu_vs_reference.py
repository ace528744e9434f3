"""The cpu backend (Numba kernels) against the reference backend: forward and vector-Jacobian products."""

import pytest
import torch

from rasterizer import rasterize_gaussians
from tests.tolerances import FLOAT32_FLIP_FRACTION, GRAD_REL, TOL

from .scenes import random_scene

PARAMS = ("means", "quats", "scales", "opacities", "colors")


def render_and_vjp(backend, p, viewmats, Ks, width, height, seed=7, **kw):
    """Render, then backpropagate random cotangents; returns outputs and gradients."""
    for v in p.values():
        v.grad = None
    render, alpha, meta = rasterize_gaussians(p["means"], p["quats"], p["scales"], p["opacities"], p["colors"],
                                              viewmats, Ks, width, height, backend=backend, **kw)
    g = torch.Generator().manual_seed(seed)
    v_render = torch.randn(render.shape, generator=g, dtype=render.dtype)
    v_alpha = torch.randn(alpha.shape, generator=g, dtype=alpha.dtype)
    ((render * v_render).sum() + (alpha * v_alpha).sum()).backward()
    grads = {k: p[k].grad.clone() for k in PARAMS if p[k].grad is not None}
    grads["means2d"] = meta["means2d"].grad.clone()
    if kw.get("absgrad"):
        grads["absgrad"] = meta["means2d"].absgrad.clone()
    return render.detach(), alpha.detach(), grads, meta


def assert_images_close(a, b, dtype):
    tol = TOL[dtype]
    if dtype == torch.float64:
        torch.testing.assert_close(a, b, **tol)
    else:
        bad = ((a - b).abs() > tol["atol"] + tol["rtol"] * b.abs()).float().mean().item()
        assert bad <= FLOAT32_FLIP_FRACTION, f"{bad:.2%} of values differ beyond tolerance"


def rel_err(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp(min=1e-12)).item()


def assert_grads_close(ga, gb, dtype, exact=None):
    """Gradients ga (kernel) vs gb (reference, same dtype). With ``exact`` (reference gradients in
    float64), a float32 kernel may also be as far from exact as twice the float32 reference is: the
    cpu kernels compute in float64, so where float32 rounding dominates they are the closer of the two."""
    for name in ga:
        err = rel_err(ga[name], gb[name])
        allowed = GRAD_REL[dtype]
        if exact is not None:
            err = min(err, rel_err(ga[name], exact[name]))
            allowed = max(allowed, 2 * rel_err(gb[name], exact[name]))
        assert err <= allowed, f"gradient of {name}: max error {err:.2e} relative to its largest entry"


CASES = {
    "rgb": dict(),
    "rgb+d": dict(render_mode="RGB+D"),
    "rgb+ed": dict(render_mode="RGB+ED"),
    "depth": dict(render_mode="D"),
    "expected-depth": dict(render_mode="ED"),
    "antialiased": dict(rasterize_mode="antialiased"),
    "absgrad": dict(absgrad=True),
    "near-far": dict(near_plane=3.0, far_plane=4.5),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_matches_reference(case, dtype):
    p, viewmats, Ks = random_scene(n=250, width=50, height=40, n_cams=2, dtype=dtype, seed=3)
    ref = render_and_vjp("reference", p, viewmats, Ks, 50, 40, **CASES[case])
    cpu = render_and_vjp("cpu", p, viewmats, Ks, 50, 40, **CASES[case])
    assert ref[1].max() > 0.5, "scene should be visibly covered"
    assert_images_close(cpu[0], ref[0], dtype)
    assert_images_close(cpu[1], ref[1], dtype)
    exact = None
    if dtype != torch.float64:
        p64, vm64, K64 = random_scene(n=250, width=50, height=40, n_cams=2, dtype=torch.float64, seed=3)
        exact = render_and_vjp("reference", p64, vm64, K64, 50, 40, **CASES[case])[2]
    assert_grads_close(cpu[2], ref[2], dtype, exact)
    assert torch.equal(cpu[3]["radii"], ref[3]["radii"])


@pytest.mark.parametrize("sh_degree", [0, 1, 3])
def test_cpu_matches_reference_sh_and_backgrounds(sh_degree):
    p, viewmats, Ks = random_scene(n=150, width=40, height=33, n_cams=2, sh_degree=sh_degree, seed=5)
    bg = torch.tensor([[0.2, 0.5, 0.9], [1.0, 1.0, 1.0]], dtype=torch.float64, requires_grad=True)
    outs = []
    for backend in ("reference", "cpu"):
        bg.grad = None
        out = render_and_vjp(backend, p, viewmats, Ks, 40, 33, sh_degree=sh_degree, backgrounds=bg)
        outs.append(out + (bg.grad.clone(),))
    assert_images_close(outs[1][0], outs[0][0], torch.float64)
    assert_grads_close(outs[1][2], outs[0][2], torch.float64)
    torch.testing.assert_close(outs[1][4], outs[0][4], **TOL[torch.float64])


def test_cpu_matches_reference_many_channels_and_per_camera_colors():
    p, viewmats, Ks = random_scene(n=120, width=36, height=36, n_cams=2, channels=5, seed=9)
    p["colors"] = torch.rand(2, 120, 5, dtype=torch.float64, requires_grad=True)
    ref = render_and_vjp("reference", p, viewmats, Ks, 36, 36)
    cpu = render_and_vjp("cpu", p, viewmats, Ks, 36, 36)
    assert cpu[0].shape == (2, 36, 36, 5)
    assert_images_close(cpu[0], ref[0], torch.float64)
    assert_grads_close(cpu[2], ref[2], torch.float64)


def test_cpu_matches_reference_with_covars():
    from rasterizer.reference import covariance_from_quat_scale

    p, viewmats, Ks = random_scene(n=150, width=40, height=30, seed=11)
    covars = covariance_from_quat_scale(p["quats"], p["scales"]).detach().requires_grad_(True)
    results = []
    for backend in ("reference", "cpu"):
        covars.grad = None
        render, alpha, _ = rasterize_gaussians(p["means"], None, None, p["opacities"], p["colors"], viewmats, Ks,
                                               40, 30, covars=covars, backend=backend)
        (render.square().sum() + alpha.sum()).backward()
        results.append((render.detach(), covars.grad.clone()))
    torch.testing.assert_close(results[1][0], results[0][0], **TOL[torch.float64])
    torch.testing.assert_close(results[1][1], results[0][1], rtol=1e-8, atol=1e-9)


def test_rows_stop_early_while_other_rows_go_on():
    """Opaque horizontal bands in front stop some rows of each tile early (T <= 1e-4) while the other
    rows keep blending the Gaussians behind: the backward leaves the stopped rows out for those
    Gaussians, and must still agree with the reference."""
    p, viewmats, Ks = random_scene(n=300, width=32, height=32, seed=5)
    f = float(Ks[0, 0, 0])
    band_rows = (3.5, 19.5)  # pixel-centre rows of the bands, one in each tile row
    with torch.no_grad():
        for j in range(16):  # 8 stacked strips per band, in front of everything else
            z = 2.0 + 0.01 * j
            p["means"][j] = torch.tensor([0.0, (band_rows[j % 2] - 16.0) * z / f, z])
            p["quats"][j] = torch.tensor([1.0, 0.0, 0.0, 0.0])
            p["scales"][j] = torch.tensor([2.0, 0.02, 0.02])
            p["opacities"][j] = 0.99
    ref = render_and_vjp("reference", p, viewmats, Ks, 32, 32)
    cpu = render_and_vjp("cpu", p, viewmats, Ks, 32, 32)
    alpha = ref[1][0, :, :, 0]
    # band rows: 8 strips of alpha >= 0.9 each, so every pixel stopped (T would fall below 1e-4)
    assert (alpha[3] > 0.99).all() and (alpha[19] > 0.99).all()
    assert (alpha[8:16].min(dim=1).values < 0.9).all()  # rows of the same tiles that went on
    assert_images_close(cpu[0], ref[0], torch.float64)
    assert_grads_close(cpu[2], ref[2], torch.float64)


def test_dense_scene_hits_early_stop():
    """Many large opaque Gaussians: most pixels terminate early (T <= 1e-4); kernels must agree."""
    p, viewmats, Ks = random_scene(n=300, width=32, height=32, seed=2)
    with torch.no_grad():
        p["scales"].mul_(4.0)
        p["opacities"].fill_(0.95)
    ref = render_and_vjp("reference", p, viewmats, Ks, 32, 32)
    cpu = render_and_vjp("cpu", p, viewmats, Ks, 32, 32)
    assert (ref[1] > 1 - 1e-3).float().mean() > 0.5
    assert_images_close(cpu[0], ref[0], torch.float64)
    assert_grads_close(cpu[2], ref[2], torch.float64)


@pytest.mark.parametrize("channels,render_mode", [(3, "RGB"), (5, "RGB"), (3, "D"), (3, "RGB+ED")])
def test_training_and_inference_forward_agree_bit_for_bit(channels, render_mode):
    """Renders that will be differentiated read the packed intersections (compositing.pack_intersections),
    renders under no_grad the [C*N, .] arrays: the pictures are the same to the last bit."""
    p, viewmats, Ks = random_scene(n=300, width=40, height=36, n_cams=2, channels=channels, dtype=torch.float32,
                                   seed=3)
    args = [p[k] for k in ("means", "quats", "scales", "opacities", "colors")]
    with torch.no_grad():
        inference = rasterize_gaussians(*args, viewmats, Ks, 40, 36, backend="cpu", render_mode=render_mode)
    training = rasterize_gaussians(*args, viewmats, Ks, 40, 36, backend="cpu", render_mode=render_mode)
    assert training[0].requires_grad and not inference[0].requires_grad
    assert torch.equal(training[0].detach(), inference[0]) and torch.equal(training[1].detach(), inference[1])
