"""rasterizer.tracing: Gaussians and surfels along arbitrary rays (secondary rays of the hybrid renderer).

The brute-force reference search is the specification; the cpu grid walk must give the same candidate
lists, the same fused forward and (through the shared PyTorch evaluation) the same gradients."""

from __future__ import annotations

import math

import pytest
import torch

from rasterizer.reference.composite import blend_weights
from rasterizer.reference.sh import eval_sh
from rasterizer.tracing import (build_gaussian_accel, build_surfel_accel, candidates_cpu, candidates_reference,
                                trace_gaussians, trace_surfels)
from rasterizer.tracing.evaluate import composite_candidates
from rasterizer.tracing.geometry import (GAUSSIAN, SURFEL, gaussian_frames, ray_response, surfel_frames)
from rasterizer.validate import RasterizerInputError

F64 = torch.float64


def scene(n=300, seed=0, sh_degree=3, surfels=False, outliers=True):
    g = torch.Generator().manual_seed(seed)
    u = lambda *s: torch.rand(*s, generator=g, dtype=F64)  # noqa: E731
    means = u(n, 3) * 2 - 1
    quats = torch.randn(n, 4, generator=g, dtype=F64)
    scales = torch.exp(u(n, 2 if surfels else 3) * 1.9 - 4.0) * 2
    opacities = u(n) * 0.9 + 0.05
    if outliers:  # loose primitives: far away ones and huge ones
        means[:3] = torch.tensor([[30.0, 0, 0], [0, -40, 2], [0, 0, 50]], dtype=F64)
        scales[3:5] = 3.0
        opacities[5] = 0.001  # invisible (below 1/255)
    colors = torch.randn(n, (sh_degree + 1) ** 2, 3, generator=g, dtype=F64) * 0.3
    return means, quats, scales, opacities, colors


def rays(R=150, seed=1):
    g = torch.Generator().manual_seed(seed)
    o = torch.randn(R, 3, generator=g, dtype=F64) * 0.4 + torch.tensor([0, 0, -3.0], dtype=F64)
    d = torch.randn(R, 3, generator=g, dtype=F64) * 0.3 + torch.tensor([0, 0, 1.0], dtype=F64)
    d[::7] = torch.randn(len(d[::7]), 3, generator=g, dtype=F64)  # any direction, also away from the scene
    d = torch.nn.functional.normalize(d, dim=-1)
    t_min = torch.rand(R, generator=g, dtype=F64) * 2.5
    t_max = torch.full((R,), math.inf, dtype=F64)
    t_max[::3] = t_min[::3] + torch.rand(len(t_max[::3]), generator=g, dtype=F64) * 2
    return o, d, t_min, t_max


@pytest.mark.parametrize("kind", ["gaussians", "covars", "surfels"])
@pytest.mark.parametrize("seed", [0, 1])
def test_cpu_candidates_equal_reference(kind, seed):
    means, quats, scales, opac, _ = scene(seed=seed, surfels=kind == "surfels")
    o, d, lo, hi = rays(seed=seed + 10)
    if kind == "surfels":
        A, k, accel = surfel_frames(quats, scales), SURFEL, build_surfel_accel(means, quats, scales, opac)
    elif kind == "covars":
        A0 = gaussian_frames(quats, scales)
        covars = torch.linalg.inv(A0.transpose(-1, -2) @ A0)
        A, k, accel = gaussian_frames(None, None, covars), GAUSSIAN, build_gaussian_accel(means, None, None, opac,
                                                                                            covars)
    else:
        A, k, accel = gaussian_frames(quats, scales), GAUSSIAN, build_gaussian_accel(means, quats, scales, opac)
    assert len(accel.loose) >= 5 and accel.n_cells > 8  # both paths of the walk are exercised
    ids_r, n_r = candidates_reference(means, A, opac, k, o, d, lo, hi)
    ids_c, n_c = candidates_cpu(accel, o, d, lo, hi)
    assert n_r.sum() > 500
    assert torch.equal(n_r, n_c)
    assert torch.equal(ids_r, ids_c)
    # lists are sorted by t*, within (t_min, t_max), alpha >= 1/255
    t, m = ray_response(means[ids_r.clamp(min=0)], A[ids_r.clamp(min=0)], o[:, None], d[:, None], k)
    valid = ids_r >= 0
    assert bool(((t[:, 1:] >= t[:, :-1]) | ~valid[:, 1:]).all())
    assert bool(((t > lo[:, None]) & (t < hi[:, None]) | ~valid).all())


def test_candidate_overflow_rerun():
    """Rays with more candidates than the first capacity are searched again (the long lists are whole)."""
    n = 400
    means = torch.zeros(n, 3, dtype=F64)
    means[:, 2] = torch.linspace(0, 40, n, dtype=F64)
    quats = torch.tensor([[1.0, 0, 0, 0]], dtype=F64).repeat(n, 1)
    scales = torch.full((n, 3), 0.05, dtype=F64)
    opac = torch.full((n,), 0.02, dtype=F64)  # faint: the light is never spent
    o = torch.tensor([[0, 0, -1.0], [0.01, 0, -1.0], [5, 5, -1]], dtype=F64)
    d = torch.tensor([[0, 0, 1.0]] * 3, dtype=F64)
    lo, hi = torch.zeros(3, dtype=F64), torch.full((3,), math.inf, dtype=F64)
    A = gaussian_frames(quats, scales)
    ids_r, n_r = candidates_reference(means, A, opac, GAUSSIAN, o, d, lo, hi)
    ids_c, n_c = candidates_cpu(build_gaussian_accel(means, quats, scales, opac), o, d, lo, hi)
    assert n_r.tolist() == [400, 400, 0]
    assert torch.equal(ids_r, ids_c) and torch.equal(n_r, n_c)


@pytest.mark.parametrize("sh_degree", [None, 0, 1, 3])
def test_fused_forward_equals_reference(sh_degree):
    means, quats, scales, opac, sh = scene(seed=3, sh_degree=max(sh_degree or 0, 0))
    colors = torch.rand(len(means), 3, dtype=F64) if sh_degree is None else sh
    o, d, lo, hi = rays(seed=4)
    ref = trace_gaussians(means, quats, scales, opac, colors, o, d, lo, hi, sh_degree=sh_degree, backend="reference")
    with torch.no_grad():
        cpu = trace_gaussians(means, quats, scales, opac, colors, o, d, lo, hi, sh_degree=sh_degree, backend="cpu")
    assert ref[1].min() < 0.5 and ref[0].abs().max() > 0.1
    for a, b in zip(ref, cpu):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_fused_forward_surfels_and_split_sh():
    means, quats, scales, opac, sh = scene(seed=5, surfels=True)
    o, d, lo, hi = rays(seed=6)
    split = (sh[:, :1], sh[:, 1:])
    ref = trace_surfels(means, quats, scales, opac, sh, o, d, lo, hi, sh_degree=3, backend="reference")
    with torch.no_grad():
        cpu = trace_surfels(means, quats, scales, opac, split, o, d, lo, hi, sh_degree=3, backend="cpu")
    assert ref[1].min() < 0.9
    for a, b in zip(ref, cpu):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("kind", ["gaussians", "covars", "surfels"])
def test_gradients_cpu_equal_reference(kind):
    means, quats, scales, opac, sh = scene(n=120, seed=7, surfels=kind == "surfels", sh_degree=2)
    o, d, lo, hi = rays(R=80, seed=8)
    if kind == "covars":
        A0 = gaussian_frames(quats, scales)
        covars = torch.linalg.inv(A0.transpose(-1, -2) @ A0)
    grads = []
    for backend in ("reference", "cpu"):
        leaves = [x.clone().requires_grad_(True) for x in (means, quats, scales, opac, sh)]
        m, q, s, op, c = leaves
        if kind == "surfels":
            out = trace_surfels(m, q, s, op, c, o, d, lo, hi, sh_degree=2, backend=backend)
        elif kind == "covars":
            cv = covars.clone().requires_grad_(True)
            leaves = [m, cv, op, c]
            out = trace_gaussians(m, None, None, op, c, o, d, lo, hi, sh_degree=2, backend=backend, covars=cv)
        else:
            out = trace_gaussians(m, q, s, op, c, o, d, lo, hi, sh_degree=2, backend=backend)
        w = torch.linspace(0.5, 1.5, 3, dtype=F64)
        loss = (out[0] * w).sum() + (out[1] ** 2).sum() + 0.1 * out[2].sum()
        grads.append(torch.autograd.grad(loss, leaves, allow_unused=True))
    for a, b in zip(*grads):
        assert a is not None and b is not None and a.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_gradcheck_evaluation():
    """float64 gradcheck of the differentiable evaluation (candidate lists fixed), all inputs."""
    g = torch.Generator().manual_seed(11)
    n = 6
    means = (torch.rand(n, 3, generator=g, dtype=F64) - 0.5) * 0.3
    means[:, 2] += torch.linspace(0, 1, n, dtype=F64)
    quats = torch.randn(n, 4, generator=g, dtype=F64)
    scales = torch.rand(n, 3, generator=g, dtype=F64) * 0.2 + 0.15
    opac = torch.rand(n, generator=g, dtype=F64) * 0.5 + 0.3
    sh = torch.randn(n, 4, 3, generator=g, dtype=F64) * 0.2
    o = torch.tensor([[0.0, 0, -2], [0.05, -0.05, -2], [0.1, 0.02, -2]], dtype=F64)
    d = torch.nn.functional.normalize(torch.tensor([[0, 0, 1.0], [0.02, 0.01, 1], [-0.03, 0, 1]], dtype=F64), dim=-1)
    lo, hi = torch.zeros(3, dtype=F64), torch.full((3,), math.inf, dtype=F64)
    ids, counts = candidates_reference(means, gaussian_frames(quats, scales), opac, GAUSSIAN, o, d, lo, hi)
    assert int(counts.min()) >= 3

    def f(m, q, s, op, c):
        rgb, T, dist = composite_candidates(m, gaussian_frames(q, s), op, c, 1, GAUSSIAN, o, d, lo, hi, ids, counts)
        return rgb, T, dist

    assert torch.autograd.gradcheck(f, [x.clone().requires_grad_(True) for x in (means, quats, scales, opac, sh)])

    def fs(m, q, s, op, c):
        return composite_candidates(m, surfel_frames(q, s), op, c, 1, SURFEL, o, d, lo, hi, sids, scounts)

    s2 = scales[:, :2]
    sids, scounts = candidates_reference(means, surfel_frames(quats, s2), opac, SURFEL, o, d, lo, hi)
    assert int(scounts.max()) >= 2
    assert torch.autograd.gradcheck(fs, [x.clone().requires_grad_(True) for x in (means, quats, s2, opac, sh)])


def test_single_gaussian_closed_form():
    """A ray through an isotropic Gaussian's centre: alpha = opacity, t* = distance, colour = SH along d."""
    mu = torch.tensor([[0.3, -0.2, 2.0]], dtype=F64)
    o = torch.tensor([[0.3, -0.2, -1.0], [0.3 + 0.2, -0.2, -1.0]], dtype=F64)
    d = torch.tensor([[0, 0, 1.0], [0, 0, 1.0]], dtype=F64)
    quats = torch.tensor([[0.3, 0.1, -0.5, 0.7]], dtype=F64)
    scales = torch.full((1, 3), 0.1, dtype=F64)
    sh = torch.randn(1, 16, 3, dtype=F64, generator=torch.Generator().manual_seed(0)) * 0.2
    lo, hi = torch.zeros(2, dtype=F64), torch.full((2,), math.inf, dtype=F64)
    for backend in ("reference", "cpu"):
        rgb, T, dist = trace_gaussians(mu, quats, scales, torch.tensor([0.7], dtype=F64), sh, o, d, lo, hi,
                                       sh_degree=3, backend=backend)
        colour = torch.clamp_min(eval_sh(3, d[0], sh[0]) + 0.5, 0)
        torch.testing.assert_close(rgb[0], 0.7 * colour, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(T[0, 0], torch.tensor(0.3, dtype=F64), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(dist[0, 0], torch.tensor(3.0, dtype=F64), rtol=1e-12, atol=1e-12)
        # offset by 2 sigma: alpha = 0.7 exp(-2)
        torch.testing.assert_close(T[1, 0], 1 - 0.7 * torch.exp(torch.tensor(-2.0, dtype=F64)), rtol=1e-12, atol=1e-12)
        # the segment ends before the Gaussian: nothing
        out = trace_gaussians(mu, quats, scales, torch.tensor([0.7], dtype=F64), sh, o, d, lo,
                              torch.full((2,), 2.9, dtype=F64), sh_degree=3, backend=backend)
        assert float(out[1].min()) == 1.0 and float(out[0].abs().max()) == 0.0 and float(out[2].abs().max()) == 0


def test_t_star_minimises_mahalanobis():
    means, quats, scales, opac, _ = scene(n=20, seed=12, outliers=False)
    o, d, _, _ = rays(R=5, seed=13)
    A = gaussian_frames(quats, scales)
    t, m = ray_response(means[None], A[None], o[:, None], d[:, None], GAUSSIAN)
    cov = torch.linalg.inv(A.transpose(-1, -2) @ A)
    ts = torch.linspace(-10, 10, 40001, dtype=F64)
    for r in range(5):
        x = o[r] + ts[:, None] * d[r]  # [T, 3]
        diff = x[:, None] - means[None]  # [T, N, 3]
        maha = torch.einsum("tni,nij,tnj->tn", diff, torch.linalg.inv(cov), diff)
        best = maha.min(0)
        assert bool((m[r] <= best.values + 1e-12).all())  # the closed form is the minimum
        torch.testing.assert_close(m[r], best.values, rtol=1e-5, atol=1e-9)  # the grid's step: 5e-4
        torch.testing.assert_close(t[r], ts[best.indices], rtol=0, atol=1e-3)


def test_surfel_exact_intersection():
    """A surfel in the plane z = 1 (normal +z), scales (0.2, 0.1): a ray hitting it at (0.2, 0.1) in its
    tangent frame has alpha = opacity exp(-(1 + 1) / 2), t* = the plane distance; edge-on rays miss."""
    mu = torch.tensor([[0.0, 0.0, 1.0]], dtype=F64)
    quats = torch.tensor([[1.0, 0, 0, 0]], dtype=F64)
    scales = torch.tensor([[0.2, 0.1]], dtype=F64)
    op = torch.tensor([0.8], dtype=F64)
    col = torch.tensor([[0.2, 0.4, 0.6]], dtype=F64)
    o = torch.tensor([[0.2, 0.1, -1.0], [0.0, 0.0, 0.5]], dtype=F64)
    d = torch.tensor([[0, 0, 1.0], [1.0, 0, 0]], dtype=F64)
    lo, hi = torch.zeros(2, dtype=F64), torch.full((2,), math.inf, dtype=F64)
    for backend in ("reference", "cpu"):
        rgb, T, dist = trace_surfels(mu, quats, scales, op, col, o, d, lo, hi, backend=backend)
        a = 0.8 * math.exp(-1.0)
        torch.testing.assert_close(T[:, 0], torch.tensor([1 - a, 1.0], dtype=F64), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(rgb[0], a * col[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(dist[:, 0], torch.tensor([2.0, 0.0], dtype=F64), rtol=1e-12, atol=1e-12)


def test_early_stop_matches_compositor():
    """A stack of opaque Gaussians: the compositing stops where the rasterizer's blend_weights does."""
    n = 12
    means = torch.zeros(n, 3, dtype=F64)
    means[:, 2] = torch.arange(n, dtype=F64) * 0.5
    quats = torch.tensor([[1.0, 0, 0, 0]], dtype=F64).repeat(n, 1)
    scales = torch.full((n, 3), 0.05, dtype=F64)
    op = torch.full((n,), 0.9, dtype=F64)
    col = torch.rand(n, 3, dtype=F64, generator=torch.Generator().manual_seed(2))
    o, d = torch.tensor([[0, 0, -1.0]], dtype=F64), torch.tensor([[0, 0, 1.0]], dtype=F64)
    lo, hi = torch.zeros(1, dtype=F64), torch.full((1,), math.inf, dtype=F64)
    w, T = blend_weights(torch.full((1, n), 0.9, dtype=F64))
    for backend in ("reference", "cpu"):
        rgb, Tout, _ = trace_gaussians(means, quats, scales, op, col, o, d, lo, hi, backend=backend)
        torch.testing.assert_close(Tout, T, rtol=1e-12, atol=1e-15)
        torch.testing.assert_close(rgb, w @ col, rtol=1e-12, atol=1e-15)
        assert float(Tout) > 1e-4


def test_float32_cpu_close_to_reference():
    means, quats, scales, opac, sh = (x.float() for x in scene(seed=9))
    o, d, lo, hi = (x.float() for x in rays(seed=9))
    ref = trace_gaussians(means, quats, scales, opac, sh, o, d, lo, hi, sh_degree=3, backend="reference")
    with torch.no_grad():
        cpu = trace_gaussians(means, quats, scales, opac, sh, o, d, lo, hi, sh_degree=3, backend="cpu")
    for a, b in zip(ref, cpu):
        assert a.dtype == torch.float32 and b.dtype == torch.float32
        assert float((a - b).abs().max()) < 1e-3


def test_no_gaussians_and_no_rays():
    e = torch.zeros(0, 3, dtype=F64)
    o, d, lo, hi = rays(R=4)
    out = trace_gaussians(e, torch.zeros(0, 4, dtype=F64), e.clone(), torch.zeros(0, dtype=F64), e.clone(), o, d,
                          lo, hi)
    assert float(out[1].min()) == 1.0 and out[0].shape == (4, 3)
    means, quats, scales, opac, sh = scene(n=10)
    out = trace_gaussians(means, quats, scales, opac, sh, o[:0], d[:0], lo[:0], hi[:0], sh_degree=3)
    assert out[0].shape == (0, 3) and out[1].shape == (0, 1)


def test_bad_inputs():
    means, quats, scales, opac, sh = scene(n=10)
    o, d, lo, hi = rays(R=4)
    with pytest.raises(RasterizerInputError, match="unit"):
        trace_gaussians(means, quats, scales, opac, sh, o, d * 2, lo, hi, sh_degree=3)
    with pytest.raises(RasterizerInputError, match="origins"):
        trace_gaussians(means, quats, scales, opac, sh, o[:, :2], d, lo, hi, sh_degree=3)
    with pytest.raises(RasterizerInputError, match="sh_degree"):
        trace_gaussians(means, quats, scales, opac, sh[:, :4], o, d, lo, hi, sh_degree=3)
    with pytest.raises(RasterizerInputError, match="backend"):
        trace_gaussians(means, quats, scales, opac, sh, o, d, lo, hi, sh_degree=3, backend="cuda")
    with pytest.raises(RasterizerInputError, match="opacities"):
        trace_gaussians(means, quats, scales, opac + 1, sh, o, d, lo, hi, sh_degree=3)
    with pytest.raises(RasterizerInputError, match="NaN"):
        trace_gaussians(means, quats, scales, opac, sh, o, d, lo * math.nan, hi, sh_degree=3)
