"""4dgs regularisers (4D-Rotor GS, Duan et al. 2024), optional, and the ``spacetime`` config section.

- Opacity entropy: mean over Gaussians of the binary entropy -(o ln o + (1 - o) ln(1 - o)) of their
  opacities (pushes each towards 0 or 1: fewer half-transparent Gaussians smearing motion). 4D-Rotor: 0.001.
- Velocity consistency: mean over Gaussians of |v_i - mean of v_j over its K nearest neighbours|_1, v the
  sliced velocity Sigma_xyz,t / Sigma_tt (world units per unit time), neighbours in (x, y, z, time_scale t)
  (neighbours move together). 4D-Rotor: 0.05, K = 8, time scale 5. The neighbour lists are recomputed
  every ``knn_every`` steps and whenever densification changes the Gaussian count (scipy's cKDTree on
  the CPU; between recomputations the lists are of the last one).

Both are off by default (weights 0); `splatforge train --method 4dgs --spacetime.entropy-lambda 0.001
--spacetime.velocity-lambda 0.05` turns on 4D-Rotor's. Measured on procedural-4d, 1,000 steps, 2-core CPU at load
~5-10 (`splatforge train --method 4dgs --data procedural-4d --steps 1000`): without 27.79 dB, 64,432 Gaussians,
155 s; with 4D-Rotor's weights 25.15 dB, 32,409 Gaussians, 140 s (the entropy term drives opacities to 0 and
densification prunes them; 4D-Rotor trains 30k steps on real captures, where it reports a gain). Hence off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

ENTROPY_EPS = 1e-6  # opacities clamped to [eps, 1 - eps] inside the logarithms


@dataclass
class SpaceTimeConfig:
    """4dgs options: the ``spacetime`` section of :class:`recon.training.trainer.TrainConfig`
    (``--spacetime.velocity-lambda 0.05``), read by ``--method 4dgs`` only."""

    entropy_lambda: float = 0.0
    """opacity-entropy weight (0: off; 4D-Rotor: 0.001)"""
    velocity_lambda: float = 0.0
    """velocity-consistency weight (0: off; 4D-Rotor: 0.05)"""
    velocity_neighbors: int = 8
    """nearest neighbours of the velocity consistency (4D-Rotor: 8)"""
    velocity_time_scale: float = 5.0
    """neighbours are searched in (x, y, z, scale x t) (4D-Rotor: 5)"""
    knn_every: int = 500
    """recompute the neighbour lists every N steps (and when the Gaussian count changes)"""
    time_lr_scale: float = 1.0
    """multiplies the learning rates of the temporal centre (t of means4) and the temporal log-scale (the 4th
    of log_scales4); 1: the spatial parts' rates (means x extent, log_scales)"""
    seg_weight: float = 0.0
    """weight of the segmentation target (0: off): each Gaussian's foreground value (a sigmoid) is rendered as
    an extra channel and compared (L1) with the dataset's foreground segmentation (Panoptic seg/, as Dynamic 3D
    Gaussians does); views without one add nothing"""


def segmentation_l1(rendered: Tensor, targets: list[Tensor | None]) -> Tensor | None:
    """Mean L1 of rendered foreground [C, h, w, 1] against the views' segmentations ([H, W] in [0, 1], None for a
    view without one; a render at an integer multiple of their size, --supersample, is box-reduced first), over
    the views that have one; None when none has."""
    terms = []
    for k, target in enumerate(targets):
        if target is None:
            continue
        r = rendered[k, ..., 0]
        if r.shape != target.shape:
            f = r.shape[0] // target.shape[0]
            r = torch.nn.functional.avg_pool2d(r[None, None], f)[0, 0]
        terms.append((r - target.to(r)).abs().mean())
    return torch.stack(terms).mean() if terms else None


def opacity_entropy(opacities: Tensor) -> Tensor:
    """Mean binary entropy (nats) of opacities [N] in [0, 1]."""
    o = opacities.clamp(ENTROPY_EPS, 1.0 - ENTROPY_EPS)
    return -(o * torch.log(o) + (1.0 - o) * torch.log1p(-o)).mean()


def velocity_consistency(velocities: Tensor, neighbors: Tensor) -> Tensor:
    """mean_i |v_i - mean_j v_j|_1 for velocities [N, 3] and neighbour indices [N, K] (int64)."""
    around = velocities.index_select(0, neighbors.reshape(-1)).reshape(*neighbors.shape, 3).mean(dim=1)
    return (velocities - around).abs().sum(dim=-1).mean()


def nearest_neighbors(points: np.ndarray, k: int) -> np.ndarray:
    """[N, k] int64 indices of each point's k nearest other points (points [N, D]; fewer points than k + 1:
    every other point, repeated to k columns)."""
    from scipy.spatial import cKDTree

    n = points.shape[0]
    if n < 2:
        return np.zeros((n, k), dtype=np.int64)
    kk = min(k + 1, n)
    _, idx = cKDTree(points).query(points, k=kk)
    idx = np.asarray(idx).reshape(n, kk)[:, 1:]  # the first is the point itself (distance 0)
    return np.resize(idx.T, (k, n)).T.astype(np.int64) if idx.shape[1] < k else idx.astype(np.int64)


class NeighborLists:
    """The velocity consistency's neighbour lists, kept between steps (``get`` recomputes when due)."""

    def __init__(self):
        self.indices: Tensor | None = None
        self.step = -1

    def get(self, means4: Tensor, step: int, cfg: SpaceTimeConfig) -> Tensor:
        """[N, K] neighbours of the 4D means [N, 4] (x, y, z, t), recomputed every cfg.knn_every steps and
        whenever N changed."""
        stale = self.indices is None or self.indices.shape[0] != means4.shape[0]
        if stale or step - self.step >= cfg.knn_every:
            pts = means4.detach().double().cpu().numpy().copy()
            pts[:, 3] *= cfg.velocity_time_scale
            self.indices = torch.from_numpy(nearest_neighbors(pts, cfg.velocity_neighbors)).to(means4.device)
            self.step = step
        return self.indices
