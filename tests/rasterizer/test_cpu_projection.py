"""The cpu backend's fused Numba projection (rasterizer/cpu/projection.py) against the reference.

Forward outputs and vector-Jacobian products (random cotangents on means2d, conics, depths and, in
antialiased mode, compensations) must equal the reference and its PyTorch autograd, on scenes with
several cameras (one with skew and an off-centre principal point), Gaussians behind the cameras,
outside the field of view (the Jacobian clamp is active), very close to the camera, thin and tiny
ones, unnormalised quaternions and opacities below 1/255.
"""

from __future__ import annotations

import math

import pytest
import torch

from rasterizer.cpu.projection import project as project_cpu
from rasterizer.reference import covariance_from_quat_scale
from rasterizer.reference import project as project_ref

from .scenes import random_scene

W, H = 64, 48
FWD_RTOL = {torch.float64: 1e-10, torch.float32: 1e-5}
GRAD_RTOL = 1e-9


def make_scene(dtype=torch.float64, n=150, n_cams=3, seed=0):
    """means, quats, scales, opacities [N] (float64 leaves converted to dtype), viewmats, Ks."""
    p, viewmats, Ks = random_scene(n=n, width=W, height=H, n_cams=n_cams, dtype=torch.float64, seed=seed)
    means, quats, scales, opac = (p[k].detach().clone() for k in ("means", "quats", "scales", "opacities"))
    g = torch.Generator().manual_seed(seed + 1)
    u = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64)  # noqa: E731
    sign = lambda k: torch.where(u(k) < 0.5, -1.0, 1.0).to(torch.float64)  # noqa: E731
    k = n // 10
    means[:k, 2] = -means[:k, 2]  # behind the cameras
    means[k:2 * k, 0] = means[k:2 * k, 2] * (0.7 + 3 * u(k)) * sign(k)  # |x/z| beyond the clamp limit (0.54)
    means[2 * k:3 * k, 1] = means[2 * k:3 * k, 2] * (0.6 + 3 * u(k)) * sign(k)  # |y/z| beyond (0.47)
    means[3 * k:3 * k + 4, :] = torch.tensor([[0.01, -0.02, 0.05], [0.3, 0.2, 0.05], [-0.1, 0.0, 0.5],
                                              [0.0, 0.0, 0.2]], dtype=torch.float64)  # close to camera 0
    scales[4 * k:5 * k] = torch.stack([0.1 + 0.1 * u(k), 1e-3 * (1 + u(k)), 1e-3 * (1 + u(k))], -1)  # needles
    scales[5 * k:6 * k] = 1e-4 * (1 + u(k, 3))  # tiny (compensation ~ 1e-5)
    scales[6 * k:7 * k, 0] = 1e-3 * (1 + u(k))  # flat discs
    quats[7 * k:8 * k] *= 1e-3 + 100 * u(k, 1)  # unnormalised quaternions
    opac[-5:] = torch.tensor([1e-3, 3e-3, 1.0 / 255.0, 5e-3, 1.0], dtype=torch.float64)
    Ks = Ks.clone()
    if n_cams > 1:
        Ks[1, 0, 1] = 0.7  # skew
        Ks[1, 0, 2] += 5.0
        Ks[1, 1, 2] -= 3.0
        Ks[1, 1, 1] *= 0.9
    cast = lambda t: t.to(dtype)  # noqa: E731
    return cast(means), cast(quats), cast(scales), cast(opac), cast(viewmats), cast(Ks)


def both(means, quats, scales, covars, viewmats, Ks, **kw):
    kw = dict(dict(eps2d=0.3, near_plane=0.01, far_plane=1e10, opacities=None, antialiased=False), **kw)
    ref = project_ref(means, quats, scales, covars, viewmats, Ks, W, H, **kw)
    cpu = project_cpu(means, quats, scales, covars, viewmats, Ks, W, H, **kw)
    return ref, cpu


def assert_rel(actual, expected, rtol, what):
    """Elementwise |a - e| <= rtol (|e| + max|e|): relative to each entry, floored at the tensor's scale."""
    scale = expected.abs().max().item() if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=rtol * max(scale, 1e-300),
                               msg=lambda m: f"{what}: {m}")


def assert_forward_equal(ref, cpu, dtype, ref64=None):
    """cpu == ref to FWD_RTOL. In float32, ``ref64`` (the reference run in float64) measures the float32
    reference's own rounding error, which is added to the tolerance (cancellation in det(Sigma2) makes
    compensations of thin Gaussians lose digits in float32; the kernel computes in float64)."""
    for name in ("means2d", "conics", "depths", "compensations"):
        a, e = getattr(cpu, name), getattr(ref, name)
        assert a.dtype == e.dtype and a.shape == e.shape, name
        if ref64 is None:
            assert_rel(a, e, FWD_RTOL[dtype], name)
            continue
        e64 = getattr(ref64, name)
        tol = FWD_RTOL[dtype] * (e.abs() + e.abs().max()) + 2 * (e.double() - e64).abs()
        assert ((a.double() - e.double()).abs() <= tol).all(), name
        assert_rel(a.double(), e64, 1e-6, name + " vs float64 reference")
    assert cpu.radii.dtype == torch.int32 and cpu.radii.shape == ref.radii.shape
    if dtype == torch.float64:
        assert torch.equal(cpu.radii, ref.radii)
    else:  # thresholds (ceil, opacity = 1/255 exactly, on-image test) may flip where float32 rounds
        diff = (cpu.radii - ref.radii).abs()
        flipped = (diff > 0).any(-1).sum().item()
        assert flipped <= max(3, ref.depths.numel() // 100) and diff.max() <= 1


def vjp(proj, inputs, cotangents):
    outs = [proj.means2d, proj.conics, proj.depths, proj.compensations]
    pairs = [(o, v) for o, v in zip(outs, cotangents) if o.requires_grad]
    return torch.autograd.grad([o for o, _ in pairs], inputs, [v for _, v in pairs], allow_unused=True,
                               retain_graph=True)


def random_cotangents(proj, seed=3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype)
            for t in (proj.means2d, proj.conics, proj.depths, proj.compensations)]


def leaves(*ts):
    return [t.detach().clone().requires_grad_(True) for t in ts]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("antialiased", [False, True])
@pytest.mark.parametrize("use_covars", [False, True])
def test_forward_matches_reference(dtype, antialiased, use_covars):
    means, quats, scales, opac, viewmats, Ks = make_scene(dtype)
    covars = covariance_from_quat_scale(quats, scales) if use_covars else None
    q, s = (None, None) if use_covars else (quats, scales)
    with torch.no_grad():
        ref, cpu = both(means, q, s, covars, viewmats, Ks, opacities=opac, antialiased=antialiased)
        ref64 = None
        if dtype != torch.float64:
            d = lambda t: None if t is None else t.double()  # noqa: E731
            ref64 = project_ref(d(means), d(q), d(s), d(covars), d(viewmats), d(Ks), W, H, eps2d=0.3,
                                near_plane=0.01, far_plane=1e10, opacities=d(opac), antialiased=antialiased)
    assert_forward_equal(ref, cpu, dtype, ref64)
    assert (ref.radii == 0).any() and (ref.radii > 0).any()
    if not antialiased:
        assert torch.equal(cpu.compensations, torch.ones_like(cpu.compensations))


@pytest.mark.parametrize("antialiased", [False, True])
@pytest.mark.parametrize("use_covars", [False, True])
@pytest.mark.parametrize("with_opacities", [False, True])
def test_vjp_matches_reference_autograd(antialiased, use_covars, with_opacities):
    means, quats, scales, opac, viewmats, Ks = make_scene(torch.float64, seed=1)
    opac = opac if with_opacities else None
    if use_covars:
        means, covars = leaves(means, covariance_from_quat_scale(quats, scales))
        inputs, args = [means, covars], (means, None, None, covars)
    else:
        means, quats, scales = leaves(means, quats, scales)
        inputs, args = [means, quats, scales], (means, quats, scales, None)
    ref, cpu = both(*args, viewmats, Ks, opacities=opac, antialiased=antialiased)
    assert_forward_equal(ref, cpu, torch.float64)
    assert cpu.compensations.requires_grad == ref.compensations.requires_grad == antialiased
    # the scene exercises what it should (camera 0 is the identity): clamp active, some behind the camera
    x_over_z = means[:, 0] / means[:, 2]
    assert (x_over_z.abs() > 0.55).sum() >= 5 and (means[:, 2] < 0).sum() >= 5 and (cpu.radii == 0).any()
    cot = random_cotangents(ref)
    grads = vjp(cpu, inputs, cot)
    for name, a, e in zip(["means", "quats/covars", "scales"], grads, vjp(ref, inputs, cot)):
        assert_rel(a, e, GRAD_RTOL, name)
    culled = (cpu.radii == 0).all(-1).all(0)  # culled in every camera: no gradient, despite their cotangents
    assert culled.sum() >= 5 and float(grads[0][culled].abs().max()) == 0.0
    assert (grads[0][~culled].abs().sum(-1) > 0).all()


def test_vjp_single_output_cotangents():
    """Each output's cotangent alone (zeros elsewhere), antialiased, quats + scales."""
    means, quats, scales, opac, viewmats, Ks = make_scene(torch.float64, n=60, n_cams=2, seed=2)
    means, quats, scales = leaves(means, quats, scales)
    ref, cpu = both(means, quats, scales, None, viewmats, Ks, opacities=opac, antialiased=True)
    full = random_cotangents(ref, seed=5)
    for i in range(4):
        cot = [c if j == i else torch.zeros_like(c) for j, c in enumerate(full)]
        for a, e in zip(vjp(cpu, [means, quats, scales], cot), vjp(ref, [means, quats, scales], cot)):
            assert_rel(a, e, GRAD_RTOL, f"output {i}")


@pytest.mark.parametrize("antialiased", [False, True])
def test_vjp_zero_cotangent_pairs(antialiased):
    """Pairs (camera, Gaussian) whose cotangents are all zero (culled or hidden: the common case in
    training) are skipped by the kernel; the gradients still equal the reference's, and Gaussians with
    zero cotangents in every camera get exactly zero."""
    means, quats, scales, opac, viewmats, Ks = make_scene(torch.float64, n=120, n_cams=3, seed=6)
    means, quats, scales = leaves(means, quats, scales)
    ref, cpu = both(means, quats, scales, None, viewmats, Ks, opacities=opac, antialiased=antialiased)
    g = torch.Generator().manual_seed(7)
    keep = torch.rand(3, 120, generator=g) < 0.5  # per pair; camera 0 is zero for about half
    keep[:, :10] = False  # Gaussians 0..9: zero in every camera
    cot = [c * keep.view(3, 120, *([1] * (c.dim() - 2))).to(c.dtype) for c in random_cotangents(ref, seed=8)]
    grads = vjp(cpu, [means, quats, scales], cot)
    for name, a, e in zip(["means", "quats", "scales"], grads, vjp(ref, [means, quats, scales], cot)):
        assert_rel(a, e, GRAD_RTOL, name)
        assert float(a[:10].abs().max()) == 0.0 and float(a[10:].abs().max()) > 0.0


def test_asymmetric_covars():
    """covars are used as given (the reference does not symmetrise them): c01 != c10."""
    means, quats, scales, opac, viewmats, Ks = make_scene(torch.float64, n=60, seed=4)
    covars = covariance_from_quat_scale(quats, scales)
    skew = torch.randn(covars.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    covars = covars + 0.2 * covars.abs().amax(dim=(1, 2), keepdim=True) * (skew - skew.transpose(1, 2))
    means, covars = leaves(means, covars)
    for antialiased in (False, True):
        ref, cpu = both(means, None, None, covars, viewmats, Ks, opacities=opac, antialiased=antialiased)
        assert_forward_equal(ref, cpu, torch.float64)
        cot = random_cotangents(ref)
        for a, e in zip(vjp(cpu, [means, covars], cot), vjp(ref, [means, covars], cot)):
            assert_rel(a, e, GRAD_RTOL, "asymmetric")


def test_det_clamp_without_blur():
    """eps2d = 0 and rank-1 covariances (two zero scales): the 1e-10 determinant clamp is active."""
    means, quats, scales, opac, viewmats, Ks = make_scene(torch.float64, n=60, seed=5)
    scales[::2, 1:] = 0.0
    means, quats, scales = leaves(means, quats, scales)
    ref, cpu = both(means, quats, scales, None, viewmats, Ks, eps2d=0.0, opacities=opac)
    assert (ref.conics.abs() > 1e8).any()  # clamped det -> huge conics
    assert_forward_equal(ref, cpu, torch.float64)
    cot = random_cotangents(ref)
    for a, e in zip(vjp(cpu, [means, quats, scales], cot), vjp(ref, [means, quats, scales], cot)):
        assert_rel(a, e, GRAD_RTOL, "det clamp")


def test_float32_gradients_close():
    means, quats, scales, opac, viewmats, Ks = make_scene(torch.float32, seed=6)
    means, quats, scales = leaves(means, quats, scales)
    ref, cpu = both(means, quats, scales, None, viewmats, Ks, opacities=opac, antialiased=True)
    cot = random_cotangents(ref)
    for a, e in zip(vjp(cpu, [means, quats, scales], cot), vjp(ref, [means, quats, scales], cot)):
        assert a.dtype == torch.float32
        assert (a - e).abs().max() <= 2e-3 * e.abs().max()


@pytest.mark.parametrize("antialiased", [False, True])
@pytest.mark.parametrize("use_covars", [False, True])
def test_gradcheck(antialiased, use_covars):
    means, quats, scales, _, viewmats, Ks = make_scene(torch.float64, n=10, n_cams=2, seed=7)
    # well-conditioned sizes: finite differences of thin Gaussians' conics need eps << 1e-6 (their
    # exact agreement with the reference autograd is checked above)
    means, quats, scales = means[:5], quats[:5], scales[:5].clamp(min=0.02)
    means[0, 2] = -means[0, 2]  # one behind the cameras
    means[1, 0] = 2.5 * means[1, 2]  # one outside the field of view
    kw = dict(eps2d=0.3, near_plane=0.01, far_plane=1e10, opacities=None, antialiased=antialiased)

    def fn(*xs):
        args = (xs[0], None, None, xs[1]) if use_covars else (xs[0], xs[1], xs[2], None)
        p = project_cpu(*args, viewmats, Ks, W, H, **kw)
        return (p.means2d, p.conics, p.depths) + ((p.compensations,) if antialiased else ())

    xs = [means, covariance_from_quat_scale(quats, scales)] if use_covars else [means, quats, scales]
    assert torch.autograd.gradcheck(fn, leaves(*xs), eps=1e-6, atol=1e-5, rtol=1e-5)


def test_camera_inputs_get_no_gradient():
    means, quats, scales, opac, viewmats, Ks = make_scene(torch.float64, n=20, n_cams=2)
    means, quats, scales, viewmats, Ks = leaves(means, quats, scales, viewmats, Ks)
    p = project_cpu(means, quats, scales, None, viewmats, Ks, W, H, eps2d=0.3, near_plane=0.01, far_plane=1e10,
                    opacities=opac, antialiased=False)
    assert not p.radii.requires_grad and not p.compensations.requires_grad
    g = torch.autograd.grad(p.means2d.sum() + p.conics.sum() + p.depths.sum(), [means, viewmats, Ks],
                            allow_unused=True)
    assert g[0] is not None and g[1] is None and g[2] is None


def test_empty_inputs():
    means, quats, scales, opac, viewmats, Ks = make_scene(torch.float64, n=20, n_cams=2)
    p = project_cpu(means[:0], quats[:0], scales[:0], None, viewmats, Ks, W, H, eps2d=0.3, near_plane=0.01,
                    far_plane=1e10, opacities=opac[:0], antialiased=True)
    assert p.means2d.shape == (2, 0, 2) and p.radii.shape == (2, 0, 2)


@pytest.mark.parametrize("antialiased", [False, True])
@pytest.mark.parametrize("use_covars", [False, True])
def test_culled_pairs_are_zero(antialiased, use_covars):
    """Culled pairs (behind the camera, off the image, too transparent) output means2d, conics, depths
    and (antialiased) compensations 0 on both backends; the cpu kernel finds most of them early (depth,
    and with quats + scales a bound on the radius), the rest after the full computation."""
    means, quats, scales, opac, viewmats, Ks = make_scene(torch.float64, n=200, seed=11)
    means[-20:, 0] += 50.0 * torch.sign(means[-20:, 0])  # far off the image
    covars = covariance_from_quat_scale(quats, scales) if use_covars else None
    q, s = (None, None) if use_covars else (quats, scales)
    with torch.no_grad():
        ref, cpu = both(means, q, s, covars, viewmats, Ks, opacities=opac, antialiased=antialiased)
    culled = (ref.radii == 0).all(-1)
    assert culled.sum() >= 30 and (~culled).sum() >= 30
    for p in (ref, cpu):
        for name in ("means2d", "conics", "depths") + (("compensations",) if antialiased else ()):
            t = getattr(p, name)
            assert float(t[culled].abs().max()) == 0.0 and float(t[~culled].abs().max()) > 0.0, name
    assert_forward_equal(ref, cpu, torch.float64)


def test_radius_bound_never_culls_a_visible_gaussian():
    """Large Gaussians whose means lie outside the image but whose footprints reach into it stay visible
    (the early off-image test uses an upper bound on the radius); in float32 too."""
    g = torch.Generator().manual_seed(3)
    n = 400
    z = 1.0 + 4.0 * torch.rand(n, generator=g, dtype=torch.float64)
    # means just outside the field of view on every side, scales up to a third of the depth
    ang = 2 * math.pi * torch.rand(n, generator=g, dtype=torch.float64)
    r = 0.6 + 0.8 * torch.rand(n, generator=g, dtype=torch.float64)
    means = torch.stack([r * torch.cos(ang) * z, r * torch.sin(ang) * z, z], -1)
    scales = z[:, None] * (0.02 + 0.3 * torch.rand(n, 3, generator=g, dtype=torch.float64))
    quats = torch.randn(n, 4, generator=g, dtype=torch.float64)
    opac = 0.05 + 0.95 * torch.rand(n, generator=g, dtype=torch.float64)
    viewmats = torch.eye(4, dtype=torch.float64)[None]
    Ks = torch.tensor([[[W, 0.0, W / 2], [0.0, W, H / 2], [0.0, 0.0, 1.0]]], dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        args = [t.to(dtype) for t in (means, quats, scales)]
        with torch.no_grad():
            ref, cpu = both(*args, None, viewmats.to(dtype), Ks.to(dtype), opacities=opac.to(dtype))
        outside = (ref.means2d[0, :, 0] < 0) | (ref.means2d[0, :, 0] > W) | (ref.means2d[0, :, 1] < 0) \
            | (ref.means2d[0, :, 1] > H)
        visible_outside = outside & (ref.radii[0] > 0).all(-1)
        assert visible_outside.sum() >= 20  # the scene tests the bound
        if dtype == torch.float64:
            assert torch.equal(cpu.radii, ref.radii)
        else:
            assert ((cpu.radii > 0) != (ref.radii > 0)).any(-1).sum() <= 2


def test_radius_bound_with_a_scaled_view_matrix():
    """View matrices are not checked to be rigid: with a scaled rotation the camera-space covariance
    grows by its square, and the early off-image test must allow for it (review find: a Gaussian just
    left of the view with radius 96 was culled)."""
    means = torch.tensor([[-1.0633, 0.0, 2.0]], dtype=torch.float64)
    quats = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    scales = torch.tensor([[0.3, 0.01, 0.01]], dtype=torch.float64)
    Ks = torch.tensor([[[64.0, 0.0, W / 2], [0.0, 64.0, H / 2], [0.0, 0.0, 1.0]]], dtype=torch.float64)
    for k in (1.0, 3.0):
        viewmats = torch.eye(4, dtype=torch.float64)[None]
        viewmats[0, :3, :3] *= k
        viewmats[0, 2, 3] = 2.0 - 2.0 * k  # depth 2; camera-space x -1.06 k: off the image, reaching into it
        with torch.no_grad():
            ref, cpu = both(means, quats, scales, None, viewmats, Ks, opacities=torch.ones(1, dtype=torch.float64))
        assert (ref.radii > 0).all()
        assert torch.equal(cpu.radii, ref.radii)


@pytest.mark.parametrize("use_covars", [False, True])
def test_float32_runs_float64_arithmetic(use_covars):
    """Float32 inputs are widened when loaded and the float64 results rounded once when stored: outputs
    and gradients equal the float64 run on the same (float32-valued) inputs and cotangents, rounded to
    float32, bit for bit. (Numba's float() keeps a float32 a float32: the quaternion normalisation and
    the covariance were once float32 arithmetic.)"""
    means, quats, scales, opac, viewmats, Ks = make_scene(torch.float32, seed=8)
    covars = covariance_from_quat_scale(quats, scales) if use_covars else None
    runs = {}
    for dt in (torch.float32, torch.float64):
        ins = leaves(*(t.to(dt) for t in ((means, covars) if use_covars else (means, quats, scales))))
        m, q, s, cv = (ins[0], None, None, ins[1]) if use_covars else (*ins, None)
        proj = project_cpu(m, q, s, cv, viewmats.to(dt), Ks.to(dt), W, H, eps2d=0.3, near_plane=0.01,
                           far_plane=1e10, opacities=opac.to(dt), antialiased=True)
        cot = [c.to(dt) for c in random_cotangents(project_cpu(means, quats, scales, None, viewmats, Ks, W, H,
                                                               eps2d=0.3, near_plane=0.01, far_plane=1e10,
                                                               opacities=opac, antialiased=True))]
        runs[dt] = ([proj.means2d, proj.conics, proj.depths, proj.compensations], vjp(proj, ins, cot))
    (out32, grad32), (out64, grad64) = runs[torch.float32], runs[torch.float64]
    for a, b in zip(out32 + list(grad32), out64 + list(grad64)):
        assert a.dtype == torch.float32
        assert torch.equal(a, b.to(torch.float32))
