"""Densification strategies: dataclasses of hyper-parameters plus an explicit state dict.

Every strategy has ``initialize_state(model) -> dict``, ``regularization(model) -> Tensor`` (added to the
loss), ``step_pre_backward(model, meta, state, step)`` and ``step_post_backward(model, meta, state, step,
lr)``, and ``scaled(steps_scaler)`` returning a copy whose iteration counts are scaled for shorter runs.
Gaussian-count changes go through :mod:`recon.strategy.ops`, which keeps Adam's state aligned.
"""

from recon.strategy.adc import ADCStrategy
from recon.strategy.mcmc import MCMCStrategy

STRATEGIES = {"adc": ADCStrategy, "mcmc": MCMCStrategy}

__all__ = ["ADCStrategy", "MCMCStrategy", "STRATEGIES"]
