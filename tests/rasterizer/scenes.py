"""Small random scenes for rasterizer tests."""

from __future__ import annotations

import math

import torch


def random_scene(n=200, width=64, height=48, n_cams=1, dtype=torch.float64, seed=0, sh_degree=None,
                 channels=3, spread=1.0):
    """Gaussians in front of camera 0 (at the origin looking down +z), plus extra cameras rotated about y.

    Returns dict of leaf tensors (means, quats, scales, opacities, colors) and viewmats [C,4,4], Ks [C,3,3].
    """
    g = torch.Generator().manual_seed(seed)
    u = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64)  # noqa: E731
    means = torch.stack([(u(n) * 2 - 1) * spread, (u(n) * 1.6 - 0.8) * spread, u(n) * 2.5 + 2.5], -1)
    quats = torch.randn(n, 4, generator=g, dtype=torch.float64)
    scales = torch.exp(u(n, 3) * 1.9 - 4.2)
    opacities = u(n) * 0.65 + 0.3
    if sh_degree is None:
        colors = u(n, channels)
    else:
        colors = torch.randn(n, (sh_degree + 1) ** 2, 3, generator=g, dtype=torch.float64) * 0.3
    f = 1.2 * width
    K = torch.tensor([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]], dtype=torch.float64)
    viewmats = []
    for i in range(n_cams):
        ang = 0.25 * i
        R = torch.tensor([[math.cos(ang), 0, math.sin(ang)], [0, 1, 0], [-math.sin(ang), 0, math.cos(ang)]],
                         dtype=torch.float64)
        centre = torch.tensor([0.0, 0.0, 3.75], dtype=torch.float64)
        vm = torch.eye(4, dtype=torch.float64)
        vm[:3, :3] = R
        vm[:3, 3] = centre - R @ centre  # rotate about the scene centre
        viewmats.append(vm)
    params = dict(means=means, quats=quats, scales=scales, opacities=opacities, colors=colors)
    params = {k: v.to(dtype).requires_grad_(True) for k, v in params.items()}
    return params, torch.stack(viewmats).to(dtype), K[None].repeat(n_cams, 1, 1).to(dtype)
