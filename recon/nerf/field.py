"""The radiance field: grid encoding, density decoder, colour decoder on spherical harmonics of the direction.

The encoding and the decoders are choices (:class:`recon.nerf.config.FieldConfig`, ``--field.encoding`` /
``--field.decoder``); :func:`build_field` makes the field a config asks for. The default is instant-ngp's NeRF
(Mueller et al. 2022, section 5.4) and nerfacto's:

- ``u`` [N, 3] in the unit cube (:mod:`recon.nerf.space`) -> hash features [N, L F]
  (:mod:`recon.nerf.hash_encoding`);
- density MLP (one hidden layer of ``hidden`` ReLU units, no biases) -> ``geo_dim`` outputs; the first
  is the log density: ``sigma = exp(out[0])`` (truncated exponential: its gradient uses exp(min(x, 15)));
- colour MLP (``color_layers`` hidden layers of ``hidden`` ReLU units, no biases) on [the ``geo_dim``
  outputs, the degree-3 real SH basis (16 values) of the unit view direction] -> sigmoid RGB.

``--field.encoding dense``: the same layout with every level dense (a few low-resolution grids, no hashing;
:meth:`FieldConfig.dense_grid`). ``--field.encoding triplane``: three 2D feature planes per level, summed
(:mod:`recon.nerf.triplane`, :meth:`FieldConfig.triplane`; plain PyTorch, so the fused CPU kernels, which read the
hash / dense table layout, are not taken: the encoding then the decoder). ``--field.decoder rbf``: each MLP is
replaced by one layer of Gaussian RBF neurons with a linear read-out (:class:`recon.nerf.rbf.RBFLayer`, same inputs and outputs); the grid then starts
uniform in [-FEATURE_INIT, FEATURE_INIT] (features must differ between places for the neurons to tell them
apart) and the neurons' centres are k-means centres of the features of random points at initialisation (the
colour head's: of the density head's outputs there next to the SH of random directions).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rasterizer.reference.sh import sh_basis
from recon.nerf.config import FieldConfig
from recon.nerf.fused_encoding_mlp import encode_mlp_numba, use_fused
from recon.nerf.grid_rbf import grid_rbf_layer
from recon.nerf.hash_encoding import HashGridConfig, hash_encode, init_table, level_layout
from recon.nerf.rbf import FEATURE_INIT, RBFLayer
from recon.nerf.triplane import TriPlaneConfig, plane_layout, triplane_encode

SH_DEGREE = 3  # 16 basis functions ("degree 4" in instant-ngp's count of bands)
TRUNC_EXP_MAX = 15.0
INIT_SAMPLES = 4096  # random points whose features place the RBF neurons at initialisation


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


def random_directions(n: int, generator: torch.Generator | None = None) -> Tensor:
    """[n, 3] unit vectors, uniform on the sphere."""
    v = torch.randn(n, 3, generator=generator)
    return v / v.norm(dim=1, keepdim=True).clamp(min=1e-12)


def grid_layout(grid: HashGridConfig | TriPlaneConfig) -> tuple[Tensor, Tensor]:
    """(resolutions int64 [L], offsets int64 [L + 1]) of a grid's flat ``table``: a tri-plane's planes
    (:func:`recon.nerf.triplane.plane_layout`) or a hash / dense grid's levels (:func:`level_layout`)."""
    return plane_layout(grid) if isinstance(grid, TriPlaneConfig) else level_layout(grid)


class GridField(nn.Module):
    """The encoding part every neural field shares (nerf's :class:`NerfField`, neus's
    :class:`recon.nerf.neus_field.NeusField`, ``sdf fit``'s :class:`recon.geometry.sdf_fit.SDFField`): the grid
    (``grid``: a hash / dense :class:`HashGridConfig` or a :class:`TriPlaneConfig`), its layout buffers
    ``resolutions`` / ``offsets`` and its flat parameter ``table`` [P, F], uniform in [-1e-4, 1e-4] under an MLP
    decoder and in [-FEATURE_INIT, FEATURE_INIT] under an RBF one (the neurons must tell places apart)."""

    def _init_grid(self, grid: HashGridConfig | TriPlaneConfig, decoder: str,
                   generator: torch.Generator | None = None, backend: str = "auto") -> None:
        if decoder not in ("mlp", "rbf"):
            raise ValueError(f"{type(self).__name__}: unknown decoder {decoder!r} (mlp, rbf)")
        self.grid, self.backend, self.decoder_kind = grid, backend, decoder
        self.triplane = isinstance(grid, TriPlaneConfig)
        res, offsets = grid_layout(grid)
        self.register_buffer("resolutions", res, persistent=False)
        self.register_buffer("offsets", offsets, persistent=False)
        scale = FEATURE_INIT if decoder == "rbf" else 1e-4
        self.table = nn.Parameter(init_table(offsets, grid.features, generator, scale=scale))

    def encode(self, u: Tensor) -> Tensor:
        """[N, L F] grid features (hash / dense table or tri-plane) of unit-cube positions ``u`` [N, 3]."""
        if self.triplane:
            return triplane_encode(u, self.table, self.resolutions, self.offsets)
        return hash_encode(u, self.table, self.resolutions, self.offsets, self.backend)


class NerfField(GridField):
    """Grid encoding + density decoder + colour decoder (see the module docstring). ``grid``: a hash / dense
    layout (:class:`HashGridConfig`) or a tri-plane (:class:`TriPlaneConfig`; its planes are the rows of
    ``table``, :func:`recon.nerf.triplane.plane_layout`). ``backend`` picks the table encoding's implementation
    (:func:`recon.nerf.hash_encoding.hash_encode`; the tri-plane is PyTorch on every backend); ``decoder`` "mlp" or
    "rbf" (``rbf_neurons`` per head, ``rbf_backend``: :func:`recon.nerf.rbf.rbf_forward`; ``rbf_density_bias``: the
    density head's initial log-density bias, :func:`start_empty`); ``encoding_mlp``: the encoding + density MLP fused
    or not (:func:`recon.nerf.fused_encoding_mlp.use_fused`)."""

    def __init__(self, grid: HashGridConfig | TriPlaneConfig, hidden: int = 64, geo_dim: int = 16,
                 color_layers: int = 2, generator: torch.Generator | None = None, backend: str = "auto", decoder: str = "mlp",
                 rbf_neurons: int = FieldConfig.rbf_neurons, rbf_backend: str = "auto",
                 encoding_mlp: str = "auto", rbf_density_bias: float = 0.0):
        super().__init__()
        if isinstance(grid, TriPlaneConfig) and encoding_mlp == "fused":
            raise ValueError("--nerf.encoding-mlp fused: the fused kernel reads hash / dense tables, not the triplane "
                             "encoding; use auto or unfused")
        self._init_grid(grid, decoder, generator, backend)
        self.encoding_mlp = encoding_mlp
        color_in = geo_dim + (SH_DEGREE + 1) ** 2
        if decoder == "mlp":
            self.density_mlp = mlp(grid.output_dim, hidden, geo_dim, 1)
            self.color_mlp = mlp(color_in, hidden, 3, color_layers)
        else:
            with torch.no_grad():
                feats = self.encode(torch.rand(INIT_SAMPLES, 3, generator=generator))
            self.density_mlp = RBFLayer(grid.output_dim, rbf_neurons, geo_dim, generator, rbf_backend, feats)
            start_empty(self.density_mlp, rbf_density_bias)
            with torch.no_grad():
                geo = self.density_mlp(feats)
                sh = sh_basis(SH_DEGREE, random_directions(INIT_SAMPLES, generator))
            self.color_mlp = RBFLayer(color_in, rbf_neurons, 3, generator, rbf_backend, torch.cat([geo, sh], 1))

    def density(self, u: Tensor) -> tuple[Tensor, Tensor]:
        """(sigma [N], geometry features [N, geo_dim]) at unit-cube positions ``u`` [N, 3]. The encoding and
        the density decoder run as one operation on the CPU: the RBF decoder through
        :func:`recon.nerf.grid_rbf.grid_rbf_layer` (unless the encoding's reference was asked for), the MLP through
        :func:`recon.nerf.fused_encoding_mlp.encode_mlp_numba` (``encoding_mlp``, see ``use_fused``); both read the
        table layout only, so a tri-plane always runs :meth:`encode` then the decoder."""
        if self.triplane:
            h = self.density_mlp(self.encode(u))
        elif self.decoder_kind == "rbf" and self.backend != "torch":
            h = grid_rbf_layer(u, self.table, self.resolutions, self.offsets, self.density_mlp)
        elif use_fused(self.encoding_mlp, self.backend, u, None, self.table, self.density_mlp):
            h = encode_mlp_numba(u, None, self.table, self.resolutions, self.offsets, self.grid.levels,
                                 self.density_mlp)
        else:
            h = self.density_mlp(self.encode(u).to(self.table.dtype))
        return TruncExp.apply(h[:, 0]), h

    def density_skips_dead_rows(self, u: Tensor) -> bool:
        """Whether :meth:`density` of positions like ``u`` takes the fused encoding + MLP kernels, whose backward
        skips the rows whose cotangents are all 0 (:func:`recon.nerf.fused_encoding_mlp.rows_with_cotangents`):
        then evaluating all of a ray batch's samples with gradients costs the backward only the rows that are
        used (:meth:`recon.models.nerf.NerfModel.render_rays`)."""
        return (not self.triplane and self.decoder_kind == "mlp"
                and use_fused(self.encoding_mlp, self.backend, u, None, self.table, self.density_mlp))

    def color(self, geo: Tensor, dirs: Tensor, ray: Tensor | None = None) -> Tensor:
        """[N, 3] RGB in (0, 1) from geometry features [N, geo_dim] and unit view directions [N, 3]; or, with
        ``ray`` int64 [N], directions per ray [R, 3] with sample i seen along dirs[ray[i]] (the SH basis
        evaluated once per ray, then gathered: the same values as per sample, for a fraction of the work)."""
        sh = sh_basis(SH_DEGREE, dirs.to(geo.dtype))
        if ray is not None:
            sh = sh[ray]
        return torch.sigmoid(self.color_mlp(torch.cat([geo, sh], dim=1)))


def start_empty(density_head: nn.Module, log_density: float) -> None:
    """Set the read-out bias of ``density_head``'s first output (the log density; sigma = exp of it) to
    ``log_density``, so a fresh field's density is about exp(log_density) everywhere (instant-ngp's exp activation
    starts at sigma = 1 from its near-zero features; an RBF head's output is smooth in its features, so its empty
    space thins slowly and its occupancy grid kept 2-4x the cells: a low start prunes from the first updates)."""
    with torch.no_grad():
        density_head.bias[0] = log_density


def field_grid_config(nerf_cfg, field_cfg: FieldConfig) -> HashGridConfig | TriPlaneConfig:
    """The grid ``--field.encoding`` asks for: the method's hash grid (``nerf_cfg``, --nerf.hash-*), the dense grids
    (--field.dense-*) or the tri-plane (--field.triplane-*); ValueError for another name."""
    grids = {"hash": nerf_cfg.hash_grid, "dense": field_cfg.dense_grid, "triplane": field_cfg.triplane}
    if field_cfg.encoding not in grids:
        raise ValueError(f"--field.encoding {field_cfg.encoding!r}: unknown (hash, dense, triplane)")
    return grids[field_cfg.encoding]()


def encoding_backend(nerf_cfg) -> str:
    """The table encoding's backend of ``--nerf.backend`` (numba, torch; auto otherwise)."""
    return nerf_cfg.backend if nerf_cfg.backend in ("numba", "torch") else "auto"


def build_field(nerf_cfg, field_cfg: FieldConfig, generator: torch.Generator | None = None) -> NerfField:
    """The field ``field_cfg`` asks for (encoding, decoder), sized by the method's ``nerf_cfg``
    (:class:`recon.nerf.config.NerfConfig`: the hash grid, the MLPs' widths, the encoding's backend)."""
    return NerfField(field_grid_config(nerf_cfg, field_cfg), nerf_cfg.hidden, nerf_cfg.geo_dim,
                     nerf_cfg.color_layers, generator, encoding_backend(nerf_cfg),
                     decoder=field_cfg.decoder, rbf_neurons=field_cfg.rbf_neurons, rbf_backend=field_cfg.rbf_backend,
                     encoding_mlp=nerf_cfg.encoding_mlp, rbf_density_bias=field_cfg.rbf_density_bias)


def parameter_count(field: nn.Module) -> int:
    """Number of trainable scalars of ``field``."""
    return sum(p.numel() for p in field.parameters() if p.requires_grad)
