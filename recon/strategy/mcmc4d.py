"""MCMC densification for 4D Gaussians (method "4dgs"): :class:`recon.strategy.mcmc.MCMCStrategy` with
the 4D parameters.

Relocation and growth are MCMC's (dead Gaussians move onto live ones sampled by opacity; copies share the
opacity, paper eq. 9), with the rescaling applied to all four scales. The position noise is 4D:
``means4 += Sigma4 z (1 - opacity)^100 lr noise_lr``, z ~ N(0, I_4), so Gaussians wander in time as well
as in space. The regulariser is MCMC's: mean opacity and mean scale (all four scales).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from rasterizer.spacetime import covariance_4d
from recon.strategy.mcmc import NOISE_GATE_POWER, MCMCStrategy


@dataclass
class MCMC4DStrategy(MCMCStrategy):
    """:class:`MCMCStrategy` for :class:`recon.models.spacetime.SpaceTimeGaussians` (see the module docstring)."""

    scales_param: ClassVar[str] = "log_scales4"  # relocation rescales all four scales

    @torch.no_grad()
    def inject_noise(self, model, scaler: float) -> None:
        p = model.params
        covars = covariance_4d(p["quats_left"], p["quats_right"], model.scales)
        gate = (1.0 - model.opacities).clamp(min=0) ** NOISE_GATE_POWER
        noise = torch.randn_like(p["means4"]) * gate[:, None] * scaler
        p["means4"].add_(torch.einsum("nij,nj->ni", covars, noise))
