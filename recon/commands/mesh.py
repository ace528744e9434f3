"""``splatforge mesh RUN --out mesh.ply|obj|glb [--voxel-size S] [--trunc VOXELS] [--depth median|expected]
[--resolution N] [--keep-largest] [--supersample N] [--sdf-resolution N] [--max-memory-gb G] [--force]``

A run with a signed distance field (--method neus) is meshed directly: marching cubes on the field's zero
level set over ``--sdf-resolution``^3 cells of its box, vertex colours from its colour net seen along -normal
(:func:`recon.geometry.mesh_extraction.zero_level_mesh`). Every other run:

Renders depth and colour of the run's training views, fuses them into a TSDF (open3d ``VoxelBlockGrid``),
extracts a vertex-coloured triangle mesh and writes it atomically with trimesh; see
:mod:`recon.geometry.mesh_extraction` for the pipeline, the default voxel size and the memory estimate.
``--supersample N`` renders the views at N x their resolution (``Camera.scaled``), for voxels finer than a
pixel's footprint. The default is 1 even for a run trained with ``--supersample``. Measured on spot (400 px,
resolution 512, stop 27), fusing such runs' views at 2x rather than 1x moved the surface further inside
(3dgs: median signed distance -0.044 -> -0.088 % of the diagonal) and raised the Chamfer distance
(3dgs 0.166 -> 0.183 %, 2dgs 0.090 -> 0.092 %) in twice the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Optional

from recon.core.atomic import atomic_write_bytes, refuse_overwrite
from recon.core.errors import USER_ERRORS, UsageError, fail
from recon.geometry import mesh_extraction as mx
from recon.core.open3d_import import open3d

try:
    import tyro

    _Positional = tyro.conf.Positional
    _NoPrefix = tyro.conf.arg(name="")
except ImportError:  # pragma: no cover
    _Positional = None
    _NoPrefix = None


@dataclass
class MeshConfig:
    """Extract a triangle mesh from a training run (TSDF fusion of its rendered depth)."""

    run: Annotated[Path, _Positional] if _Positional else Path
    """Training run folder."""
    out: Path
    """Output mesh: .ply, .obj or .glb."""
    voxel_size: Optional[float] = None
    """TSDF voxel size in scene units; default: surface extent / --resolution."""
    trunc: float = 4.0
    """Truncation distance in voxels."""
    depth: Literal["median", "expected"] = "median"
    """Rendered depth to fuse; 3dgs runs have expected depth only (median falls back to it for them)."""
    resolution: int = 512
    """Voxels across the diagonal of the rendered surface's bounding box (when --voxel-size is not given)."""
    keep_largest: bool = False
    """Keep only the largest connected component."""
    supersample: int = 1
    """Render depth and colour at N x the training views' resolution (for voxels finer than a pixel)."""
    sdf_resolution: int = 256
    """Runs with a signed distance field (--method neus): marching-cubes cells per axis of the box (the mesh is
    the field's zero level set; the TSDF options do not apply)."""
    sdf_full_grid: bool = False
    """Evaluate the SDF at every vertex of the grid: by default only near its zero level (the same mesh while
    the field's slope stays bounded, checked where it is evaluated; a steep floater smaller than 4 cells can be
    missed)."""
    max_memory_gb: float = 4.0
    """Refuse voxel sizes whose TSDF grid is estimated to need more memory than this."""
    data: Optional[Path] = None
    """Dataset folder, when the run's config.yaml does not name it (or it moved)."""
    force: bool = False
    """Overwrite an existing output."""
    progress: bool = True
    """Show a progress bar."""


def depth_kind(model, asked: str) -> str:
    """``asked``, except that "median" becomes "expected" for a model without a median-depth render."""
    return asked if hasattr(model, "render_depth") else "expected"


def extract_run_mesh(cfg: MeshConfig) -> dict:
    """Run the pipeline; returns a summary dict (vertices, faces, voxel_size, views, out)."""
    from rich.progress import Progress

    from recon.run.folder import Run

    fmt = cfg.out.suffix.lower().lstrip(".")
    if fmt not in ("ply", "obj", "glb"):
        raise UsageError(f"--out {cfg.out}: give a .ply, .obj or .glb file")
    if cfg.trunc <= 0:
        raise UsageError(f"--trunc {cfg.trunc}: must be > 0 (voxels)")
    if cfg.supersample < 1:
        raise UsageError(f"--supersample {cfg.supersample}: must be >= 1 (1: the training views' resolution)")
    refuse_overwrite(cfg.out, cfg.force)
    open3d("splatforge mesh")  # before rendering: a missing library is reported at once
    run = Run.open(cfg.run, data=cfg.data)
    cameras = run.cameras
    if not cameras:
        raise UsageError(f"{cfg.run}: the run's dataset has no training cameras; nothing to fuse into a mesh")
    model = run.load_model()
    if hasattr(model, "sdf_function"):
        return zero_level_run_mesh(cfg, model, fmt)
    kind = depth_kind(model, cfg.depth)
    cameras = [cam.scaled(cfg.supersample) for cam in cameras]
    with Progress(disable=not cfg.progress, transient=True) as bar:
        task = bar.add_task("rendering depth", total=len(cameras))
        views = mx.render_views(model, cameras, kind, run.background(), lambda n: bar.advance(task, n))
        points = views.surface_points()
        voxel = cfg.voxel_size if cfg.voxel_size is not None else mx.default_voxel_size(points, cfg.resolution)
        blocks = mx.check_memory(points, voxel, cfg.trunc, cfg.max_memory_gb)
        task = bar.add_task("fusing TSDF", total=len(cameras))
        mesh = mx.fuse_tsdf(views, voxel, cfg.trunc, blocks, lambda n: bar.advance(task, n))
    if cfg.keep_largest:
        mesh = mx.keep_largest_component(mesh)
    atomic_write_bytes(cfg.out, mx.mesh_bytes(mesh, fmt), force=cfg.force)
    return {"out": str(cfg.out), "vertices": len(mesh.vertices), "faces": len(mesh.faces),
            "voxel_size": voxel, "depth": kind, "views": len(cameras), "supersample": cfg.supersample}


def zero_level_run_mesh(cfg: MeshConfig, model, fmt: str) -> dict:
    """The mesh of a run with a signed distance field: its zero level set (:func:`mx.zero_level_mesh`)."""
    if cfg.sdf_resolution < 2:
        raise UsageError(f"--sdf-resolution {cfg.sdf_resolution}: must be >= 2 (cells per axis)")
    mesh = mx.zero_level_mesh(model, cfg.sdf_resolution, full_grid=cfg.sdf_full_grid)
    if cfg.keep_largest:
        mesh = mx.keep_largest_component(mesh)
    atomic_write_bytes(cfg.out, mx.mesh_bytes(mesh, fmt), force=cfg.force)
    return {"out": str(cfg.out), "vertices": len(mesh.vertices), "faces": len(mesh.faces),
            "voxel_size": float(model.sdf_function()[2]) / cfg.sdf_resolution, "depth": "sdf zero level",
            "views": 0, "supersample": 1}


def mesh(config: Annotated[MeshConfig, _NoPrefix] if _NoPrefix else MeshConfig) -> dict:
    """Extract a mesh from a run. Errors print one line on stderr and exit with status 2."""
    try:
        summary = extract_run_mesh(config)
    except (*USER_ERRORS, MemoryError) as exc:
        fail("mesh", exc)
    if summary["views"] == 0:  # a signed distance field's zero level set
        print(f"wrote {summary['out']}: {summary['vertices']} vertices, {summary['faces']} faces (marching cubes of "
              f"the SDF, cell {summary['voxel_size']:.4g})")
        return summary
    print(f"wrote {summary['out']}: {summary['vertices']} vertices, {summary['faces']} faces "
          f"(voxel {summary['voxel_size']:.4g}, {summary['depth']} depth, {summary['views']} views"
          + (f" at {summary['supersample']}x" if summary["supersample"] > 1 else "") + ")")
    return summary
