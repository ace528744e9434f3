"""The neus training render (issue 50): every section evaluated once, with gradients, then cut at the early stop
(transmittance EARLY_STOP), against the two passes it replaced (all sections without gradients to find the alive
ones, then those again with gradients), which remain the path of batches too large to hold their graph."""

from __future__ import annotations

import torch

from recon.models import neus
from recon.nerf.neus import eikonal_loss
from tests.recon.nerf.test_neus_fast_render import camera_rays, sphere_model


def training_render(model, o, d):
    """(rgb [R, 3], SDF gradients of the coloured sections [S, 3], samples, {name: parameter gradient})."""
    for p in model.params.values():
        p.grad = None
    out = model.render_rays(o, d, torch.tensor([1.0, 1.0, 1.0]), jitter=torch.full((o.shape[0],), 0.5,
                                                                                     dtype=torch.float64))
    grad = out["train_meta"]["gradients"]
    (((out["rgb"] - 0.3) ** 2).mean() + 0.1 * eikonal_loss(grad)).backward()
    return (out["rgb"].detach(), grad.detach(), out["samples"],
            {n: p.grad.clone() for n, p in model.params.items() if p.grad is not None})


def test_one_pass_equals_two_passes(monkeypatch):
    model = sphere_model(0.1)
    o, d = camera_rays(8)
    rgb1, grad1, samples1, params1 = training_render(model, o, d)
    assert samples1 <= neus.ONE_PASS_SAMPLES  # the first render took the one-pass branch
    monkeypatch.setattr(neus, "ONE_PASS_SAMPLES", 0)  # every batch takes the two passes
    rgb2, grad2, samples2, params2 = training_render(model, o, d)
    assert samples1 == samples2 and 0 < grad1.shape[0] < samples1  # the early stop cut sections
    # the same values up to float32 rounding (BLAS blocks rows differently; a central difference divides it by 2h)
    assert grad1.shape == grad2.shape and torch.allclose(grad1, grad2, rtol=0, atol=1e-4)
    assert torch.allclose(rgb1, rgb2, rtol=0, atol=1e-5)
    assert params1.keys() == params2.keys() and {"table", "variance"} <= params1.keys()
    for name, g in params1.items():
        scale = float(params2[name].abs().max())
        assert scale > 0 and float((g - params2[name]).abs().max()) <= 1e-4 * scale, name
