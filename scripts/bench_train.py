#!/usr/bin/env python
"""Training benchmarks, printed as JSON.

Default: median wall time and process CPU time of one full training step (render, loss, backward, Adam, densification
hooks) at 480 x 272 with about 6,500 Gaussians: ../shared/data/colmap_bird at --data-factor 2 (6,271
SfM points) when present, else the procedural scene rendered at 480 x 272 with 6,500 random Gaussians.
Optional full runs (many minutes on a CPU): --full-lego (lego_400, data factor 2) and --full-bird.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"


def step_times(trainer, first_step: int, n: int, warmup: int) -> tuple[list[float], list[float]]:
    """(wall seconds, process CPU seconds) of ``n`` train steps after ``warmup`` untimed ones, skipping
    refinement steps. CPU time is the figure to compare on a loaded machine (wall time includes waiting
    for the cores)."""
    wall, cpu, step = [], [], first_step
    while len(wall) < n:
        step += 1
        if step % 100 == 0:
            continue
        t, c = time.perf_counter(), time.process_time()
        trainer.train_step(step)
        if warmup > 0:
            warmup -= 1
            continue
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu


def bench_step(args) -> dict:
    import torch

    from recon.models.gaussians import GaussianModel
    from recon.training.trainer import TrainConfig, Trainer

    bird = SHARED / "colmap_bird"
    with tempfile.TemporaryDirectory() as tmp:
        if bird.is_dir() and not args.synthetic:
            cfg = TrainConfig(data=bird, out=Path(tmp), data_factor=2, progress=False, device=args.device)
            source = "colmap_bird --data-factor 2"
            trainer = Trainer(cfg, log=lambda *a: None)
        else:
            from recon.data.procedural_scene import procedural_scene

            cfg = TrainConfig(out=Path(tmp), progress=False, device=args.device)
            source = "procedural 480x272, 6500 random Gaussians"
            trainer = Trainer(cfg, log=lambda *a: None)
            trainer.scene = procedural_scene(width=480, height=272)
            from recon.data.frame_images import FrameImages

            trainer.images = FrameImages(trainer.scene.frames_train, trainer.device)
            g = torch.Generator().manual_seed(0)
            trainer.model = GaussianModel.random_in_box(6500, (0.0, 0.25, 0.0), 1.0, 3, trainer.scene.extent,
                                                        generator=g).to(trainer.device)
            trainer.strategy_state = trainer.strategy.initialize_state(trainer.model)
        cam = trainer.scene.frames_train[0].camera
        n0 = len(trainer.model)
        sh0, cpu0 = step_times(trainer, 10, args.steps, args.warmup)  # SH degree 0, before densification
        sh3, cpu3 = step_times(trainer, 3000, args.steps, 2)  # SH degree 3, gradient accumulation only
    return {"benchmark": "train_step", "source": source, "width": cam.width, "height": cam.height,
            "num_gaussians": n0, "device": str(trainer.device), "torch_threads": torch.get_num_threads(),
            "steps_timed": args.steps, "median_step_seconds_sh0": round(statistics.median(sh0), 4),
            "median_step_seconds_sh3": round(statistics.median(sh3), 4),
            "median_step_cpu_seconds_sh0": round(statistics.median(cpu0), 4),
            "median_step_cpu_seconds_sh3": round(statistics.median(cpu3), 4), "load_average": os.getloadavg(),
            "numba_threads": int(os.environ.get("NUMBA_NUM_THREADS", "0")) or None,
            "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT"),
            "keeps_freed_memory": rasterizer.runtime.KEEPS_FREED_MEMORY, "cpus": os.cpu_count()}


def bench_full(name: str, data: Path, steps: int, device: str) -> dict:
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    if not data.is_dir():
        return {"benchmark": f"full_{name}", "skipped": f"{data} not found"}
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        m = train_model(TrainConfig(data=data, out=Path(tmp), data_factor=2, steps=steps, progress=False,
                                    device=device, init_num_random=100_000), log=lambda *a: None)
    return {"benchmark": f"full_{name}", "steps": steps, "wall_seconds": round(time.perf_counter() - t, 1), **m}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=15, help="timed steps per measurement")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (Numba compilation)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--synthetic", action="store_true", help="use the procedural scene even if colmap_bird exists")
    p.add_argument("--full-lego", action="store_true", help="also train lego_400 at data factor 2 (slow)")
    p.add_argument("--full-bird", action="store_true", help="also train colmap_bird at data factor 2 (slow)")
    p.add_argument("--full-steps", type=int, default=7000)
    args = p.parse_args()
    results = [bench_step(args)]
    if args.full_lego:
        results.append(bench_full("lego_400", SHARED / "lego_400", args.full_steps, args.device))
    if args.full_bird:
        results.append(bench_full("colmap_bird", SHARED / "colmap_bird", args.full_steps, args.device))
    print(json.dumps(results if len(results) > 1 else results[0], indent=2))


if __name__ == "__main__":
    main()
