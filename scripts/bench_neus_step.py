#!/usr/bin/env python
"""One later frame's NeuS training steps (issue 50): CPU and wall seconds per step, printed as JSON.

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python scripts/bench_neus_step.py RUN [--steps 7] [--frame-steps 40] [--gradient tetrahedral|central]
        [--sharp-step K]

``RUN`` is a ``scripts/bench_neus_sequence.py`` run folder (``--out DIR``: DIR/run) whose frame 0 has finished,
trained with that script's defaults for ``--size`` 96, ``--target-samples`` and ``--hash-log2-table`` and the
``--steps`` given here as ``--frame0-steps``. Frame 1 (procedural-4d's second time step) is fine-tuned from frame
0's final checkpoint as the sequence does (:func:`recon.training.frame_sequence.frame_config`: no warm-ups), in
memory: nothing is written. The first step is not timed (Numba's cache loads); the others are, one by one, with
``time.process_time`` (CPU seconds of the process: what a step costs on an idle machine when the load is high)
and ``time.perf_counter``; the JSON holds their medians and the last step's loss. Run it
from two worktrees on the same RUN, alternately, to compare code (the steps draw the same rays).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--frame0-steps", type=int, default=150)
    ap.add_argument("--frame-steps", type=int, default=40)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--target-samples", type=int, default=1 << 14)
    ap.add_argument("--hash-log2-table", type=int, default=17)
    ap.add_argument("--gradient", default="central", choices=("central", "tetrahedral"),
                    help="--neus.gradient (the SDF gradient scheme)")
    ap.add_argument("--sharp-step", type=float, default=None,
                    help="--neus.sharp-step of the timed steps (default: NeusConfig's; frame 0's may differ)")
    args = ap.parse_args()

    from bench_neus_sequence import first_frames
    from recon.data.procedural_4d import procedural_4d_scene
    from recon.nerf.config import NerfConfig, NeusConfig
    from recon.training.frame_sequence import FrameSequence, frame_config, frame_scene, frame_times
    from recon.training.trainer import TrainConfig, Trainer

    scene = first_frames(procedural_4d_scene(width=args.size, height=args.size, test_time_stride=1), 2)
    nerf = NerfConfig(target_samples=args.target_samples, hash_log2_table=args.hash_log2_table)
    neus = NeusConfig(level_every=max(1, args.frame0_steps // 24), frame_steps=args.frame_steps)
    cfg = TrainConfig(data=Path("procedural-4d"), out=args.run, method="neus", strategy="occupancy",
                      steps=args.frame0_steps, save_every=0, progress=False, device="cpu", nerf=nerf, neus=neus)
    times = frame_times(scene)
    model = FrameSequence(cfg, scene, log=lambda *_: None).final_model(0)
    fcfg = frame_config(cfg, 1)
    model.level_offset, model.cfg = args.frame0_steps, fcfg.nerf
    model.neus.gradient = model.field.gradient = args.gradient  # the scheme of the timed steps (frame 0's may differ)
    model.neus.sharp_step = NeusConfig().sharp_step if args.sharp_step is None else args.sharp_step
    torch.manual_seed(0)
    trainer = Trainer(fcfg, lambda *_: None, [], scene=frame_scene(scene, times[1], times), model=model)
    cpu, wall = [], []
    for step in range(args.steps):
        c0, w0 = time.process_time(), time.perf_counter()
        result = trainer.advance(step)
        if step:
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
    print(json.dumps({
        "machine": {"platform": platform.platform(), "threads": torch.get_num_threads(),
                    "numba_threads": os.environ.get("NUMBA_NUM_THREADS"), "load": os.getloadavg()},
        "timed_steps": len(cpu), "cpu_seconds_per_step_median": round(statistics.median(cpu), 3),
        "wall_seconds_per_step_median": round(statistics.median(wall), 3),
        "cpu_seconds_per_step": [round(c, 3) for c in cpu], "last_loss": result.loss, "gradient": args.gradient,
        "sharp_step": model.neus.sharp_step, "samples_per_ray": round(trainer.model.samples_per_ray, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
