"""Splat budgets for whole 4D models (``export --format ply4d --max-splats N`` / ``--target``).

The 3D rule (:mod:`recon.export.budget`) applied over time. Importance of a 4D Gaussian (higher = keep):

* with cameras (a run whose dataset is available): the sum over :data:`BUDGET_TIMES` evenly spaced times
  t_k = (k + 0.5) / K of ``opacity(t_k) x footprint`` of its 3D slice at t_k (the conditioned mean and
  covariance, :func:`rasterizer.spacetime.slice_gaussians_4d`) over the training views: a Gaussian that
  lives briefly counts for the time it is seen, a long-lived one for all of it;
* otherwise: ``opacity x 4-volume`` = ``sigmoid(logit_opacity) * exp(sum of the four log-scales)``
  (the 4D covariance's determinant, invariant to the 4D rotation).

SH truncation and the device presets are the 3D ones.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from rasterizer.camera import Camera
from rasterizer.spacetime import slice_gaussians_4d
from recon.export.budget import BudgetResult, apply_budget, covariance_footprint
from recon.core.spacetime_data import SpaceTimeData
from recon.core.splat_data import sigmoid

BUDGET_TIMES = 8


def volume_importance4(data: SpaceTimeData) -> np.ndarray:
    """float64 [N]: sigmoid(logit_opacity) * exp(sum of the four log-scales)."""
    log_vol = data.log_scales4.astype(np.float64).sum(axis=1)
    return sigmoid(data.logit_opacities) * np.exp(np.minimum(log_vol, 700.0))


def footprint_importance4(data: SpaceTimeData, cameras: Sequence[Camera], times: int = BUDGET_TIMES) -> np.ndarray:
    """float64 [N]: sum over ``times`` evenly spaced slices of opacity(t) x footprint of the slice (module
    docstring); Gaussians culled at a time (temporal factor < 1/255) add nothing for it."""
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.float64))  # noqa: E731
    means4, ql, qr = as_t(data.means4), as_t(data.quats_left), as_t(data.quats_right)
    scales4 = torch.exp(as_t(data.log_scales4))
    opac = torch.sigmoid(as_t(data.logit_opacities))
    total = np.zeros(len(data), np.float64)
    with torch.no_grad():
        for k in range(times):
            s = slice_gaussians_4d(means4, ql, qr, scales4, opac, (k + 0.5) / times)
            idx = s.indices.numpy()
            area = covariance_footprint(s.means.numpy(), s.covars.numpy(), cameras)
            np.add.at(total, idx, s.opacities.numpy() * area)
    return total


def importance4(data: SpaceTimeData, cameras: Sequence[Camera] | None = None) -> tuple[np.ndarray, str]:
    """(scores [N], "footprint over time" or "4-volume")."""
    if cameras:
        return footprint_importance4(data, cameras), "footprint over time"
    return volume_importance4(data), "4-volume"


def apply_budget4(data: SpaceTimeData, max_splats: int | None = None, sh_degree: int | None = None,
                  cameras: Sequence[Camera] | None = None,
                  target: str | None = None) -> tuple[SpaceTimeData, BudgetResult]:
    """Keep the ``max_splats`` most important 4D Gaussians (file order kept, ranked by :func:`importance4`)
    and truncate SH to ``sh_degree``: :func:`recon.export.budget.apply_budget` for 4D models."""
    return apply_budget(data, max_splats, sh_degree, cameras, target, rank=importance4)
