"""Benchmark of ``splatforge mesh2splat`` (issue 49): quality and speed of the per-object preset on a batch.

    python scripts/bench_mesh2splat.py [--per-category 10] [--workers 2] [--out DIR] [--no-shared]

Builds a mesh folder in ``OUT/meshes``: ``--per-category`` procedural meshes of each category of
:mod:`recon.data.procedural_meshes` (5 categories: 10 each gives the issue's 50) plus, unless
``--no-shared``, copies of ../shared/data/meshes (spot with its texture, the Stanford bunny), each in a
folder of its own (the label). Converts them with :func:`recon.mesh2splat.batch.run_batch` (the code of
``splatforge mesh2splat``) with ``--workers`` processes and the default :class:`ObjectPreset` (flags
override it), then prints JSON: the medians over done objects of held-out PSNR, seconds per object, Chamfer
(% of diagonal) and Gaussians, the share of objects meeting each target, objects per hour of wall time, the
failures, the machine (CPUs, load average before and after) and the targets (PSNR >= 35 dB at 128 x 128,
<= 60 s per object with 2 workers, Chamfer <= 1 %).
A rerun with the same --out resumes (finished objects are skipped; wall time is then that of the rest).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, when splatforge is not installed
from recon.data.procedural_meshes import write_mesh_collection  # noqa: E402
from recon.data.splat_index import latest_rows, read_index  # noqa: E402
from recon.mesh2splat.batch import BatchConfig, run_batch  # noqa: E402
from recon.mesh2splat.preset import ObjectPreset  # noqa: E402

SHARED_MESHES = Path(__file__).resolve().parents[2] / "shared" / "data" / "meshes"
TARGETS = {"test_psnr_db": 35.0, "seconds_per_object": 60.0, "chamfer_pct": 1.0}


def build_mesh_folder(root: Path, per_category: int, shared: bool) -> list[str]:
    """Write the benchmark's meshes under ``root`` (kept when already there); returns what was added."""
    added = []
    marker = root / ".generated"
    if not marker.is_file() or marker.read_text() != str(per_category):
        write_mesh_collection(root, per_category, seed=0)  # the same seed gives the same files: a larger
        marker.write_text(str(per_category))               # --per-category adds meshes, the rest resume
        added.append(f"{5 * per_category} procedural")
    if shared and SHARED_MESHES.is_dir():
        if (SHARED_MESHES / "spot").is_dir() and not (root / "spot").is_dir():
            shutil.copytree(SHARED_MESHES / "spot", root / "spot")
            added.append("spot")
        if (SHARED_MESHES / "bunny_ingp.obj").is_file() and not (root / "bunny").is_dir():
            (root / "bunny").mkdir(parents=True)
            shutil.copy(SHARED_MESHES / "bunny_ingp.obj", root / "bunny" / "bunny_ingp.obj")
            added.append("bunny")
    return added


def warm_kernel_cache(meshes: Path, scratch: Path, method: str) -> None:
    """Convert one mesh at toy size in this process, so the Numba kernels are compiled into the cache before
    the timed batch (a fresh checkout compiles them for minutes; every worker would wait for that)."""
    from recon.mesh2splat.convert import convert_object
    from recon.mesh2splat.sources import find_meshes

    first = find_meshes(meshes)[0]
    tiny = ObjectPreset(views=2, test_views=1, size=16, samples=1, steps=3, init_points=64, max_gaussians=64)
    convert_object(meshes, scratch, first, tiny, method, "cpu")
    shutil.rmtree(scratch, ignore_errors=True)


def median(values: list) -> float | None:
    return round(statistics.median(values), 3) if values else None


def share(values: list, ok) -> float | None:
    return round(sum(1 for v in values if ok(v)) / len(values), 3) if values else None


def stage_medians(done: list[dict]) -> dict:
    """Median seconds of each stage of recon.mesh2splat.convert.STAGES over the rows that record them."""
    from recon.mesh2splat.convert import STAGES

    staged = [r["stage_seconds"] for r in done if r.get("stage_seconds")]
    return {stage: median([s.get(stage, 0.0) for s in staged]) for stage in STAGES} if staged else {}


def summary(rows: list[dict], wall: float, workers: int, converted: int) -> dict:
    done = [r for r in rows if r["status"] == "done"]
    psnr = [r["test_psnr"] for r in done if r["test_psnr"] is not None]
    secs = [r["seconds"] for r in done]
    chamfer = [r["chamfer_pct"] for r in done if r["chamfer_pct"] is not None]
    by_label = {}
    for r in done:
        by_label.setdefault(r["label"] or "(top level)", []).append(r["test_psnr"])
    return {
        "objects": len(rows), "done": len(done), "failed": {r["source"]: r["reason"] for r in rows if r["status"] != "done"},
        "median_test_psnr_db": median(psnr), "median_train_psnr_db": median([r["train_psnr"] for r in done]),
        "median_seconds_per_object": median(secs), "median_chamfer_pct": median(chamfer),
        "median_cpu_seconds_per_object": median([r["cpu_seconds"] for r in done if r.get("cpu_seconds") is not None]),
        "per_object": {r["source"]: {k: r.get(k) for k in ("test_psnr", "chamfer_pct", "seconds", "cpu_seconds", "gaussians")}
                       for r in sorted(done, key=lambda r: r["source"])},
        "median_gaussians": median([r["gaussians"] for r in done]),
        "median_stage_seconds": stage_medians(done),
        "share_psnr_ok": share(psnr, lambda v: v >= TARGETS["test_psnr_db"]),
        "share_chamfer_ok": share(chamfer, lambda v: v <= TARGETS["chamfer_pct"]),
        "median_test_psnr_by_label": {k: median(v) for k, v in sorted(by_label.items())},
        "wall_seconds": round(wall, 1), "workers": workers,
        "objects_per_hour": round(3600 * converted / wall, 1) if wall > 0 and converted else None,
        "targets": TARGETS,
        "meets": {"psnr": median(psnr) is not None and median(psnr) >= TARGETS["test_psnr_db"],
                  "seconds": median(secs) is not None and median(secs) <= TARGETS["seconds_per_object"],
                  "chamfer": median(chamfer) is not None and median(chamfer) <= TARGETS["chamfer_pct"]},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_mesh2splat"))
    parser.add_argument("--per-category", type=int, default=10, help="procedural meshes per category (5 categories)")
    parser.add_argument("--no-shared", action="store_true", help="leave out ../shared/data/meshes")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--method", default="3dgs", choices=("3dgs", "2dgs"))
    for f in dataclasses.fields(ObjectPreset):
        kind = float if f.default is None else type(f.default)  # the Optional fields (means_lr) are floats
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=f.default)
    args = parser.parse_args(argv)
    preset = ObjectPreset(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ObjectPreset)})
    meshes = args.out / "meshes"
    added = build_mesh_folder(meshes, args.per_category, not args.no_shared)
    cfg = BatchConfig(mesh_dir=meshes, out=args.out / "splats", method=args.method, preset=preset,
                      workers=args.workers, progress=sys.stderr.isatty())
    warm_kernel_cache(meshes, args.out / "warmup", args.method)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    run = run_batch(cfg)
    wall = time.perf_counter() - t0
    rows = [r for r in latest_rows(read_index(cfg.out)).values()]
    result = {"bench": "mesh2splat", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "load_average_before": [round(v, 2) for v in load_before],
                          "load_average_after": [round(v, 2) for v in os.getloadavg()]},
              "preset": dataclasses.asdict(preset), "method": args.method, "meshes_added": added, "this_run": run,
              **summary(rows, wall, args.workers, run["converted"])}
    if run["skipped"]:
        result["note"] = (f"{run['skipped']} objects were converted by an earlier run into the same --out; "
                          f"objects_per_hour counts this run's objects over its wall time")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
