"""3D Gaussian splatting as Markov chain Monte Carlo (Kheradmand et al. 2024), as gsplat's MCMCStrategy.

Every ``refine_every`` steps in (``refine_start_iter``, ``refine_stop_iter``): dead Gaussians (opacity
<= ``min_opacity``) are moved onto live ones sampled proportionally to opacity, and the count grows by
``growth`` (5 %) up to ``cap_max`` by the same sampling; a sampled Gaussian shared by ``r`` copies gets
opacity ``1 - (1 - o)^(1/r)`` and scales rescaled so the summed footprint is unchanged (paper eq. 9).
Every step, positions get noise ``Sigma z * (1 - opacity)^100 * lr * noise_lr``, z ~ N(0, I) (the
paper/gsplat gate is the similar ``sigmoid(100 (0.005 - opacity))``). The loss gets
``opacity_reg * mean(opacity) + scale_reg * mean(scale)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import ClassVar

import torch
from torch import Tensor

from rasterizer.reference.covariance import covariance_from_quat_scale
from recon.models.gaussians import GaussianModel

ITERATION_FIELDS = ("refine_start_iter", "refine_stop_iter", "refine_every")
MAX_COPIES = 51  # relocation ratios are clamped to this (binomial table size, as gsplat)
NOISE_GATE_POWER = 100
OPACITY_EPS = 1e-6


@dataclass
class MCMCConfig:
    """Hyper-parameters of MCMC densification (gsplat defaults, 30k-step schedule); the ``mcmc`` section
    of :class:`recon.training.trainer.TrainConfig` (``--mcmc.noise-lr 1e5``)."""

    noise_lr: float = 5e5
    """position noise scale, x the current means learning rate"""
    refine_start_iter: int = 500
    """first relocation step (x steps_scaler)"""
    refine_stop_iter: int = 25_000
    """no relocation from this step on (x steps_scaler)"""
    refine_every: int = 100
    """relocation period (x steps_scaler)"""
    min_opacity: float = 0.005
    """Gaussians at or below this opacity are dead and relocated"""
    growth: float = 0.05
    """fraction the Gaussian count grows by at each relocation (up to --max-gaussians)"""
    opacity_reg: float = 0.01
    """loss weight of the mean opacity"""
    scale_reg: float = 0.01
    """loss weight of the mean scale"""

    def scaled(self, steps_scaler: float):
        """Copy with the iteration counts multiplied by ``steps_scaler`` (at least 1)."""
        return replace(self, **{f: max(1, round(getattr(self, f) * steps_scaler)) for f in ITERATION_FIELDS})


@dataclass
class MCMCStrategy(MCMCConfig):
    """MCMC densification: the :class:`MCMCConfig` hyper-parameters plus the Gaussian cap ``cap_max``."""

    cap_max: int = 1_000_000
    scales_param: ClassVar[str] = "log_scales"  # the parameter relocation rescales (4dgs: log_scales4)

    @classmethod
    def from_config(cls, config: MCMCConfig, max_gaussians: int | None = None) -> "MCMCStrategy":
        """The strategy with ``config``'s hyper-parameters and the count capped at ``max_gaussians``."""
        cap = {} if max_gaussians is None else {"cap_max": max_gaussians}
        return cls(**asdict(config), **cap)

    def initialize_state(self, model: GaussianModel) -> dict:
        """MCMC keeps no per-Gaussian statistics."""
        return {}

    def regularization(self, model: GaussianModel) -> Tensor:
        """``opacity_reg * mean(opacity) + scale_reg * mean(scale)`` (scalar)."""
        return self.opacity_reg * model.opacities.abs().mean() + self.scale_reg * model.scales.abs().mean()

    # ---------------------------------------------------------------------------- hooks

    def step_pre_backward(self, model: GaussianModel, meta: dict, state: dict, step: int) -> None:
        """Nothing to do before backward."""

    def step_post_backward(self, model: GaussianModel, meta: dict, state: dict, step: int,
                           lr: float | None = None) -> dict:
        """Relocate / add on schedule, then inject position noise (``lr`` = current means lr).

        Call after ``optimizer.step()`` (as gsplat does). Returns ``{"relocated", "added"}``.
        """
        info = {"relocated": 0, "added": 0}
        if self.refine_start_iter < step < self.refine_stop_iter and step % self.refine_every == 0:
            info["relocated"] = self.relocate(model)
            info["added"] = self.add(model)
        if lr is not None and lr > 0:
            self.inject_noise(model, lr * self.noise_lr)
        return info

    # ---------------------------------------------------------------------------- operations

    def relocate(self, model: GaussianModel) -> int:
        """Move dead Gaussians onto live ones sampled proportionally to opacity. Returns the count."""
        opac = model.opacities.detach()
        dead = opac <= self.min_opacity
        n_dead = int(dead.sum())
        if n_dead == 0 or n_dead == len(model):
            return 0
        alive_idx = (~dead).nonzero().squeeze(1)
        dead_idx = dead.nonzero().squeeze(1)
        sampled = alive_idx[torch.multinomial(opac[alive_idx], n_dead, replacement=True)]
        self._share(model, sampled)
        zero_rows = torch.cat([sampled, dead_idx])

        def fn_param(name: str, p: Tensor) -> Tensor:
            p = p.clone()
            p[dead_idx] = p[sampled]
            return p

        def fn_state(name: str, key: str, v: Tensor) -> Tensor:
            v = v.clone()
            v[zero_rows] = 0
            return v

        model.update_params(fn_param, fn_state)
        return n_dead

    def add(self, model: GaussianModel) -> int:
        """Grow by ``growth`` (capped at ``cap_max``), copies sampled proportionally to opacity."""
        n = len(model)
        n_new = max(0, min(self.cap_max, int((1.0 + self.growth) * n)) - n)
        if n_new == 0:
            return 0
        sampled = torch.multinomial(model.opacities.detach(), n_new, replacement=True)
        self._share(model, sampled)

        def fn_state(name: str, key: str, v: Tensor) -> Tensor:
            v = v.clone()
            v[sampled] = 0
            return torch.cat([v, v.new_zeros((n_new,) + tuple(v.shape[1:]))])

        model.update_params(lambda name, p: torch.cat([p, p[sampled]]), fn_state)
        return n_new

    def _share(self, model: GaussianModel, sampled: Tensor) -> None:
        """Set opacity and scale of each sampled Gaussian for the number of copies it will have
        (itself + the times it was drawn), in place (shapes unchanged, state untouched)."""
        copies = torch.bincount(sampled, minlength=len(model))[sampled] + 1
        new_opac, new_scales = relocation_values(model.opacities.detach()[sampled], model.scales.detach()[sampled],
                                                 copies)
        new_opac = new_opac.clamp(self.min_opacity, 1.0 - OPACITY_EPS)
        with torch.no_grad():
            model.params["logit_opacities"][sampled] = torch.logit(new_opac)
            model.params[self.scales_param][sampled] = torch.log(new_scales)

    @torch.no_grad()
    def inject_noise(self, model: GaussianModel, scaler: float) -> None:
        """``means += Sigma z * (1 - opacity)^100 * scaler`` (Sigma = world covariance, z ~ N(0, I))."""
        p = model.params
        opac = model.opacities
        covars = covariance_from_quat_scale(p["quats"], model.scales)
        gate = (1.0 - opac).clamp(min=0) ** NOISE_GATE_POWER
        noise = torch.randn_like(p["means"]) * gate[:, None] * scaler
        p["means"].add_(torch.einsum("nij,nj->ni", covars, noise))


def relocation_values(opacities: Tensor, scales: Tensor, copies: Tensor) -> tuple[Tensor, Tensor]:
    """Opacity and scales for a Gaussian replaced by ``copies`` identical ones (MCMC paper eq. 9).

    new_opacity = 1 - (1 - o)^(1/r);  new_scale = scale * o / sum_{i=1}^{r} sum_{k=0}^{i-1}
    C(i-1, k) (-1)^k new_opacity^(k+1) / sqrt(k+1), with r clamped to [1, MAX_COPIES].
    Shapes: opacities [M], scales [M, 3], copies [M] int -> ([M], [M, 3]).
    """
    r = copies.clamp(1, MAX_COPIES).to(opacities.dtype)
    new_opac = 1.0 - (1.0 - opacities) ** (1.0 / r)
    n = MAX_COPIES
    binom = torch.tensor([[math.comb(i, k) for k in range(n)] for i in range(n)], dtype=torch.float64,
                         device=opacities.device)
    k = torch.arange(n, device=opacities.device, dtype=torch.float64)
    # inner[i-1, k] = C(i-1, k) (-1)^k / sqrt(k+1); the sum over i = 1..r uses rows 0..r-1
    inner = binom * ((-1.0) ** k / torch.sqrt(k + 1))[None]
    powers = new_opac.double()[:, None] ** (k + 1)[None]  # [M, n]
    per_i = powers @ inner.T  # [M, n]: entry i-1 = sum_k inner[i-1, k] new_o^(k+1)
    rows = torch.arange(n, device=opacities.device)[None] < r[:, None]
    denom = (per_i * rows).sum(dim=1)
    coeff = (opacities.double() / denom).to(scales.dtype)
    return new_opac, scales * coeff[:, None]
