"""Adaptive density control for 4D Gaussians (method "4dgs"): 3DGS's schedule and thresholds, in 4D.

The statistics are :class:`recon.strategy.adc.ADCStrategy`'s, unchanged: the model's render maps the
gradient of each slice's screen-space means (and its radii) back to all N 4D Gaussians (see
:class:`recon.models.spacetime.SlicedScreenMeans`), so a Gaussian's average counts the renders that kept
it. What differs:

- size: a Gaussian's spatial size is the largest standard deviation of its sliced 3D covariance
  (Sigma3, the same at every time), compared with ``grow_scale3d`` / ``prune_scale3d`` x extent;
- split: the two children are drawn from the parent's 4D Gaussian, mean4 + R S z with z ~ N(0, I_4)
  (time included), and get all four scales / 1.6; clones copy the parent (as in 3D);
- pruning: 4D opacity below ``prune_opa`` (and, after the first reset, spatially huge ones).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rasterizer.spacetime import condition_on_time, rotmat4_from_quats
from recon.strategy import ops
from recon.strategy.adc import ADCStrategy


def spatial_sizes(model) -> Tensor:
    """[N] largest standard deviation of each Gaussian's sliced 3D covariance (world units)."""
    p = model.params
    with torch.no_grad():
        covars = condition_on_time(p["quats_left"], p["quats_right"], model.scales).covars
        # on the CPU: cuSOLVER's batched float64 eigvalsh failed on an H100 with 100k Gaussians
        # (CUSOLVER_STATUS_INTERNAL_ERROR, torch 2.11+cu130); 3x3 matrices cost little there
        largest = torch.linalg.eigvalsh(covars.double().cpu()).amax(dim=-1)
        return largest.clamp(min=0).sqrt().to(covars.device, covars.dtype)


def split_4d(model, mask: Tensor) -> int:
    """Replace each Gaussian in ``mask`` by 2 children drawn from its 4D Gaussian (mean4 + R S z,
    z ~ N(0, I_4) from torch's global RNG), scales / 1.6; other parameters copied, Adam moments zero.
    Children are appended, parents removed. Returns the number of parents split."""
    idx = mask.nonzero().squeeze(1)
    n = int(idx.numel())
    if n == 0:
        return 0
    rest = (~mask).nonzero().squeeze(1)
    p = model.params
    scales = torch.exp(p["log_scales4"].detach()[idx])
    R = rotmat4_from_quats(p["quats_left"].detach()[idx], p["quats_right"].detach()[idx])
    z = torch.randn(2, n, 4, device=scales.device)
    offsets = torch.einsum("nij,nj,bnj->bni", R, scales, z)
    children = {"means4": (p["means4"].detach()[idx][None] + offsets).reshape(-1, 4),
                "log_scales4": torch.log(scales / ops.SPLIT_SCALE_DIVISOR).repeat(2, 1)}
    return ops.replace_with_children(model, idx, rest, children)


@dataclass
class ADC4DStrategy(ADCStrategy):
    """:class:`ADCStrategy` for :class:`recon.models.spacetime.SpaceTimeGaussians` (see the module docstring)."""

    def regularization(self, model) -> Tensor:
        """ADC adds no loss term."""
        return model.params["means4"].new_zeros(())

    def sizes(self, model) -> Tensor:
        return spatial_sizes(model)

    def split(self, model, mask: Tensor) -> int:
        return split_4d(model, mask)

    def prune(self, model, step: int) -> int:
        is_prune = model.opacities.detach() < self.prune_opa
        if step > self.reset_every:
            is_prune |= spatial_sizes(model) > self.prune_scale3d * model.extent
        return ops.remove(model, is_prune)
