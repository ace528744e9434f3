"""Volume rendering quadrature of packed samples (issue 20): a hand-computed case, rays without samples,
independence of rays packed together, gradients (gradcheck), and the field's pieces."""

from __future__ import annotations

import math

import pytest
import torch

from recon.nerf.field import NerfField, TruncExp
from recon.nerf.hash_encoding import HashGridConfig
from recon.nerf.rendering import transmittance_weights, volume_render

E = math.exp


def _two_sample_ray(ray_id: int):
    sigma = torch.tensor([1.0, 2.0], dtype=torch.float64)
    t0 = torch.tensor([0.0, 0.5], dtype=torch.float64)
    t1 = torch.tensor([0.5, 0.75], dtype=torch.float64)
    rgb = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    return sigma, t0, t1, rgb, torch.full((2,), ray_id, dtype=torch.int64)


def test_hand_computed_ray():
    """tau = (0.5, 0.5): alpha = 1 - e^-0.5 each, T = (1, e^-0.5); colour = (a, e^-0.5 a, e^-1 on blue)."""
    sigma, t0, t1, rgb, ray = _two_sample_ray(0)
    bg = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    colour, acc, depth = volume_render(sigma, rgb, t0, t1, ray, 1, bg)
    a = 1 - E(-0.5)
    assert colour[0].tolist() == pytest.approx([a, E(-0.5) * a, E(-1.0)], abs=1e-12)
    assert acc[0].item() == pytest.approx(1 - E(-1.0), abs=1e-12)
    assert depth[0].item() == pytest.approx((a * 0.25 + E(-0.5) * a * 0.625) / (1 - E(-1.0)), abs=1e-12)
    w, T = transmittance_weights(sigma, t0, t1, ray, 1)
    assert T.tolist() == pytest.approx([1.0, E(-0.5)], abs=1e-12)
    assert w.tolist() == pytest.approx([a, E(-0.5) * a], abs=1e-12)


def test_rays_packed_together_are_independent():
    """Rays 0 and 2 carry the same samples, ray 1 none: 0 and 2 equal the lone ray, 1 is the background."""
    parts = [_two_sample_ray(0), _two_sample_ray(2)]
    sigma, t0, t1, rgb, ray = (torch.cat([p[i] for p in parts]) for i in range(5))
    bg = torch.tensor([[0.2, 0.3, 0.4]] * 3, dtype=torch.float64)  # one background per ray
    colour, acc, depth = volume_render(sigma, rgb, t0, t1, ray, 3, bg)
    lone = volume_render(*[_two_sample_ray(0)[i] for i in (0, 3, 1, 2, 4)], 1, bg[:1])
    for r in (0, 2):
        torch.testing.assert_close(colour[r], lone[0][0])
        assert acc[r].item() == pytest.approx(lone[1][0].item())
    assert colour[1].tolist() == pytest.approx([0.2, 0.3, 0.4]) and acc[1].item() == 0.0 and depth[1].item() == 0.0


def test_gradients_gradcheck():
    gen = torch.Generator().manual_seed(0)
    ray = torch.tensor([0, 0, 0, 1, 1, 3], dtype=torch.int64)
    t0 = torch.rand(6, generator=gen, dtype=torch.float64)
    t1 = t0 + 0.1 + torch.rand(6, generator=gen, dtype=torch.float64)
    sigma = torch.rand(6, generator=gen, dtype=torch.float64).requires_grad_()
    rgb = torch.rand(6, 3, generator=gen, dtype=torch.float64).requires_grad_()
    bg = torch.rand(3, generator=gen, dtype=torch.float64)

    def fn(s, c):
        return volume_render(s, c, t0, t1, ray, 4, bg)

    assert torch.autograd.gradcheck(fn, (sigma, rgb), eps=1e-6, atol=1e-8)


def test_trunc_exp_and_field_shapes():
    x = torch.tensor([0.0, 20.0], requires_grad=True)
    TruncExp.apply(x).sum().backward()
    assert x.grad.tolist() == pytest.approx([1.0, math.exp(15.0)], rel=1e-5)
    field = NerfField(HashGridConfig(levels=2, log2_table=8, base_res=2, max_res=8), hidden=16, geo_dim=8,
                      generator=torch.Generator().manual_seed(0))
    u = torch.rand(10, 3)
    sigma, geo = field.density(u)
    dirs = torch.nn.functional.normalize(torch.randn(10, 3), dim=1)
    rgb = field.color(geo, dirs)
    assert sigma.shape == (10,) and bool((sigma > 0).all()) and geo.shape == (10, 8)
    assert rgb.shape == (10, 3) and bool(((rgb > 0) & (rgb < 1)).all())


def test_median_depth_by_hand():
    """Ray 0: weights 0.3, 0.4, 0.3 -> the cumulative weight reaches 0.5 at its second sample (midpoint 1.5);
    ray 1: weights 0.2, 0.1 never reach it -> 0; ray 2 has no samples -> 0."""
    from recon.nerf.rendering import median_depth

    w = torch.tensor([0.3, 0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    t0 = torch.tensor([0.0, 1.0, 2.0, 0.0, 1.0], dtype=torch.float64)
    t1 = t0 + 1.0
    ray = torch.tensor([0, 0, 0, 1, 1])
    assert median_depth(w, t0, t1, ray, 3).tolist() == [1.5, 0.0, 0.0]
