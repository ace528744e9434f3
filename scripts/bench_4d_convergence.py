#!/usr/bin/env python
"""Does ``--method 4dgs`` converge on real multi-view video? Held-out PSNR at growing step counts, as JSON.

For each step count of ``--steps`` (a fresh run each: the densification schedule scales with the run length) it
trains ``--method 4dgs`` in-process (no run folder written) on ``--data`` (default the shared classroom capture,
../shared/data/d3dgs_classroom: 3 cameras x 298 frames, no test split) with a held-out split
(``--test-every N``: every camera's frames at every N-th time step; ``--test-cameras A,B``: whole cameras), then
prints one JSON line per run:

- ``held_out``: PSNR / SSIM over the held-out frames, and split into ``held_out_times`` (training cameras at
  held-out times) and ``held_out_cameras`` (the cameras of ``--test-cameras``);
- ``train_eval_psnr``: ``evaluate_model`` on every ``--train-every``-th training view (what ``splatforge eval
  --split train`` measures) against ``progress_psnr``: the mean full-image step PSNR of the last
  ``--window`` steps (what the progress bar shows; the model moved during those steps, so they differ by noise);
- ``train_seconds``, ``num_gaussians``, ``steps``, the config overrides and the machine.

``--data procedural-4d --rig dome`` trains on a proxy of a CMU Panoptic dome capture (issue 55's >= 22 dB
target; not the real capture, which is not in ../shared): the generated moving objects filmed by 27 training
and 4 test cameras on a dome (recon.data.procedural_4d.dome_cameras), 150 time steps at 640x360 before
``--data-factor``, the test cameras at every ``--dome-test-stride``-th time step (``--test-every 0``).

Any ``splatforge train`` flag after ``--`` overrides the run's TrainConfig (``-- --batch 2 --init-type random``).
``--renders DIR`` writes the held-out renders (target | render | error PNGs) of the last run, to look at.

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python scripts/bench_4d_convergence.py --data-factor 4 \\
        --steps 500,1000,2000 --test-every 10 --renders /tmp/held_out

Times are upper bounds on a shared machine; compare runs made back to back on the same machine only.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
_sys.path.insert(0, str(_Path(__file__).resolve().parent))  # bench_rasterizer, also when loaded as a module
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import tyro  # noqa: E402

from bench_rasterizer import machine  # noqa: E402
from recon.data.frame_images import FrameImages  # noqa: E402
from recon.data.holdout import camera_name  # noqa: E402
from recon.training.evaluation import evaluate_model  # noqa: E402
from recon.training.trainer import TrainConfig, Trainer, background_color  # noqa: E402

PROCEDURAL = ("procedural-4d",)  # --data names of generated 4D scenes (no folder)
CLASSROOM = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "d3dgs_classroom"


def pose_key(frame) -> tuple:
    """A frame's camera pose as a hashable key (its world-to-camera matrix rounded to 1e-6)."""
    return tuple(round(float(v), 6) for v in frame.camera.world_to_cam.reshape(-1))


def unseen_camera_views(frames_test: list, frames_train: list) -> set[str]:
    """Names of the test frames whose camera pose no training frame has: views from held-out cameras, whatever
    the format names its cameras (a Panoptic ``--test-cameras`` split, the dome proxy's test cameras); the others
    are training cameras at held-out times. (On data whose cameras move, monocular video, every held-out view
    counts as a held-out camera: this benchmark is for fixed multi-camera rigs.)"""
    seen = {pose_key(f) for f in frames_train}
    return {f.name for f in frames_test if pose_key(f) not in seen}


def group_scores(per_view: list[dict], unseen: set[str]) -> dict:
    """Mean PSNR / SSIM and count of the evaluated views from cameras in / not in training (``unseen``: the names
    of the views from held-out cameras): {"held_out_times": ..., "held_out_cameras": ...} (None where a group is
    empty)."""
    def score(views):
        if not views:
            return None
        return {"psnr": round(float(np.mean([v["psnr"] for v in views])), 3),
                "ssim": round(float(np.mean([v["ssim"] for v in views])), 4), "views": len(views)}
    cams = [v for v in per_view if v["name"] in unseen]
    times = [v for v in per_view if v["name"] not in unseen]
    return {"held_out_times": score(times), "held_out_cameras": score(cams)}


DOME = {"width": 640, "height": 360, "n_train": 27, "n_test": 4, "n_times": 150}  # Panoptic's layout (issue 55)


def dome_scene(data_factor: int, seed: int, test_stride: int):
    """The procedural-4d dome proxy of a Panoptic capture (DOME; the module docstring)."""
    from recon.data.procedural_4d import procedural_4d_scene

    return procedural_4d_scene(**DOME, rig="dome", test_time_stride=test_stride, data_factor=data_factor, seed=seed)


def run_once(cfg: TrainConfig, train_every: int, window: int, renders: Path | None, scene=None) -> dict:
    """Train ``cfg`` (no outputs written; on ``scene`` if given, else ``cfg.data``'s) and score it: the module
    docstring's fields."""
    trainer = Trainer(cfg, log=lambda line: None, writes_outputs=False, scene=scene)
    start = time.perf_counter()
    for step in range(cfg.steps):
        trainer.advance(step)
    seconds = time.perf_counter() - start
    trainer.images.close()
    model, scene = trainer.model, trainer.scene
    bg = background_color(cfg, scene)
    with torch.no_grad():
        held = evaluate_model(model, scene.frames_test, FrameImages(scene.frames_test, trainer.device), bg,
                              cfg.sh_degree, renders)
        train_frames = scene.frames_train[::train_every]
        train = evaluate_model(model, train_frames, FrameImages(train_frames, trainer.device), bg, cfg.sh_degree)
    recent = [p for p in trainer.history.psnr[-window:] if p is not None]
    return {"steps": cfg.steps, "held_out": {"psnr": round(held["psnr"], 3), "ssim": round(held["ssim"], 4),
                                             "views": held["num_views"]},
            **group_scores(held["per_view"], unseen_camera_views(scene.frames_test, scene.frames_train)),
            "train_eval_psnr": round(train["psnr"], 3), "train_eval_views": train["num_views"],
            "progress_psnr": round(float(np.mean(recent)), 3) if recent else None,
            "train_seconds": round(seconds, 3), "num_gaussians": len(model),
            "cameras": sorted({camera_name(f) for f in scene.frames_train}),
            "train_cameras": len({pose_key(f) for f in scene.frames_train}),
            "train_frames": len(scene.frames_train)}


def main(argv: list[str] | None = None) -> None:
    argv = list(_sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(CLASSROOM), help="a 4D dataset folder or procedural-4d")
    ap.add_argument("--data-factor", type=int, default=4)
    ap.add_argument("--steps", default="500,1000,2000", help="comma-separated step counts, one fresh run each")
    ap.add_argument("--test-every", type=int, default=10, help="hold out every camera's N-th time steps (0: none)")
    ap.add_argument("--test-cameras", default=None, help="hold out these cameras, A,B")
    ap.add_argument("--train-every", type=int, default=10, help="score every N-th training view with eval")
    ap.add_argument("--window", type=int, default=50, help="steps whose mean step PSNR is progress_psnr")
    ap.add_argument("--renders", type=Path, default=None, help="write the last run's held-out renders here")
    ap.add_argument("--poses-as-labelled", action="store_true",
                    help="read Panoptic 'w2c' matrices as world-to-camera even where the rig's geometry says they are "
                         "camera-to-world (the loader before issue 55's fix; recon.data.rig)")
    ap.add_argument("--rig", choices=("ring", "dome"), default="ring",
                    help="procedural-4d only: its 8-camera ring (default) or the Panoptic dome proxy (27 + 4 cameras)")
    ap.add_argument("--dome-test-stride", type=int, default=5, help="--rig dome: test cameras at every N-th time step")
    args = ap.parse_args(argv)
    if args.rig == "dome" and args.data not in PROCEDURAL:
        raise SystemExit(f"--rig dome: needs --data procedural-4d (got {args.data})")
    if args.poses_as_labelled:
        import recon.data.panoptic as panoptic

        panoptic.pose_direction = lambda w2c: "world_to_cam"
    if not Path(args.data).exists() and args.data not in PROCEDURAL:
        raise SystemExit(f"--data {args.data}: no such dataset (the shared classroom capture is absent)")
    base = TrainConfig(data=Path(args.data), method="4dgs", data_factor=args.data_factor, test_every=args.test_every,
                       test_cameras=args.test_cameras, progress=False, device="cpu", save_every=0)
    base = tyro.cli(TrainConfig, default=base, args=extra, prog="bench_4d_convergence.py ... --")
    overrides = {f.name: getattr(base, f.name) for f in dataclasses.fields(TrainConfig)
                 if f.name not in ("steps", "out") and getattr(base, f.name) != getattr(TrainConfig(), f.name)}
    counts = [int(s) for s in args.steps.split(",") if s.strip()]
    scene = dome_scene(base.data_factor, base.seed, args.dome_test_stride) if args.rig == "dome" else None
    for k, steps in enumerate(counts):
        renders = args.renders if k == len(counts) - 1 else None
        result = run_once(dataclasses.replace(base, steps=steps), args.train_every, args.window, renders, scene)
        print(json.dumps({"benchmark": "4d_convergence", "data": args.data, "rig": args.rig, **result,
                          "config": {k: str(v) if isinstance(v, Path) else
                                     (dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v)
                                     for k, v in overrides.items()},
                          "machine": machine()}), flush=True)


if __name__ == "__main__":
    main()
