"""Finite-difference checks (float64 gradcheck) of both backends on tiny hand-built scenes."""

import pytest
import torch

from rasterizer import rasterize_gaussians


def tiny_scene():
    """Three overlapping Gaussians, one 12x10 image (a single tile), away from thresholds."""
    means = torch.tensor([[0.0, 0.0, 3.0], [0.08, -0.05, 3.4], [-0.1, 0.06, 3.8]], dtype=torch.float64)
    quats = torch.tensor([[1.0, 0.1, -0.2, 0.05], [0.9, -0.3, 0.1, 0.2], [0.7, 0.2, 0.4, -0.1]], dtype=torch.float64)
    scales = torch.tensor([[0.12, 0.08, 0.1], [0.1, 0.14, 0.09], [0.15, 0.1, 0.12]], dtype=torch.float64)
    opacities = torch.tensor([0.55, 0.7, 0.6], dtype=torch.float64)
    colors = torch.tensor([[0.9, 0.2, 0.1], [0.1, 0.8, 0.3], [0.2, 0.3, 0.9]], dtype=torch.float64)
    K = torch.tensor([[[14.0, 0, 6.0], [0, 14.0, 5.0], [0, 0, 1]]], dtype=torch.float64)
    return [means, quats, scales, opacities, colors], torch.eye(4, dtype=torch.float64)[None], K


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("mode", ["classic", "antialiased"])
def test_gradcheck(backend, mode):
    params, viewmats, Ks = tiny_scene()
    params = [p.clone().requires_grad_(True) for p in params]

    def f(means, quats, scales, opacities, colors):
        render, alpha, _ = rasterize_gaussians(means, quats, scales, opacities, colors, viewmats, Ks, 12, 10,
                                               backend=backend, rasterize_mode=mode, render_mode="RGB+ED")
        return render, alpha

    assert torch.autograd.gradcheck(f, params, eps=1e-6, atol=1e-6, rtol=1e-4)
