"""The neus training render (issue 50): every section evaluated once, with gradients, then cut at the early stop
(transmittance EARLY_STOP), against the two passes it replaced (all sections without gradients to find the alive
ones, then those again with gradients), which remain the path of batches too large to hold their graph."""

from __future__ import annotations

import pytest
import torch

from recon.models import neus
from recon.nerf.config import NeusConfig
from recon.nerf.neus import FIELD_POINTS, eikonal_loss
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


@pytest.mark.parametrize("gradient", ["central", "tetrahedral"])
def test_one_pass_equals_two_passes(monkeypatch, gradient):
    model = sphere_model(0.1, gradient)
    o, d = camera_rays(8)
    rgb1, grad1, samples1, params1 = training_render(model, o, d)
    assert samples1 * FIELD_POINTS[model.field.gradient] <= neus.ONE_PASS_POINTS  # the one-pass branch
    monkeypatch.setattr(neus, "ONE_PASS_POINTS", 0)  # every batch takes the two passes
    rgb2, grad2, samples2, params2 = training_render(model, o, d)
    assert samples1 == samples2 and 0 < grad1.shape[0] < samples1  # the early stop cut sections
    # the same values up to float32 rounding (BLAS blocks rows differently; a central difference divides it by 2h)
    assert grad1.shape == grad2.shape and torch.allclose(grad1, grad2, rtol=0, atol=1e-4)
    assert torch.allclose(rgb1, rgb2, rtol=0, atol=1e-5)
    assert params1.keys() == params2.keys() and {"table", "variance"} <= params1.keys()
    for name, g in params1.items():
        scale = float(params2[name].abs().max())
        assert scale > 0 and float((g - params2[name]).abs().max()) <= 1e-4 * scale, name


def test_gradient_scheme_reaches_the_field_and_older_checkpoints_load_as_central():
    """--neus.gradient reaches the field (the default stays central); a checkpoint saved before the option (no
    "gradient" in its neus section) loads with the central differences it was trained with. The training render
    of the sphere-initialised model is nearly the same with either scheme (the sphere's curvature is the only
    difference: max |rgb difference| 0.020 measured, bound 0.05)."""
    assert NeusConfig().gradient == "central"
    model = sphere_model(0.0, "tetrahedral")
    assert model.field.gradient == model.neus.gradient == "tetrahedral"
    o, d = camera_rays(8)
    rgb_t, grad_t, _, _ = training_render(model, o, d)
    state = model.state_dict()
    del state["neus_config"]["gradient"]
    old = type(model).from_state_dict(state)
    assert old.field.gradient == old.neus.gradient == "central"
    rgb_c, _, _, _ = training_render(old, o, d)
    assert float((rgb_t - rgb_c).abs().max()) < 0.05
