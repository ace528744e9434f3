"""NeRF scenes composited with inserted meshes (issue 21): ``NerfModel.render_front`` (each pixel's ray
stops at the mesh hit) and ``NerfModel.trace_rays`` (secondary rays between t_min and t_max); per-ray
bounds in the ray marchers. Closed forms use a field of uniform density (every cell occupied), where the
quadrature is exact: T = exp(-sigma * length marched)."""

from __future__ import annotations

import math

import pytest
import torch

from rasterizer import Camera
from recon.models import NerfModel
from recon.models.nerf import camera_pixel_rays
from recon.nerf.config import NerfConfig
from recon.nerf.marching import clip_steps, march_rays_numba, march_rays_reference, ray_entry
from recon.nerf.space import FieldSpace

SMALL = NerfConfig(hash_levels=2, hash_log2_table=8, hash_base_res=2, hash_max_res=8, hidden=16, geo_dim=8,
                   occupancy_resolution=8, steps_per_diagonal=96, eval_rays=200)
SIZE = 24


def camera(z: float = -4.0, x: float = 0.0) -> Camera:
    """A 24 x 24 camera at (x, 0, z) looking along +z (OpenCV axes), 40 px focal length."""
    w2c = torch.eye(4)
    w2c[0, 3], w2c[2, 3] = -x, -z
    K = torch.tensor([[40.0, 0.0, SIZE / 2], [0.0, 40.0, SIZE / 2], [0.0, 0.0, 1.0]])
    return Camera(w2c, K, SIZE, SIZE)


def model(space: FieldSpace | None = None, sigma: float | None = None, seed: int = 0) -> NerfModel:
    """A small nerf with every occupancy cell set; ``sigma``: density exactly uniform (the hash table all
    ones, so every feature is 1, and MLP weights making the log density log(sigma)); else the random
    initial field."""
    m = NerfModel(SMALL, space or FieldSpace.box((-1.5,) * 3, (1.5,) * 3), 1.0, torch.Generator().manual_seed(seed))
    m.grid.bits[:] = True
    if sigma is not None:
        with torch.no_grad():
            first, last = m.field.density_mlp[0], m.field.density_mlp[2]
            m.field.table.fill_(1.0)
            first.weight.fill_(1.0 / first.weight.shape[1])  # every hidden unit = 1
            last.weight[0].fill_(math.log(sigma) / last.weight.shape[1])
    return m


def test_uniform_density_stops_exactly_at_the_limit():
    """Rays enter the box at camera z 2.5 and stop at the limit z = 3.5: transmittance exp(-sigma (1 / zs))
    (zs = d . forward), colour (1 - T) times the field's colour, depth between entry and limit; with a
    limit in front of the box nothing is seen."""
    sigma = 2.0
    m = model(sigma=sigma)
    cam = camera()
    _, d, zs = camera_pixel_rays(cam)
    with torch.no_grad():
        rgb, T, depth = m.render_front([cam], torch.full((1, SIZE, SIZE), 3.5))
    want = torch.exp(-sigma * (3.5 - 2.5) / zs).reshape(1, SIZE, SIZE, 1)
    torch.testing.assert_close(T.double(), want, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        geo = m.field.density(torch.full((1, 3), 0.5))[1]
        colour = m.field.color(geo.expand(len(d), -1), d.float()).reshape(1, SIZE, SIZE, 3)
    torch.testing.assert_close(rgb, (1.0 - T) * colour, rtol=1e-5, atol=1e-6)
    assert bool((depth > 2.5).all()) and bool((depth < 3.5).all())
    # the expected distance of an exponential cut at length L: entry + 1/sigma - L e^{-sigma L} / (1 - e^{-sigma L})
    L = 1.0 / zs
    exp_t = 2.5 / zs + 1 / sigma - L * torch.exp(-sigma * L) / (1 - torch.exp(-sigma * L))
    dt = m.dt_min
    torch.testing.assert_close(depth.double().reshape(-1), exp_t * zs, rtol=0, atol=dt)  # midpoint quadrature
    with torch.no_grad():
        rgb0, T0, depth0 = m.render_front([cam], torch.full((1, SIZE, SIZE), 2.0))
    assert bool((T0 == 1).all()) and bool((rgb0 == 0).all()) and bool((depth0 == 0).all())


def test_dense_nerf_weights_nothing_beyond_the_hit():
    """A density high everywhere: the marched steps all end at or before the hit distance, the expected
    depth stays in front of the limit, and the light left is exactly what the steps before it let through."""
    m = model(sigma=30.0)
    cam = camera()
    o, d, zs = camera_pixel_rays(cam)
    limit = torch.full((SIZE * SIZE,), 2.9, dtype=torch.float64)
    limit[::3] = 2.6  # some rays hit the mesh very soon after entering
    t_lim = limit / zs
    ray, t0, t1 = m.march(o, d, torch.zeros(len(o), dtype=torch.float64), t_max=t_lim)
    t1 = clip_steps(ray, t0, t1, t_lim)
    assert ray.numel() > 0 and bool((t1 <= t_lim[ray]).all()) and bool((t0 < t1).all())
    with torch.no_grad():
        rgb, T, depth = m.render_front([cam], limit.reshape(1, SIZE, SIZE).float())
    assert bool((depth.reshape(-1) <= limit.float() + 1e-6).all()) and bool((depth > 2.5).all())
    T = T.double().reshape(-1)
    soon = limit < 2.7  # 0.1 of density 30: T = exp(-3 / zs) exactly
    torch.testing.assert_close(T[soon], torch.exp(-30.0 * (limit - 2.5) / zs)[soon], rtol=1e-4, atol=1e-7)
    assert bool((T[~soon] < 2e-4).all())  # nearly opaque (samples after T < 1e-4 are dropped: nerfacc's early stop)


@pytest.mark.parametrize("contracted", [False, True], ids=["box", "contracted"])
def test_no_limit_is_render(contracted):
    """+inf everywhere: render_front is render() on a black background (transmittance 1 - alpha; depth where
    render() reports one)."""
    space = FieldSpace.unbounded((0.0, 0.0, 0.0), 1.5) if contracted else None
    m = model(space, seed=3)
    cams = [camera(), camera(-3.5, 0.4)]
    rgb, alpha, meta = m.render(cams, background=torch.zeros(3))
    with torch.no_grad():
        f_rgb, f_T, f_depth = m.render_front(cams, torch.full((2, SIZE, SIZE), math.inf))
    assert float(alpha.min()) > 0.05
    torch.testing.assert_close(f_rgb, rgb, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(f_T, 1.0 - alpha, rtol=1e-6, atol=1e-6)
    seen = alpha >= 0.5
    assert bool(seen.any())
    torch.testing.assert_close(f_depth[seen], meta["depth"][seen], rtol=1e-5, atol=1e-5)


def test_render_front_has_gradients_and_render_still_has_none():
    m = model(seed=1)
    cam = camera()
    limit = torch.full((1, SIZE, SIZE), 3.2)
    rgb, T, depth = m.render_front([cam], limit)
    assert rgb.requires_grad and T.requires_grad
    (rgb.sum() + T.sum() + depth.sum()).backward()
    assert m.field.table.grad is not None and float(m.field.table.grad.abs().sum()) > 0
    with torch.no_grad():
        rgb_ng, T_ng, _ = m.render_front([cam], limit)
    torch.testing.assert_close(rgb.detach(), rgb_ng, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(T.detach(), T_ng, rtol=1e-6, atol=1e-7)
    plain, _, _ = m.render([cam])
    assert not plain.requires_grad


def test_trace_rays_agrees_with_render_front_for_camera_rays():
    m = model(seed=2)
    cam = camera(-3.6, 0.3)
    o, d, zs = camera_pixel_rays(cam)
    limit = 2.4 + torch.rand(SIZE * SIZE, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    limit[::5] = math.inf
    with torch.no_grad():
        rgb, T, depth = m.render_front([cam], limit.reshape(1, SIZE, SIZE))
        near, _ = m.near_far()
        t_rgb, t_T, t_dist = m.trace_rays(o, d, torch.full((len(o),), near, dtype=torch.float64), limit / zs)
    assert t_rgb.shape == (SIZE * SIZE, 3) and t_T.shape == (SIZE * SIZE, 1) and t_dist.shape == (SIZE * SIZE, 1)
    torch.testing.assert_close(t_rgb, rgb.reshape(-1, 3), rtol=0, atol=1e-7)
    torch.testing.assert_close(t_T, T.reshape(-1, 1), rtol=0, atol=1e-7)
    torch.testing.assert_close(t_dist * zs[:, None].float(), depth.reshape(-1, 1), rtol=1e-6, atol=1e-6)
    assert float(T.min()) < 0.9 and float((T < 1).float().mean()) > 0.5


def test_trace_rays_marches_between_t_min_and_t_max():
    """Uniform density: a ray along +x through the box centre, traced over [t_min, t_max] inside the box,
    lets through exactly exp(-sigma (t_max - t_min)); one that starts beyond the box sees nothing."""
    m = model(sigma=1.5)
    o = torch.tensor([[-3.0, 0.0, 0.0], [-3.0, 0.2, 0.1]], dtype=torch.float64)
    d = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    with torch.no_grad():
        rgb, T, dist = m.trace_rays(o, d, torch.tensor([2.0, 5.0], dtype=torch.float64),
                                    torch.tensor([3.2, math.inf], dtype=torch.float64))
    assert T[0, 0].item() == pytest.approx(math.exp(-1.5 * 1.2), rel=1e-5)
    assert 2.0 < dist[0, 0].item() < 3.2
    assert T[1, 0].item() == 1.0 and dist[1, 0].item() == 0.0 and bool((rgb[1] == 0).all())


@pytest.mark.parametrize("contracted", [False, True])
def test_march_with_per_ray_bounds_numba_matches_reference(contracted):
    """Per-ray near / far (tensors) through ray_entry: both marchers give the same samples, all starting
    inside the bounds; clip_steps ends the last one at the far bound."""
    gen = torch.Generator().manual_seed(4)
    n = 64
    src = torch.randn(n, 3, generator=gen, dtype=torch.float64)
    o = 4.0 * src / src.norm(dim=1, keepdim=True)
    d = 0.5 * torch.randn(n, 3, generator=gen, dtype=torch.float64) - o
    d = d / d.norm(dim=1, keepdim=True)
    space = FieldSpace.unbounded((0.1, 0.0, -0.1), 1.5) if contracted else FieldSpace.box((-1.5,) * 3, (1.5,) * 3)
    near = 0.5 + 3.0 * torch.rand(n, generator=gen, dtype=torch.float64)
    far = near + 2.0 * torch.rand(n, generator=gen, dtype=torch.float64)
    far[::7] = math.inf
    t_near, t_far = ray_entry(o, d, space, near, far)
    if contracted:
        t_far = torch.minimum(t_far, torch.full_like(t_far, 60.0))
    assert bool((t_near >= near).all()) and bool(((t_far <= far) | (t_far == t_near)).all())  # or empty
    grid = torch.rand(16, 16, 16, generator=gen) < 0.5
    jitter = torch.rand(n, generator=gen, dtype=torch.float64)
    dt = space.diagonal / 128
    args = (o, d, t_near, t_far, jitter, grid, space, dt, 1e10 if contracted else dt, 1 / 64 if contracted else 0.0,
            4000)
    ray_r, t0_r, t1_r = march_rays_reference(*args)
    ray_n, t0_n, t1_n = march_rays_numba(*args)
    assert ray_r.numel() > 50
    assert torch.equal(ray_n, ray_r)
    torch.testing.assert_close(t0_n, t0_r, rtol=0, atol=1e-12)
    torch.testing.assert_close(t1_n, t1_r, rtol=0, atol=1e-12)
    assert bool((t0_r >= t_near[ray_r]).all()) and bool((t0_r < t_far[ray_r]).all())
    t1c = clip_steps(ray_r, t0_r, t1_r, t_far)
    assert bool((t1c <= t_far[ray_r]).all()) and bool((t1c > t0_r).all())
    assert bool((t1c < t1_r).any())  # some last steps were cut


def test_bad_limit_is_refused():
    m = model(seed=0)
    with pytest.raises(ValueError, match="expected \\[1, 24, 24\\]"):
        m.render_front([camera()], torch.full((1, 24, 23), 3.0))
    with pytest.raises(ValueError, match="NaN"):
        m.render_front([camera()], torch.full((1, 24, 24), math.nan))


def test_no_grad_field_evaluation_in_sample_chunks_changes_nothing(monkeypatch):
    """Without gradients the field is evaluated NO_GRAD_SAMPLES samples at a time (bounded memory on
    unbounded captures, whose rays march thousands of samples): chunks of 7 samples give the same image,
    opacity and depths as one chunk, and the same as the training path's render with gradients."""
    import recon.models.nerf as nerf_module

    m = model(seed=3)
    cam = camera(x=0.3)
    bg = torch.tensor([0.2, 0.4, 0.6])
    with torch.no_grad():
        whole = m._render_camera(cam, bg)
        monkeypatch.setattr(nerf_module, "NO_GRAD_SAMPLES", 7)
        chunked = m._render_camera(cam, bg)
    for a, b in zip(whole, chunked):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    o, d, _ = camera_pixel_rays(cam)
    with_grad = m.render_rays(o, d, bg)["rgb"]
    torch.testing.assert_close(with_grad.detach().reshape(SIZE, SIZE, 3), whole[0], rtol=1e-6, atol=1e-6)
    assert whole[1].min() < whole[1].max()  # some rays hit density, some less: not a blank image
