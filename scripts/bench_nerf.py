#!/usr/bin/env python
"""Hash-grid NeRF benchmark (issue 20), printed as JSON.

1. ``hash_encoding``: the instant-ngp grid (16 levels x 2 features, table 2^19) on ``--points`` (default
   2^18) uniform random points: median wall seconds of the Numba forward and backward over ``--repeats``
   runs (after one warm-up), and of the PyTorch reference (fewer repeats: it is slow); also the Numba
   forward + backward at one training step's sample count (``nerf.target_samples``).
2. ``train`` (unless ``--no-train``): ``splatforge train --method nerf`` (the ``nerf`` preset) on ``--data``
   at ``--data-factor`` for ``--steps`` steps or ``--max-train-seconds`` of steps, whichever ends first (no
   outputs written), then the test PSNR over every ``--test-every``-th test view (default all);
   train seconds and the median seconds of a step over the last ``--window`` steps.
3. ``step_share`` (with ``--share-steps N``): after N warm-up steps, one training step and one Numba forward +
   backward of a step's sample count, alternated ``--repeats`` times (the same load for both): the hash
   encoding's share of a step.

The machine (CPU count, torch threads, load average before and after) is in the output: timings on a
shared machine are only comparable within one run.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from recon.nerf.hash_encoding import HashGridConfig, hash_encode_numba, hash_encode_reference, init_table, level_layout  # noqa: E402


def time_encoding(fn, x, table, res, offsets, repeats: int) -> dict:
    """Median forward / backward seconds of ``fn`` over ``repeats`` runs (one warm-up run first)."""
    fwd, bwd = [], []
    for i in range(repeats + 1):
        table.grad = None
        t0 = time.perf_counter()
        out = fn(x, table, res, offsets)
        t1 = time.perf_counter()
        out.backward(torch.ones_like(out))
        t2 = time.perf_counter()
        if i:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    return {"forward_s": statistics.median(fwd), "backward_s": statistics.median(bwd),
            "total_s": statistics.median(f + b for f, b in zip(fwd, bwd)), "repeats": repeats}


def bench_encoding(points: int, repeats: int, step_points: int) -> dict:
    cfg = HashGridConfig()
    res, offsets = level_layout(cfg)
    gen = torch.Generator().manual_seed(0)
    table = init_table(offsets, cfg.features, gen).requires_grad_()
    x = torch.rand(points, 3, generator=gen)
    return {"config": dataclasses.asdict(cfg), "table_rows": int(offsets[-1]), "points": points,
            "numba": time_encoding(hash_encode_numba, x, table, res, offsets, repeats),
            "torch_reference": time_encoding(hash_encode_reference, x, table, res, offsets, max(1, repeats // 3)),
            "numba_at_step_samples": {"points": step_points, **time_encoding(
                hash_encode_numba, x[:step_points], table, res, offsets, repeats)}}


class _TimeBudget(Exception):
    """Raised by :class:`_Budget` to end training when its seconds are spent."""


class _Budget:
    """Training hook: stop after ``seconds`` of training steps (the sum of the history's step times)."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds

    def on_train_start(self, trainer):
        pass

    def on_step(self, trainer, result):
        if self.seconds is not None and sum(trainer.history.step_seconds) >= self.seconds:
            raise _TimeBudget

    def on_train_end(self, trainer):
        pass


def bench_train(data: str, data_factor: int, steps: int, window: int, max_seconds: float | None,
                test_every: int) -> dict:
    from recon.training.presets import preset_config
    from recon.training.trainer import Trainer

    cfg = preset_config("nerf", data=Path(data), data_factor=data_factor, steps=steps, progress=False,
                        device="cpu", out=Path("unused"))
    trainer = Trainer(cfg, log=lambda s: None, hooks=[_Budget(max_seconds)], writes_outputs=False)
    stopped_early = False
    try:
        trainer.train_and_finish()
    except _TimeBudget:
        stopped_early = True
    train_seconds = sum(trainer.history.step_seconds)
    n_test = len(trainer.scene.frames_test)
    trainer.scene.frames_test = trainer.scene.frames_test[::test_every]
    start = time.perf_counter()
    test = trainer.evaluate(None)
    return {"data": data, "data_factor": data_factor, "steps_planned": steps, "steps_trained": trainer.step,
            "stopped_by_time_budget": stopped_early, "max_train_seconds": max_seconds,
            "test_psnr": test["psnr"], "test_ssim": test["ssim"],
            "test_views": f"{test['num_views']} of {n_test} (every {test_every}th)",
            "train_seconds": round(train_seconds, 1), "eval_seconds": round(time.perf_counter() - start, 1),
            "median_step_s": statistics.median(trainer.history.step_seconds[-window:]),
            "occupied_cells": len(trainer.model), "samples_per_ray": round(trainer.model.samples_per_ray, 1),
            "psnr_target_28_met_within_1200s": bool(test["psnr"] >= 28.0 and train_seconds <= 1200)}


def bench_share(data: str, data_factor: int, warm_steps: int, repeats: int) -> dict:
    """The hash encoding's share of a training step, measured back to back (same load): ``warm_steps``
    steps of lego, then ``repeats`` x (one step, one Numba forward + backward of ``target_samples`` points)."""
    from recon.training.presets import preset_config
    from recon.training.trainer import Trainer

    cfg = preset_config("nerf", data=Path(data), data_factor=data_factor, steps=30_000, progress=False,
                        device="cpu", out=Path("unused"))
    trainer = Trainer(cfg, log=lambda s: None, writes_outputs=False)
    for step in range(warm_steps):
        trainer.advance(step)
    field = trainer.model.field
    n = cfg.nerf.target_samples
    x = torch.rand(n, 3, generator=torch.Generator().manual_seed(1))
    steps, hashes = [], []
    for k in range(repeats):
        t0 = time.perf_counter()
        trainer.advance(warm_steps + k)
        steps.append(time.perf_counter() - t0)
        hashes.append(time_encoding(hash_encode_numba, x, field.table, field.resolutions, field.offsets, 1)["total_s"])
    step_s, hash_s = statistics.median(steps), statistics.median(hashes)
    return {"warm_steps": warm_steps, "repeats": repeats, "points": n, "median_step_s": round(step_s, 4),
            "median_hash_fwd_bwd_s": round(hash_s, 4), "hash_share_of_step": round(hash_s / step_s, 3),
            "note": "a step evaluates the encoding twice forward (all marched samples without gradients, then the "
                    "live ones with) and once backward"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=1 << 18)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "lego_400"))
    ap.add_argument("--data-factor", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--max-train-seconds", type=float, default=None,
                    help="stop training when its steps have taken this long (the schedule stays --steps')")
    ap.add_argument("--test-every", type=int, default=1, help="evaluate every Nth test view (1: all)")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--share-steps", type=int, default=0,
                    help="also measure the encoding's share of a step back to back after this many warm-up steps")
    args = ap.parse_args()
    from recon.nerf.config import NerfConfig

    report = {"machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                          "processor": platform.processor() or platform.machine(),
                          "load_before": os.getloadavg()}}
    report["hash_encoding"] = bench_encoding(args.points, args.repeats, NerfConfig().target_samples)
    if not args.no_train:
        report["train"] = bench_train(args.data, args.data_factor, args.steps, args.window, args.max_train_seconds,
                                      args.test_every)
    if args.share_steps:
        report["step_share"] = bench_share(args.data, args.data_factor, args.share_steps, args.repeats)
    report["machine"]["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
