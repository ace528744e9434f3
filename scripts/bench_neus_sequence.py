#!/usr/bin/env python
"""Dynamic NeuS (frame by frame, issue 50) on procedural-4d: seconds and test PSNR per frame, printed as JSON.

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python scripts/bench_neus_sequence.py [--frames 4] [--steps 400]
        [--frame-steps 60] [--size 96] [--target-samples 16384] [--hash-log2-table 17] [--out DIR] [--device cpu]
        [--gradient tetrahedral|central] [--frame0-from RUN]

The first ``--frames`` time steps of ``procedural-4d`` (8 training cameras filming every time, the test camera
every time step: ``test_time_stride`` 1) at ``--size`` px train as ``splatforge train --method neus --data
procedural-4d`` does (:class:`recon.training.frame_sequence.FrameSequence`, one run folder under ``--out``, removed
first): frame 0 for ``--steps``, each later frame ``--frame-steps`` from the previous one. Per frame: its
training seconds (the trainer's ``train_seconds``, wall clock), the wall and process CPU seconds of the whole
frame (training, evaluation, outputs, mesh; CPU seconds say what the frame costs on an idle machine when the
load is high), the part of them spent in the training loop (``loop_cpu_seconds`` / ``loop_wall_seconds``: its
steps, occupancy updates and checkpoints; the rest is ``outside_cpu_seconds``: loading the frame, evaluation,
history, metrics, the mesh), its test PSNR, and ``psnr_previous_field``: the previous frame's field scored on this frame's
test view (what the fine-tune gains over not training the frame), and ``eikonal``: |grad SDF| at the vertices of
the frame's mesh (the zero level set; :func:`recon.nerf.neus.eikonal_stats`, within 5 % of 1), measured with the
run's own gradient scheme and with central differences (the same measure for runs of either scheme). The machine (threads, load average before and
after) is recorded; one run (training is not repeated for a median). ``--frame0-from RUN``: start from a copy of
RUN's ``frames/frame_00000`` (a finished frame 0 of a run of this script with the same options) instead of
training it: the sequence resumes as ``splatforge train`` does; frame 0 then has no seconds of this process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import time
from pathlib import Path

import torch


def first_frames(scene, k: int):
    """``scene`` restricted to its first ``k`` time steps (train and test frames)."""
    times = sorted({f.time for f in scene.frames_train})[:k]
    keep = set(times)
    return dataclasses.replace(scene, frames_train=[f for f in scene.frames_train if f.time in keep],
                               frames_test=[f for f in scene.frames_test if f.time in keep])


def previous_field_psnr(out: Path, scene, times, k: int, cfg) -> float | None:
    """Test PSNR of frame k-1's final field on frame ``k``'s test views (None without test views)."""
    from recon.data.frame_images import FrameImages
    from recon.training.evaluation import evaluate_model
    from recon.training.frame_sequence import FrameSequence, frame_scene
    from recon.training.trainer import background_color

    sub = frame_scene(scene, times[k], times)
    if not sub.frames_test:
        return None
    model = FrameSequence(cfg, scene, log=lambda *_: None).final_model(k - 1)
    return evaluate_model(model, sub.frames_test, FrameImages(sub.frames_test), background_color(cfg, scene))["psnr"]


def frame_eikonal(seq, out: Path, k: int) -> dict:
    """{scheme: eikonal_stats} of frame ``k``'s final field at its mesh's vertices, the gradient by the run's own
    scheme ("own") and by central differences ("central")."""
    import numpy as np
    import trimesh

    from recon.nerf.neus import eikonal_stats
    from recon.training.frame_sequence import mesh_file

    model = seq.final_model(k)
    verts = torch.from_numpy(np.asarray(trimesh.load(mesh_file(out, k), process=False).vertices, dtype=np.float64))
    own = eikonal_stats(model.surface_gradients(verts))
    model.field.gradient = "central"
    return {"points": int(len(verts)), "own": own, "central": eikonal_stats(model.surface_gradients(verts))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=4)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--frame-steps", type=int, default=60)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--target-samples", type=int, default=1 << 14)
    ap.add_argument("--hash-log2-table", type=int, default=17)
    ap.add_argument("--gradient", default="central", choices=("central", "tetrahedral"),
                    help="--neus.gradient (the SDF gradient scheme)")
    ap.add_argument("--out", type=Path, default=Path("bench_neus_sequence"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--frame0-from", type=Path, default=None,
                    help="a run folder (OUT/run of this script) whose finished frame 0 is copied instead of trained")
    args = ap.parse_args()

    from recon.data.procedural_4d import procedural_4d_scene
    from recon.nerf.config import NerfConfig, NeusConfig
    from recon.training.frame_sequence import FrameSequence, frame_folder, frame_times
    from recon.training.trainer import TrainConfig, TrainingHook

    scene = first_frames(procedural_4d_scene(width=args.size, height=args.size, test_time_stride=1), args.frames)
    run = args.out / "run"
    shutil.rmtree(run, ignore_errors=True)
    if args.frame0_from is not None:
        shutil.copytree(frame_folder(args.frame0_from, 0), frame_folder(run, 0))
    nerf = NerfConfig(target_samples=args.target_samples, hash_log2_table=args.hash_log2_table)
    # all hash levels active by half of the first frame (as bench_geometry's neus column)
    neus = NeusConfig(level_every=max(1, args.steps // 24), frame_steps=args.frame_steps,
                      gradient=args.gradient)
    cfg = TrainConfig(data=Path("procedural-4d"), out=run, method="neus", strategy="occupancy", steps=args.steps,
                      save_every=0, progress=False, device=args.device, nerf=nerf, neus=neus)
    times = frame_times(scene)
    walls, cpus, mark = [], [], [time.perf_counter(), time.process_time()]

    def log(line: str) -> None:  # frame boundaries: "frame k/N (time t): test PSNR ..." ends frame k
        if "test PSNR" in line and line.startswith("frame "):
            walls.append(time.perf_counter() - mark[0])
            cpus.append(time.process_time() - mark[1])
            mark[:] = [time.perf_counter(), time.process_time()]

    loops = []  # per trained frame: [wall, CPU] seconds of its training loop

    class Loop(TrainingHook):
        def on_train_start(self, trainer):
            loops.append([time.perf_counter(), time.process_time()])

        def on_train_end(self, trainer):
            loops[-1] = [time.perf_counter() - loops[-1][0], time.process_time() - loops[-1][1]]

    load_before = os.getloadavg()
    metrics = FrameSequence(cfg, scene, log=log, hooks=[Loop()]).run()
    load_after = os.getloadavg()
    frames = []
    copied = len(metrics["frames"]) - len(loops)  # frame 0 with --frame0-from: not trained here
    loops = [None] * copied + loops
    for k, f in enumerate(metrics["frames"]):
        timed = k >= copied
        frames.append({**f, "wall_seconds": round(walls[k], 2) if timed else None,
                       "cpu_seconds": round(cpus[k], 2) if timed else None,
                       "loop_wall_seconds": round(loops[k][0], 2) if timed else None,
                       "loop_cpu_seconds": round(loops[k][1], 2) if timed else None,
                       "outside_cpu_seconds": round(cpus[k] - loops[k][1], 2) if timed else None,
                       "psnr_previous_field": None if k == 0 else previous_field_psnr(run, scene, times, k, cfg),
                       "eikonal": frame_eikonal(FrameSequence(cfg, scene, log=lambda *_: None), run, k)})
    later = [f["train_seconds"] for f in frames[1:]]
    print(json.dumps({
        "machine": {"platform": platform.platform(), "threads": torch.get_num_threads(),
                    "numba_threads": os.environ.get("NUMBA_NUM_THREADS"), "load_before": load_before,
                    "load_after": load_after},
        "config": {**{k: getattr(args, k) for k in ("frames", "steps", "frame_steps", "size", "target_samples",
                                                     "hash_log2_table", "gradient")},
                   "frame0_from": None if args.frame0_from is None else str(args.frame0_from)},
        "frames": frames,
        "later_frames_train_seconds_max": max(later) if later else None,
        "later_frames_wall_seconds_max": max(walls[1:]) if len(walls) > 1 else None,
        "later_frames_cpu_seconds_max": max(cpus[1:]) if len(cpus) > 1 else None,
        "mean_psnr": metrics["test"]["psnr"],
    }, indent=1))


if __name__ == "__main__":
    main()
