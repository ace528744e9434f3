"""The NeuS field: signed distance + colour on the hash encoding (NeuS2's layout, Wang et al. 2023).

Coordinates: the field takes *normalised* positions ``x`` [N, 3] in [-k, k]^3 (``k`` = 1 for a scene box,
whose cube maps to [-1, 1]^3; ``k`` = 2 for a contracted capture, whose inner cube is [-1, 1]^3); the hash
grid reads ``u = (x + k) / (2 k)`` in the unit cube (:mod:`recon.nerf.hash_encoding`). SDF values and
gradients are in the same normalised units (world distance = sdf x the box's half size, or the radius).

- hash features [N, L F] (levels beyond the active count masked to 0: progressive training, coarse to fine);
- geometry MLP on [x, features]: one softplus (beta 100) hidden layer of ``geo_hidden`` units, with biases,
  -> [sdf, ``geo_dim`` features]. Geometric initialisation (SAL, Atzmon and Lipman 2020; as NeuS / NeuS2):
  first layer N(0, sqrt(2 / width)) on x and 0 on the features, last layer N(sqrt(pi / width), 1e-4) and
  bias -r on the SDF output, so the initial SDF is close to ``|x| - r``;
- colour MLP (``color_layers`` ReLU layers of ``hidden`` units, no biases) on [geometry features, degree-3
  SH of the view direction, unit normal] -> sigmoid RGB (NeuS's "idr" colour input with SH directions);
- ``variance``: the learned scalar of the sharpness ``s = exp(10 variance)`` (:func:`recon.nerf.neus.sharpness`).

Gradients of the SDF are central differences (:func:`recon.nerf.neus.central_differences`) of step
``fd_cells`` cells of the finest active level (:meth:`NeusField.fd_step`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from rasterizer.reference.sh import sh_basis
from recon.nerf.field import SH_DEGREE, mlp
from recon.nerf.fused_encoding_mlp import encode_mlp_numba, use_fused
from recon.nerf.hash_encoding import HashGridConfig, hash_encode, init_table, level_layout
from recon.nerf.neus import central_differences, sharpness

SOFTPLUS_BETA = 100.0


def geometry_mlp(grid_dim: int, hidden: int, geo_dim: int, radius: float,
                 generator: torch.Generator | None = None) -> nn.Sequential:
    """[3 + grid_dim] -> [1 + geo_dim]: Linear, Softplus(100), Linear with the geometric initialisation of the
    module docstring (initial SDF ~ |x| - radius)."""
    first, last = nn.Linear(3 + grid_dim, hidden), nn.Linear(hidden, 1 + geo_dim)
    with torch.no_grad():
        first.weight.normal_(0.0, math.sqrt(2.0) / math.sqrt(hidden), generator=generator)
        first.weight[:, 3:] = 0.0
        first.bias.zero_()
        last.weight.normal_(0.0, 1.0 / math.sqrt(hidden), generator=generator)
        last.weight[0].normal_(math.sqrt(math.pi) / math.sqrt(hidden), 1e-4, generator=generator)
        last.bias.zero_()
        last.bias[0] = -radius
    return nn.Sequential(first, nn.Softplus(beta=SOFTPLUS_BETA), last)


class NeusField(nn.Module):
    """Hash grid + geometry MLP + colour MLP + learned variance (see the module docstring). ``k``: half the
    side of the normalised cube (1 box, 2 contracted); ``backend``: :func:`recon.nerf.hash_encoding.hash_encode`;
    ``encoding_mlp``: the encoding + geometry MLP fused or not (:func:`recon.nerf.fused_encoding_mlp.use_fused`)."""

    def __init__(self, grid: HashGridConfig, k: float = 1.0, geo_hidden: int = 64, geo_dim: int = 15,
                 hidden: int = 64, color_layers: int = 2, init_radius: float = 0.5, init_variance: float = 0.3,
                 fd_cells: float = 0.5, generator: torch.Generator | None = None, backend: str = "auto",
                 encoding_mlp: str = "auto"):
        super().__init__()
        self.grid, self.k, self.backend, self.fd_cells = grid, float(k), backend, float(fd_cells)
        self.encoding_mlp = encoding_mlp
        res, offsets = level_layout(grid)
        self.register_buffer("resolutions", res, persistent=False)
        self.register_buffer("offsets", offsets, persistent=False)
        self.table = nn.Parameter(init_table(offsets, grid.features, generator))
        self.geo_mlp = geometry_mlp(grid.output_dim, geo_hidden, geo_dim, init_radius, generator)
        self.color_mlp = mlp(geo_dim + (SH_DEGREE + 1) ** 2 + 3, hidden, 3, color_layers)
        self.variance = nn.Parameter(torch.tensor(float(init_variance)))
        self.active_levels = grid.levels

    def set_active_levels(self, n: int) -> None:
        """Progressive training: only the ``n`` coarsest hash levels contribute (clamped to 1..L)."""
        self.active_levels = int(min(max(n, 1), self.grid.levels))

    def level_mask(self) -> Tensor:
        """[L F] 1 for the features of active levels, 0 beyond."""
        levels = torch.arange(self.grid.levels, device=self.table.device).repeat_interleave(self.grid.features)
        return (levels < self.active_levels).to(self.table.dtype)

    def fd_step(self) -> float:
        """Central-difference step in normalised units: ``fd_cells`` cells of the finest active level."""
        r = float(self.resolutions[self.active_levels - 1])
        return self.fd_cells * 2.0 * self.k / r

    def to_unit(self, x: Tensor) -> Tensor:
        """[N, 3] unit-cube positions of normalised ``x`` [N, 3]."""
        return (x + self.k) / (2.0 * self.k)

    def from_unit(self, u: Tensor) -> Tensor:
        """[N, 3] normalised positions of unit-cube ``u`` [N, 3]."""
        return u * (2.0 * self.k) - self.k

    def sdf(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(sdf [N], geometry features [N, geo_dim]) at normalised positions ``x`` [N, 3]."""
        x = x.to(self.table.dtype)
        if use_fused(self.encoding_mlp, self.backend, x, x, self.table, self.geo_mlp):
            h = encode_mlp_numba(self.to_unit(x), x, self.table, self.resolutions, self.offsets, self.active_levels,
                                 self.geo_mlp)
            return h[:, 0], h[:, 1:]
        feats = hash_encode(self.to_unit(x), self.table, self.resolutions, self.offsets, self.backend)
        h = self.geo_mlp(torch.cat([x, feats.to(x.dtype) * self.level_mask()], dim=1))
        return h[:, 0], h[:, 1:]

    def sdf_and_gradient(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(sdf [N], features [N, geo_dim], gradient [N, 3]) at ``x`` [N, 3]: central differences of
        :meth:`fd_step`."""
        return central_differences(self.sdf, x.to(self.table.dtype), self.fd_step())

    def color(self, feats: Tensor, dirs: Tensor, normals: Tensor) -> Tensor:
        """[N, 3] RGB in (0, 1) from geometry features [N, geo_dim], unit view directions and unit normals [N, 3]."""
        sh = sh_basis(SH_DEGREE, dirs.to(feats.dtype))
        return torch.sigmoid(self.color_mlp(torch.cat([feats, sh, normals.to(feats.dtype)], dim=1)))

    def sharpness(self) -> Tensor:
        """[] the logistic sharpness s = exp(10 variance)."""
        return sharpness(self.variance)


def unit_normals(grad: Tensor) -> Tensor:
    """[N, 3] gradients [N, 3] scaled to unit length (0 stays 0)."""
    return grad / grad.norm(dim=-1, keepdim=True).clamp(min=1e-12)
