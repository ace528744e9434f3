"""The NeRF "strategy": keeping the occupancy grid of :mod:`recon.nerf.occupancy` up to date.

Every ``update_every`` steps (after the optimiser step) the model re-estimates its grid
(:meth:`recon.models.nerf.NerfModel.update_occupancy`): during the first ``warmup_steps`` every cell,
later a random ``fraction`` of them; values decay by ``decay`` per update and a cell is marched while
its value (opacity of one base step) exceeds ``min(threshold, mean)``. Defaults: nerfacc's
OccGridEstimator (``update_every_n_steps`` 16, warm-up 256 steps, ema decay 0.95, threshold 0.01;
instant-ngp re-estimates a quarter of the cells after warm-up). No loss term, no count changes.

Only ``--method nerf`` and ``--method neus`` (its SDF-derived cell values) train with it (:attr:`OccupancyGridStrategy.METHODS`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

import torch
from torch import Tensor


@dataclass
class OccupancyConfig:
    """Occupancy-grid update rhythm (--method nerf, --strategy occupancy); the ``occupancy`` section."""

    update_every: int = 16
    """re-estimate the grid every N steps"""
    warmup_steps: int = 256
    """re-estimate every cell during these first steps (then a random --occupancy.fraction of them)"""
    decay: float = 0.95
    """values decay by this factor per update"""
    threshold: float = 0.01
    """a cell is marched while its one-step opacity exceeds min(threshold, the mean over cells)"""
    fraction: float = 0.25
    """share of the cells re-estimated per update after the warm-up"""

    def scaled(self, steps_scaler: float) -> "OccupancyConfig":
        """Unchanged: the update rhythm follows the field's learning, not the run length."""
        return self


@dataclass
class OccupancyGridStrategy(OccupancyConfig):
    """:class:`OccupancyConfig` as a training strategy (the interface of :mod:`recon.strategy`)."""

    METHODS: ClassVar[tuple[str, ...]] = ("nerf", "neus")  # the methods it applies to (recon.training.trainer.strategy_class)
    max_gaussians: int | None = None  # unused (the trainer passes the run's cap to every strategy)

    @classmethod
    def from_config(cls, config: OccupancyConfig, max_gaussians: int | None = None) -> "OccupancyGridStrategy":
        return cls(**asdict(config), max_gaussians=max_gaussians)

    def initialize_state(self, model) -> dict:
        """No state of its own: the grid lives in the model (and its checkpoints)."""
        return {}

    def regularization(self, model) -> Tensor:
        return torch.zeros((), device=model.device)

    def step_pre_backward(self, model, meta: dict, state: dict, step: int) -> None:
        pass

    def step_post_backward(self, model, meta: dict, state: dict, step: int, lr: float | None = None) -> None:
        """Re-estimate the grid at every ``update_every``-th step (0-based ``step``)."""
        if step % self.update_every == 0:
            warm = step < self.warmup_steps
            model.update_occupancy(self.decay, self.threshold, 1.0 if warm else self.fraction)
