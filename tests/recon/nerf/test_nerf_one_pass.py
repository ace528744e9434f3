"""The NeRF training pass (issue 53): a ray batch's densities evaluated once with gradients (the fused kernels'
backward skips the rows of samples behind the early stop) give the outputs and gradients of nerfacc's two passes
(the reference: a density pass without gradients, then the samples kept evaluated again); the colour MLP's SH basis
evaluated per ray and gathered equals the per-sample one; training leaves out the median depth it never reads."""

from __future__ import annotations

import torch

import recon.models.nerf as NM
from recon.models import NerfModel
from recon.nerf.space import FieldSpace
from tests.recon.nerf.test_nerf_train import SMALL


def dense_model() -> NerfModel:
    """A small nerf whose random field is dense enough that rays reach the early stop inside the box."""
    gen = torch.Generator().manual_seed(3)
    m = NerfModel(SMALL, FieldSpace.box((-1.0,) * 3, (1.0,) * 3), 1.0, gen)
    with torch.no_grad():
        m.field.table.uniform_(-1.0, 1.0, generator=gen)
        m.field.density_mlp[2].weight[0].abs_().mul_(3.0).add_(1.0)  # log density well above 0
    return m


def rays(n: int = 96):
    gen = torch.Generator().manual_seed(4)
    o = torch.tensor([0.0, 0.0, -3.0], dtype=torch.float64) + 0.2 * torch.randn(n, 3, generator=gen, dtype=torch.float64)
    d = torch.nn.functional.normalize(torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
                                      + 0.25 * torch.randn(n, 3, generator=gen, dtype=torch.float64), dim=1)
    return o, d, torch.rand(n, generator=gen, dtype=torch.float64)


def pass_outputs(model, monkeypatch, one_pass: bool):
    """(outputs, gradients by parameter name, density calls with gradients) of one batch's loss."""
    monkeypatch.setattr(NM, "ONE_PASS_SAMPLES", 1 << 19 if one_pass else 0)
    calls = []
    density = model.field.density

    def counted(u):
        calls.append(torch.is_grad_enabled())
        return density(u)

    monkeypatch.setattr(model.field, "density", counted)
    for p in model.params.values():
        p.grad = None
    o, d, jitter = rays()
    out = model.render_rays(o, d, torch.tensor([0.2, 0.5, 0.9]), jitter)
    weights = torch.linspace(0.5, 1.5, 3)
    ((out["rgb"] * weights).sum() + 0.1 * out["depth"].sum() + out["opacity"].sum()).backward()
    monkeypatch.setattr(model.field, "density", density)
    return out, {n: p.grad.clone() for n, p in model.params.items()}, calls


def test_one_pass_matches_the_two_passes(monkeypatch):
    model = dense_model()
    with torch.no_grad():  # the early stop must drop some samples for the comparison to mean anything
        o, d, jitter = rays()
        o, d, ray, t0, t1 = model._march_rays(o, d, jitter, None, None)
        sigma, _ = model._density_no_grad(o, d, ray, t0, t1, keep_geo=False)
        _, trans = NM.transmittance_weights(sigma, t0, t1, ray, o.shape[0])
        kept = float((trans > NM.EARLY_STOP).double().mean())
    assert 0.1 < kept < 0.9, kept
    one, g_one, calls_one = pass_outputs(model, monkeypatch, True)
    two, g_two, calls_two = pass_outputs(model, monkeypatch, False)
    assert calls_one == [True] and calls_two == [False, True]  # the field's density: once, against twice
    assert one["samples"] == two["samples"] > 0
    for key in ("rgb", "opacity", "depth", "median_depth"):
        torch.testing.assert_close(one[key], two[key], rtol=1e-5, atol=1e-6)
    for name, g in g_two.items():
        assert g.abs().max() > 0, name
        torch.testing.assert_close(g_one[name], g, rtol=1e-4, atol=1e-6 * float(g.abs().max()))


def test_one_pass_only_where_the_backward_skips_dead_rows(monkeypatch):
    model = dense_model()
    assert model._one_pass(1000) and not model._one_pass(NM.ONE_PASS_SAMPLES + 1)
    model.field.encoding_mlp = "unfused"  # the torch MLP's backward would run over every row
    assert not model._one_pass(1000)


def test_colour_with_per_ray_directions_is_the_per_sample_colour():
    model = dense_model()
    gen = torch.Generator().manual_seed(5)
    d = torch.nn.functional.normalize(torch.randn(7, 3, generator=gen), dim=1)
    ray = torch.randint(7, (50,), generator=gen)
    geo = torch.randn(50, SMALL.geo_dim, generator=gen)
    with torch.no_grad():
        assert torch.equal(model.field.color(geo, d, ray), model.field.color(geo, d[ray]))


def test_training_batch_leaves_out_the_median_depth():
    model = dense_model()
    o, d, jitter = rays(16)
    with torch.no_grad():
        full = model.render_rays(o, d, torch.ones(3), jitter)
        short = model.render_rays(o, d, torch.ones(3), jitter, median=False)
    assert "median_depth" in full and "median_depth" not in short
    assert torch.equal(full["rgb"], short["rgb"]) and torch.equal(full["depth"], short["depth"])
