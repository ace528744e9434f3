"""Densification strategies: dataclasses of hyper-parameters plus an explicit state dict.

Every strategy has ``initialize_state(model) -> dict``, ``regularization(model) -> Tensor`` (added to the
loss), ``step_pre_backward(model, meta, state, step)`` and ``step_post_backward(model, meta, state, step,
lr)``, and ``scaled(steps_scaler)`` returning a copy whose iteration counts are scaled for shorter runs.
Gaussian-count changes go through :mod:`recon.strategy.ops`, which keeps Adam's state aligned.

Each strategy's tunable hyper-parameters are a config dataclass (:class:`ADCConfig`, :class:`MCMCConfig`)
that the strategy class extends with the Gaussian cap; ``Strategy.from_config(config, max_gaussians)``
builds it. :data:`STRATEGIES` maps ``--strategy NAME`` to the class; the hyper-parameters live in the
training config's section of the same name (``TrainConfig.adc``, ``TrainConfig.mcmc``, ``TrainConfig.occupancy``:
the NeRF occupancy-grid updates, :mod:`recon.strategy.occupancy`). A method whose parameters differ from
3DGS's has its own table in :data:`METHOD_STRATEGIES` (4D Gaussians: :mod:`recon.strategy.adc4d`,
:mod:`recon.strategy.mcmc4d`); :func:`strategies_for` answers for any method.

This package sits above ``recon.models`` (strategies read and edit a model's parameters); models never
import it.

Layer 5: may import layers 1-4 (recon.models above all) and rasterizer.
"""

from recon.strategy.adc import ADCConfig, ADCStrategy
from recon.strategy.mcmc import MCMCConfig, MCMCStrategy
from recon.strategy.adc4d import ADC4DStrategy
from recon.strategy.adc_mesh import MeshADCStrategy
from recon.strategy.mcmc4d import MCMC4DStrategy
from recon.strategy.occupancy import OccupancyConfig, OccupancyGridStrategy

STRATEGIES = {"adc": ADCStrategy, "mcmc": MCMCStrategy, "occupancy": OccupancyGridStrategy}
"""``--strategy`` name -> class; a class with ``METHODS`` applies only to those methods (occupancy: nerf)."""

METHOD_STRATEGIES: dict[str, dict[str, type]] = {"4dgs": {"adc": ADC4DStrategy, "mcmc": MCMC4DStrategy},
                                                  "meshgs": {"adc": MeshADCStrategy}}
"""``--method`` name -> its own ``--strategy`` table, for methods whose parameters differ from 3DGS's."""


def strategies_for(method: str) -> dict[str, type]:
    """``--strategy`` name -> class for ``--method``: the method's own table (:data:`METHOD_STRATEGIES`), else
    the :data:`STRATEGIES` that apply to it (a class with ``METHODS`` applies only to those methods)."""
    if method in METHOD_STRATEGIES:
        return dict(METHOD_STRATEGIES[method])
    return {name: cls for name, cls in STRATEGIES.items() if method in getattr(cls, "METHODS", (method,))}


__all__ = ["METHOD_STRATEGIES", "strategies_for", "ADCConfig", "ADCStrategy", "MCMCConfig", "MCMCStrategy",
           "OccupancyConfig", "OccupancyGridStrategy",
           "STRATEGIES"]
