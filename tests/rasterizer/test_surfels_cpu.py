"""rasterize_surfels: the cpu backend (Numba forward, hand-written backward) against the reference
backend in float64 (1e-9), and against finite differences."""

import pytest
import torch

from rasterizer import rasterize_surfels

from .test_surfels import OUTPUTS, surfel_scene


def _run(backend, p, viewmats, Ks, width, height, weights, used=OUTPUTS, **kw):
    leaves = {k: (tuple(t.detach().clone().requires_grad_(True) for t in v) if isinstance(v, tuple)
                  else v.detach().clone().requires_grad_(True)) for k, v in p.items()}
    out = rasterize_surfels(leaves["means"], leaves["quats"], leaves["scales"], leaves["opacities"], leaves["colors"],
                            viewmats, Ks, width, height, backend=backend, **kw)
    loss = sum((w * getattr(out, k)).sum() for w, k in zip(weights, OUTPUTS) if k in used)
    loss.backward()
    grads = {k: (v.grad if not isinstance(v, tuple) else torch.cat([t.grad for t in v], 1)) for k, v in leaves.items()}
    grads["means2d"] = out.meta.means2d.grad
    grads["ray_transforms"] = out.meta.ray_transforms.grad
    return {k: getattr(out, k).detach() for k in OUTPUTS}, grads, out.meta


def _weights(C, H, W, D=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(C, H, W, d, generator=g, dtype=torch.float64) - 0.3 for d in (D, 1, 1, 1, 3, 3, 1)]


def _assert_match(cpu, ref, tol=1e-9):
    for name in ref[0]:
        torch.testing.assert_close(cpu[0][name], ref[0][name], rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")
    for name in ref[1]:
        want, got = ref[1][name], cpu[1][name]
        if want is None or got is None:  # not reached by the loss: the other's gradient must be zero
            assert float((want if got is None else got).abs().max()) == 0.0, f"grad {name}"
            continue
        scale = max(1.0, float(want.abs().max()))
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * scale,
                                   msg=lambda m: f"grad {name}: {m}")
    assert torch.equal(cpu[2].radii, ref[2].radii)


CASES = {
    "centre": dict(),
    "intersection": dict(surfel_depth="intersection"),
    "sh2+backgrounds": dict(sh_degree=2, backgrounds=True),
    "spread (culling, image edges)": dict(spread=2.5),
    "dense (early stop)": dict(n=400, dense=True),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_cpu_matches_reference_float64(case):
    kw = dict(CASES[case])
    n, spread, dense = kw.pop("n", 150), kw.pop("spread", 1.0), kw.pop("dense", False)
    p, viewmats, Ks = surfel_scene(n=n, width=45, height=35, n_cams=2, seed=21, spread=spread,
                                   sh_degree=kw.get("sh_degree"))
    if dense:  # opaque, large surfels: pixels reach T < 1e-4 and stop early
        p["opacities"] = torch.full_like(p["opacities"].detach(), 0.97).requires_grad_(True)
        p["scales"] = (p["scales"].detach() * 3).requires_grad_(True)
    if kw.pop("backgrounds", False):
        kw["backgrounds"] = torch.tensor([[0.3, 0.1, 0.6], [0.9, 0.9, 0.1]], dtype=torch.float64)
    w = _weights(2, 35, 45)
    ref = _run("reference", p, viewmats, Ks, 45, 35, w, **kw)
    cpu = _run("cpu", p, viewmats, Ks, 45, 35, w, **kw)
    if dense:
        assert float(ref[0]["alpha"].max()) > 1 - 2e-4, "some pixel should stop early"
    _assert_match(cpu, ref)


@pytest.mark.parametrize("used", [("render",), ("depth", "median_depth"), ("normals_world",), ("distortion",)],
                         ids=lambda u: "+".join(u))
def test_cpu_matches_reference_with_some_outputs_unused(used):
    """Unused outputs reach the backward as None cotangents."""
    p, viewmats, Ks = surfel_scene(n=120, width=40, height=32, n_cams=1, seed=8)
    w = _weights(1, 32, 40, seed=1)
    ref = _run("reference", p, viewmats, Ks, 40, 32, w, used=used, surfel_depth="intersection")
    cpu = _run("cpu", p, viewmats, Ks, 40, 32, w, used=used, surfel_depth="intersection")
    _assert_match(cpu, ref)


def test_cpu_split_sh_and_per_camera_colours():
    p, viewmats, Ks = surfel_scene(n=80, width=40, height=32, n_cams=2, seed=2, sh_degree=1)
    p["colors"] = (p["colors"][:, :1].detach(), p["colors"][:, 1:].detach())
    w = _weights(2, 32, 40, seed=2)
    _assert_match(_run("cpu", p, viewmats, Ks, 40, 32, w, sh_degree=1),
                  _run("reference", p, viewmats, Ks, 40, 32, w, sh_degree=1))
    q, viewmats, Ks = surfel_scene(n=80, width=40, height=32, n_cams=2, seed=2, channels=5)
    q["colors"] = q["colors"].detach()[None].repeat(2, 1, 1) * torch.tensor([1.0, 0.5])[:, None, None]
    w = _weights(2, 32, 40, D=5, seed=3)
    _assert_match(_run("cpu", q, viewmats, Ks, 40, 32, w), _run("reference", q, viewmats, Ks, 40, 32, w))


def test_cpu_float32_close_to_reference():
    p, viewmats, Ks = surfel_scene(n=150, width=40, height=32, n_cams=1, seed=4, dtype=torch.float32)
    w = [x.float() for x in _weights(1, 32, 40, seed=4)]
    ref = _run("reference", p, viewmats, Ks, 40, 32, w)
    cpu = _run("cpu", p, viewmats, Ks, 40, 32, w)
    assert cpu[0]["render"].dtype == torch.float32 and cpu[1]["means"].dtype == torch.float32
    for name in OUTPUTS:
        assert float((cpu[0][name] - ref[0][name]).abs().max()) < 1e-4, name
    for name in ("means", "quats", "scales", "opacities", "colors"):
        err = (cpu[1][name] - ref[1][name]).norm() / ref[1][name].norm()
        assert err < 1e-4, f"{name}: {err:.3g}"


def test_cpu_nothing_visible_and_no_surfels():
    p, viewmats, Ks = surfel_scene(n=20, width=40, height=32, n_cams=1)
    behind = {**p, "means": (p["means"].detach() * torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)
                             ).requires_grad_(True)}
    w = _weights(1, 32, 40)
    cpu = _run("cpu", behind, viewmats, Ks, 40, 32, w)
    assert float(cpu[0]["alpha"].abs().max()) == 0.0 and float(cpu[1]["means"].abs().max()) == 0.0
    empty, _, _ = surfel_scene(n=0, width=40, height=32, n_cams=1)
    out = _run("cpu", empty, viewmats, Ks, 40, 32, w)
    assert float(out[0]["render"].abs().max()) == 0.0 and out[1]["means"].shape == (0, 3)


@pytest.mark.parametrize("surfel_depth", ["centre", "intersection"])
def test_cpu_gradcheck_float64(surfel_depth):
    g = torch.Generator().manual_seed(5)
    means = torch.tensor([[0.0, 0.0, 3.0], [0.15, 0.1, 3.4], [-0.1, 0.05, 3.8], [0.05, -0.1, 2.6]],
                         dtype=torch.float64)
    quats = torch.nn.functional.normalize(torch.tensor([[1.0, 0, 0, 0]]).double() + 0.3 * torch.randn(
        4, 4, generator=g, dtype=torch.float64), dim=-1)
    scales = torch.tensor([[0.35, 0.25], [0.3, 0.3], [0.4, 0.2], [0.05, 0.08]], dtype=torch.float64)
    opac = torch.tensor([0.6, 0.7, 0.8, 0.5], dtype=torch.float64)
    colors = torch.rand(4, 3, generator=g, dtype=torch.float64)
    Ks = torch.tensor([[[30.0, 0, 8.0], [0, 30.0, 8.0], [0, 0, 1.0]]], dtype=torch.float64)
    viewmats = torch.eye(4, dtype=torch.float64)[None]
    weights = _weights(1, 16, 16, seed=6)

    def loss(means, quats, scales, opac, colors):
        out = rasterize_surfels(means, quats, scales, opac, colors, viewmats, Ks, 16, 16, backend="cpu",
                                surfel_depth=surfel_depth)
        return sum((w * getattr(out, k)).sum() for w, k in zip(weights, OUTPUTS))

    inputs = tuple(t.clone().requires_grad_(True) for t in (means, quats, scales, opac, colors))
    assert torch.autograd.gradcheck(loss, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_cpu_projection_matches_reference_forward_and_backward():
    from rasterizer.surfels import project_surfels
    from rasterizer.surfels.cpu_projection import project_surfels_cpu

    p, viewmats, Ks = surfel_scene(n=300, width=64, height=48, n_cams=3, seed=13, spread=2.5)
    g = torch.Generator().manual_seed(1)
    outs = {}
    for name, fn in (("reference", project_surfels), ("cpu", project_surfels_cpu)):
        leaves = [p[k].detach().clone().requires_grad_(True) for k in ("means", "quats", "scales")]
        proj = fn(*leaves, viewmats, Ks, 64, 48)
        g.manual_seed(1)
        loss = sum((torch.randn(t.shape, generator=g, dtype=torch.float64) * t).sum()
                   for t in (proj.ray_transforms, proj.means2d, proj.depths, proj.normals))
        loss.backward()
        outs[name] = (proj, [t.grad for t in leaves])
    ref, cpu = outs["reference"], outs["cpu"]
    assert torch.equal(cpu[0].radii, ref[0].radii) and (ref[0].radii == 0).any() and (ref[0].radii > 0).any()
    for a, b in zip(cpu[0][:4], ref[0][:4]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-10)
    for a, b in zip(cpu[1], ref[1]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9 * float(b.abs().max()))


def test_cpu_matches_reference_with_large_tilted_surfels():
    """Surfels spanning many tiles, seen at a slant: the kernels trim each one's rows per tile to those its
    ellipse reaches (and skip tiles its box reaches but its ellipse does not); results stay the reference's."""
    p, viewmats, Ks = surfel_scene(n=60, width=70, height=52, n_cams=2, seed=13)
    p["scales"] = (p["scales"].detach() * 4).requires_grad_(True)
    w = _weights(2, 52, 70, seed=5)
    for kw in ({}, {"surfel_depth": "intersection"}):
        _assert_match(_run("cpu", p, viewmats, Ks, 70, 52, w, **kw),
                      _run("reference", p, viewmats, Ks, 70, 52, w, **kw))


def test_row_trimming_never_drops_a_reached_pixel():
    """row_reaches (the kernels' per-row trim) is conservative: every row in which some pixel centre gets
    alpha >= 1/255 from a surfel (the specification's surfel_alphas, float64) is reported reachable for
    every tile span containing that pixel; and it does trim (some rows of the alpha boxes are not)."""
    import numpy as np

    from rasterizer.surfels import cpu_kernels as K
    from rasterizer.surfels.composite import surfel_alphas
    from rasterizer.surfels.projection import project_surfels

    p, viewmats, Ks = surfel_scene(n=80, width=64, height=48, n_cams=1, seed=3, spread=1.5)
    p["scales"] = p["scales"].detach() * 3
    proj = project_surfels(p["means"], p["quats"], p["scales"], viewmats, Ks, 64, 48)
    G = proj.means2d.shape[1]
    M = proj.ray_transforms.detach().reshape(G, 9).numpy().copy()
    m2d = proj.means2d.detach().reshape(G, 2).numpy().copy()
    opac = p["opacities"].detach().numpy().copy()
    packed, rows = np.empty((G, K.PACKED)), np.empty((G, K.ROWS))
    K.pack_surfels(M, m2d, opac, p["colors"].detach().numpy().copy(), proj.depths.detach().reshape(G).numpy().copy(),
                   proj.normals.detach().reshape(G, 3).numpy().copy(), proj.radii.reshape(G, 2).numpy().copy(),
                   packed, rows)
    ys, xs = torch.meshgrid(torch.arange(48, dtype=torch.float64), torch.arange(64, dtype=torch.float64),
                            indexing="ij")
    centres = torch.stack([xs.reshape(-1) + 0.5, ys.reshape(-1) + 0.5], -1)
    alpha, _, _, _ = surfel_alphas(centres, proj.ray_transforms.detach()[0], proj.means2d.detach()[0],
                                   p["opacities"].detach())
    reached = (alpha > 0).reshape(48, 64, G).numpy()
    kept = dropped = 0
    from rasterizer.cpu.chords import row_reaches

    reaches = row_reaches.py_func
    for g in range(G):
        if proj.radii[0, g, 0] <= 0:
            continue
        for y in range(48):
            for x0 in range(0, 64, 16):
                hit = reached[y, x0:x0 + 16, g].any()
                ok = reaches(rows, g, y + 0.5, x0 + 8.0, 7.5)  # the centres x0 + 0.5 .. x0 + 15.5
                assert ok or not hit, f"surfel {g} row {y} tile x {x0}: reached but trimmed"
                kept += hit
                dropped += not ok
    assert kept > 100 and dropped > 100


def test_cpu_projection_float32_runs_float64_arithmetic():
    """The surfel cpu projection reads float32 inputs and cotangents in place, widening each load, and
    stores float64 results rounded once: bit for bit the float64 run on the same values, rounded."""
    from rasterizer.surfels.cpu_projection import project_surfels_cpu

    p, viewmats, Ks = surfel_scene(n=300, width=64, height=48, n_cams=3, seed=14, spread=2.5)
    runs = {}
    for dt in (torch.float32, torch.float64):
        leaves = [p[k].detach().to(torch.float32).to(dt).requires_grad_(True) for k in ("means", "quats", "scales")]
        f32 = lambda t: t.to(torch.float32).to(dt)  # noqa: E731  (float32 values in either dtype)
        proj = project_surfels_cpu(*leaves, f32(viewmats), f32(Ks), 64, 48)
        g = torch.Generator().manual_seed(2)
        outs = (proj.ray_transforms, proj.means2d, proj.depths, proj.normals)
        # cotangents as strided views too (the compositing passes column slices of its gradient rows)
        cots = [torch.randn(t.shape + (2,), generator=g).to(dt)[..., 0] for t in outs]
        grads = torch.autograd.grad(outs, leaves, cots)
        runs[dt] = (list(outs) + list(grads), proj.radii)
    (a32, r32), (a64, r64) = runs[torch.float32], runs[torch.float64]
    assert torch.equal(r32, r64)
    for a, b in zip(a32, a64):
        assert a.dtype == torch.float32
        assert torch.equal(a, b.to(torch.float32))
