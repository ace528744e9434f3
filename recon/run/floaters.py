"""Floater removal: drop the Gaussians that no training view ever sees contribute.

A Gaussian's blending weight at a pixel is ``w = alpha T`` (its alpha there times the transmittance in front
of it). A Gaussian whose largest weight over every pixel of every training view stays below a threshold
(0.005 by default) is invisible in the capture: the optimiser never got a signal to place it, and from other
viewpoints it shows as haze (the random-init cube of a Blender scene).

The rasterizer does not report per-Gaussian weights, so they come from a gradient: rendering one scalar
colour ``c_i`` per Gaussian (all zero), ``d sum(render) / d c_i = S_i``, the sum over pixels of ``w_i``.
For a Gaussian of screen covariance ``Sigma`` (``conics`` = its inverse) whose transmittance is about
constant across its footprint, ``S_i ~ max_w_i 2 pi sqrt(det Sigma)``, so ``max_w_i ~ S_i sqrt(det conic) /
(2 pi)``, capped by its composited opacity. Culled Gaussians (radii 0) weigh 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from rasterizer import rasterize_gaussians
from rasterizer.camera import Camera
from recon.core.errors import UsageError
from recon.core.splat_data import SplatData
from recon.run.cameras import run_cameras

if TYPE_CHECKING:
    from recon.run.folder import Run

DEFAULT_THRESHOLD = 0.005
"""lego (1500 steps, data factor 4): 23.8% removed at -0.016 dB; 0.01: 37.4% at -0.24 dB; 0.05: 78.8% (docs/export.md)."""


@dataclass
class FloaterResult:
    """What :func:`remove_floaters` did: the kept model, how many Gaussians went, the threshold used and
    each input Gaussian's max weight (float64 [N])."""

    kept: SplatData
    removed: int
    threshold: float
    max_weight: np.ndarray

    def note(self) -> str:
        """One line for an export report."""
        total = self.removed + len(self.kept)
        pct = 100.0 * self.removed / max(total, 1)
        return (f"floaters: removed {self.removed:,} of {total:,} Gaussians ({pct:.1f}%) whose blending weight "
                f"stays below {self.threshold:g} in every training view")


def _tensor(a, device) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32, device=device)


def max_blend_weights(data: SplatData, cameras: Sequence[Camera], device: str | torch.device = "cpu",
                      antialiased: bool | None = None) -> np.ndarray:
    """float64 [N]: per Gaussian, the estimated largest blending weight ``alpha T`` over all pixels of all
    ``cameras`` (OpenCV world-to-camera), one view at a time (see the module docstring)."""
    device = torch.device(device)
    means, quats = _tensor(data.means, device), _tensor(data.quats, device)
    scales = torch.exp(_tensor(data.log_scales, device))
    opac = torch.sigmoid(_tensor(data.logit_opacities, device))
    aa = data.antialiased if antialiased is None else antialiased
    best = torch.zeros(len(data), dtype=torch.float64, device=device)
    for cam in cameras:
        cam = cam.to(device=device, dtype=torch.float32)
        colour = torch.zeros(len(data), 1, device=device, requires_grad=True)
        render, _, meta = rasterize_gaussians(
            means, quats, scales, opac, colour, cam.world_to_cam[None], cam.K[None], cam.width, cam.height,
            backgrounds=torch.zeros(1, 1, device=device), rasterize_mode="antialiased" if aa else "classic")
        (summed,) = torch.autograd.grad(render.sum(), colour)
        with torch.no_grad():
            a, b, c = meta.conics[0].double().unbind(-1)
            det = (a * c - b * b).clamp_min(0.0)
            peak = summed[:, 0].double() * det.sqrt() / (2.0 * math.pi)
            peak = torch.minimum(peak, meta.opacities[0].double())
            peak = torch.where((meta.radii[0] > 0).any(-1), peak, torch.zeros_like(peak))
            best = torch.maximum(best, peak)
    return best.cpu().numpy()


def remove_floaters(data: SplatData, cameras: Sequence[Camera], threshold: float = DEFAULT_THRESHOLD,
                    device: str | torch.device = "cpu") -> FloaterResult:
    """Drop the Gaussians of ``data`` whose max blending weight over ``cameras`` is below ``threshold``.
    ValueError for a threshold outside (0, 1) or no cameras."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"--floater-threshold {threshold}: give a blending weight in (0, 1), e.g. 0.005")
    if not cameras:
        raise ValueError("--remove-floaters needs the run's training cameras (its dataset)")
    weight = max_blend_weights(data, cameras, device)
    keep = weight >= threshold
    return FloaterResult(data.subset(keep), int((~keep).sum()), float(threshold), weight)



def remove_run_floaters(run: "Run", data: SplatData, threshold: float = DEFAULT_THRESHOLD,
                        device: str | torch.device = "cpu") -> FloaterResult:
    """:func:`remove_floaters` over the training cameras of ``run`` (``export --remove-floaters`` and
    ``train --remove-floaters``). UsageError naming --remove-floaters when the run's cameras are not
    available, naming --floater-threshold for a threshold outside (0, 1)."""
    cameras, why = run_cameras(run)
    if cameras is None:
        raise UsageError(f"--remove-floaters: no training cameras ({why})")
    try:
        return remove_floaters(data, cameras, threshold, device=device)
    except ValueError as err:
        raise UsageError(str(err)) from None
