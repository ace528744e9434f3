"""How close meshes lie to a COLMAP capture's reliable SfM points: a geometry check without ground truth.

    python scripts/sfm_distance.py --data COLMAP_DIR --mesh MESH [MESH ...] [--min-track 3]
        [--max-error 1.5] [--box-percentiles 1 99] [--within 0.5]

COLMAP_DIR is a capture folder that ``splatforge train`` reads (``sparse/0`` or ``sparse``, ``.bin`` or
``.txt``); MESH a mesh in that capture's world frame, e.g. ``splatforge mesh RUN --out mesh.ply`` of a run
trained on it (splatforge keeps COLMAP's world frame). Reliable points: seen in at least ``--min-track``
images, reprojection error below ``--max-error`` px, inside the per-axis ``--box-percentiles`` box of
those (which drops far outliers). Prints JSON: the point count, that box's diagonal (scene units) and,
per mesh, the exact distance of each point to the mesh's triangles (open3d ray-casting scene) in % of
that diagonal: median, mean, 90th percentile, and the fraction of the points within ``--within`` %;
and the median in scene units (``median``), which does not depend on how the box is drawn.

This measures one direction only (points to mesh): a mesh that lies on the points scores well even
with floaters elsewhere, and a mesh with holes where the points are scores badly. SfM points are
sparse and sit on textured surfaces; read the numbers beside ray-cast views of the meshes.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from recon.data.colmap import ColmapPoints, find_sparse_dir, read_model  # noqa: E402
from recon.geometry.mesh_metrics import bounding_diagonal, distance_to_mesh  # noqa: E402


def reliable_points(points: ColmapPoints, min_track: int, max_error: float,
                    box_percentiles: tuple[float, float]) -> np.ndarray:
    """[P', 3] float64 xyz of the points with a track of >= ``min_track`` images and a reprojection
    error < ``max_error`` px that lie inside the per-axis (lo, hi) percentile box of those points."""
    track = np.array([len(t) for t in points.tracks], np.int64)
    keep = (track >= min_track) & (points.errors < max_error)
    xyz = points.xyz[keep]
    if len(xyz) == 0:
        return xyz
    lo, hi = np.percentile(xyz, box_percentiles[0], axis=0), np.percentile(xyz, box_percentiles[1], axis=0)
    return xyz[np.all((xyz >= lo) & (xyz <= hi), axis=1)]


def load_triangles(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(vertices [V, 3], faces [F, 3]) of a mesh file (any format trimesh reads; scenes are merged)."""
    import trimesh

    if not path.is_file():
        raise SystemExit(f"sfm_distance.py: {path}: no such mesh file")
    try:
        mesh = trimesh.load(path, force="mesh", process=False)
    except Exception as err:  # trimesh raises many types for bad files
        raise SystemExit(f"sfm_distance.py: {path}: not a readable mesh ({err})") from err
    if len(mesh.faces) == 0:
        raise SystemExit(f"sfm_distance.py: {path}: the mesh has no triangles (an empty extraction?)")
    return np.asarray(mesh.vertices), np.asarray(mesh.faces)


def distance_summary(dist: np.ndarray, diagonal: float, within_pct: float) -> dict:
    """Statistics of point-to-mesh distances ``dist`` [P] in % of ``diagonal``."""
    pct = dist / diagonal * 100
    return {"median": float(np.median(dist)), "median_pct": float(np.median(pct)), "mean_pct": float(pct.mean()),
            "p90_pct": float(np.percentile(pct, 90)), f"within_{within_pct:g}_pct": float((pct <= within_pct).mean())}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="COLMAP capture folder")
    ap.add_argument("--mesh", type=Path, nargs="+", required=True, help="meshes in the capture's world frame")
    ap.add_argument("--min-track", type=int, default=3, help="images a point must be seen in")
    ap.add_argument("--max-error", type=float, default=1.5, help="largest reprojection error (px)")
    ap.add_argument("--box-percentiles", type=float, nargs=2, default=(1.0, 99.0), metavar=("LO", "HI"))
    ap.add_argument("--within", type=float, default=0.5, help="report the fraction of points within this %%")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    sparse = find_sparse_dir(args.data)
    xyz = reliable_points(read_model(sparse).points, args.min_track, args.max_error, tuple(args.box_percentiles))
    if len(xyz) < 10:
        raise SystemExit(f"sfm_distance.py: {sparse}: only {len(xyz)} points pass --min-track {args.min_track} "
                         f"--max-error {args.max_error}; loosen them")
    diagonal = bounding_diagonal(xyz)
    report = {"data": str(args.data), "points": int(len(xyz)), "diagonal": diagonal,
              "filters": {"min_track": args.min_track, "max_error": args.max_error,
                          "box_percentiles": list(args.box_percentiles)},
              "meshes": {}}
    for path in args.mesh:
        vertices, faces = load_triangles(path)
        report["meshes"][str(path)] = distance_summary(distance_to_mesh(xyz, vertices, faces), diagonal, args.within)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
