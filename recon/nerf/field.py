"""The radiance field: hash-grid encoding, density MLP, colour MLP on spherical harmonics of the direction.

As instant-ngp's NeRF (Mueller et al. 2022, section 5.4) and nerfacto:

- ``u`` [N, 3] in the unit cube (:mod:`recon.nerf.space`) -> hash features [N, L F]
  (:mod:`recon.nerf.hash_encoding`);
- density MLP (one hidden layer of ``hidden`` ReLU units, no biases) -> ``geo_dim`` outputs; the first
  is the log density: ``sigma = exp(out[0])`` (truncated exponential: its gradient uses exp(min(x, 15)));
- colour MLP (``color_layers`` hidden layers of ``hidden`` ReLU units, no biases) on [the ``geo_dim``
  outputs, the degree-3 real SH basis (16 values) of the unit view direction] -> sigmoid RGB.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rasterizer.reference.sh import sh_basis
from recon.nerf.hash_encoding import HashGridConfig, hash_encode, init_table, level_layout

SH_DEGREE = 3  # 16 basis functions ("degree 4" in instant-ngp's count of bands)
TRUNC_EXP_MAX = 15.0


class TruncExp(torch.autograd.Function):
    """exp(x) whose backward uses exp(min(x, 15)) (instant-ngp's density activation; avoids exploding
    gradients from large log densities)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return torch.exp(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return grad * torch.exp(x.clamp(max=TRUNC_EXP_MAX))


def mlp(d_in: int, hidden: int, d_out: int, layers: int) -> nn.Sequential:
    """``layers`` hidden ReLU layers of width ``hidden`` then a linear output (no biases, as tiny-cuda-nn)."""
    mods, d = [], d_in
    for _ in range(layers):
        mods += [nn.Linear(d, hidden, bias=False), nn.ReLU()]
        d = hidden
    mods.append(nn.Linear(d, d_out, bias=False))
    return nn.Sequential(*mods)


class NerfField(nn.Module):
    """Hash grid + density MLP + colour MLP (see the module docstring). ``backend`` picks the hash
    encoding's implementation (:func:`recon.nerf.hash_encoding.hash_encode`)."""

    def __init__(self, grid: HashGridConfig, hidden: int = 64, geo_dim: int = 16, color_layers: int = 2,
                 generator: torch.Generator | None = None, backend: str = "auto"):
        super().__init__()
        self.grid, self.backend = grid, backend
        res, offsets = level_layout(grid)
        self.register_buffer("resolutions", res, persistent=False)
        self.register_buffer("offsets", offsets, persistent=False)
        self.table = nn.Parameter(init_table(offsets, grid.features, generator))
        self.density_mlp = mlp(grid.output_dim, hidden, geo_dim, 1)
        self.color_mlp = mlp(geo_dim + (SH_DEGREE + 1) ** 2, hidden, 3, color_layers)

    def encode(self, u: Tensor) -> Tensor:
        """[N, L F] hash features of unit-cube positions ``u`` [N, 3]."""
        return hash_encode(u, self.table, self.resolutions, self.offsets, self.backend)

    def density(self, u: Tensor) -> tuple[Tensor, Tensor]:
        """(sigma [N], geometry features [N, geo_dim]) at unit-cube positions ``u`` [N, 3]."""
        h = self.density_mlp(self.encode(u).to(self.table.dtype))
        return TruncExp.apply(h[:, 0]), h

    def color(self, geo: Tensor, dirs: Tensor) -> Tensor:
        """[N, 3] RGB in (0, 1) from geometry features [N, geo_dim] and unit view directions [N, 3]."""
        sh = sh_basis(SH_DEGREE, dirs.to(geo.dtype))
        return torch.sigmoid(self.color_mlp(torch.cat([geo, sh], dim=1)))
