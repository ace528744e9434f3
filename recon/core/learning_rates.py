"""The Adam learning rates of the 3DGS paper, one place for the Gaussian models (recon.models) and for what
tunes Gaussians below them (recon.lod's level fine-tuning)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LearningRates:
    """Adam learning rates of the 3DGS paper; ``means`` is multiplied by the scene extent and decays
    exponentially to ``means * means_final_ratio`` over the run."""

    means: float = 1.6e-4
    """means learning rate, x scene extent, decayed over the run"""
    means_final_ratio: float = 0.01
    """the means learning rate decays exponentially to this fraction of it"""
    quats: float = 1e-3
    log_scales: float = 5e-3
    logit_opacities: float = 5e-2
    sh0: float = 2.5e-3
    shN: float = 2.5e-3 / 20
    eps: float = 1e-15
    """Adam epsilon"""
