"""Secondary rays through trained-scene models: GaussianModel / SpaceTimeGaussians / SurfelModel.trace_rays,
and the closed-form mirror case (a MeshScene quad + optics.reflect + trace_rays)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rasterizer.tracing import trace_gaussians, trace_surfels
from recon.hybrid.assets import MeshAsset, MeshPart, Material, PlacedAsset, Pose
from recon.hybrid.optics import reflect
from recon.hybrid.raycast import MeshScene
from recon.models.gaussians import GaussianModel, rgb_to_sh0
from recon.models.spacetime import SpaceTimeGaussians
from recon.models.surfels import SurfelModel


def _rays(R=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    o = torch.randn(R, 3, generator=g) * 0.2 + torch.tensor([0, 0, -3.0])
    d = torch.nn.functional.normalize(torch.randn(R, 3, generator=g) * 0.25 + torch.tensor([0, 0, 1.0]), dim=-1)
    return o, d, torch.zeros(R), torch.full((R,), math.inf)


def _gaussian_model(cls=GaussianModel, n=150, seed=0, sh_degree=1):
    g = torch.Generator().manual_seed(seed)
    pts = torch.rand(n, 3, generator=g) * 2 - 1
    model = cls.from_points(pts, torch.rand(n, 3, generator=g), sh_degree, extent=2.0, init_opacity=0.6,
                            init_scale=1.5, generator=g)
    with torch.no_grad():
        model.params["shN"].normal_(0, 0.1, generator=g)
    return model


@pytest.mark.parametrize("cls", [GaussianModel, SurfelModel])
def test_model_trace_rays_matches_tracer_and_caches(cls):
    model = _gaussian_model(cls)
    o, d, lo, hi = _rays()
    rgb, T, dist = model.trace_rays(o, d, lo, hi)
    p = model.params
    tracer = trace_surfels if cls is SurfelModel else trace_gaussians
    ref = tracer(p["means"], p["quats"], model.scales, model.opacities, (p["sh0"], p["shN"]), o, d, lo, hi,
                 sh_degree=model.sh_degree, backend="reference")
    assert float(T.detach().min()) < 0.5
    for a, b in zip((rgb, T, dist), ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=2e-5)
    # differentiable with respect to the parameters
    (rgb.sum() + dist.sum()).backward()
    for name in ("means", "quats", "log_scales", "logit_opacities", "sh0", "shN"):
        assert p[name].grad is not None and float(p[name].grad.abs().max()) > 0, name
    # the grid is kept while the parameters are unchanged, rebuilt after an optimiser step
    accel = model._trace_cache.accel
    model.trace_rays(o, d, lo, hi)
    assert model._trace_cache.accel is accel
    model.step()
    model.zero_grad()
    with torch.no_grad():
        model.trace_rays(o, d, lo, hi)
    assert model._trace_cache.accel is not accel


def test_spacetime_trace_rays_is_the_slice():
    g = torch.Generator().manual_seed(3)
    n = 150
    model = SpaceTimeGaussians.from_points(torch.rand(n, 3, generator=g) * 2 - 1, torch.rand(n, generator=g),
                                           torch.rand(n, 3, generator=g), 1, extent=2.0, init_opacity=0.6,
                                           init_scale=1.5, generator=g)
    with torch.no_grad():
        model.params["quats_left"].add_(torch.randn(n, 4, generator=g) * 0.2)  # some velocity
    o, d, lo, hi = _rays(seed=4)
    for time in (0.2, 0.7):
        rgb, T, dist = model.trace_rays(o, d, lo, hi, t=time)
        s = model.slice(time)
        ref = trace_gaussians(s.means, None, None, s.opacities, s.gather((model.params["sh0"], model.params["shN"])),
                              o, d, lo, hi, sh_degree=1, covars=s.covars, backend="reference")
        assert float(T.detach().min()) < 0.7
        for a, b in zip((rgb, T, dist), ref):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=2e-5)
    a0 = model.trace_rays(o, d, lo, hi, t=0.2)[1]
    assert float((a0 - model.trace_rays(o, d, lo, hi, t=0.7)[1]).detach().abs().max()) > 1e-3  # time matters
    rgb.sum().backward()
    assert float(model.params["means4"].grad.abs().max()) > 0
    assert float(model.params["quats_right"].grad.abs().max()) > 0


def _mirror_scene():
    """A 4 x 4 mirror quad in the plane z = 0 (ground frame = world axes, up = +z)."""
    v = np.array([[-2.0, 0, -2], [2, 0, -2], [2, 0, 2], [-2, 0, 2]])  # file frame (Y up): y = 0 -> world z = 0
    part = MeshPart(vertices=v, faces=np.array([[0, 1, 2], [0, 2, 3]], np.int32))
    asset = PlacedAsset(MeshAsset("mirror", [part]), Pose(), Material("mirror"))
    return MeshScene([asset], np.eye(3))


def _red_gaussian(p, opacity=0.8, scale=0.02):
    params = {"means": torch.tensor([list(p)], dtype=torch.float32), "quats": torch.tensor([[1.0, 0, 0, 0]]),
              "log_scales": torch.full((1, 3), math.log(scale)),
              "logit_opacities": torch.tensor([math.log(opacity / (1 - opacity))]),
              "sh0": rgb_to_sh0(torch.tensor([[[1.0, 0.0, 0.0]]])), "shN": torch.zeros(1, 3, 3)}
    return GaussianModel(params, sh_degree=1, extent=1.0)


@pytest.mark.parametrize("cls", [GaussianModel, SurfelModel])
def test_mirror_quad_shows_gaussian_where_geometry_says(cls):
    scene = _mirror_scene()
    p = np.array([1.0, 0.5, 1.0])
    model = _red_gaussian(p)
    if cls is SurfelModel:  # a surfel facing the mirror (normal +z: identity rotation), same centre
        prm = {k: v.clone() for k, v in model.params.items()}
        prm["log_scales"] = prm["log_scales"][:, :2]
        model = SurfelModel(prm, sh_degree=1, extent=1.0)
    eye = np.array([0.0, 0.0, 2.0])
    image = p * np.array([1, 1, -1])  # p mirrored in z = 0
    targets = np.stack([image, image + np.array([0.3, 0.0, 0.0]), np.array([-1.0, -0.5, -1.0])])
    d = targets - eye
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    hits = scene.first_hit(np.repeat(eye[None], 3, 0), d)
    assert hits.hit.all()
    np.testing.assert_allclose(hits.normal, [[0, 0, 1.0]] * 3, atol=1e-6)
    points = eye + hits.t[:, None] * d
    r = reflect(d, hits.normal)
    nxt = scene.first_hit(points, r, t_min=scene.eps)  # the next mesh hit bounds the secondary ray
    t_max = np.where(nxt.hit, nxt.t, np.inf)
    np.testing.assert_allclose(r[0], (p - points[0]) / np.linalg.norm(p - points[0]), atol=1e-6)
    rgb, T, dist = model.trace_rays(torch.as_tensor(points), torch.as_tensor(r),
                                    torch.full((3,), scene.eps), torch.as_tensor(t_max))
    # toward the image: red with alpha = opacity (the ray passes through the centre), at |p - hit|
    torch.testing.assert_close(rgb[0], torch.tensor([0.8, 0.0, 0.0]), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(T[0, 0], torch.tensor(0.2), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dist[0, 0], torch.tensor(float(np.linalg.norm(p - points[0]))), rtol=1e-5, atol=1e-5)
    # reflected elsewhere (15 sigma and more away): nothing
    assert float(rgb[1:].abs().max()) == 0.0 and float(T[1:].min()) == 1.0 and float(dist[1:].abs().max()) == 0.0
    # a segment that ends before the Gaussian (another mesh in between) sees nothing either
    short = torch.full((3,), 0.5 * float(np.linalg.norm(p - points[0])))
    _, T_short, _ = model.trace_rays(torch.as_tensor(points), torch.as_tensor(r), torch.full((3,), scene.eps), short)
    assert float(T_short.min()) == 1.0


def _quad(world_corners):
    """A MeshPart quad from world corners [4, 3] (counter-clockwise seen from where its normal points),
    stored in the asset's file frame (Y up: file = (x, z, -y) for the identity ground frame)."""
    w = np.asarray(world_corners, np.float64)
    return MeshPart(vertices=np.stack([w[:, 0], w[:, 2], -w[:, 1]], 1),
                    faces=np.array([[0, 1, 2], [0, 2, 3]], np.int32))


def test_glass_slab_shows_gaussian_displaced_by_snell():
    """A glass slab (index 1.5, 0.5 thick, faces z = 0 and z = -0.5): the ray from the eye refracts in and out
    (Snell at both faces, MeshScene's front flags choosing eta), leaves parallel to itself and shifted by
    0.5 (tan 30 - tan theta_t); a Gaussian on the shifted ray is seen with alpha = opacity, and the straight,
    unrefracted line misses it."""
    from recon.hybrid.optics import fresnel_dielectric, glass_eta, refract

    top = _quad([[-3, -3, 0], [3, -3, 0], [3, 3, 0], [-3, 3, 0]])  # normal +z (outward)
    bottom = _quad([[-3, -3, -0.5], [-3, 3, -0.5], [3, 3, -0.5], [3, -3, -0.5]])  # normal -z (outward)
    slab = PlacedAsset(MeshAsset("slab", [top, bottom]), Pose(), Material("glass", ior=1.5))
    scene = MeshScene([slab], np.eye(3))
    eye = np.array([[0.0, 0.0, 2.0]])
    a = math.radians(30.0)
    d = np.array([[math.sin(a), 0.0, -math.cos(a)]])
    h1 = scene.first_hit(eye, d)
    assert h1.hit[0] and h1.front[0]
    p1 = eye + h1.t[:, None] * d
    d1, tir1 = refract(d, h1.normal, glass_eta(h1.front, 1.5))
    assert not tir1[0]
    sin_t = math.sin(a) / 1.5
    np.testing.assert_allclose(d1[0, 0], sin_t, rtol=1e-12)  # Snell: sin_t = sin_i / 1.5
    h2 = scene.first_hit(p1, d1, t_min=scene.eps)
    assert h2.hit[0] and not h2.front[0]  # leaves through the bottom face's inner side
    p2 = p1 + h2.t[:, None] * d1
    d2, tir2 = refract(d1, h2.normal, glass_eta(h2.front, 1.5))
    assert not tir2[0]
    np.testing.assert_allclose(d2, d, atol=1e-12)  # a parallel slab: leaves in the original direction
    shift = 0.5 * (math.tan(a) - math.tan(math.asin(sin_t)))
    straight_x = (2.0 + 0.5) * math.tan(a)
    np.testing.assert_allclose(straight_x - p2[0, 0], shift, atol=1e-6)
    gauss = p2[0] + 1.0 * d2[0]
    model = _red_gaussian(gauss)
    after = scene.first_hit(p2, d2, t_min=scene.eps)
    rgb, T, dist = model.trace_rays(torch.as_tensor(p2), torch.as_tensor(d2), torch.tensor([scene.eps]),
                                    torch.as_tensor(np.where(after.hit, after.t, np.inf)))
    torch.testing.assert_close(T[0, 0], torch.tensor(0.2), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(rgb[0], torch.tensor([0.8, 0.0, 0.0]), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dist[0, 0], torch.tensor(1.0), rtol=1e-5, atol=1e-5)
    # without refraction the line from the eye passes 0.11 (5 sigma) beside it: nothing
    _, T_straight, _ = model.trace_rays(torch.as_tensor(eye), torch.as_tensor(d), torch.zeros(1),
                                        torch.full((1,), math.inf))
    assert float(T_straight.detach()[0, 0]) == 1.0
    # the energy split at the faces is in [0, 1]
    for h, dd in ((h1, d), (h2, d1)):
        R = fresnel_dielectric(-np.einsum("ri,ri->r", dd, h.normal), glass_eta(h.front, 1.5))
        assert 0.0 < float(R[0]) < 1.0
