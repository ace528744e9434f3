"""4D Gaussians (rasterizer/spacetime): rotation, slicing, culling, rendering the slices, 4D-Rotor rotors,
spherindrical harmonics, bad input. Independent checks: quaternion products written out here, the 4D
density against torch.distributions, finite differences (gradcheck), 4D-Rotor's constraint projection
re-implemented from its description."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from torch.autograd import gradcheck

from rasterizer import RasterizerInputError, SlicedGaussians, rasterize_gaussians, slice_gaussians_4d
from rasterizer.reference.sh import sh_to_color
from rasterizer.spacetime import (CULL_THRESHOLD, condition_on_time, condition_on_time_reference, covariance_4d,
                                  left_matrix, quats_to_rotor, right_matrix, rotmat4_from_quats, rotor_constraint,
                                  rotor_from_4drotor_halves, rotor_to_4drotor_halves, rotor_to_quats, rotor_to_rotmat4,
                                  spherindrical_to_color)

F64 = torch.float64


def gaussians_4d(n=40, seed=0, dtype=F64, time_scale=(0.05, 0.4)):
    """Random 4D Gaussians in front of a camera at the origin looking down +z (leaf tensors)."""
    g = torch.Generator().manual_seed(seed)
    u = lambda *s: torch.rand(*s, generator=g, dtype=F64)  # noqa: E731
    means4 = torch.stack([u(n) * 2 - 1, u(n) * 1.6 - 0.8, u(n) * 2 + 3, u(n)], -1)
    quats_left = torch.randn(n, 4, generator=g, dtype=F64) * (u(n, 1) * 3 + 0.2)
    quats_right = torch.randn(n, 4, generator=g, dtype=F64) * (u(n, 1) * 3 + 0.2)
    scales4 = torch.cat([torch.exp(u(n, 3) * 1.5 - 3.5), u(n, 1) * (time_scale[1] - time_scale[0]) + time_scale[0]], -1)
    opacities = u(n) * 0.6 + 0.35
    params = dict(means4=means4, quats_left=quats_left, quats_right=quats_right, scales4=scales4, opacities=opacities)
    return {k: v.to(dtype).requires_grad_(True) for k, v in params.items()}


def call(p, times, **kw):
    return slice_gaussians_4d(p["means4"], p["quats_left"], p["quats_right"], p["scales4"], p["opacities"], times, **kw)


def hamilton(a, b):
    """Quaternion product a b, (w, x, y, z), written out component by component."""
    a0, a1, a2, a3 = a.unbind(-1)
    b0, b1, b2, b3 = b.unbind(-1)
    return torch.stack([a0 * b0 - a1 * b1 - a2 * b2 - a3 * b3,
                        a0 * b1 + a1 * b0 + a2 * b3 - a3 * b2,
                        a0 * b2 - a1 * b3 + a2 * b0 + a3 * b1,
                        a0 * b3 + a1 * b2 - a2 * b1 + a3 * b0], -1)


def unit(q):
    return q / q.norm(dim=-1, keepdim=True)


# ----------------------------------------------------------------------------- rotation


def test_left_and_right_matrices_are_quaternion_products():
    g = torch.Generator().manual_seed(1)
    q, v = torch.randn(2, 50, 4, generator=g, dtype=F64)
    torch.testing.assert_close((left_matrix(q) @ v[..., None])[..., 0], hamilton(q, v), rtol=0, atol=1e-14)
    torch.testing.assert_close((right_matrix(q) @ v[..., None])[..., 0], hamilton(v, q), rtol=0, atol=1e-14)


def test_rotation_is_q_l_v_q_r_and_proper():
    g = torch.Generator().manual_seed(2)
    ql, qr, v = torch.randn(3, 200, 4, generator=g, dtype=F64)
    R = rotmat4_from_quats(ql * 3.0, qr * 0.1)  # any norm: normalised inside
    rotated = hamilton(hamilton(unit(ql), v), unit(qr))  # q_l v q_r
    torch.testing.assert_close((R @ v[..., None])[..., 0], rotated, rtol=0, atol=1e-13)
    torch.testing.assert_close(R @ R.transpose(-1, -2), torch.eye(4, dtype=F64).expand(200, 4, 4), rtol=0, atol=1e-13)
    torch.testing.assert_close(torch.linalg.det(R), torch.ones(200, dtype=F64), rtol=0, atol=1e-12)


def test_plane_rotation_and_identity():
    phi = 0.7
    q = torch.tensor([[math.cos(phi / 2), math.sin(phi / 2), 0.0, 0.0]], dtype=F64)
    R = rotmat4_from_quats(q, q)[0]
    expect = torch.eye(4, dtype=F64)
    expect[:2, :2] = torch.tensor([[math.cos(phi), -math.sin(phi)], [math.sin(phi), math.cos(phi)]], dtype=F64)
    torch.testing.assert_close(R, expect, rtol=0, atol=1e-15)  # x turns towards y; z and t stay
    ident = torch.tensor([[2.0, 0, 0, 0]], dtype=F64)
    torch.testing.assert_close(rotmat4_from_quats(ident, ident)[0], torch.eye(4, dtype=F64), rtol=0, atol=0)


# ----------------------------------------------------------------------------- slicing maths


def test_identity_rotation_gives_axis_aligned_slice():
    p = gaussians_4d(n=12)
    with torch.no_grad():
        p["quats_left"][:] = torch.tensor([3.0, 0, 0, 0])
        p["quats_right"][:] = torch.tensor([0.5, 0, 0, 0])
    mu_t = p["means4"][:, 3].detach()
    for i in (0, 5):
        s = call(p, float(mu_t[i]), cull_threshold=0.0)
        torch.testing.assert_close(s.means[i], p["means4"][i, :3].detach(), rtol=0, atol=0)
        torch.testing.assert_close(s.opacities[i], p["opacities"][i].detach(), rtol=0, atol=0)
    s = call(p, 0.37, cull_threshold=0.0)
    torch.testing.assert_close(s.covars, torch.diag_embed(p["scales4"][:, :3] ** 2).detach(), rtol=1e-15, atol=1e-18)
    torch.testing.assert_close(s.means, p["means4"][:, :3].detach(), rtol=0, atol=0)  # no velocity
    factor = torch.exp(-0.5 * (0.37 - mu_t) ** 2 / p["scales4"][:, 3].detach() ** 2)
    torch.testing.assert_close(s.opacities, p["opacities"].detach() * factor, rtol=1e-14, atol=0)


def test_conditioning_matches_the_4d_covariance():
    p = gaussians_4d(n=30, seed=3)
    sigma = covariance_4d(p["quats_left"], p["quats_right"], p["scales4"]).detach()
    rot = rotmat4_from_quats(p["quats_left"], p["quats_right"]).detach()
    torch.testing.assert_close(sigma, rot @ torch.diag_embed(p["scales4"].detach() ** 2) @ rot.transpose(-1, -2))
    cond = condition_on_time(p["quats_left"], p["quats_right"], p["scales4"])
    b, c = sigma[:, :3, 3], sigma[:, 3, 3]
    torch.testing.assert_close(cond.time_variances, c, rtol=1e-13, atol=0)
    torch.testing.assert_close(cond.velocities, b / c[:, None], rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(cond.covars, sigma[:, :3, :3] - b[:, :, None] * b[:, None, :] / c[:, None, None],
                               rtol=1e-12, atol=1e-16)
    assert torch.equal(cond.covars, cond.covars.transpose(-1, -2))
    assert bool((torch.linalg.eigvalsh(cond.covars) > 0).all())


@pytest.mark.parametrize("backend", ["torch", "cpu"])
@pytest.mark.parametrize("outputs", [("covars", "velocities", "time_variances"), ("covars",), ("velocities",),
                                     ("time_variances",), ("covars", "time_variances")])
def test_hand_written_backward_matches_autograd(outputs, backend):
    """condition_on_time (hand-written backward: PyTorch ops, or the fused Numba kernels) against
    condition_on_time_reference (autograd), float64, random cotangents on the outputs used (the others get no
    gradient: None in the backward)."""
    p = gaussians_4d(n=50, seed=23)
    g = torch.Generator().manual_seed(24)
    cot = {"covars": torch.randn(50, 3, 3, generator=g, dtype=F64),
           "velocities": torch.randn(50, 3, generator=g, dtype=F64),
           "time_variances": torch.randn(50, generator=g, dtype=F64)}
    names = ("quats_left", "quats_right", "scales4")
    results = []
    for fn in (functools.partial(condition_on_time, backend=backend), condition_on_time_reference):
        leaves = [p[k].detach().clone().requires_grad_(True) for k in names]
        out = fn(*leaves)
        sum((getattr(out, k) * cot[k]).sum() for k in outputs).backward()
        results.append((out, [x.grad for x in leaves]))
    (fast, fast_grads), (ref, ref_grads) = results
    for k in ("covars", "velocities", "time_variances"):
        if backend == "torch":  # the same operations as the reference
            assert torch.equal(getattr(fast, k), getattr(ref, k))
        else:
            torch.testing.assert_close(getattr(fast, k), getattr(ref, k), rtol=1e-12, atol=1e-15)
    for name, a, b in zip(names, fast_grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9 * float(b.abs().max()), msg=name)


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_hand_written_backward_below_the_normalisation_floor(backend):
    """A quaternion below the 1e-12 floor is divided by 1e-12, not by its norm (no gradient through the
    norm there): the hand-written backward does what autograd does with the clamp."""
    g = torch.Generator().manual_seed(25)
    ql, qr = torch.randn(2, 5, 4, generator=g, dtype=F64)
    ql[0] *= 1e-13
    s = torch.rand(5, 4, generator=g, dtype=F64) + 0.2
    w = torch.randn(5, 3, 3, generator=g, dtype=F64)
    grads = []
    for fn in (functools.partial(condition_on_time, backend=backend), condition_on_time_reference):
        leaves = [x.clone().requires_grad_(True) for x in (ql, qr, s)]
        (fn(*leaves).covars * w).sum().backward()
        grads.append([x.grad for x in leaves])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9 * float(b.abs().max()))


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_float32_slices_of_long_thin_gaussians_stay_positive_definite(backend):
    """Spatial scales 1e-4 of the time scale, tilted at random: the float32 Schur complement
    A - b b^T / c loses the small eigenvalues to cancellation (most come out indefinite); the Gram form
    the slicing uses keeps them."""
    g = torch.Generator().manual_seed(20)
    n = 2000
    ql, qr = torch.randn(2, n, 4, generator=g)
    scales = torch.cat([torch.full((n, 3), 1e-4), torch.ones(n, 1)], -1)
    cond = condition_on_time(ql, qr, scales, backend=backend)
    assert cond.covars.dtype == torch.float32
    assert bool((torch.linalg.eigvalsh(cond.covars.double()) > 0).all())
    sigma = covariance_4d(ql, qr, scales)  # float32
    b, c = sigma[:, :3, 3], sigma[:, 3, 3]
    schur = sigma[:, :3, :3] - b[:, :, None] * b[:, None, :] / c[:, None, None]
    assert float((torch.linalg.eigvalsh(schur.double())[:, 0] <= 0).float().mean()) > 0.3
    exact = condition_on_time(ql.double(), qr.double(), scales.double()).covars
    rel = (cond.covars.double() - exact).abs().amax((1, 2)) / torch.linalg.eigvalsh(exact)[:, 2]
    assert float(rel.max()) < 1e-3


def test_4d_density_is_temporal_factor_times_sliced_density():
    p = gaussians_4d(n=20, seed=4)
    sigma = covariance_4d(p["quats_left"], p["quats_right"], p["scales4"]).detach()
    mu = p["means4"].detach()
    g = torch.Generator().manual_seed(5)
    for _ in range(5):
        t = float(torch.rand((), generator=g, dtype=F64))
        x = mu[:, :3] + 0.05 * torch.randn(20, 3, generator=g, dtype=F64)
        s = call(p, t, cull_threshold=0.0)
        d4 = torch.distributions.MultivariateNormal(mu, covariance_matrix=sigma)
        d1 = torch.distributions.Normal(mu[:, 3], sigma[:, 3, 3].sqrt())
        d3 = torch.distributions.MultivariateNormal(s.means.detach(), covariance_matrix=s.covars.detach())
        xt = torch.cat([x, torch.full((20, 1), t, dtype=F64)], -1)
        torch.testing.assert_close(d4.log_prob(xt), d1.log_prob(torch.full((20,), t, dtype=F64)) + d3.log_prob(x),
                                   rtol=1e-10, atol=1e-10)
        # unnormalised (what splatting evaluates): exp(-d4' S4^-1 d4 / 2) = factor * exp(-dx' S3^-1 dx / 2)
        d = xt - mu
        q4 = (d[:, None] @ torch.linalg.solve(sigma, d[..., None]))[:, 0, 0]
        dx = x - s.means.detach()
        q3 = (dx[:, None] @ torch.linalg.solve(s.covars.detach(), dx[..., None]))[:, 0, 0]
        factor = s.opacities.detach() / p["opacities"].detach()
        torch.testing.assert_close(torch.exp(-0.5 * q4), factor * torch.exp(-0.5 * q3), rtol=1e-10, atol=1e-14)


def test_gradcheck_slicing():
    p = gaussians_4d(n=6, seed=6)
    names = ["means4", "quats_left", "quats_right", "scales4", "opacities"]
    time = torch.tensor(0.45, dtype=F64, requires_grad=True)

    def f(*args):
        s = slice_gaussians_4d(*args[:5], args[5], cull_threshold=0.0)
        return s.means, s.covars, s.opacities

    assert gradcheck(f, [p[k] for k in names] + [time], eps=1e-6, atol=1e-8, rtol=1e-6)


def test_gradcheck_slicing_with_culling():
    p = gaussians_4d(n=10, seed=7, time_scale=(0.03, 0.1))
    names = ["means4", "quats_left", "quats_right", "scales4", "opacities"]
    s = call(p, 0.5, cull_threshold=0.05)
    assert 0 < len(s) < 10

    def f(*args):
        out = slice_gaussians_4d(*args, 0.5, cull_threshold=0.05)
        assert torch.equal(out.indices, s.indices)
        return out.means, out.covars, out.opacities

    assert gradcheck(f, [p[k] for k in names], eps=1e-7, atol=1e-8, rtol=1e-6)


# ----------------------------------------------------------------------------- culling and times


def test_culling_keeps_exactly_the_factors_at_or_above_the_threshold():
    p = gaussians_4d(n=400, seed=8, time_scale=(0.02, 0.3))
    sigma = covariance_4d(p["quats_left"], p["quats_right"], p["scales4"]).detach()
    t, threshold = 0.6, 0.2
    factor = torch.exp(-0.5 * (t - p["means4"][:, 3].detach()) ** 2 / sigma[:, 3, 3])
    assert float((factor - threshold).abs().min()) > 1e-9  # no tie the rounding could flip
    s = call(p, t, cull_threshold=threshold)
    expect = (factor >= threshold).nonzero()[:, 0]
    assert 50 < len(expect) < 350
    assert torch.equal(s.indices, expect)
    torch.testing.assert_close(s.opacities, (p["opacities"].detach() * factor)[expect], rtol=1e-12, atol=0)
    full = call(p, t, cull_threshold=0.0)
    assert torch.equal(full.indices, torch.arange(400))
    torch.testing.assert_close(s.means, full.means[expect], rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(s.covars, full.covars[expect], rtol=1e-12, atol=1e-18)


def test_several_times_give_one_record_each():
    p = gaussians_4d(n=60, seed=9, time_scale=(0.02, 0.2))
    times = torch.tensor([0.1, 0.5, 0.9], dtype=F64)
    many = call(p, times)
    assert isinstance(many, list) and len(many) == 3
    for t, s in zip(times.tolist(), many):
        one = call(p, t)
        assert isinstance(one, SlicedGaussians) and torch.equal(one.indices, s.indices)
        for name in ("means", "covars", "opacities"):
            torch.testing.assert_close(getattr(s, name), getattr(one, name), rtol=1e-12, atol=1e-18)
    assert len({len(s) for s in many}) > 1  # each time keeps its own set
    one = call(p, torch.tensor(0.5, dtype=F64))
    assert isinstance(one, SlicedGaussians) and torch.equal(one.indices, many[1].indices)


def test_no_gaussians():
    p = {k: v[:0].detach() for k, v in gaussians_4d(n=3).items()}
    s = call(p, 0.5)
    assert s.means.shape == (0, 3) and s.covars.shape == (0, 3, 3) and s.opacities.shape == (0,) and len(s) == 0
    p = gaussians_4d(n=5, time_scale=(0.01, 0.02))
    s = call(p, 50.0)  # far from every mu_t: all culled
    assert len(s) == 0 and s.covars.shape == (0, 3, 3)
    (s.means.sum() + s.covars.sum() + s.opacities.sum()).backward()
    assert float(p["quats_left"].grad.abs().sum()) == 0.0


def test_gather_reads_kept_rows_of_colours_and_split_sh():
    p = gaussians_4d(n=50, seed=10, time_scale=(0.02, 0.1))
    s = call(p, 0.5)
    colours = torch.rand(50, 3, dtype=F64)
    torch.testing.assert_close(s.gather(colours), colours[s.indices])
    sh0, shN = torch.rand(50, 1, 3, dtype=F64), torch.rand(50, 3, 3, dtype=F64)
    a, b = s.gather((sh0, shN))
    assert torch.equal(a, sh0[s.indices]) and torch.equal(b, shN[s.indices])


# ----------------------------------------------------------------------------- rendering


def camera(width=48, height=40):
    f = 1.1 * width
    K = torch.tensor([[[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]]], dtype=F64)
    return torch.eye(4, dtype=F64)[None], K, width, height


def render_sliced(p, colors, t, backend, cull_threshold=CULL_THRESHOLD):
    viewmats, Ks, W, H = camera()
    for v in list(p.values()) + [colors]:
        v.grad = None
    s = call(p, t, cull_threshold=cull_threshold)
    render, alpha, _ = rasterize_gaussians(s.means, None, None, s.opacities, s.gather(colors), viewmats, Ks, W, H,
                                           covars=s.covars, backend=backend)
    g = torch.Generator().manual_seed(11)
    ((render * torch.randn(render.shape, generator=g, dtype=F64)).sum() + alpha.sum()).backward()
    grads = {k: v.grad.clone() for k, v in p.items()}
    grads["colors"] = colors.grad.clone()
    return render.detach(), alpha.detach(), grads, s


def test_sliced_model_renders_the_same_on_reference_and_cpu():
    p = gaussians_4d(n=80, seed=12, time_scale=(0.05, 0.3))
    colors = torch.rand(80, 3, dtype=F64, requires_grad=True)
    ref = render_sliced(p, colors, 0.4, "reference")
    cpu = render_sliced(p, colors, 0.4, "cpu")
    assert 0 < len(ref[3]) < 80 and float(ref[1].max()) > 0.3
    torch.testing.assert_close(cpu[0], ref[0], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(cpu[1], ref[1], rtol=1e-9, atol=1e-9)
    for name in ref[2]:
        torch.testing.assert_close(cpu[2][name], ref[2][name], rtol=1e-9, atol=1e-9, msg=name)


def test_default_culling_changes_neither_render_nor_gradients():
    p = gaussians_4d(n=80, seed=13, time_scale=(0.03, 0.2))
    colors = torch.rand(80, 3, dtype=F64, requires_grad=True)
    culled = render_sliced(p, colors, 0.5, "cpu")
    kept_all = render_sliced(p, colors, 0.5, "cpu", cull_threshold=0.0)
    assert len(culled[3]) < 60 and len(kept_all[3]) == 80
    torch.testing.assert_close(culled[0], kept_all[0], rtol=0, atol=1e-14)
    for name in culled[2]:
        torch.testing.assert_close(culled[2][name], kept_all[2][name], rtol=0, atol=1e-13, msg=name)


@pytest.mark.cuda
def test_sliced_model_renders_on_cuda_like_the_reference():
    """Slicing on CUDA tensors, rendered by gsplat (cuda backend), against slicing + the reference on the
    CPU (float32; tolerances of tests/rasterizer/test_cuda.py)."""
    p = gaussians_4d(n=200, seed=21, dtype=torch.float32, time_scale=(0.05, 0.3))
    colors = torch.rand(200, 3, generator=torch.Generator().manual_seed(22))
    viewmats, Ks, W, H = camera()

    def run(device, backend):
        leaves = {k: v.detach().to(device).requires_grad_(True) for k, v in p.items()}
        s = call(leaves, 0.4)
        render, alpha, _ = rasterize_gaussians(s.means, None, None, s.opacities, s.gather(colors.to(device)),
                                               viewmats.float().to(device), Ks.float().to(device), W, H,
                                               covars=s.covars, backend=backend)
        (render.square().sum() + alpha.sum()).backward()
        return render.detach().cpu(), alpha.detach().cpu(), {k: v.grad.cpu() for k, v in leaves.items()}, s

    ref, cuda = run("cpu", "reference"), run("cuda", "cuda")
    assert torch.equal(cuda[3].indices.cpu(), ref[3].indices) and 0 < len(ref[3]) < 200
    assert (cuda[0] - ref[0]).abs().mean() < 1e-4 and (cuda[0] - ref[0]).abs().max() < 2e-2
    assert (cuda[1] - ref[1]).abs().max() < 2e-2
    for name in p:
        err = (cuda[2][name] - ref[2][name]).norm() / ref[2][name].norm()
        assert err < 1e-2, f"{name} gradient relative error {err:.3g}"


# ----------------------------------------------------------------------------- 4D-Rotor rotors


def valid_rotors(n, seed):
    """Unit rotors satisfying s p - b_xy b_zw + b_xz b_yw - b_xw b_yz = 0, drawn without the quaternion
    map: the constraint is r' Q r with Q's eigenvalues +-1/2, so r = (x + y) / sqrt(2) with x, y unit
    vectors of its two eigenspaces."""
    Q = torch.zeros(8, 8, dtype=F64)
    for i, j, v in ((0, 7, 1), (1, 6, -1), (2, 5, 1), (3, 4, -1)):
        Q[i, j] = Q[j, i] = v / 2
    w, V = torch.linalg.eigh(Q)
    g = torch.Generator().manual_seed(seed)
    x = unit(torch.randn(n, 4, generator=g, dtype=F64)) @ V[:, w > 0].T
    y = unit(torch.randn(n, 4, generator=g, dtype=F64)) @ V[:, w < 0].T
    r = (x + y) / math.sqrt(2)
    assert float(rotor_constraint(r).abs().max()) < 1e-15
    return r


def project_like_4d_rotor(r):
    """4D-Rotor's normalisation of raw parameters, from its description: move r along its dual J r (s <-> p,
    b_xy <-> -b_zw, b_xz <-> b_yw, b_xw <-> -b_yz) until the constraint is zero, then divide by |r|."""
    s, bxy, bxz, bxw, byz, byw, bzw, p = r.unbind(-1)
    dual = torch.stack([p, -bzw, byw, -byz, -bxw, bxz, -bxy, s], -1)
    c = rotor_constraint(r)[..., None]
    l2 = (r * r).sum(-1, keepdim=True)
    # constraint(r + d J r) = c (1 + d^2) + d l2 = 0, the root of smaller size
    delta = (torch.sqrt(l2 * l2 - 4 * c * c) - l2) / (2 * c)
    out = r + delta * dual
    return out / out.norm(dim=-1, keepdim=True)


def test_rotor_matrix_equals_two_quaternion_matrix():
    r = valid_rotors(500, seed=14)
    M = rotor_to_rotmat4(r)
    torch.testing.assert_close(M @ M.transpose(-1, -2), torch.eye(4, dtype=F64).expand(500, 4, 4), rtol=0, atol=1e-14)
    ql, qr = rotor_to_quats(r)
    torch.testing.assert_close(rotmat4_from_quats(ql, qr), M, rtol=0, atol=1e-14)
    torch.testing.assert_close(ql.norm(dim=-1), torch.ones(500, dtype=F64), rtol=0, atol=1e-14)
    back = quats_to_rotor(ql, qr)
    torch.testing.assert_close(back, r, rtol=0, atol=1e-14)


def test_quaternions_to_rotor_and_back():
    g = torch.Generator().manual_seed(15)
    ql, qr = torch.randn(2, 500, 4, generator=g, dtype=F64) * 2.5
    r = quats_to_rotor(ql, qr)
    torch.testing.assert_close(r.norm(dim=-1), torch.ones(500, dtype=F64), rtol=0, atol=1e-14)
    assert float(rotor_constraint(r).abs().max()) < 1e-15
    torch.testing.assert_close(rotor_to_rotmat4(r), rotmat4_from_quats(ql, qr), rtol=0, atol=1e-14)
    bl, br = rotor_to_quats(r)
    torch.testing.assert_close(bl, unit(ql), rtol=0, atol=1e-14)
    torch.testing.assert_close(br, unit(qr), rtol=0, atol=1e-14)


def test_raw_4d_rotor_parameters_give_the_rotation_4d_rotor_renders():
    g = torch.Generator().manual_seed(16)
    raw = torch.randn(500, 8, generator=g, dtype=F64) * 0.7
    assert float(rotor_constraint(raw).abs().min()) > 1e-3  # not rotations as they are
    rendered_by_4d_rotor = rotor_to_rotmat4(project_like_4d_rotor(raw))
    torch.testing.assert_close(rotmat4_from_quats(*rotor_to_quats(raw)), rendered_by_4d_rotor, rtol=0, atol=1e-13)


def test_rotor_halves_and_a_plane_rotation():
    r = valid_rotors(10, seed=17)
    h1, h2 = rotor_to_4drotor_halves(r)
    torch.testing.assert_close(h1, r[:, [0, 1, 2, 4]], rtol=0, atol=0)  # (s, b_xy, b_xz, b_yz)
    torch.testing.assert_close(h2, r[:, [3, 5, 6, 7]], rtol=0, atol=0)  # (b_xw, b_yw, b_zw, p)
    assert torch.equal(rotor_from_4drotor_halves(h1, h2), r)
    theta = 0.8  # 4D-Rotor's xy rotor turns x towards -y
    r = torch.tensor([[math.cos(theta / 2), math.sin(theta / 2), 0, 0, 0, 0, 0, 0]], dtype=F64)
    expect = torch.eye(4, dtype=F64)
    expect[:2, :2] = torch.tensor([[math.cos(theta), math.sin(theta)], [-math.sin(theta), math.cos(theta)]], dtype=F64)
    torch.testing.assert_close(rotor_to_rotmat4(r)[0], expect, rtol=0, atol=1e-15)
    torch.testing.assert_close(rotmat4_from_quats(*rotor_to_quats(r))[0], expect, rtol=0, atol=1e-15)


def test_slicing_imported_rotors_matches_4d_rotor_slicing():
    """4D-Rotor's slice: Sigma = M S S^T M^T, Sigma3 = Sigma_xyz - Sigma_xyz,t Sigma_t,xyz / Sigma_tt, speed
    Sigma_xyz,t / Sigma_tt; the same from the converted quaternions."""
    g = torch.Generator().manual_seed(18)
    n = 50
    raw = torch.randn(n, 8, generator=g, dtype=F64)
    scales = torch.rand(n, 4, generator=g, dtype=F64) * 0.3 + 0.05
    M = rotor_to_rotmat4(project_like_4d_rotor(raw)) * scales[:, None, :]
    sigma = M @ M.transpose(-1, -2)
    ql, qr = rotor_to_quats(raw)
    cond = condition_on_time(ql, qr, scales)
    b, c = sigma[:, :3, 3], sigma[:, 3, 3]
    torch.testing.assert_close(cond.velocities, b / c[:, None], rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(cond.covars, sigma[:, :3, :3] - b[:, :, None] * b[:, None] / c[:, None, None],
                               rtol=1e-10, atol=1e-14)


def test_rotor_with_a_zero_quaternion_is_refused():
    r = torch.tensor([[0.5, 0, 0, 0, 0, 0, 0, 0.5]], dtype=F64)  # q_l = (s - p, ...) = 0
    with pytest.raises(RasterizerInputError, match="zero left quaternion"):
        rotor_to_quats(r)
    with pytest.raises(RasterizerInputError, match=r"`rotors` must be a floating-point tensor \[..., 8\]"):
        rotor_to_quats(torch.zeros(3, 7, dtype=F64))
    with pytest.raises(RasterizerInputError, match="`quats_right` must be"):
        quats_to_rotor(torch.ones(3, 4, dtype=F64), torch.ones(3, 4, dtype=torch.int64))


# ----------------------------------------------------------------------------- spherindrical harmonics


def sh_scene(n=25, seed=19, blocks=3, degree=2):
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(n, 3, generator=g, dtype=F64) + torch.tensor([0, 0, 4.0], dtype=F64)
    mean_times = torch.rand(n, generator=g, dtype=F64)
    coeffs = torch.randn(n, blocks, (degree + 1) ** 2, 3, generator=g, dtype=F64) * 0.3
    viewmats, _, _, _ = camera()
    viewmats = torch.cat([viewmats, viewmats.clone()])
    viewmats[1, :3, 3] = torch.tensor([0.3, -0.2, 0.5])
    return means, mean_times, coeffs, viewmats


def test_time_degree_zero_is_the_3d_colour():
    means, mean_times, coeffs, viewmats = sh_scene()
    got = spherindrical_to_color(2, 0, means, mean_times, coeffs, viewmats, 0.3)
    torch.testing.assert_close(got, sh_to_color(2, means, coeffs[:, 0], viewmats), rtol=0, atol=1e-15)


def test_time_blocks_are_weighted_by_cosines():
    means, mean_times, coeffs, viewmats = sh_scene()
    times = torch.tensor([0.2, 0.75], dtype=F64)
    got = spherindrical_to_color(2, 2, means, mean_times, coeffs, viewmats, times, period=1.5)
    for c in range(2):
        dt = times[c] - mean_times
        weights = [torch.cos(2 * math.pi * n * dt / 1.5)[:, None, None] for n in range(3)]  # n = 0: ones
        mixed = sum(w * coeffs[:, n] for n, w in enumerate(weights))
        torch.testing.assert_close(got[c], sh_to_color(2, means, mixed, viewmats[c:c + 1])[0], rtol=1e-13, atol=1e-14)


def test_gradcheck_spherindrical():
    means, mean_times, coeffs, viewmats = sh_scene(n=4, degree=1)
    args = [x.clone().requires_grad_(True) for x in (means, mean_times, coeffs)]
    t = torch.tensor([0.3, 0.6], dtype=F64, requires_grad=True)
    assert gradcheck(lambda m, mt, co, tt: spherindrical_to_color(1, 2, m, mt, co, viewmats, tt), args + [t],
                     eps=1e-6, atol=1e-8)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("name,mutate,pattern", [
    ("means4", lambda p: p.update(means4=p["means4"][:, :3]), r"`means4` has shape \[8, 3\], expected \[\*, 4\]"),
    ("quats_left", lambda p: p["quats_left"].data[2].zero_(), r"`quats_left` has zero-norm rows \[2\]"),
    ("quats_right", lambda p: p.update(quats_right=p["quats_right"].float()),
     r"`quats_right` has dtype torch.float32 but `means4`"),
    ("scales4", lambda p: p["scales4"].data[5, 3].fill_(0.0), r"`scales4` has values <= 0 \(first rows: \[5\]\)"),
    ("scales4", lambda p: p["scales4"].data[1, 0].fill_(-1.0), r"`scales4` has values <= 0"),
    ("opacities", lambda p: p["opacities"].data[0].fill_(1.5), r"`opacities` has values outside \[0, 1\]"),
    ("means4", lambda p: p["means4"].data[3, 3].fill_(float("nan")), r"`means4` contains NaN or Inf"),
])
def test_bad_gaussians_are_named(name, mutate, pattern):
    p = gaussians_4d(n=8)
    mutate(p)
    with pytest.raises(RasterizerInputError, match="slice_gaussians_4d: " + pattern):
        call(p, 0.5)


@pytest.mark.parametrize("times,pattern", [
    (float("nan"), "`times` is nan"),
    ("0.5", "`times` must be a float or a 1-D tensor"),
    (torch.zeros(2, 2, dtype=F64), r"`times` has shape \[2, 2\]"),
    (torch.zeros(0, dtype=F64), "`times` holds zero times"),
    (torch.tensor([0.1, float("inf")], dtype=F64), "`times` contains NaN or Inf"),
    (torch.tensor([1, 2]), "`times` must be a floating-point tensor"),
])
def test_bad_times_are_named(times, pattern):
    with pytest.raises(RasterizerInputError, match=pattern):
        call(gaussians_4d(n=8), times)


@pytest.mark.parametrize("threshold", [-0.1, 1.5, "x", None])
def test_bad_threshold(threshold):
    with pytest.raises(RasterizerInputError, match="`cull_threshold`"):
        call(gaussians_4d(n=8), 0.5, cull_threshold=threshold)


def test_bad_spherindrical_inputs():
    means, mean_times, coeffs, viewmats = sh_scene()
    with pytest.raises(RasterizerInputError, match="`time_degree` must be an int in 0..2"):
        spherindrical_to_color(2, 3, means, mean_times, coeffs, viewmats, 0.5)
    with pytest.raises(RasterizerInputError, match=r"`coeffs` has shape \[25, 2, 9, 3\]"):
        spherindrical_to_color(2, 2, means, mean_times, coeffs[:, :2], viewmats, 0.5)
    with pytest.raises(RasterizerInputError, match=r"`times` has shape \[3\]"):
        spherindrical_to_color(2, 1, means, mean_times, coeffs, viewmats, torch.zeros(3, dtype=F64))
    with pytest.raises(RasterizerInputError, match="`period` must be a positive number"):
        spherindrical_to_color(2, 1, means, mean_times, coeffs, viewmats, 0.5, period=0.0)


def test_fused_cpu_conditioning_blocks_and_float32():
    """The Numba kernels over several blocks (N not a multiple of the block) and in float32 storage: equal to
    the PyTorch path within float32 rounding, forward and backward; a CUDA-only backend name is refused."""
    from rasterizer.spacetime.cpu_kernels import BLOCK

    n = 3 * BLOCK + 17
    g = torch.Generator().manual_seed(31)
    ql, qr = torch.randn(2, n, 4, generator=g)
    s = torch.exp(torch.randn(n, 4, generator=g) - 2)
    w = [torch.randn(n, 3, 3, generator=g), torch.randn(n, 3, generator=g), torch.randn(n, generator=g)]
    results = []
    for backend in ("torch", "cpu"):
        leaves = [x.clone().requires_grad_(True) for x in (ql, qr, s)]
        out = condition_on_time(*leaves, backend=backend)
        outs = (out.covars, out.velocities, out.time_variances)
        sum((o * wi).sum() for o, wi in zip(outs, w)).backward()
        results.append(([o.detach() for o in outs], [x.grad for x in leaves]))
    for a, b in zip(results[0][0] + results[0][1], results[1][0] + results[1][1]):
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(b, a, rtol=2e-4, atol=2e-5 * float(a.abs().max()))
    with pytest.raises(ValueError, match="backend must be one of"):
        condition_on_time(ql, qr, s, backend="cuda")


def test_fused_time_variances_match_the_conditioning():
    from rasterizer.spacetime.covariance import time_variances

    g = torch.Generator().manual_seed(32)
    ql, qr = torch.randn(2, 600, 4, generator=g, dtype=F64)
    ql[3] *= 1e-13  # below the normalisation floor
    s = torch.exp(torch.randn(600, 4, generator=g, dtype=F64) - 2)
    with torch.no_grad():
        fused = time_variances(ql, qr, s)
    exact = condition_on_time_reference(ql, qr, s).time_variances
    torch.testing.assert_close(fused, exact, rtol=1e-12, atol=0)
    leaves = [x.clone().requires_grad_(True) for x in (ql, qr, s)]
    assert time_variances(*leaves).requires_grad  # with gradients: the PyTorch rows
