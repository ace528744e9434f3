"""Occupancy grid for empty-space skipping (instant-ngp section 5.4 / nerfacc's OccGridEstimator).

A [G, G, G] grid over the unit cube (index [x, y, z]) holds a running density estimate per cell, stored
as the opacity of one base step, ``sigma dt_min``. An update evaluates the field at one random point in
each chosen cell and sets ``value = max(value decay, new)``; the cells marched are those whose value
exceeds ``min(threshold, mean of all values)`` (the mean keeps a young field, whose densities are all
small, from being skipped entirely). All cells start occupied, with value 0 (nerfacc).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

EVAL_CHUNK = 1 << 16  # points per field evaluation during an update


class OccupancyGrid:
    """Values [G^3] float32 and the occupied mask ``bits`` bool [G, G, G] (see the module docstring)."""

    def __init__(self, resolution: int, values: Tensor | None = None, bits: Tensor | None = None):
        if resolution < 1:
            raise ValueError(f"OccupancyGrid: resolution must be >= 1, got {resolution}")
        self.resolution = int(resolution)
        n = self.resolution**3
        self.values = values.float().reshape(n).clone() if values is not None else torch.zeros(n)
        self.bits = (bits.bool().reshape((self.resolution,) * 3).clone() if bits is not None
                     else torch.ones((self.resolution,) * 3, dtype=torch.bool))

    def to(self, device) -> "OccupancyGrid":
        self.values, self.bits = self.values.to(device), self.bits.to(device)
        return self

    @property
    def occupied(self) -> int:
        return int(self.bits.sum())

    def cell_points(self, cells: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """[M, 3] one uniform random unit-cube point in each of the flat cell indices ``cells`` [M]."""
        G = self.resolution
        ijk = torch.stack([cells // (G * G), (cells // G) % G, cells % G], dim=1)
        jitter = torch.rand(ijk.shape, generator=generator).to(cells.device)
        return (ijk.float() + jitter) / G

    @torch.no_grad()
    def update(self, density: Callable[[Tensor], Tensor], dt_min: float, decay: float, threshold: float,
               fraction: float = 1.0, generator: torch.Generator | None = None) -> None:
        """Re-estimate a random ``fraction`` of the cells (all when 1) with ``density`` (unit-cube points
        [M, 3] -> sigma [M]), decay the others' values, and recompute ``bits``."""
        n = self.values.numel()
        if fraction >= 1.0:
            cells = torch.arange(n, device=self.values.device)
        else:
            m = max(1, int(n * fraction))
            # distinct cells: a repeated index in the max-update below would make the winner arbitrary
            cells = torch.randperm(n, generator=generator)[:m].to(self.values.device)
        fresh = torch.empty(cells.shape[0], device=self.values.device)
        for s in range(0, cells.shape[0], EVAL_CHUNK):
            part = cells[s:s + EVAL_CHUNK]
            fresh[s:s + EVAL_CHUNK] = density(self.cell_points(part, generator)).float() * dt_min
        self.values.mul_(decay)
        self.values[cells] = torch.maximum(self.values[cells], fresh)
        limit = min(threshold, float(self.values.mean()))
        self.bits = (self.values > limit).reshape(self.bits.shape)
