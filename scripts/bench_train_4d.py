#!/usr/bin/env python
"""4D training benchmark (default --data procedural-4d; also a D-NeRF folder), printed as JSON.

Trains ``--steps`` steps of ``--method 4dgs`` (the default preset's schedule scaled to the run, no outputs
written; ``--sh-degree``, ``--max-gaussians``, ``--data-factor`` as ``splatforge train``'s), then reports
the test PSNR (all test views, each at its time), the median seconds per training step over the last
``--window`` steps, and the share of such a step that slicing takes: the median forward + backward time
of ``slice_gaussians_4d`` on the final model at ``--repeats`` random frame times (the issue's rule:
a fused slicing kernel only where this exceeds 15 %). With ``--target-psnr`` and ``--max-seconds``,
``meets_target`` says whether the test PSNR reached the one within the other.

Issue 17's targets:
    python scripts/bench_train_4d.py --steps 10000 --sh-degree 1 --max-gaussians 40000 \
        --target-psnr 32 --max-seconds 300                                   # procedural-4d
    python scripts/bench_train_4d.py --data ../shared/data/dnerf_mutant --data-factor 2 --steps 15000 \
        --sh-degree 1 --max-gaussians 100000 --target-psnr 33 --max-seconds 1800   # D-NeRF mutant, 400x400
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from bench_rasterizer import machine  # noqa: E402
from recon.training.trainer import TrainConfig, Trainer  # noqa: E402


def slicing_seconds(model, times: list[float]) -> list[float]:
    """Wall seconds of forward + backward of slicing ``model`` at each time (gradients of all outputs)."""
    out = []
    for t in times:
        model.zero_grad()
        start = time.perf_counter()
        s = model.slice(t)
        loss = s.means.sum() + s.covars.sum() + s.opacities.sum()
        loss.backward()
        out.append(time.perf_counter() - start)
    model.zero_grad()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--window", type=int, default=50, help="steps at the end whose median time is reported")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--sh-degree", type=int, default=3)
    ap.add_argument("--data", default="procedural-4d", help="procedural-4d or a D-NeRF folder")
    ap.add_argument("--data-factor", type=int, default=1)
    ap.add_argument("--max-gaussians", type=int, default=TrainConfig.max_gaussians)
    ap.add_argument("--target-psnr", type=float, default=None)
    ap.add_argument("--max-seconds", type=float, default=None, help="training-time budget of the target")
    args = ap.parse_args()
    cfg = TrainConfig(data=Path(args.data), method="4dgs", steps=args.steps, sh_degree=args.sh_degree,
                      data_factor=args.data_factor, max_gaussians=args.max_gaussians, progress=False,
                      device="cpu")
    trainer = Trainer(cfg, log=lambda s: None, writes_outputs=False)
    start = time.perf_counter()
    metrics = trainer.train_and_finish()
    wall = time.perf_counter() - start
    step_s = statistics.median(trainer.history.step_seconds[-args.window:])
    frames = trainer.scene.frames_train
    g = torch.Generator().manual_seed(0)
    times = [frames[int(i)].time for i in torch.randint(len(frames), (args.repeats,), generator=g)]
    slice_s = statistics.median(slicing_seconds(trainer.model, times))
    meets = None
    if args.target_psnr is not None and args.max_seconds is not None:
        meets = metrics["test"]["psnr"] >= args.target_psnr and metrics["train_seconds"] <= args.max_seconds
    print(json.dumps({
        "benchmark": "train_4d", "scene": args.data, "data_factor": args.data_factor, "steps": args.steps,
        "sh_degree": args.sh_degree, "max_gaussians": args.max_gaussians, "target_psnr": args.target_psnr,
        "max_seconds": args.max_seconds, "meets_target": meets,
        "test_psnr": round(metrics["test"]["psnr"], 3),
        "per_time_psnr": [round(p["psnr"], 2) for p in metrics["test"]["per_time"]],
        "num_gaussians": len(trainer.model), "train_seconds": round(metrics["train_seconds"], 2),
        "wall_seconds": round(wall, 2), "median_step_seconds_last": round(step_s, 4),
        "slice_fwd_bwd_seconds": round(slice_s, 5), "slice_share_of_step": round(slice_s / step_s, 4),
        "torch_threads": torch.get_num_threads(), "machine": machine()}))


if __name__ == "__main__":
    main()
