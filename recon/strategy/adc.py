"""Adaptive density control (3DGS): clone, split, prune, opacity reset.

Every ``refine_every`` steps in (``refine_start_iter``, ``refine_stop_iter``): Gaussians whose average
screen-space mean gradient (NDC-equivalent units) is >= ``grow_grad2d`` are cloned when small (max
scale <= ``grow_scale3d`` x extent) or split in two when large; then Gaussians with opacity <
``prune_opa`` (and, after the first opacity reset, those larger than ``prune_scale3d`` x extent) are
removed. Every ``reset_every`` steps opacities are clamped to ``2 prune_opa``. Same algorithm and
defaults as gsplat's ``DefaultStrategy``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import torch
from torch import Tensor

from recon.models.gaussians import GaussianModel
from recon.strategy import ops

ITERATION_FIELDS = ("refine_start_iter", "refine_stop_iter", "reset_every", "refine_every")
MIN_REFINE_EVERY = 20  # scaled schedules: averaging gradients over fewer views makes growth explode


@dataclass
class ADCConfig:
    """Hyper-parameters of adaptive density control (3DGS / gsplat defaults, 30k-step schedule); the
    ``adc`` section of :class:`recon.training.trainer.TrainConfig` (``--adc.grow-grad2d 0.0003``)."""

    prune_opa: float = 0.005
    """prune Gaussians less opaque than this; opacity resets clamp to twice it"""
    grow_grad2d: float = 0.0002
    """clone/split Gaussians whose mean screen-space gradient (NDC units) reaches this"""
    grow_scale3d: float = 0.01
    """clone (small) or split (large) at this max scale, x scene extent"""
    prune_scale3d: float = 0.1
    """after the first opacity reset, prune Gaussians larger than this, x scene extent"""
    refine_start_iter: int = 500
    """first refinement step (x steps_scaler)"""
    refine_stop_iter: int = 15_000
    """no refinement from this step on (x steps_scaler)"""
    reset_every: int = 3000
    """opacity reset period (x steps_scaler)"""
    refine_every: int = 100
    """refinement period (x steps_scaler, kept >= 20)"""
    absgrad: bool = False
    """accumulate absolute gradients (AbsGS) instead of gradients"""

    def scaled(self, steps_scaler: float):
        """Copy with the iteration counts multiplied by ``steps_scaler`` (at least 1); ``refine_every`` is
        kept >= MIN_REFINE_EVERY (or unscaled if smaller) and ``reset_every`` >= 2 x ``refine_every``."""
        new = {f: max(1, round(getattr(self, f) * steps_scaler)) for f in ITERATION_FIELDS}
        new["refine_every"] = max(new["refine_every"], min(MIN_REFINE_EVERY, self.refine_every))
        new["reset_every"] = max(new["reset_every"], 2 * new["refine_every"])
        return replace(self, **new)


@dataclass
class ADCStrategy(ADCConfig):
    """Adaptive density control: the :class:`ADCConfig` hyper-parameters plus the run's Gaussian cap."""

    max_gaussians: int | None = None  # optional hard cap: growth stops at this count

    @classmethod
    def from_config(cls, config: ADCConfig, max_gaussians: int | None = None) -> "ADCStrategy":
        """The strategy with ``config``'s hyper-parameters and growth capped at ``max_gaussians``."""
        return cls(**asdict(config), max_gaussians=max_gaussians)

    # ---------------------------------------------------------------------------- state

    def initialize_state(self, model: GaussianModel) -> dict:
        """``grad2d`` [N] summed gradient norms, ``count`` [N] number of views each Gaussian was seen in."""
        n, dev = len(model), model.device
        return {"grad2d": torch.zeros(n, device=dev), "count": torch.zeros(n, device=dev)}

    def regularization(self, model: GaussianModel) -> Tensor:
        """ADC adds no loss term."""
        return model.params["means"].new_zeros(())

    # ---------------------------------------------------------------------------- hooks

    def step_pre_backward(self, model: GaussianModel, meta: dict, state: dict, step: int) -> None:
        """Nothing to do: the rasterizer already retains ``meta["means2d"]``'s gradient."""

    def step_post_backward(self, model: GaussianModel, meta: dict, state: dict, step: int,
                           lr: float | None = None) -> dict:
        """Accumulate gradients; refine / reset on schedule (after backward and ``optimizer.step()``).

        Returns counts ``{"cloned", "split", "pruned", "reset"}`` (zeros when nothing happened).
        """
        info = {"cloned": 0, "split": 0, "pruned": 0, "reset": 0}
        if step >= self.refine_stop_iter:
            return info
        self.update_state(model, meta, state)
        if step > self.refine_start_iter and step % self.refine_every == 0:
            info["cloned"], info["split"] = self.grow(model, state)
            info["pruned"] = self.prune(model, step)
            state.update(self.initialize_state(model))
        if step % self.reset_every == 0 and step > 0:
            ops.reset_opacity(model, 2.0 * self.prune_opa)
            info["reset"] = 1
        return info

    def update_state(self, model: GaussianModel, meta: dict, state: dict) -> None:
        """Add ``|d loss / d means2d|`` (the model's :meth:`screen_gradient`: for surfels a surrogate from
        the ray transforms) in NDC-equivalent units (pixels x size / 2, times the number of cameras of the
        batch) for every Gaussian with a positive radius."""
        grads = model.screen_gradient(meta, self.absgrad)
        if grads is None:
            raise RuntimeError("ADCStrategy: the render has no screen-space gradient yet; call step_post_backward after "
                               "loss.backward()")
        C = grads.shape[0]
        grads = grads.detach().clone()
        grads[..., 0] *= meta["width"] / 2.0 * C
        grads[..., 1] *= meta["height"] / 2.0 * C
        visible = (meta["radii"] > 0).all(dim=-1)  # [C, N]
        gs_ids = visible.nonzero()[:, 1]
        state["grad2d"].index_add_(0, gs_ids, grads[visible].norm(dim=-1))
        state["count"].index_add_(0, gs_ids, torch.ones_like(gs_ids, dtype=state["count"].dtype))

    # ---------------------------------------------------------------------------- refinement

    def grow(self, model: GaussianModel, state: dict) -> tuple[int, int]:
        """Clone small and split large high-gradient Gaussians. Returns (cloned, split)."""
        grads = state["grad2d"] / state["count"].clamp(min=1)
        high = grads > self.grow_grad2d
        small = self.sizes(model) <= self.grow_scale3d * model.extent
        is_clone, is_split = high & small, high & ~small
        if self.max_gaussians is not None:
            room = max(0, self.max_gaussians - len(model))
            is_clone, is_split = _limit(is_clone, is_split, room, grads)
        n_clone = ops.duplicate(model, is_clone)
        # clones were appended: pad the split mask with False for them
        is_split = torch.cat([is_split, is_split.new_zeros(n_clone)])
        n_split = self.split(model, is_split)
        return n_clone, n_split

    def sizes(self, model) -> Tensor:
        """[N] the size :meth:`grow` compares with ``grow_scale3d x extent``: the largest activated scale
        (the 4D strategy: the spatial one)."""
        return model.scales.detach().max(dim=-1).values

    def split(self, model, mask: Tensor) -> int:
        """Split the Gaussians in ``mask`` (:func:`ops.split`; the 4D and mesh-bound strategies: their own)."""
        return ops.split(model, mask)

    def prune(self, model: GaussianModel, step: int) -> int:
        """Remove transparent Gaussians (and, after the first reset, huge ones). Returns the count."""
        is_prune = model.opacities.detach() < self.prune_opa
        if step > self.reset_every:
            is_prune |= model.scales.detach().max(dim=-1).values > self.prune_scale3d * model.extent
        return ops.remove(model, is_prune)


def _limit(is_clone: Tensor, is_split: Tensor, room: int, grads: Tensor) -> tuple[Tensor, Tensor]:
    """Keep only the highest-gradient candidates so that clones + splits add at most ``room`` Gaussians
    (a clone adds one, a split adds one net)."""
    cand = is_clone | is_split
    if int(cand.sum()) <= room:
        return is_clone, is_split
    keep = torch.zeros_like(cand)
    if room > 0:
        scores = torch.where(cand, grads, torch.full_like(grads, -1.0))
        keep[scores.topk(room).indices] = True
    return is_clone & keep, is_split & keep
