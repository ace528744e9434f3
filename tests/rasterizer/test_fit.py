"""A small optimisation through the cpu backend fits a target image (loss falls at least 10x)."""

import torch

from rasterizer import rasterize_gaussians

from .scenes import random_scene


def test_fit_target_image():
    W, H = 48, 36
    target_p, viewmats, Ks = random_scene(n=120, width=W, height=H, dtype=torch.float32, seed=21)
    with torch.no_grad():
        target, _, _ = rasterize_gaussians(*[target_p[k] for k in ("means", "quats", "scales", "opacities", "colors")],
                                           viewmats, Ks, W, H, backend="cpu")
    # start: jittered positions, wrong colours/opacities/sizes
    g = torch.Generator().manual_seed(0)
    means = (target_p["means"].detach() + 0.05 * torch.randn(120, 3, generator=g)).requires_grad_(True)
    quats = torch.randn(120, 4, generator=g).requires_grad_(True)
    log_scales = torch.full((120, 3), -3.3).requires_grad_(True)
    logit_op = torch.zeros(120).requires_grad_(True)
    color_logits = torch.zeros(120, 3).requires_grad_(True)
    opt = torch.optim.Adam([{"params": [means], "lr": 2e-3}, {"params": [quats], "lr": 1e-2},
                            {"params": [log_scales, logit_op, color_logits], "lr": 5e-2}])
    losses = []
    for _ in range(150):
        render, _, _ = rasterize_gaussians(means, quats, torch.exp(log_scales), torch.sigmoid(logit_op),
                                           torch.sigmoid(color_logits), viewmats, Ks, W, H, backend="cpu")
        loss = (render - target).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 10, f"loss {losses[0]:.4g} -> {losses[-1]:.4g}"
