"""The ``nerf`` section of the training config (``--nerf.rays-per-batch`` ...): field, sampling, optimiser.

Defaults: instant-ngp (Mueller et al. 2022: hash grid, 64-wide MLPs, 1024 steps per box diagonal, Adam
1e-2 with betas (0.9, 0.99), eps 1e-15) and nerfacc's instant-ngp example (learning-rate warm-up over
100 steps, decay x 0.33 at 50 / 75 / 90 % of the run, weight decay 1e-6 on the MLPs, the occupancy
update rhythm in :mod:`recon.strategy.occupancy`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from recon.nerf.hash_encoding import HashGridConfig
from recon.nerf.triplane import TriPlaneConfig


@dataclass
class FieldConfig:
    """The neural field's parts (``--field.encoding``, ``--field.decoder``), one choice for every neural method
    (--method nerf and --method neus: recon/nerf/field.py, recon/nerf/neus_field.py). Encodings: ``hash``
    (instant-ngp's multiresolution hash grid, sized by the method's
    --nerf.hash-* options) or ``dense`` (a few low-resolution dense grids, --field.dense-*: every level stored
    whole, no hashing) or ``triplane`` (three axis-aligned 2D feature planes per level, summed; --field.triplane-*;
    recon/nerf/triplane.py). Decoders: ``mlp`` (the method's MLPs, --nerf.hidden ...) or ``rbf`` (one layer of
    Gaussian RBF neurons per head, recon/nerf/rbf.py: Gaussian RBFNet / GNF, Bouzidi et al. 2025)."""

    encoding: Literal["hash", "dense", "triplane"] = "hash"
    """position encoding: hash (multiresolution hash grid), dense (low-resolution dense grids) or triplane (xy, xz,
    yz feature planes per level, summed)"""
    decoder: Literal["mlp", "rbf"] = "mlp"
    """decoder of the encoded features: mlp or rbf (a single layer of Gaussian RBF neurons)"""
    dense_levels: int = 4
    """dense encoding: resolution levels"""
    dense_features: int = 4
    """dense encoding: features per level"""
    dense_base_res: int = 16
    """dense encoding: cells per axis of the coarsest level"""
    dense_max_res: int = 128
    """dense encoding: cells per axis of the finest level"""
    triplane_levels: int = 4
    """triplane encoding: resolution levels"""
    triplane_features: int = 4
    """triplane encoding: features per level (each plane's; the three planes are summed)"""
    triplane_base_res: int = 64
    """triplane encoding: cells per side of the coarsest level's planes"""
    triplane_max_res: int = 768
    """triplane encoding: cells per side of the finest level's planes (the defaults: 8.73M values, the dense
    defaults' 9.85M)"""
    rbf_neurons: int = 128
    """rbf decoder: Gaussian neurons per head (density head and colour head). Each sample's cost is linear in them:
    lego f2, density started empty, at 100 and 200 steps 128 neurons had the PSNR of 256 at half the CPU seconds
    (docs/nerf.md); 256 until 7 Dec 2026 (a run keeps the count it was trained with). ``--method neus``'s RBF heads
    read the same option; 128 against 256 was not measured for NeuS"""
    rbf_density_bias: float = -2.0
    """rbf decoder, --method nerf: the density head's log-density bias at initialisation (sigma = exp(bias) at every
    point of a fresh field: exp(-2) = 0.14, nearly empty, so the occupancy grid prunes early; 0 until 7 Dec 2026,
    whose flat sigma of about 1 kept 2-4x the cells occupied: docs/nerf.md). Initialisation only"""
    rbf_backend: Literal["auto", "numba", "matmul", "reference"] = "auto"
    """rbf decoder: the matrix-product form (any device), the Numba kernels (CPU), the reference, or auto (on the
    CPU the fused grid + RBF kernel for the density head and the Numba kernels for the colour head; matmul
    elsewhere). An explicit backend runs the density head unfused (the encoding, then that backend)"""

    def dense_grid(self) -> HashGridConfig:
        """The dense encoding as a hash-grid layout whose table is large enough that no level is hashed."""
        rows = (self.dense_max_res + 1) ** 3
        return HashGridConfig(self.dense_levels, self.dense_features, max(1, math.ceil(math.log2(rows))),
                              self.dense_base_res, self.dense_max_res)

    def triplane(self) -> TriPlaneConfig:
        """The triplane encoding's size (--field.triplane-*)."""
        return TriPlaneConfig(self.triplane_levels, self.triplane_features, self.triplane_base_res,
                              self.triplane_max_res)


@dataclass
class NerfConfig:
    """Hash-grid NeRF options (--method nerf); see recon/nerf/config.py for the sources of the defaults."""

    hash_levels: int = 16
    """hash grid: resolution levels L (instant-ngp: 16)"""
    hash_features: int = 2
    """hash grid: features per level F (instant-ngp: 2)"""
    hash_log2_table: int = 19
    """hash grid: log2 of the rows of a hashed level (instant-ngp: 19)"""
    hash_base_res: int = 16
    """hash grid: cells per axis of the coarsest level (instant-ngp: 16)"""
    hash_max_res: int = 2048
    """hash grid: cells per axis of the finest level across the field's unit cube (instant-ngp: 2048 for a
    unit-scale box)"""
    hidden: int = 64
    """width of the density and colour MLPs"""
    geo_dim: int = 16
    """density MLP outputs (log density + geometry features fed to the colour MLP)"""
    color_layers: int = 2
    """hidden layers of the colour MLP"""
    scene: Literal["auto", "box", "unbounded"] = "auto"
    """box: march inside a bounding box (Blender scenes: [-1.5, 1.5]^3 unless --nerf.box); unbounded:
    contract all of space (COLMAP / nerfstudio captures); auto picks by dataset format"""
    box: str | None = None
    """bounding box "cx,cy,cz,half" (a cube; write --nerf.box=-1,0,0,2 for a negative first number);
    default: the dataset's (see recon.models.nerf.scene_space)"""
    steps_per_diagonal: int = 1024
    """ray-marching step: the box diagonal (unbounded: the inner cube's) over this"""
    cone_angle: float | None = None
    """steps grow as t x cone_angle (default 0 in a box, 1/256 unbounded, as instant-ngp)"""
    far: float = 1000.0
    """unbounded scenes: rays end at this many scene radii"""
    target_samples: int = 1 << 16
    """samples per training step: the ray count adapts to the measured samples per ray (instant-ngp's
    dynamic batch)"""
    max_rays: int = 8192
    """most rays in one training step"""
    lr: float = 1e-2
    """Adam learning rate of the hash table and the MLPs"""
    weight_decay: float = 1e-6
    """Adam weight decay of the MLP weights"""
    lr_warmup_steps: int = 100
    """learning rate ramps linearly from 1 % over these steps"""
    occupancy_resolution: int = 128
    """occupancy grid cells per axis"""
    eval_rays: int = 16384
    """most rays per chunk when rendering whole images (fewer when rays march many samples: about 2^22 samples
    a chunk)"""
    backend: Literal["auto", "numba", "torch"] = "auto"
    """hash encoding and ray marching: Numba kernels (CPU), the PyTorch reference, or auto (Numba on the CPU)"""
    encoding_mlp: Literal["auto", "fused", "unfused"] = "auto"
    """hash encoding + density (NeuS: geometry) MLP: one fused Numba kernel each way (CPU;
    recon/nerf/fused_encoding_mlp.py), the encoding then the torch MLP (unfused), or auto (fused where it applies)"""

    def hash_grid(self) -> HashGridConfig:
        return HashGridConfig(self.hash_levels, self.hash_features, self.hash_log2_table, self.hash_base_res,
                              self.hash_max_res)


@dataclass
class NeusConfig:
    """NeuS options (--method neus; the hash grid, sampling and optimiser come from the ``nerf`` section, the
    encoding and decoder from ``field``).
    Sources: NeuS (Wang et al. 2021), NeuS2 (Wang et al. 2023), instant-nsr-pl's neus configs."""

    eikonal_weight: float = 0.1
    """weight of the eikonal loss mean((|grad SDF| - 1)^2) on the training samples"""
    init_radius: float = 0.5
    """the SDF starts as a sphere of this radius (normalised coordinates: the box is [-1, 1]^3)"""
    init_variance: float = 0.3
    """learned sharpness s = exp(10 variance) starts here (NeuS: 0.3, s = 20)"""
    variance_lr_scale: float = 1.0
    """the variance's learning rate is --nerf.lr x this (instant-nsr-pl: 0.1; the short CPU runs here need
    the sharpness to grow faster)"""
    start_levels: int = 4
    """progressive training: grid levels (hash, dense or triplane) active at step 0"""
    level_every: int = 500
    """progressive training: one more grid level every N steps (the default: all 16 levels by step 6,000)"""
    fd_cells: float = 0.5
    """finite-difference step of the SDF gradient, in cells of the finest active grid level"""
    gradient: Literal["central", "tetrahedral"] = "central"
    """SDF gradient scheme: central differences (7 field evaluations per sample) or tetrahedral differences (4;
    Instant-NSR: 1.6-2.4x cheaper steps, a first-order gradient error; not the default: from the same start its
    later frames' test PSNR was 0.7-0.8 dB below central's); docs/nerf.md"""
    sharp_step: float = 0.5
    """marching step while the surface is blurry: sections of up to this many 1/s (s the learned sharpness;
    normalised units) instead of the box diagonal / --nerf.steps-per-diagonal, at most 16x that step; 0: always the
    nerf step. NeuS's opacity of a section is exact for an SDF linear along it, whatever its length (docs/nerf.md)"""
    geo_hidden: int = 64
    """width of the geometry MLP's hidden layer (softplus, geometric initialisation; --field.decoder mlp)"""
    frame_steps: int = 300
    """dynamic data (frames with times): steps of each frame after the first, a fine-tune of the previous
    frame's field (NeuS2's incremental training); the first frame trains --steps (docs/nerf.md)"""
    frame_mesh_resolution: int = 128
    """dynamic data: marching-cubes cells per axis of each frame's mesh (RUN/meshes/frame_NNNNN.ply)"""
    frame_splats: bool = False
    """dynamic data: also write each frame's baked splats.ply (the viewer bakes a frame when it first shows it)"""


def _pos_int(v) -> bool:
    return v >= 1


_FINITE_NONNEG = (lambda v: math.isfinite(v) and v >= 0, ">= 0")
_FINITE_POS = (lambda v: math.isfinite(v) and v > 0, "> 0")

FIELD_RANGES = {  # merged into recon.training.trainer.FIELD_RANGES (dotted names)
    **{f"field.{name}": (_pos_int, ">= 1") for name in (
        "dense_levels", "dense_features", "dense_base_res", "rbf_neurons", "triplane_levels", "triplane_features",
        "triplane_base_res")},
    "field.rbf_density_bias": (lambda v: -20.0 <= v <= 10.0, "in [-20, 10] (exp overflows above; a field far below "
                               "starts dead)"),
    "field.dense_max_res": (lambda v: 1 <= v <= 1000, "1..1000 (a dense level holds (res + 1)^3 rows)"),
    "field.triplane_max_res": (lambda v: 1 <= v <= 8192, "1..8192 (a triplane level holds 3 res^2 rows)"),
    **{f"nerf.{name}": (_pos_int, ">= 1") for name in (
        "hash_levels", "hash_features", "hash_base_res", "hash_max_res", "hidden", "geo_dim", "steps_per_diagonal",
        "target_samples", "max_rays", "occupancy_resolution", "eval_rays")},
    "nerf.color_layers": (lambda v: v >= 0, ">= 0"),
    "nerf.hash_log2_table": (lambda v: 1 <= v <= 30, "1..30"),
    "nerf.cone_angle": (lambda v: v is None or (math.isfinite(v) and v >= 0), ">= 0"),
    "nerf.far": _FINITE_POS,
    "nerf.lr": _FINITE_POS,
    "nerf.weight_decay": _FINITE_NONNEG,
    "nerf.lr_warmup_steps": (lambda v: v >= 0, ">= 0"),
    **{f"neus.{name}": (_pos_int, ">= 1") for name in ("start_levels", "level_every", "geo_hidden", "frame_steps")},
    "neus.frame_mesh_resolution": (lambda v: v >= 2, ">= 2 (cells per axis)"),
    "neus.eikonal_weight": _FINITE_NONNEG,
    "neus.init_radius": (lambda v: 0 < v < 1, "in (0, 1) (the box is [-1, 1]^3)"),
    "neus.init_variance": (lambda v: math.isfinite(v), "finite"),
    "neus.variance_lr_scale": _FINITE_NONNEG,
    "neus.fd_cells": _FINITE_POS,
    "neus.sharp_step": _FINITE_NONNEG,
    "occupancy.update_every": (_pos_int, ">= 1"),
    "occupancy.warmup_steps": (lambda v: v >= 0, ">= 0"),
    "occupancy.decay": (lambda v: 0 <= v <= 1, "0..1"),
    "occupancy.threshold": _FINITE_NONNEG,
    "occupancy.fraction": (lambda v: 0 < v <= 1, "in (0, 1]"),
}
