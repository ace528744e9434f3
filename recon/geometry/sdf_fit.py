"""Fit a signed distance field to a watertight mesh (`splatforge sdf fit`): samples, the field, the loop, the mesh.

Frame: the mesh is normalised into the unit cube [0, 1]^3 of the field (``to_unit``: centre of the bounding box to
0.5, longest side to 1 - 2 MARGIN), so the field's grids cover it with a margin; distances are fitted in mesh units
(the field's output x ``scale``), so a marching-cubes mesh at level 0 comes back in the mesh's own frame.

Samples (:func:`sdf_samples`): a share near the surface (surface points plus Gaussian offsets of two widths,
NEAR_SIGMAS x the bounding diagonal) and the rest uniform in the box; their signed distances (negative inside) come from
the ray-casting scene of open3d (exact distance to the triangles, sign by ray parity: the mesh must be watertight,
checked first with trimesh).

Field (:class:`SDFField`): the same parts as the radiance field (recon/nerf: ``--encoding`` hash, dense grids or
triplane (:mod:`recon.nerf.triplane`),
``--decoder`` mlp or rbf), one scalar out; the RBF read-out's bias starts at the samples' mean distance (positive:
far from every neuron the field is its bias, which must read "outside", or empty space fills with spurious
surfaces). Loss: mean absolute error of the distance, samples redrawn from a pool
each step. The result: ``mesh.ply`` (marching cubes of the field at level 0 on a ``--resolution``^3 grid, scikit-
image), ``sdf.pt`` (the field, its config and the normalisation: :func:`load_sdf` rebuilds it), ``metrics.json``.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Literal

import numpy as np
import torch
from torch import Tensor

from recon.geometry.narrow_band import narrow_band_grid
from recon.nerf.config import FieldConfig
from recon.nerf.field import INIT_SAMPLES, GridField, mlp, parameter_count
from recon.nerf.grid_rbf import grid_rbf_layer
from recon.nerf.hash_encoding import HashGridConfig
from recon.nerf.rbf import RBFLayer
from recon.nerf.triplane import TriPlaneConfig

from recon.core.errors import SplatforgeError
from recon.core.open3d_import import open3d

from .mesh_metrics import bounding_diagonal, sample_surface, triangle_scene

MARGIN = 0.05  # of the unit cube left empty on each side
NEAR_SIGMAS = (0.01, 0.002)  # x the bounding diagonal: offsets of the near-surface samples
NEAR_SHARE = 0.8  # of the samples near the surface (the rest uniform in the box)
EVAL_CHUNK = 1 << 18
# Defaults of the dense + rbf field (spot at 256^3, 150 steps, one pool of samples, 6 Dec 2026): the
# finest grid at 128 cells (9.85M values) gave Chamfer 0.66 % at lr 1e-2, 0.28 % at 5e-3, 0.83 % at 2e-3; at 64
# cells (1.47M values, steps 2.7x cheaper: Adam over fewer values) 0.50 % at 1e-2 and 0.135 % at 5e-3.
RBF_DEFAULTS = {"max_res": 64, "lr": 5e-3}
OTHER_DEFAULTS = {"max_res": 128, "lr": 1e-2}


@dataclass
class SDFConfig:
    """How to fit one mesh's signed distance field."""

    encoding: Literal["hash", "dense", "triplane"] = "dense"
    decoder: Literal["mlp", "rbf"] = "rbf"
    levels: int = 4
    features: int = 4
    base_res: int = 16
    max_res: int | None = None
    """cells per axis of the finest level (triplane: per side of its planes); default: 64 for dense + rbf, 128
    otherwise (RBF_DEFAULTS)."""
    log2_table: int = 19
    """hash encoding: rows of a hashed level (dense: every level whole)."""
    neurons: int = 64
    """rbf decoder: Gaussian neurons."""
    hidden: int = 64
    """mlp decoder: width (two hidden layers)."""
    steps: int = 1500
    batch: int = 1 << 14
    pool: int = 1 << 20
    """samples drawn once (distances computed once); each step takes ``batch`` of them."""
    lr: float | None = None
    """Adam's peak learning rate (one-cycle); default: 5e-3 for dense + rbf, 1e-2 otherwise (RBF_DEFAULTS)."""
    resolution: int = 256
    """marching-cubes grid cells per axis."""
    seed: int = 0
    backend: str = "auto"

    def __post_init__(self):
        defaults = RBF_DEFAULTS if (self.encoding, self.decoder) == ("dense", "rbf") else OTHER_DEFAULTS
        for name, value in defaults.items():
            if getattr(self, name) is None:
                setattr(self, name, value)

    def grid(self) -> HashGridConfig | TriPlaneConfig:
        if self.encoding == "triplane":
            return TriPlaneConfig(self.levels, self.features, self.base_res, self.max_res)
        if self.encoding == "dense":
            return FieldConfig(dense_levels=self.levels, dense_features=self.features, dense_base_res=self.base_res,
                               dense_max_res=self.max_res).dense_grid()
        return HashGridConfig(self.levels, self.features, self.log2_table, self.base_res, self.max_res)


class SDFField(GridField):
    """Grid encoding (:class:`recon.nerf.field.GridField`, as the radiance and NeuS fields) + decoder -> one signed
    distance (in mesh units: output x ``scale``) at unit-cube points."""

    def __init__(self, cfg: SDFConfig, scale: float, generator: torch.Generator | None = None):
        super().__init__()
        self.cfg, self.scale = cfg, float(scale)
        grid = cfg.grid()
        self._init_grid(grid, cfg.decoder, generator)
        if cfg.decoder == "rbf":
            with torch.no_grad():
                feats = self.encode(torch.rand(INIT_SAMPLES, 3, generator=generator))
            self.decoder = RBFLayer(grid.output_dim, cfg.neurons, 1, generator, cfg.backend, feats)
        else:
            self.decoder = mlp(grid.output_dim, cfg.hidden, 1, 2)

    def forward(self, u: Tensor) -> Tensor:
        """[N] signed distance (mesh units) at unit-cube points ``u`` [N, 3] (the RBF decoder: encoding and layer as
        one operation, :func:`recon.nerf.grid_rbf.grid_rbf_layer`, the fused kernel on the CPU; it reads the table
        layout, so a triplane runs the encoding then the layer)."""
        if self.cfg.decoder == "rbf" and self.cfg.encoding != "triplane":
            return grid_rbf_layer(u, self.table, self.resolutions, self.offsets, self.decoder)[:, 0] * self.scale
        return self.decoder(self.encode(u))[:, 0] * self.scale


@dataclass
class Normalisation:
    """mesh -> unit cube: u = (x - centre) / size + 0.5 (``size``: the longest side / (1 - 2 MARGIN))."""

    centre: tuple[float, float, float]
    size: float

    @staticmethod
    def of(vertices: np.ndarray) -> "Normalisation":
        lo, hi = vertices.min(0), vertices.max(0)
        return Normalisation(tuple(float(v) for v in (lo + hi) / 2), float((hi - lo).max() / (1 - 2 * MARGIN)))

    def to_unit(self, x: np.ndarray) -> np.ndarray:
        return (x - np.asarray(self.centre)) / self.size + 0.5

    def from_unit(self, u: np.ndarray) -> np.ndarray:
        return (u - 0.5) * self.size + np.asarray(self.centre)


class MeshFileError(SplatforgeError, ValueError):
    """The mesh file of `sdf fit` cannot be used (unreadable, not finite, empty or open); names the file."""


def load_closed_mesh(path: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(vertices [V, 3], faces [F, 3], notes) of the mesh file ``path``, its vertices merged by position (an OBJ's
    texture seams split them) and small holes filled (trimesh.repair.fill_holes) when that closes it; MeshFileError
    (a ValueError) naming the file when it is not a regular file, unreadable, not finite, empty or stays open
    (:func:`check_watertight`)."""
    import trimesh

    from recon.core.limits import require_regular_file

    require_regular_file(path, "mesh file", lambda p, problem: MeshFileError(f"{p}: {problem}"))  # a FIFO would block
    from recon.export.mesh_checks import check_mesh_file

    check_mesh_file(path, lambda p, problem: MeshFileError(f"{p}: {problem}"))  # GLB chunks/accessors, OBJ indices, before trimesh
    try:
        mesh = trimesh.load(path, force="mesh", process=True)
    except Exception as err:  # trimesh raises many kinds for unreadable files
        raise MeshFileError(f"{path}: cannot read a mesh ({type(err).__name__}: {' '.join(str(err).split())[:160]})") \
            from None
    notes = []
    if not isinstance(mesh, trimesh.Trimesh):  # force="mesh" gives an empty Scene for a file without geometry
        raise MeshFileError(f"{path}: holds no triangle mesh (a point cloud or an empty scene?); give a closed mesh")
    if not np.isfinite(np.asarray(mesh.vertices)).all():
        raise MeshFileError(f"{path}: {int((~np.isfinite(mesh.vertices).all(axis=1)).sum()):,} vertices have NaN or "
                            f"infinite coordinates; repair or re-export the mesh")
    mesh.merge_vertices(merge_tex=True, merge_norm=True)
    if len(mesh.faces) and not mesh.is_watertight:
        trimesh.repair.fill_holes(mesh)
        if mesh.is_watertight:
            notes.append("holes filled to close the surface (trimesh.repair.fill_holes)")
    check_watertight(mesh, str(path))
    return np.asarray(mesh.vertices, dtype=np.float64), np.asarray(mesh.faces, dtype=np.int64), notes


def check_watertight(mesh, name: str) -> None:
    """MeshFileError (a ValueError) naming the mesh unless it is a non-empty watertight triangle mesh (signs need
    a closed surface)."""
    if len(mesh.faces) == 0:
        raise MeshFileError(f"{name}: no triangles")
    if not mesh.is_watertight:
        raise MeshFileError(f"{name}: not watertight ({len(mesh.faces):,} faces; some edges belong to one face or to "
                            f"more than two), so inside and outside are undefined; close its holes first (e.g. "
                            f"trimesh.repair.fill_holes, or a remesher)")


def sdf_samples(vertices: np.ndarray, faces: np.ndarray, norm: Normalisation, count: int,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(points [count, 3] in mesh units, signed distances [count], negative inside) (module docstring)."""
    diag = bounding_diagonal(vertices)
    near = int(count * NEAR_SHARE)
    per = near // len(NEAR_SIGMAS)
    parts = [sample_surface(vertices, faces, per, rng) + rng.normal(scale=s * diag, size=(per, 3))
             for s in NEAR_SIGMAS]
    u = rng.random((count - per * len(NEAR_SIGMAS), 3))
    parts.append(norm.from_unit(u))
    points = np.concatenate(parts)
    scene = triangle_scene(vertices, faces)
    query = open3d("signed distances").core.Tensor(points.astype(np.float32))
    return points, scene.compute_signed_distance(query).numpy().astype(np.float64)


def fit_sdf(vertices: np.ndarray, faces: np.ndarray, cfg: SDFConfig,
            progress: Callable[[int, float], None] | None = None,
            samples: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[SDFField, Normalisation, dict]:
    """The fitted field, the normalisation and {"seconds", "sample_seconds", "final_l1", "parameters"}.
    ``samples``: (points, distances) of :func:`sdf_samples` drawn before (a benchmark fitting several fields to
    one pool), else drawn here."""
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    norm = Normalisation.of(vertices)
    t0 = time.perf_counter()
    points, sdf = samples if samples is not None else sdf_samples(vertices, faces, norm, cfg.pool, rng)
    sample_seconds = time.perf_counter() - t0
    u = torch.from_numpy(norm.to_unit(points)).float().clamp(0, 1)
    target = torch.from_numpy(sdf).float()
    field = SDFField(cfg, norm.size, gen)
    if cfg.decoder == "rbf":  # far from every neuron the field is its bias: start it at the mean distance (outside)
        with torch.no_grad():
            field.decoder.bias.fill_(float(target.mean()) / field.scale)
    opt = torch.optim.Adam(field.parameters(), lr=cfg.lr, betas=(0.9, 0.99), eps=1e-15)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.steps, pct_start=0.05)
    loss_value = float("nan")
    for step in range(1, cfg.steps + 1):
        idx = torch.randint(len(u), (cfg.batch,), generator=gen)
        loss = (field(u[idx]) - target[idx]).abs().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 25 == 0 or step == cfg.steps:
            loss_value = float(loss.detach())
            if progress is not None:
                progress(step, loss_value)
    return field, norm, {"seconds": time.perf_counter() - t0, "sample_seconds": sample_seconds,
                         "final_l1": loss_value, "parameters": parameter_count(field)}


@torch.no_grad()
def field_grid(field: Callable[[Tensor], Tensor], resolution: int) -> np.ndarray:
    """[R + 1, R + 1, R + 1] distances at the vertices of a resolution^3 grid over the unit cube (x, y, z order) of
    ``field`` (unit-cube points [N, 3] -> [N]: an :class:`SDFField`, or a neus model's ``sdf_function``)."""
    ax = torch.linspace(0, 1, resolution + 1)
    out = np.empty((resolution + 1,) * 3, dtype=np.float32)
    for i in range(resolution + 1):  # one x slab at a time: bounded memory
        yy, zz = torch.meshgrid(ax, ax, indexing="ij")
        u = torch.stack([torch.full_like(yy, float(ax[i])), yy, zz], -1).reshape(-1, 3)
        out[i] = torch.cat([field(u[s:s + EVAL_CHUNK]).float().cpu() for s in range(0, len(u), EVAL_CHUNK)]
                           ).reshape(resolution + 1, resolution + 1).numpy()
    return out


def extract_mesh(field: Callable[[Tensor], Tensor], norm: Normalisation, resolution: int,
                 slope: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(vertices [V, 3] in mesh units, faces [F, 3]) of the zero level of ``field`` (as :func:`field_grid`)
    by marching cubes; ValueError when the field has no zero crossing in the box. ``slope`` (a bound on
    |grad field| per unit of the cube): the field is evaluated only near its zero level
    (:func:`recon.geometry.narrow_band.narrow_band_grid`; the same mesh while the bound holds)."""
    from skimage.measure import marching_cubes

    values = field_grid(field, resolution) if slope is None else narrow_band_grid(field, resolution, slope,
                                                                                  chunk=EVAL_CHUNK)
    if not (values.min() < 0 < values.max()):
        raise ValueError(f"the fitted field has no surface in the box (distances {values.min():.4g}..{values.max():.4g})")
    # "ascent": triangles face towards increasing distance, i.e. outwards (negative inside)
    verts, faces, _, _ = marching_cubes(values, level=0.0, spacing=(1.0 / resolution,) * 3,
                                        gradient_direction="ascent")
    return norm.from_unit(verts.astype(np.float64)), faces.astype(np.int64)


def save_sdf(path: Path, field: SDFField, norm: Normalisation) -> None:
    """``sdf.pt``: {"config", "normalisation", "scale", "state"} written atomically."""
    from recon.core.atomic import atomic_write_bytes
    import io

    buf = io.BytesIO()
    torch.save({"format": "splatforge-sdf", "version": 1, "config": asdict(field.cfg), "normalisation": asdict(norm),
                "scale": field.scale, "state": field.state_dict()}, buf)
    atomic_write_bytes(path, buf.getvalue(), force=True)


def load_sdf(path: Path) -> tuple[SDFField, Normalisation]:
    """The field and normalisation saved by :func:`save_sdf`; ValueError naming the file otherwise."""
    from recon.core.errors import CheckpointError
    from recon.outputs.files import load_checkpoint_file

    try:  # the checkpoint reader's checks: a regular file, a zip archive whose CRC-32s hold, weights only
        data = load_checkpoint_file(path)
    except CheckpointError as err:
        problem = str(err).removeprefix(f"{path}: ").split(";")[0]
        raise ValueError(f"{path}: cannot load the SDF ({problem}); fit it again with `splatforge sdf fit`") \
            from None
    try:
        if data.get("format") != "splatforge-sdf":
            raise ValueError("not an sdf.pt written by `splatforge sdf fit`")
        cfg = SDFConfig(**data["config"])
        field = SDFField(cfg, data["scale"])
        field.load_state_dict(data["state"])
        n = data["normalisation"]
        return field, Normalisation(tuple(n["centre"]), float(n["size"]))
    except (OSError, RuntimeError, KeyError, TypeError, ValueError, EOFError, pickle.UnpicklingError) as err:
        raise ValueError(f"{path}: cannot load the SDF ({' '.join(str(err).split())[:200]})") from None
