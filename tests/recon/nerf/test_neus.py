"""NeuS math (issue 50, recon/nerf/neus.py): SDF -> opacity against a closed-form sphere, the finite-difference
gradient and eikonal term against autograd (a smooth MLP, and the hash-grid field's reference path), the
alpha compositing, the field's sphere initialisation."""

from __future__ import annotations

import math

import pytest
import torch

from recon.nerf.hash_encoding import HashGridConfig
from recon.nerf.neus import (GRADIENTS, central_differences, eikonal_loss, eikonal_stats, neus_alpha, neus_alpha_from_slope,
                             ray_neighbours, sharpness, slope_cos, step_alpha, tetrahedral_differences)
from recon.nerf.neus_field import NeusField
from recon.nerf.rendering import alpha_weights, transmittance_weights


def sphere_ray(r: float, offset: float, s: float, n: int = 4000):
    """Weights [n] and section midpoints [n] of a ray along +z from z = -2 at lateral ``offset`` through the
    sphere |x| = r (exact SDF and gradient) with sharpness s."""
    t = torch.linspace(0.0, 4.0, n + 1, dtype=torch.float64)
    t0, t1 = t[:-1], t[1:]
    mid = 0.5 * (t0 + t1)
    pts = torch.stack([torch.full_like(mid, offset), torch.zeros_like(mid), mid - 2.0], 1)
    sdf = pts.norm(dim=1) - r
    grad = pts / pts.norm(dim=1, keepdim=True)
    dirs = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64).expand(n, 3)
    alpha = neus_alpha(sdf, grad, dirs, t1 - t0, torch.tensor(s, dtype=torch.float64))
    w, _ = alpha_weights(alpha, torch.zeros(n, dtype=torch.int64), 1)
    return w, mid


@pytest.mark.parametrize("r", [0.3, 0.6])
def test_sphere_opacity_and_weight_peak(r):
    """A ray through the centre: opacity -> 1 and the weight peaks at the entry point t = 2 - r (unbiased: the
    expected distance is within a few 1/s of it); a ray passing 3 r away: opacity ~ 0."""
    s = 400.0
    w, mid = sphere_ray(r, 0.0, s)
    assert float(w.sum()) > 0.999
    entry = 2.0 - r
    assert abs(float(mid[w.argmax()]) - entry) <= 1e-3 + 4.0 / 4000
    near = (mid - entry).abs() < 20.0 / s  # the 1e-5 floor of every section's alpha adds a thin tail elsewhere
    assert float(w[near].sum()) > 0.98
    assert abs(float((w[near] * mid[near]).sum() / w[near].sum()) - entry) < 2.0 / s
    miss, _ = sphere_ray(r, 3.0 * r, s)
    assert float(miss.sum()) < 1e-3


def test_sharper_is_less_spread():
    spread = []
    for s in (50.0, 500.0):
        w, mid = sphere_ray(0.5, 0.0, s)
        m = (w * mid).sum() / w.sum()
        spread.append(float(((w * (mid - m) ** 2).sum() / w.sum()).sqrt()))
    assert spread[1] < 0.2 * spread[0]


def test_plane_weight_is_unbiased_at_any_angle():
    """A plane crossed at 60 degrees: the weight's mean lies at the crossing (NeuS's first-order unbiasedness)."""
    n, s = 4000, 300.0
    t = torch.linspace(0.0, 2.0, n + 1, dtype=torch.float64)
    t0, t1 = t[:-1], t[1:]
    mid = 0.5 * (t0 + t1)
    d = torch.tensor([math.sin(math.radians(60)), 0.0, math.cos(math.radians(60))], dtype=torch.float64)
    normal = torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64)  # plane z = 0.5 seen from below
    sdf = 0.5 - mid * d[2]
    alpha = neus_alpha(sdf, normal.expand(n, 3), d.expand(n, 3), t1 - t0, torch.tensor(s, dtype=torch.float64))
    w, _ = alpha_weights(alpha, torch.zeros(n, dtype=torch.int64), 1)
    crossing = float(0.5 / d[2])
    near = (mid - crossing).abs() < 20.0 / s
    assert float(w.sum()) > 0.999 and float(w[near].sum()) > 0.98
    assert abs(float((w[near] * mid[near]).sum()) / float(w[near].sum()) - crossing) < 2e-3


def test_alpha_weights_match_density_weights():
    """alpha = 1 - exp(-sigma dt) gives the density quadrature's weights (two rays, packed)."""
    g = torch.Generator().manual_seed(0)
    sigma = torch.rand(9, generator=g, dtype=torch.float64) * 5
    t0 = torch.rand(9, generator=g, dtype=torch.float64)
    t1 = t0 + 0.1
    ray = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1])
    w1, tr1 = transmittance_weights(sigma, t0, t1, ray, 3)
    w2, tr2 = alpha_weights(-torch.expm1(-sigma * (t1 - t0)), ray, 3)
    assert torch.allclose(w1, w2, atol=1e-12) and torch.allclose(tr1, tr2, atol=1e-12)


def test_step_alpha_is_largest_at_the_surface():
    sdf = torch.tensor([-0.5, -0.01, 0.0, 0.01, 0.5], dtype=torch.float64)
    a = step_alpha(sdf, 0.02, sharpness(torch.tensor(0.5, dtype=torch.float64)))
    assert a[2] > a[3] > a[4] and a[4] < 1e-6 and a[2] > 0.4


def smooth_sdf_net(seed: int = 0) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(3, 32), torch.nn.Softplus(beta=5), torch.nn.Linear(32, 4)).double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)
    return net


def test_central_differences_match_autograd_on_a_smooth_field():
    net = smooth_sdf_net()
    fn = lambda x: (net(x)[:, 0], net(x)[:, 1:])  # noqa: E731
    x = torch.rand(64, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2 - 1
    sdf, feats, grad = central_differences(fn, x, 1e-4)
    xa = x.clone().requires_grad_(True)
    exact = torch.autograd.grad(net(xa)[:, 0].sum(), xa)[0]
    assert torch.allclose(sdf, net(x)[:, 0]) and torch.allclose(feats, net(x)[:, 1:])
    assert torch.allclose(grad, exact, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("scheme,h,atol,rtol", [("central", 1e-4, 1e-6, 1e-5), ("tetrahedral", 1e-5, 1e-5, 1e-4)])
def test_eikonal_parameter_gradients_match_double_backward(scheme, h, atol, rtol):
    """The eikonal loss through central / tetrahedral differences has (nearly) the parameter gradients of the
    exact eikonal loss differentiated twice by autograd (create_graph)."""
    net = smooth_sdf_net(2)
    x = torch.rand(128, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2 - 1
    params = list(net.parameters())[:3]  # the output bias does not move the gradient
    _, _, grad_fd = GRADIENTS[scheme](lambda p: (net(p)[:, 0], net(p)[:, 1:]), x, h)
    fd = torch.autograd.grad(eikonal_loss(grad_fd), params)
    xa = x.clone().requires_grad_(True)
    g = torch.autograd.grad(net(xa)[:, 0].sum(), xa, create_graph=True)[0]
    exact = torch.autograd.grad(eikonal_loss(g), params)
    for a, b in zip(fd, exact):
        assert torch.allclose(a, b, atol=atol, rtol=rtol)


def hessians(net, x: torch.Tensor) -> torch.Tensor:
    """[N, 3, 3] autograd Hessians of ``net``'s first output at points ``x`` [N, 3]."""
    xa = x.clone().requires_grad_(True)
    g = torch.autograd.grad(net(xa)[:, 0].sum(), xa, create_graph=True)[0]
    return torch.stack([torch.autograd.grad(g[:, i].sum(), xa, retain_graph=True)[0] for i in range(3)], 1)


def test_tetrahedral_differences_match_autograd_and_their_error_term():
    """Tetrahedral differences (4 points) on a smooth MLP: exact for an affine field at any step; for the MLP the
    gradient within 1e-6 of autograd's at h = 1e-6, and at h = 1e-2 its error is the documented first-order
    term h (H_yz, H_xz, H_xy) (to O(h^2)), the value's h^2/2 trace(H) (to O(h^3))."""
    x = torch.rand(64, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2 - 1
    a = torch.tensor([0.3, -1.2, 0.7], dtype=torch.float64)
    affine = lambda p: (p @ a + 0.4, torch.stack([p[:, 0], 2 * p[:, 1]], 1))  # noqa: E731
    sdf, feats, grad = tetrahedral_differences(affine, x, 0.3)
    assert torch.allclose(grad, a.expand(64, 3), atol=1e-12) and torch.allclose(sdf, x @ a + 0.4, atol=1e-12)
    assert torch.allclose(feats, torch.stack([x[:, 0], 2 * x[:, 1]], 1), atol=1e-12)

    net = smooth_sdf_net()
    fn = lambda p: (net(p)[:, 0], net(p)[:, 1:])  # noqa: E731
    xa = x.clone().requires_grad_(True)
    exact = torch.autograd.grad(net(xa)[:, 0].sum(), xa)[0]
    _, _, grad = tetrahedral_differences(fn, x, 1e-6)
    assert torch.allclose(grad, exact, atol=1e-6, rtol=0)
    h, hess = 1e-2, hessians(net, x)
    sdf, _, grad = tetrahedral_differences(fn, x, h)
    mixed = torch.stack([hess[:, 1, 2], hess[:, 0, 2], hess[:, 0, 1]], 1)
    assert float((grad - exact - h * mixed).abs().max()) < 0.05 * h * float(mixed.abs().max())
    trace = hess.diagonal(dim1=1, dim2=2).sum(1)
    err = sdf - net(x)[:, 0].detach()
    assert float((err - 0.5 * h * h * trace).abs().max()) < 0.05 * h * h * float(trace.abs().max())


@pytest.mark.parametrize("gradient,bound", [("central", 0.004), ("tetrahedral", 0.04)])
def test_field_gradient_scheme_on_the_fused_field(gradient, bound):
    """NeusField(gradient=...) on the fused Numba path (float32, the training path) at the training step
    (fd_cells 0.5) of the sphere-initialised field: the scheme's own formula on the float64 reference path
    (to float32 rounding), and its mean distance to autograd's exact gradient there (measured: central 0.0017,
    tetrahedral 0.024 for |grad| ~ 1.05: the tetrahedron's first-order term h (H_yz, H_xz, H_xy) with h half a
    cell of the finest level, 1/32 of the box here; the trained fields' finest level is 64x finer)."""
    g = torch.Generator().manual_seed(0)
    field = NeusField(HashGridConfig(4, 2, 12, 4, 32), generator=g, gradient=gradient)
    x = torch.rand(500, 3, generator=g) * 1.6 - 0.8
    with torch.no_grad():
        _, _, fd = field.sdf_and_gradient(x)
    ref = NeusField(HashGridConfig(4, 2, 12, 4, 32), backend="torch", gradient=gradient).double()
    ref.load_state_dict(field.state_dict())
    with torch.no_grad():
        _, _, same = GRADIENTS[gradient](ref.sdf, x.double(), ref.fd_step())
    assert torch.allclose(fd.double(), same, atol=2e-4, rtol=0)
    xa = x.double().requires_grad_(True)
    exact = torch.autograd.grad(ref.sdf(xa)[0].sum(), xa)[0]
    assert float((fd.double() - exact).norm(dim=1).mean()) < bound


def test_field_gradient_matches_autograd_on_the_reference_hash_path():
    """NeusField's central-difference gradient (reference PyTorch encoding, float64, a step far below a cell)
    equals autograd's gradient through the trilinear hash encoding and the geometry MLP."""
    g = torch.Generator().manual_seed(0)
    field = NeusField(HashGridConfig(4, 2, 12, 4, 32), generator=g, backend="torch").double()
    field.fd_cells = 1e-5
    with torch.no_grad():
        field.table.uniform_(-0.3, 0.3, generator=g)  # features that matter
        field.geo_mlp[0].weight.normal_(0.0, 0.5, generator=g)
    x = torch.rand(200, 3, generator=g, dtype=torch.float64) * 1.6 - 0.8
    _, _, fd = field.sdf_and_gradient(x)
    xa = x.clone().requires_grad_(True)
    exact = torch.autograd.grad(field.sdf(xa)[0].sum(), xa)[0]
    close = (fd - exact).norm(dim=1) <= 1e-5 * (1 + exact.norm(dim=1))
    assert float(close.double().mean()) > 0.98  # a few points may straddle a cell face within the step


def test_field_starts_as_a_sphere_and_levels_mask():
    field = NeusField(HashGridConfig(4, 2, 12, 4, 64), init_radius=0.5, generator=torch.Generator().manual_seed(0))
    x = torch.randn(2000, 3, generator=torch.Generator().manual_seed(1))
    x = x / x.norm(dim=1, keepdim=True)
    with torch.no_grad():
        inside, outside = field.sdf(0.2 * x)[0], field.sdf(0.9 * x)[0]
        _, _, grad = field.sdf_and_gradient(0.5 * x)
    assert float(inside.max()) < 0 < float(outside.min())
    stats = eikonal_stats(grad, 0.3)
    assert 0.7 < stats["grad_norm_mean"] < 1.3 and stats["within_tolerance"] > 0.8
    field.set_active_levels(2)
    assert field.level_mask().tolist() == [1.0] * 4 + [0.0] * 4
    assert field.fd_step() == pytest.approx(0.5 * 2.0 / float(field.resolutions[1]))


def packed_sphere_rays(r: float, offsets: list[float], n: int, s: float):
    """Packed sections (ray [S], t0 [S], t1 [S], midpoints [S, 3], exact alpha [S], slope alpha [S]) of rays
    along +z from z = -1 at lateral ``offsets`` through the sphere |x| = r, ``n`` sections each, sharpness s."""
    t = torch.linspace(0.0, 2.0, n + 1, dtype=torch.float64)
    k = len(offsets)
    ray = torch.arange(k).repeat_interleave(n)
    t0, t1 = t[:-1].repeat(k), t[1:].repeat(k)
    mid = 0.5 * (t0 + t1)
    off = torch.tensor(offsets, dtype=torch.float64)[ray]
    pts = torch.stack([off, torch.zeros_like(mid), mid - 1.0], 1)
    sdf = pts.norm(dim=1) - r
    dirs = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64).expand(len(ray), 3)
    sv = torch.tensor(s, dtype=torch.float64)
    exact = neus_alpha(sdf, pts / pts.norm(dim=1, keepdim=True), dirs, t1 - t0, sv)
    fast = neus_alpha_from_slope(sdf, slope_cos(sdf, pts, *ray_neighbours(ray, t0, t1)), t1 - t0, sv)
    return ray, t0, t1, pts, exact, fast


def test_slope_alpha_matches_exact_alpha_on_a_sphere():
    """One SDF value per section (the neighbours' slope for grad . dir) vs the exact gradient, on rays through,
    grazing and missing a sphere (200 sections over 2 units, s = 64): where the transmittance is above 1e-4 the
    opacities agree to 2e-4 (measured 4.3e-5), the weights to 5e-5 (6.5e-6), each ray's total to 1e-4 (2.4e-5);
    (deep inside, behind the surface, they may differ: the exact cosine flips at the centre). A ray's lone
    section takes cos = -1 (= step_alpha)."""
    s = 64.0
    offsets = [0.0, 0.2, 0.4, 0.45, 0.49, 0.6]
    ray, t0, t1, pts, exact, fast = packed_sphere_rays(0.5, offsets, 200, s)
    w_exact, trans = alpha_weights(exact, ray, len(offsets))
    w_fast, _ = alpha_weights(fast, ray, len(offsets))
    live = trans > 1e-4
    assert float((fast - exact)[live].abs().max()) < 2e-4
    assert float((w_fast - w_exact).abs().max()) < 5e-5
    acc = lambda w: torch.zeros(len(offsets), dtype=w.dtype).index_add_(0, ray, w)
    assert float((acc(w_exact) - acc(w_fast)).abs().max()) < 1e-4
    assert float(acc(w_exact)[:3].min()) > 0.99 and 0.5 < float(acc(w_exact)[4]) < 0.8  # real surfaces, grazing
    sdf = torch.tensor([0.01], dtype=torch.float64)
    lone = neus_alpha_from_slope(sdf, slope_cos(sdf, torch.zeros(1, 3, dtype=torch.float64),
                                                *ray_neighbours(torch.zeros(1, dtype=torch.int64),
                                                                torch.zeros(1, dtype=torch.float64),
                                                                torch.full((1,), 0.1, dtype=torch.float64))),
                                 torch.tensor([0.1], dtype=torch.float64), torch.tensor(s, dtype=torch.float64))
    assert torch.allclose(lone, step_alpha(sdf, 0.1, torch.tensor(s, dtype=torch.float64)))


def test_slope_alpha_is_exact_on_a_plane_and_neighbours_stop_at_rays_and_gaps():
    """A plane's SDF is linear along a ray: the slope estimate equals grad . dir to rounding; neighbours never
    cross to another ray nor over a gap longer than the section."""
    n, s = 100, 300.0
    t = torch.linspace(0.0, 1.0, n + 1, dtype=torch.float64)
    t0, t1 = t[:-1], t[1:]
    mid = 0.5 * (t0 + t1)
    d = torch.tensor([math.sin(math.radians(60)), 0.0, math.cos(math.radians(60))], dtype=torch.float64)
    pts = mid[:, None] * d
    sdf = 0.3 - pts[:, 2]
    ray = torch.zeros(n, dtype=torch.int64)
    cos = slope_cos(sdf, pts, *ray_neighbours(ray, t0, t1))
    assert torch.allclose(cos, torch.full_like(cos, -float(d[2])), atol=1e-12)
    exact = neus_alpha(sdf, torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64).expand(n, 3), d.expand(n, 3),
                       t1 - t0, torch.tensor(s, dtype=torch.float64))
    fast = neus_alpha_from_slope(sdf, cos, t1 - t0, torch.tensor(s, dtype=torch.float64))
    assert float((fast - exact).abs().max()) < 1e-10
    ray = torch.tensor([0, 0, 0, 1, 1])
    t0 = torch.tensor([0.0, 0.1, 0.5, 0.0, 0.1], dtype=torch.float64)
    prev, nxt = ray_neighbours(ray, t0, t0 + 0.1)
    assert prev.tolist() == [-1, 0, -1, -1, 3] and nxt.tolist() == [1, -1, -1, 4, -1]
