"""The neus marching step while the surface is blurry (issue 50, ``--neus.sharp-step``): sections of up to
sharp_step / s (normalised units), at least the nerf step, at most MAX_STEP_FACTOR of it; renders with the long
sections match those with the nerf step (NeuS's opacity is exact for an SDF linear along a section)."""

from __future__ import annotations

import math

import pytest
import torch

from recon.models import NeusModel, neus
from recon.nerf.config import NeusConfig
from recon.nerf.space import FieldSpace
from tests.recon.nerf.test_neus_fast_render import SMALL, camera_rays, psnr, sphere_model
from tests.recon.nerf.test_neus_training_pass import training_render


def with_sharpness(model, s: float):
    with torch.no_grad():
        model.field.variance.fill_(math.log(s) / 10.0)
    return model


def test_march_step_follows_the_sharpness():
    model = sphere_model(0.0)  # box [-1, 1]^3: normalised = world; SMALL: 256 steps per diagonal
    base = 2.0 * math.sqrt(3.0) / 256
    assert model.neus.sharp_step == NeusConfig().sharp_step == 0.5
    assert with_sharpness(model, 20.0).dt_min == pytest.approx(0.5 / 20.0, rel=1e-5)  # blurry: 1.8 nerf steps
    assert with_sharpness(model, 64.0).dt_min == pytest.approx(base)  # sharp: the nerf step
    assert with_sharpness(model, 1.0).dt_min == pytest.approx(neus.MAX_STEP_FACTOR * base)  # at most 16 of them
    model.neus.sharp_step = 0.0
    assert with_sharpness(model, 20.0).dt_min == pytest.approx(base)
    big = NeusModel(SMALL, FieldSpace.box((-2, -2, -2), (2, 2, 2)), 1.0, torch.Generator().manual_seed(0),
                    neus_cfg=NeusConfig(geo_hidden=8))  # 2 world units per normalised unit
    assert with_sharpness(big, 20.0).dt_min == pytest.approx(2.0 * 0.5 / 20.0, rel=1e-5)


SHARP = 10.0


def test_long_sections_render_as_the_nerf_step():
    """A sphere of sharpness 10 (a wide band), 16 x 16 rays through the box, training render (gradients on), the
    same model at both steps: sharp_step 0.5 marches sections of 0.05 (3.7 nerf steps of 0.0135); measured: 3.7x
    fewer sections (10,024 vs 37,368), colours 64.8 dB from the nerf step's (largest difference 0.0021), mean
    |grad| of the coloured sections 1.0272 vs 1.0287; bounds: fewer than a third, 50 dB, 0.01, 0.005. The render
    without gradients (the fast path): 68.3 dB, largest difference 0.0020; bounds 50 dB, 0.01."""
    o, d = camera_rays(16)
    fine = with_sharpness(sphere_model(0.0, "tetrahedral"), SHARP)
    coarse = type(fine).from_state_dict(fine.state_dict())  # the same colour net (drawn from torch's seed)
    fine.neus.sharp_step = 0.0
    rgb_f, grad_f, samples_f, _ = training_render(fine, o, d)
    rgb_c, grad_c, samples_c, _ = training_render(coarse, o, d)
    assert samples_c * 3 < samples_f
    assert psnr(rgb_c, rgb_f) > 50.0 and float((rgb_c - rgb_f).abs().max()) < 0.01
    assert float(grad_c.norm(dim=1).mean()) == pytest.approx(float(grad_f.norm(dim=1).mean()), abs=0.005)
    with torch.no_grad():  # the render without gradients (eval, view: the fast path, faint sections dropped)
        white = torch.ones(3)
        fast_f, fast_c = fine.render_rays(o, d, white)["rgb"], coarse.render_rays(o, d, white)["rgb"]
    print(f"fast render, long vs nerf step: {psnr(fast_c, fast_f):.1f} dB, max {float((fast_c - fast_f).abs().max()):.4f}")
    assert psnr(fast_c, fast_f) > 50.0 and float((fast_c - fast_f).abs().max()) < 0.01


def test_older_checkpoints_march_at_the_nerf_step():
    """A checkpoint saved before the option (no "sharp_step" in its neus section) resumes with the step it was
    trained with (sharp_step 0); a newer one keeps its own."""
    model = with_sharpness(sphere_model(0.0), 20.0)
    state = model.state_dict()
    assert type(model).from_state_dict(state).neus.sharp_step == 0.5
    del state["neus_config"]["sharp_step"]
    old = type(model).from_state_dict(state)
    assert old.neus.sharp_step == 0.0 and old.dt_min == pytest.approx(2.0 * math.sqrt(3.0) / 256)
