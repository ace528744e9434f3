"""Compositing over a background: what a pixel shows of the colour behind the Gaussians."""

from __future__ import annotations

import torch
from torch import Tensor


def over_background(render: Tensor, alpha: Tensor, backgrounds: Tensor | None) -> Tensor:
    """render [C, H, W, D] with its first B channels composited over backgrounds [C, B] (B <= D):
    render + (1 - alpha) * background, alpha [C, H, W, 1]; the other channels unchanged. None: render
    itself. Differentiable in all three (torch ops)."""
    if backgrounds is None:
        return render
    n = backgrounds.shape[-1]
    colour = torch.addcmul(render[..., :n], 1.0 - alpha, backgrounds[:, None, None, :])
    return colour if render.shape[-1] == n else torch.cat([colour, render[..., n:]], dim=-1)
