"""Scene representations: one module per representation (parameters + optimiser groups + render)."""

from recon.models.gaussians import GaussianModel, LearningRates, resize_optimizer_state

__all__ = ["GaussianModel", "LearningRates", "resize_optimizer_state"]
