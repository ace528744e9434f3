"""Named training configurations (as gsplat's trainer): ``splatforge train mcmc --data DIR`` starts from
:data:`PRESETS` ``["mcmc"]``, then applies the flags. The command line (:mod:`recon.commands.train`) and
block training (:mod:`recon.distributed.worker`) read them here."""

from __future__ import annotations

import dataclasses

from recon.core.errors import UsageError
from recon.training.trainer import TrainConfig

# name -> (config, one-line description); flags given after the name override these values
PRESETS: dict[str, tuple[TrainConfig, str]] = {
    "default": (TrainConfig(), "3DGS recipe: 30k steps, adaptive density control (ADC), SH degree 3"),
    "mcmc": (TrainConfig(strategy="mcmc", max_gaussians=1_000_000),
             "3DGS-MCMC: relocation instead of split/clone, Gaussian count capped at --max-gaussians"),
    "fast": (TrainConfig(steps=7_000, sh_degree=1, init_num_random=30_000, save_every=3_500),
             "a quick look: 7k steps (schedule scaled), SH degree 1, fewer random initial Gaussians"),
    "nerf": (TrainConfig(method="nerf", strategy="occupancy", steps=20_000, save_every=2_000),
             "hash-grid NeRF (instant-ngp style), occupancy-grid sampling; also what --method nerf alone picks"),
    "neus": (TrainConfig(method="neus", strategy="occupancy", steps=20_000, save_every=2_000),
             "NeuS2-style SDF on the hash grid (meshes from the zero level set); also what --method neus alone picks"),
}
DEFAULT_PRESET = "default"


def preset_config(name: str, **overrides) -> TrainConfig:
    """A copy of preset ``name`` with ``overrides`` applied; ValueError for an unknown name."""
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r} (have {', '.join(PRESETS)})")
    return dataclasses.replace(PRESETS[name][0], **overrides)
