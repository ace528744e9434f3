"""The per-object schedule of ``splatforge mesh2splat`` and the :class:`TrainConfig` it gives the trainer.

An object is small, centred and seen from all sides, its renders view-independent (Lambert shading under a
fixed light: :mod:`recon.data.mesh_render`), so it needs far fewer steps than a scene, SH degree 0 (view-
dependent colour has nothing to fit), and starts from Gaussians sampled on the surface (no search for the
geometry). The defaults of :class:`ObjectPreset` are the fastest schedule found to reach the targets of
docs/mesh2splat.md (measurements there, by ``scripts/bench_mesh2splat.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from recon.training.trainer import TrainConfig


@dataclass(frozen=True)
class ObjectPreset:
    """How one object is rendered and trained."""

    views: int = 48
    """training views (Fibonacci sphere around the object)"""
    test_views: int = 8
    """held-out views (a rotated set: none repeats a training view), scored for ``test_psnr``"""
    size: int = 128
    """image width = height in pixels"""
    samples: int = 4
    """rays per pixel side when rendering the views (a box filter: antialiased silhouettes; with 2 the
    quantised edge coverage cost 1.5 dB)"""
    steps: int = 1500
    """training steps"""
    sh_degree: int = 0
    """SH degree (0: the renders are view-independent)"""
    init_points: int = 6000
    """initial Gaussians, sampled uniformly on the surface with their shaded colours (6,000 against 8,000:
    10 % less CPU per object, the same held-out PSNR: docs/mesh2splat.md)"""
    max_gaussians: int = 6000
    """Gaussian count: MCMC's cap (3dgs), where ADC stops growing (2dgs)"""
    means_lr: float | None = None
    """means learning rate (x scene extent, decayed over the run as the trainer's ``--lr.means``); None: the
    method's (:func:`means_lr_for`)"""
    seed: int = 0


def strategy_for(method: str) -> str:
    """MCMC for 3dgs (a fixed Gaussian count: the time per object is predictable, and its opacity and scale
    regularisers keep the centres on the surface); ADC for 2dgs (which refuses MCMC)."""
    return "mcmc" if method == "3dgs" else "adc"


MEANS_LR = {"3dgs": 1.6e-4, "2dgs": 1.6e-4}
"""the means learning rate per method when the preset names none (docs/mesh2splat.md: how each was chosen)"""


def means_lr_for(preset: ObjectPreset, method: str) -> float:
    """The means learning rate an object trains with: the preset's, else the method's :data:`MEANS_LR`."""
    return preset.means_lr if preset.means_lr is not None else MEANS_LR[method]


def object_train_config(preset: ObjectPreset, method: str, data: Path, out: Path,
                        device: str = "auto") -> TrainConfig:
    """The TrainConfig that trains one object: ``data`` its rendered views, ``out`` its run folder (named
    only: mesh2splat's trainer writes no run folder), no progress bar, and no on-disk frame cache (the views
    are scratch files, deleted after the object: caching them would only fill the cache folder)."""
    return dataclasses.replace(
        TrainConfig(), data=Path(data), out=Path(out), method=method, steps=preset.steps, strategy=strategy_for(method),
        sh_degree=preset.sh_degree, init_type="sfm", seed=preset.seed, max_gaussians=preset.max_gaussians,
        save_every=0, keep_checkpoints=1, progress=False, device=device, frame_cache="off",
        lr=dataclasses.replace(TrainConfig().lr, means=means_lr_for(preset, method)))
