"""Densification strategies: dataclasses of hyper-parameters plus an explicit state dict.

Every strategy has ``initialize_state(model) -> dict``, ``regularization(model) -> Tensor`` (added to the
loss), ``step_pre_backward(model, meta, state, step)`` and ``step_post_backward(model, meta, state, step,
lr)``, and ``scaled(steps_scaler)`` returning a copy whose iteration counts are scaled for shorter runs.
Gaussian-count changes go through :mod:`recon.strategy.ops`, which keeps Adam's state aligned.

Each strategy's tunable hyper-parameters are a config dataclass (:class:`ADCConfig`, :class:`MCMCConfig`)
that the strategy class extends with the Gaussian cap; ``Strategy.from_config(config, max_gaussians)``
builds it. :data:`STRATEGIES` maps ``--strategy NAME`` to the class; the hyper-parameters live in the
training config's section of the same name (``TrainConfig.adc``, ``TrainConfig.mcmc``, ``TrainConfig.occupancy``:
the NeRF occupancy-grid updates, :mod:`recon.strategy.occupancy`).
"""

from recon.strategy.adc import ADCConfig, ADCStrategy
from recon.strategy.mcmc import MCMCConfig, MCMCStrategy
from recon.strategy.occupancy import OccupancyConfig, OccupancyGridStrategy

STRATEGIES = {"adc": ADCStrategy, "mcmc": MCMCStrategy, "occupancy": OccupancyGridStrategy}
"""``--strategy`` name -> class; a class with ``METHODS`` applies only to those methods (occupancy: nerf)."""

__all__ = ["ADCConfig", "ADCStrategy", "MCMCConfig", "MCMCStrategy", "OccupancyConfig", "OccupancyGridStrategy",
           "STRATEGIES"]
