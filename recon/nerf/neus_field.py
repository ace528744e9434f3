"""The NeuS field: signed distance + colour on a grid encoding (NeuS2's layout, Wang et al. 2023).

Coordinates: the field takes *normalised* positions ``x`` [N, 3] in [-k, k]^3 (``k`` = 1 for a scene box,
whose cube maps to [-1, 1]^3; ``k`` = 2 for a contracted capture, whose inner cube is [-1, 1]^3); the grid
reads ``u = (x + k) / (2 k)`` in the unit cube. SDF values and gradients are in the same normalised units (world
distance = sdf x the box's half size, or the radius).

The encoding and the decoder are the radiance field's choices (``--field.encoding hash|dense|triplane``,
``--field.decoder mlp|rbf``; the grid part is :class:`recon.nerf.field.GridField`, built by
:func:`recon.nerf.field.field_grid_config` as nerf's; the default is the hash grid and MLPs, NeuS2's field):

- grid features [N, L F] (levels beyond the active count masked to 0: progressive training, coarse to fine; the
  hash and dense grids and the tri-plane all have levels);
- ``--field.decoder mlp``: geometry MLP on [x, features]: one softplus (beta 100) hidden layer of ``geo_hidden``
  units, with biases, -> [sdf, ``geo_dim`` features]. Geometric initialisation (SAL, Atzmon and Lipman 2020; as
  NeuS / NeuS2): first layer N(0, sqrt(2 / width)) on x and 0 on the features, last layer N(sqrt(pi / width),
  1e-4) and bias -r on the SDF output, so the initial SDF is close to ``|x| - r``. Colour MLP (``color_layers``
  ReLU layers of ``hidden`` units, no biases) on [geometry features, degree-3 SH of the view direction, unit
  normal] -> sigmoid RGB (NeuS's "idr" colour input with SH directions);
- ``--field.decoder rbf``: one layer of ``--field.rbf-neurons`` Gaussian RBF neurons per head
  (:class:`recon.nerf.rbf.RBFLayer`, centres by k-means of the features of random points, as nerf's RBF field).
  Sphere initialisation: **the analytic sphere is the SDF's base**, ``sdf(x) = (|x| - r) + y_0(f(x))``, with the
  read-out row of the SDF output and its bias starting at 0, so the initial SDF is exactly ``|x| - r``. Why not
  fit the RBF layer to the sphere instead: the neurons live in feature space, not in x (a grid starting random
  carries no position a Gaussian of the features could turn into |x|), and far from every neuron the layer is its
  bias, a constant; with the base, far from the neurons the field stays the sphere's (outside reads positive, so
  empty space grows no spurious surface, the concern of ``sdf fit``'s bias, recon/geometry/sdf_fit.py) and its
  gradient is the sphere's unit normal, so the eikonal term starts at 0. The colour head takes the MLP head's
  inputs; its centres come from k-means of [geometry features, SH of random directions, random unit normals];
- ``variance``: the learned scalar of the sharpness ``s = exp(10 variance)`` (:func:`recon.nerf.neus.sharpness`).

Fused CPU kernels where they apply: hash or dense + MLP, the encoding + geometry MLP kernel
(:func:`recon.nerf.fused_encoding_mlp.encode_mlp_numba`, active levels included); hash or dense + RBF with every
level active, the grid + RBF kernel (:func:`recon.nerf.grid_rbf.grid_rbf_layer`); a tri-plane (PyTorch) and an RBF
head with masked levels run the encoding then the decoder.

Gradients of the SDF are finite differences of step ``fd_cells`` cells of the finest active level
(:meth:`NeusField.fd_step`), whatever the encoding and decoder: ``gradient`` "tetrahedral" (4 field evaluations
per point: :func:`recon.nerf.neus.tetrahedral_differences`) or "central" (7:
:func:`recon.nerf.neus.central_differences`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from rasterizer.reference.sh import sh_basis
from recon.nerf.config import FieldConfig
from recon.nerf.field import INIT_SAMPLES, SH_DEGREE, GridField, mlp, random_directions
from recon.nerf.fused_encoding_mlp import encode_mlp_numba, use_fused
from recon.nerf.grid_rbf import grid_rbf_layer
from recon.nerf.hash_encoding import HashGridConfig
from recon.nerf.neus import GRADIENTS, sharpness
from recon.nerf.rbf import RBFLayer
from recon.nerf.triplane import TriPlaneConfig

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


def sphere_sdf(x: Tensor, radius: float) -> Tensor:
    """[N] signed distance ``|x| - radius`` of points ``x`` [N, 3] to the sphere about the origin."""
    return x.norm(dim=-1) - radius


def rbf_sphere_heads(field: "NeusField", neurons: int, geo_dim: int, backend: str,
                     generator: torch.Generator | None) -> tuple[RBFLayer, RBFLayer]:
    """(geometry head [L F] -> [1 + geo_dim], colour head [geo_dim + 16 + 3] -> [3]) of the RBF decoder (module
    docstring): centres by k-means of the features of random points; the SDF output's read-out row and bias start
    at 0, so the field starts as the analytic sphere base alone."""
    with torch.no_grad():
        feats = field.encode(torch.rand(INIT_SAMPLES, 3, generator=generator))
    geo = RBFLayer(field.grid.output_dim, neurons, 1 + geo_dim, generator, backend, feats)
    with torch.no_grad():
        geo.weight[0].zero_()
        geo.bias.zero_()
        colour_in = torch.cat([geo(feats)[:, 1:], sh_basis(SH_DEGREE, random_directions(INIT_SAMPLES, generator)),
                               random_directions(INIT_SAMPLES, generator)], 1)
    return geo, RBFLayer(colour_in.shape[1], neurons, 3, generator, backend, colour_in)


class NeusField(GridField):
    """Grid encoding + geometry head + colour head + learned variance (see the module docstring). ``grid``: a
    hash / dense :class:`HashGridConfig` or a :class:`TriPlaneConfig`; ``k``: half the side of the normalised cube
    (1 box, 2 contracted); ``backend``: the table encoding's (:func:`recon.nerf.hash_encoding.hash_encode`);
    ``encoding_mlp``: the encoding + geometry MLP fused or not (:func:`recon.nerf.fused_encoding_mlp.use_fused`);
    ``decoder`` "mlp" or "rbf" (``rbf_neurons`` per head, ``rbf_backend``: :func:`recon.nerf.rbf.rbf_forward`);
    ``gradient`` the finite-difference scheme (:data:`recon.nerf.neus.GRADIENTS`). The
    heads keep the names ``geo_mlp`` / ``color_mlp`` whatever the decoder (checkpoint keys)."""

    def __init__(self, grid: HashGridConfig | TriPlaneConfig, k: float = 1.0, geo_hidden: int = 64,
                 geo_dim: int = 15, hidden: int = 64, color_layers: int = 2, init_radius: float = 0.5,
                 init_variance: float = 0.3, fd_cells: float = 0.5, generator: torch.Generator | None = None,
                 backend: str = "auto", encoding_mlp: str = "auto", decoder: str = "mlp",
                 rbf_neurons: int = FieldConfig.rbf_neurons, rbf_backend: str = "auto", gradient: str = "central"):
        super().__init__()
        if gradient not in GRADIENTS:
            raise ValueError(f"NeusField: unknown gradient {gradient!r} ({', '.join(GRADIENTS)})")
        self.gradient = gradient
        self._init_grid(grid, decoder, generator, backend)
        self.k, self.fd_cells, self.init_radius = float(k), float(fd_cells), float(init_radius)
        self.encoding_mlp = encoding_mlp
        self.active_levels = grid.levels
        if decoder == "mlp":
            self.geo_mlp = geometry_mlp(grid.output_dim, geo_hidden, geo_dim, init_radius, generator)
            self.color_mlp = mlp(geo_dim + (SH_DEGREE + 1) ** 2 + 3, hidden, 3, color_layers)
        else:
            self.geo_mlp, self.color_mlp = rbf_sphere_heads(self, rbf_neurons, geo_dim, rbf_backend, generator)
        self.variance = nn.Parameter(torch.tensor(float(init_variance)))

    def set_active_levels(self, n: int) -> None:
        """Progressive training: only the ``n`` coarsest grid levels contribute (clamped to 1..L)."""
        self.active_levels = int(min(max(n, 1), self.grid.levels))

    def level_mask(self) -> Tensor:
        """[L F] 1 for the features of active levels, 0 beyond."""
        levels = torch.arange(self.grid.levels, device=self.table.device).repeat_interleave(self.grid.features)
        return (levels < self.active_levels).to(self.table.dtype)

    def fd_step(self) -> float:
        """Finite-difference step in normalised units: ``fd_cells`` cells of the finest active level."""
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
        if self.decoder_kind == "rbf":
            h = self._rbf_geometry(x)
            return sphere_sdf(x, self.init_radius) + h[:, 0], h[:, 1:]
        if not self.triplane and use_fused(self.encoding_mlp, self.backend, x, x, self.table, self.geo_mlp):
            h = encode_mlp_numba(self.to_unit(x), x, self.table, self.resolutions, self.offsets, self.active_levels,
                                 self.geo_mlp)
            return h[:, 0], h[:, 1:]
        feats = self.encode(self.to_unit(x))
        h = self.geo_mlp(torch.cat([x, feats.to(x.dtype) * self.level_mask()], dim=1))
        return h[:, 0], h[:, 1:]

    def _rbf_geometry(self, x: Tensor) -> Tensor:
        """[N, 1 + geo_dim] the RBF geometry head's outputs at normalised ``x`` [N, 3] (the sphere base not added):
        the fused grid + RBF kernel when every level is active on a table grid, else encoding, mask, layer."""
        u = self.to_unit(x)
        if not self.triplane and self.backend != "torch" and self.active_levels == self.grid.levels:
            return grid_rbf_layer(u, self.table, self.resolutions, self.offsets, self.geo_mlp)
        return self.geo_mlp(self.encode(u).to(x.dtype) * self.level_mask())

    def sdf_and_gradient(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(sdf [N], features [N, geo_dim], gradient [N, 3]) at ``x`` [N, 3]: the ``gradient`` scheme's finite
        differences of step :meth:`fd_step`."""
        return GRADIENTS[self.gradient](self.sdf, x.to(self.table.dtype), self.fd_step())

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
