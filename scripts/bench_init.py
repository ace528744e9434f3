"""Random initialisation against point initialisation: test PSNR of short and full runs (prints JSON).

Cases (see recon/models/init_region.py for the rule that places random Gaussians):
  arc    the procedural scene seen from a 90-degree arc with its points removed, trained with the
         camera-derived box and with the box the old rule chose (camera centroid +- 0.5 x extent);
  bird   colmap_bird (../shared/data/colmap_bird) at data factor 2 with its SfM points and with
         --init-type random (100k random Gaussians), 7000 steps by default (about 15 min each on 2 cores).

Usage: python scripts/bench_init.py [--cases arc bird] [--bird-steps 7000] [--bird-modes sfm random]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import rasterizer  # noqa: F401  (first: sets GOMP_SPINCOUNT before torch loads)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def arc_scene(data_factor: int):
    from recon.data.procedural_scene import procedural_scene

    s = procedural_scene(arc_deg=90.0, data_factor=data_factor)
    return dataclasses.replace(s, points=None, point_colors=None, source_format="nerfstudio")


def old_rule_box(scene) -> str:
    """The box the replaced rule used for such scenes: camera centroid, half-size 0.5 x extent."""
    center, extent = scene.nerfpp_norm()
    return ",".join(f"{v:.9g}" for v in (*center, 0.5 * extent))


def bench_arc(steps: int, data_factor: int) -> list[dict]:
    import recon.training.train_run as train_run
    import recon.training.trainer as trainer

    original = trainer.load_training_scene
    trainer.load_training_scene = lambda cfg: arc_scene(cfg.data_factor)
    results = []
    try:
        for rule, box in (("cameras", None), ("old_centroid_box", old_rule_box(arc_scene(data_factor)))):
            with tempfile.TemporaryDirectory() as tmp:
                t = time.perf_counter()
                m = train_run.train_model(trainer.TrainConfig(out=Path(tmp), steps=steps, data_factor=data_factor,
                                                            init_num_random=20_000, init_box=box, save_every=0,
                                                            progress=False), log=lambda *a: None)
            results.append({"benchmark": "arc90_no_points", "rule": rule, "steps": steps,
                            "wall_seconds": round(time.perf_counter() - t, 1), "test": m["test"],
                            "num_gaussians": m["num_gaussians"]})
    finally:
        trainer.load_training_scene = original
    return results


def bench_bird(steps: int, modes: list[str], device: str) -> list[dict]:
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    data = SHARED / "colmap_bird"
    if not data.is_dir():
        return [{"benchmark": "colmap_bird_init", "skipped": f"{data} not found"}]
    results = []
    for mode in modes:
        lines: list[str] = []
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            m = train_model(TrainConfig(data=data, out=Path(tmp), data_factor=2, steps=steps, progress=False,
                                        device=device, init_type=mode, init_num_random=100_000), log=lines.append)
        results.append({"benchmark": "colmap_bird_init", "init_type": mode, "steps": steps,
                        "wall_seconds": round(time.perf_counter() - t, 1),
                        "init_line": next((s for s in lines if s.startswith("random init")), None), **m})
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", default=["arc", "bird"], choices=["arc", "bird"])
    p.add_argument("--arc-steps", type=int, default=300)
    p.add_argument("--bird-steps", type=int, default=7000)
    p.add_argument("--bird-modes", nargs="+", default=["sfm", "random"], choices=["sfm", "random"])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    args = p.parse_args()
    machine = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    results = []
    if "arc" in args.cases:
        results += bench_arc(args.arc_steps, data_factor=2)
    if "bird" in args.cases:
        results += bench_bird(args.bird_steps, args.bird_modes, args.device)
    print(json.dumps({**machine, "results": results}, indent=2))


if __name__ == "__main__":
    main()
