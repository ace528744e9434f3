#!/usr/bin/env python
"""Hybrid render benchmark for ``splatforge insert`` (issue 21), printed as JSON.

Cases (``--cases``, default all three):

- ``shadows``: ../shared/data/meshes/spot inserted into a Gaussian run (``--gaussian-run``, the issue's target:
  a ~200k-Gaussian colmap_bird run) at ``--size`` (480x272), diffuse, one sun, shadows both ways
  (target <= 400 ms a frame on the 2-core CPU);
- ``mirror``: the same with ``--material mirror`` (one bounce: ``bounces=1``; target <= 1,000 ms);
- ``nerf``: spot inserted into a NeRF run (``--nerf-run``) at ``--nerf-size`` (200x200), shadows on
  (target <= 2 s).

Per case: the renderer is built once (model load and the proxy mesh, cached in RUN/hybrid/, are reported as
``setup_s`` and not counted), one warm-up frame, then ``--repeats`` (>= 3) frames of the same view; the
median and all frame times in ms, the median of each stage from ``HybridFrame.timings``, the Gaussian count,
the asset's pixel count. Spot is placed at the scene's centre (where the training cameras look), scaled so
that its bounding-box diagonal is ``--asset-fraction`` of the scene's (splat centres' 5..95 % box), unless
``--pose`` is given. The machine (CPU count, torch threads, load average before and after each case, device)
is in the output: timings on a shared machine compare only within one run.

    python scripts/bench_insert.py --gaussian-run runs/bird200k --nerf-run runs/lego_nerf --repeats 5
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPOT = ROOT.parent / "shared" / "data" / "meshes" / "spot" / "spot_triangulated.obj"
TARGET_MS = {"shadows": 400.0, "mirror": 1000.0, "nerf": 2000.0}


def machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def auto_pose(run, mesh, fraction: float):
    """A Pose at the scene's centre whose bounding-box diagonal is ``fraction`` of the scene's."""
    from recon.data.camera_paths import scene_rig
    from recon.hybrid.assets import Pose

    centre = scene_rig(run.cameras)["center"]
    means = np.asarray(run.read_splats().means, np.float64)
    lo, hi = np.quantile(means, 0.05, axis=0), np.quantile(means, 0.95, axis=0)
    v = mesh.vertices
    size = float(np.linalg.norm(v.max(0) - v.min(0)))
    scale = fraction * float(np.linalg.norm(hi - lo)) / max(size, 1e-12)
    return Pose(tuple(float(c) for c in centre), 30.0, 0.0, 0.0, scale)


def bench_case(name: str, run_dir: Path, size: str, material: str, bounces: int, repeats: int, device: str,
               pose: str | None, fraction: float, camera: str, light: str) -> dict:
    from recon.commands.insert import parse_camera, parse_size, resized
    from recon.hybrid.assets import PlacedAsset, load_mesh, parse_light, parse_material, parse_pose
    from recon.hybrid.render import HybridRenderer
    from recon.run.folder import Run

    load_before = os.getloadavg()
    t0 = time.perf_counter()
    run = Run.open(run_dir)
    mesh = load_mesh(SPOT)
    placed = parse_pose(pose) if pose else auto_pose(run, mesh, fraction)
    assets = [PlacedAsset(mesh, placed, parse_material(material))]
    from recon.hybrid.render import ground_frame_of

    frame = ground_frame_of(run.scene.frames_train)
    lights = [parse_light(light, frame)]
    renderer = HybridRenderer.for_run(run, assets, lights, bounces=bounces, device=device, warn=lambda m: None)
    split, index = parse_camera(camera)
    frames = run.scene.frames_test if split == "test" and run.scene.frames_test else run.scene.frames_train
    cam = resized(frames[min(index, len(frames) - 1)].camera, parse_size(size), None)
    setup_s = time.perf_counter() - t0
    times, stages, asset_px = [], [], 0
    for i in range(repeats + 1):
        t = time.perf_counter()
        with torch.no_grad():
            out = renderer.render(cam, shadows=True)
        if device == "cuda":
            torch.cuda.synchronize()
        ms = 1000.0 * (time.perf_counter() - t)
        if i:  # the first frame warms up (Numba, open3d scenes, caches)
            times.append(ms)
            stages.append(dict(out.timings))
        asset_px = int((np.asarray(out.asset_id) >= 0).sum())
    keys = sorted({k for s in stages for k in s})
    median = statistics.median(times)
    return {"case": name, "run": str(run_dir), "method": run.config.method, "primitives": len(renderer.model),
            "size": size, "material": material, "bounces": bounces, "pose": placed.as_list(), "light": light,
            "camera": camera, "asset_pixels": asset_px, "setup_s": round(setup_s, 2), "repeats": repeats,
            "frame_ms_median": round(median, 1), "frame_ms_all": [round(t, 1) for t in times],
            "stage_ms_median": {k: round(statistics.median([s.get(k, 0.0) for s in stages]), 1) for k in keys},
            "target_ms": TARGET_MS[name], "target_met": median <= TARGET_MS[name],
            "load_before": [round(v, 2) for v in load_before], "load_after": [round(v, 2) for v in os.getloadavg()]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gaussian-run", type=Path, help="a Gaussian run (the target: ~200k-Gaussian colmap_bird)")
    p.add_argument("--nerf-run", type=Path, help="a --method nerf run (lego_400)")
    p.add_argument("--cases", default="shadows,mirror,nerf")
    p.add_argument("--size", default="480x272", help="WxH; colmap_bird's views are portrait: give 272x480")
    p.add_argument("--nerf-size", default="200x200")
    p.add_argument("--repeats", type=int, default=5, help="timed frames per case (>= 3), after one warm-up")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--pose", default=None, help="spot's pose in the Gaussian run (default: auto, scene centre)")
    p.add_argument("--nerf-pose", default=None, help="spot's pose in the NeRF run (default: auto)")
    p.add_argument("--asset-fraction", type=float, default=0.25)
    p.add_argument("--camera", default="test:0")
    p.add_argument("--light", default="sun:45,60")
    args = p.parse_args()
    if args.repeats < 3:
        p.error("--repeats must be >= 3 (the median of several frames)")
    if not SPOT.is_file():
        p.error(f"{SPOT}: spot is not there (../shared/data/meshes/spot)")
    results = []
    for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
        if case not in TARGET_MS:
            p.error(f"--cases: unknown case {case!r} (have {', '.join(TARGET_MS)})")
        run_dir = args.nerf_run if case == "nerf" else args.gaussian_run
        if run_dir is None:
            results.append({"case": case, "skipped": "--nerf-run / --gaussian-run not given"})
            continue
        from recon.commands.insert import check_compositable
        from recon.hybrid.assets import parse_material
        from recon.models.base import NotCompositableError
        from recon.run.folder import Run

        material = "mirror" if case == "mirror" else "diffuse"
        try:
            check_compositable(Run.open(run_dir).model_class, [parse_material(material)])
        except NotCompositableError as err:
            results.append({"case": case, "run": str(run_dir), "skipped": str(err)})
            print(json.dumps(results[-1]), file=_sys.stderr)
            continue
        results.append(bench_case(case, run_dir, args.nerf_size if case == "nerf" else args.size, material,
                                  1 if case == "mirror" else 0, args.repeats, args.device,
                                  args.nerf_pose if case == "nerf" else args.pose, args.asset_fraction, args.camera,
                                  args.light))
        print(json.dumps(results[-1]), file=_sys.stderr)
    print(json.dumps({"benchmark": "insert", "machine": machine(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
