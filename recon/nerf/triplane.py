"""Tri-plane encoding (EG3D, Chan et al. 2022; K-Planes, Fridovich-Keil et al. 2023): per resolution level three
axis-aligned 2D feature planes (xy, xz, yz), bilinearly interpolated and summed. Plain PyTorch
(``torch.nn.functional.grid_sample``: differentiable, any device and float dtype).

Positions ``x`` [N, 3] are in the unit cube [0, 1]^3 as the other encodings take them (values outside are
clamped). Level ``l`` (of L) has ``r_l`` cells per axis, ``r_l`` geometric from ``base_res`` to ``max_res`` as the
hash grid's levels (:func:`recon.nerf.hash_encoding.level_layout`). Its planes are rows
``table[offsets[l]:offsets[l + 1]]`` [3 r_l^2, F] of one flat parameter table [P, F] (the layout the fields'
optimisers and checkpoints already know as ``table``): plane p (0: xy, 1: xz, 2: yz, axes (a, b) = PLANE_AXES[p])
holds cell (i along a, j along b) at row ``p r^2 + j r + i``.

Cell convention: **pixel centres at +0.5**, cell (i, j) has its centre at ``((i + 0.5) / r, (j + 0.5) / r)``
(``grid_sample(align_corners=False)``); a point's plane feature is the bilinear interpolation of the four nearest
centres, and within half a cell of the cube's faces the edge cells' values hold (``padding_mode="border"``).
(The hash grid instead puts its ``r + 1`` vertices at ``i / r``.)

Combination of the planes: the **sum** per level, ``f_l(x) = P_xy(x, y) + P_xz(x, z) + P_yz(y, z)`` (EG3D's rule),
levels concatenated level-major (``out[:, l F + f]``) into [N, L F], the shape of the other encodings, so the
decoders take it unchanged. Why the sum, not K-Planes' Hadamard product: the fields start their grids small and
uniform (1e-4 under an MLP, FEATURE_INIT under an RBF layer); the product's gradient to one plane is the product
of the other two (~scale^2: 1e-8 under an MLP) and its features are ~scale^3, too close together for RBF neurons
to tell places apart, while the sum keeps the dense grid's scale and a unit gradient to every plane.
Concatenating the planes would triple the decoders' inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from recon.nerf.hash_encoding import HashGridConfig, level_layout

PLANE_AXES = ((0, 1), (0, 2), (1, 2))  # (a: the plane's width axis, b: its height axis) of the xy, xz, yz planes


@dataclass(frozen=True)
class TriPlaneConfig:
    """The tri-plane's size: L levels of three r_l x r_l planes of F features, r_l from base_res to max_res."""

    levels: int = 4
    features: int = 4
    base_res: int = 64
    max_res: int = 768

    def __post_init__(self):
        if self.levels < 1 or self.features < 1:
            raise ValueError(f"TriPlaneConfig: levels and features must be >= 1, got {self}")
        if self.base_res < 1 or self.max_res < self.base_res:
            raise ValueError(f"TriPlaneConfig: need 1 <= base_res <= max_res, got {self.base_res}, {self.max_res}")

    @property
    def output_dim(self) -> int:
        return self.levels * self.features


def plane_layout(cfg: TriPlaneConfig) -> tuple[Tensor, Tensor]:
    """(resolutions int64 [L], offsets int64 [L + 1]) of the flat table: level l owns 3 r_l^2 rows."""
    res, _ = level_layout(HashGridConfig(cfg.levels, cfg.features, 1, cfg.base_res, cfg.max_res))
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(3 * res * res, 0)])
    return res, offsets


def triplane_encode(x: Tensor, table: Tensor, resolutions: Tensor, offsets: Tensor) -> Tensor:
    """[N, L F] tri-plane features of positions ``x`` [N, 3] in [0, 1]^3 (clamped) from ``table`` [P, F] laid out
    by :func:`plane_layout` (module docstring: cell centres at +0.5, planes summed per level). Autograd gives the
    table's gradient (and the positions')."""
    x = x.to(table.dtype).clamp(0.0, 1.0)
    g = (2.0 * x - 1.0)  # grid_sample's [-1, 1] frame; align_corners=False puts cell centres at (i + 0.5) / r
    grid = torch.stack([g[:, list(ab)] for ab in PLANE_AXES])[:, None]  # [3, 1, N, 2]: (width, height) coordinates
    n_feat, outs = table.shape[1], []
    for level in range(resolutions.shape[0]):
        r, start = int(resolutions[level]), int(offsets[level])
        planes = table[start:start + 3 * r * r].view(3, r, r, n_feat).permute(0, 3, 1, 2)  # [3, F, r (b), r (a)]
        feats = F.grid_sample(planes, grid, mode="bilinear", padding_mode="border", align_corners=False)
        outs.append(feats.sum(0)[:, 0].t())  # [3, F, 1, N] -> [N, F]
    return torch.cat(outs, dim=1)
