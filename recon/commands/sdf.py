"""``splatforge sdf fit MESH --out DIR [--decoder rbf|mlp] [--encoding dense|hash|triplane] [--steps N]
[--resolution R]``

Fits a signed distance field to a watertight mesh (recon/geometry/sdf_fit.py: samples near the surface and in the
volume, a grid encoding and a Gaussian RBF or MLP decoder), then writes into DIR: ``mesh.ply`` (marching cubes of
the field at level 0, in the mesh's frame), ``sdf.pt`` (the field; ``recon.geometry.sdf_fit.load_sdf`` loads it
back) and ``metrics.json`` (Chamfer distance of mesh.ply to the input in % of its bounding diagonal, normal
consistency, parameters, seconds). A mesh that is not closed (after merging its vertices and filling small holes)
is refused in one line.

``splatforge sdf mesh sdf.pt --out mesh.ply [--resolution R]``: the marching-cubes mesh of a saved field.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Literal, Union

import tyro

from recon.core.errors import USER_ERRORS, UsageError, fail

METRIC_SAMPLES = 100_000


@dataclass
class SdfFitArgs:
    """Fit a signed distance field to a watertight mesh; write its marching-cubes mesh, the field and metrics."""

    mesh: Annotated[Path, tyro.conf.Positional]
    """a closed triangle mesh (.obj, .ply, .glb, .off, ...)."""
    out: Path
    """output folder (mesh.ply, sdf.pt, metrics.json)."""
    decoder: Literal["rbf", "mlp"] = "rbf"
    """rbf: one layer of Gaussian RBF neurons (Gaussian RBFNet); mlp: two hidden layers of 64 ReLU units."""
    encoding: Literal["dense", "hash", "triplane"] = "dense"
    """dense: low-resolution dense grids (4 levels, 16..128); hash: the same levels through a hash table; triplane:
    xy, xz, yz feature planes per level, summed (4 levels, 16..128 cells per side)."""
    steps: int = 1500
    resolution: int = 256
    """marching-cubes cells per axis."""
    neurons: int = 64
    samples: int = 1 << 20
    """training samples drawn once (80 % near the surface); each step takes 16,384 of them."""
    seed: int = 0
    progress: bool = True
    force: bool = False
    """overwrite an existing output folder's files."""


@dataclass
class SdfMeshArgs:
    """Extract a mesh from a saved field (sdf.pt) at any resolution."""

    field: Annotated[Path, tyro.conf.Positional]
    """an sdf.pt written by `splatforge sdf fit`."""
    out: Path
    """the mesh to write (.ply, .obj, .glb)."""
    resolution: int = 256
    force: bool = False


SdfCommand = Union[Annotated[SdfFitArgs, tyro.conf.subcommand("fit")],
                   Annotated[SdfMeshArgs, tyro.conf.subcommand("mesh")]]


def sdf(cmd: Annotated[SdfCommand, tyro.conf.arg(name="")]) -> None:
    """Signed distance fields of meshes: fit (Gaussian RBF or MLP decoder), marching-cubes mesh, metrics."""
    name = "fit" if isinstance(cmd, SdfFitArgs) else "mesh"
    try:
        fit_command(cmd) if isinstance(cmd, SdfFitArgs) else mesh_command(cmd)
    except USER_ERRORS as err:
        fail(f"sdf {name}", err)


def mesh_command(args: SdfMeshArgs) -> None:
    """The marching-cubes mesh of a saved field, written atomically."""
    import trimesh

    from recon.core.atomic import atomic_write_bytes
    from recon.geometry.sdf_fit import extract_mesh, load_sdf
    from recon.outputs.paths import check_output_file

    if not 8 <= args.resolution <= 1024:
        raise UsageError(f"--resolution {args.resolution}: must be in 8..1024")
    check_output_file(args.out, args.force, suffixes=(".ply", ".obj", ".glb"))
    try:
        field, norm = load_sdf(Path(args.field))
        v, f = extract_mesh(field, norm, args.resolution)
    except ValueError as err:
        raise UsageError(str(err)) from None
    data = trimesh.Trimesh(v, f, process=False).export(file_type=Path(args.out).suffix.lower()[1:])
    atomic_write_bytes(args.out, data if isinstance(data, bytes) else data.encode(), force=args.force)
    print(f"wrote {args.out}: {len(f):,} triangles at {args.resolution}^3")


def check_args(args: SdfFitArgs) -> None:
    for flag, value, low in (("--steps", args.steps, 1), ("--resolution", args.resolution, 8),
                             ("--neurons", args.neurons, 1), ("--samples", args.samples, 1024)):
        if value < low:
            raise UsageError(f"{flag} {value}: must be >= {low}")
    if args.resolution > 1024:
        raise UsageError(f"--resolution {args.resolution}: at most 1024 (the grid holds (R + 1)^3 distances)")
    if not Path(args.mesh).is_file():
        raise UsageError(f"{args.mesh}: no such file; give a mesh file (.obj, .ply, .glb, .off)")


def fit_command(args: SdfFitArgs) -> None:
    from recon.commands.image import FitProgress
    from recon.core.atomic import atomic_write_bytes, refuse_overwrite
    from recon.geometry.mesh_metrics import chamfer_distance, normal_consistency
    from recon.geometry.sdf_fit import SDFConfig, extract_mesh, fit_sdf, load_closed_mesh, save_sdf
    from recon.outputs.paths import ensure_writable_folder

    check_args(args)
    out = Path(args.out)
    ensure_writable_folder(out)
    for name in ("mesh.ply", "sdf.pt", "metrics.json"):
        refuse_overwrite(out / name, args.force)
    try:
        vertices, faces, notes = load_closed_mesh(Path(args.mesh))
    except ValueError as err:
        raise UsageError(str(err)) from None
    for note in notes:
        print(f"{args.mesh}: {note}")
    cfg = SDFConfig(encoding=args.encoding, decoder=args.decoder, steps=args.steps, resolution=args.resolution,
                    neurons=args.neurons, pool=args.samples, seed=args.seed)
    started = time.perf_counter()
    with FitProgress(args.progress, cfg.steps, Path(args.mesh).name, metric="L1", fmt="{:.2e}") as on_step:
        field, norm, info = fit_sdf(vertices, faces, cfg, on_step)
    try:
        mesh_v, mesh_f = extract_mesh(field, norm, cfg.resolution)
    except ValueError as err:
        raise UsageError(f"{args.mesh}: {err}; try more --steps") from None
    seconds = time.perf_counter() - started
    import trimesh

    atomic_write_bytes(out / "mesh.ply", trimesh.Trimesh(mesh_v, mesh_f, process=False).export(file_type="ply"),
                       force=True)
    save_sdf(out / "sdf.pt", field, norm)
    chamfer = chamfer_distance(mesh_v, mesh_f, vertices, faces, samples=METRIC_SAMPLES)
    metrics = {"mesh": str(args.mesh), "config": asdict(cfg), "parameters": info["parameters"],
               "fit_seconds": round(info["seconds"], 2), "sample_seconds": round(info["sample_seconds"], 2),
               "seconds_with_mesh": round(seconds, 2), "final_l1": info["final_l1"],
               "chamfer_pct": chamfer["chamfer_pct"], "accuracy_pct": chamfer["accuracy_pct"],
               "completeness_pct": chamfer["completeness_pct"],
               "normal_consistency": normal_consistency(mesh_v, mesh_f, vertices, faces, METRIC_SAMPLES),
               "mesh_vertices": len(mesh_v), "mesh_faces": len(mesh_f), "notes": notes}
    atomic_write_bytes(out / "metrics.json", json.dumps(metrics, indent=2).encode(), force=True)
    print(f"wrote {out}/mesh.ply ({len(mesh_f):,} triangles), sdf.pt, metrics.json: Chamfer "
          f"{metrics['chamfer_pct']:.3f} % of the diagonal, normal consistency {metrics['normal_consistency']:.4f}, "
          f"{info['parameters']:,} parameters, fit {info['seconds']:.1f} s")
