"""Peak resident memory, time to the first step and seconds per step of ``splatforge train`` (issue 55: data in
bounded memory).

One measurement (``measure``) runs ``python -m recon.cli train ARGS --out OUT`` as a child process from ``--code``
(a checkout of splatforge: its ``recon`` is imported, so a worktree at another commit measures that commit)
through a small runner that records when the first training step ends; it prints JSON: the child's peak RSS
(``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` of that child alone), wall seconds, ``first_step_seconds``
(process start to the end of step 1: imports, loading, filling the frame cache, model init, the step; with
``first_step_cpu_seconds``, the CPU time the child used by then, all its threads: the wall time on a loaded
machine is mostly waiting) and
``seconds_per_step`` / ``train_seconds`` from the run's metrics.json.

    python scripts/bench_data_memory.py --out /tmp/run -- --method 4dgs --data ../shared/data/d3dgs_classroom \\
        --data-factor 2 --steps 50 --device cpu --no-progress

``--synthetic DIR`` instead writes a Panoptic-layout capture (``--layout n3dv``: Neural 3D Video mp4s, cam00
the test view) (``--cameras`` x ``--frames`` JPEGs of
``--size``, all training cameras: the final evaluation of test views would dominate a short CPU run;
smooth moving patterns plus noise, about the real captures'
JPEG size) into DIR (e.g. under /tmp, never the repository) unless it is already there, and measures, with
the frame cache in ``DIR.frame-cache`` (``$SPLATFORGE_CACHE``):

- ``cold``: the first run (fills the frame cache with a progress bar, then trains ``--steps``);
- ``warm``: the same run again (cache complete: time to the first step);
- ``warm_budget``: the same with ``--cache-bytes`` = ``--budget`` (a bounded LRU whatever the machine);
- ``in_memory``: every training image decoded into memory before the first step (the pre-issue-55 path),
  frame cache off: the steps/s reference (it needs the whole decoded capture in memory).

``--eval-views N`` limits the runs' final evaluation to the first N test views.

``--runs`` picks and orders them (default all four, as listed).

Then ``summary``: peak GiB of each, ``first_step_seconds`` warm, and the streaming runs' steps/s relative to the
all-in-memory run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

# the child: records process start -> end of the first training step into $BENCH_FIRST_STEP_FILE; with
# $BENCH_PRELOAD=1 decodes every training image into memory before training (the all-in-memory reference)
CHILD = r"""
import json, os, sys, time
import psutil
born = psutil.Process().create_time()
from recon.training import trainer as T
advance, init = T.Trainer.advance, T.Trainer.__init__
def first(self, step):
    out = advance(self, step)
    if not getattr(self, "_bench_seen", False):
        self._bench_seen = True
        with open(os.environ["BENCH_FIRST_STEP_FILE"], "w") as f:
            json.dump({"first_step_seconds": time.time() - born, "first_step_cpu_seconds": time.process_time()}, f)
    return out
T.Trainer.advance = first
if os.environ.get("BENCH_PRELOAD") == "1":
    def preload(self, *a, **k):
        init(self, *a, **k)
        self._bench_all = self.images.rgba  # all decoded, held for the whole run
    T.Trainer.__init__ = preload
if os.environ.get("BENCH_EVAL_VIEWS"):
    evaluate = T.Trainer.evaluate
    def first_views(self, renders_dir):
        keep, n = self.scene.frames_test, int(os.environ["BENCH_EVAL_VIEWS"])
        self.scene.frames_test = keep[:n]  # the final evaluation of the first n test views only
        try:
            return evaluate(self, renders_dir)
        finally:
            self.scene.frames_test = keep
    T.Trainer.evaluate = first_views
from recon.cli import main
main(sys.argv[1:])
"""


def measure(code: Path, out: Path, train_args: list[str], env: dict | None = None) -> dict:
    """Run the training in a child process; its peak RSS (bytes), wall seconds, time to the first step and the
    run's step timing."""
    first_file = out.with_name(out.name + ".first_step.json")
    first_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-c", CHILD, "train", *train_args, "--out", str(out), "--overwrite"]
    child_env = {**os.environ, **(env or {}), "BENCH_FIRST_STEP_FILE": str(first_file)}
    child_env["PYTHONPATH"] = os.pathsep.join([str(code), child_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    start = time.perf_counter()
    # a fresh intermediate process per measurement, so RUSAGE_CHILDREN's maximum is this child's alone
    wrapper = [sys.executable, "-c", "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(p.returncode)", *cmd]
    proc = subprocess.run(wrapper, cwd=code, capture_output=True, text=True, env=child_env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"training failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-3:]}")
    peak_kib = int(proc.stdout.strip().splitlines()[-1])  # Linux: KiB
    metrics = json.loads((out / "metrics.json").read_text())
    first = json.loads(first_file.read_text()) if first_file.is_file() else {}
    sps = metrics.get("seconds_per_step")
    return {"args": train_args, "env": {k: v for k, v in (env or {}).items()},
            "peak_rss_bytes": peak_kib * 1024, "peak_rss_gib": round(peak_kib / 2**20, 3),
            "wall_seconds": round(wall, 2), "first_step_seconds": first.get("first_step_seconds"),
            "first_step_cpu_seconds": first.get("first_step_cpu_seconds"),
            "train_seconds": metrics.get("train_seconds"), "seconds_per_step": sps,
            "steps_per_second": round(1.0 / sps, 3) if sps else None}


# ------------------------------------------------------------------------------------------ synthetic capture


def ring_camera(c: int, n: int, width: int, height: int) -> tuple[list, list]:
    """(K [3][3], w2c [4][4]) of camera ``c`` of ``n`` on a ring of radius 4 around the origin, looking at it."""
    import numpy as np

    a = 2 * math.pi * c / n
    centre = np.array([4 * math.cos(a), 0.6 * math.sin(3 * a), 4 * math.sin(a)])
    fwd = -centre / np.linalg.norm(centre)
    right = np.cross(fwd, [0.0, -1.0, 0.0])
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    R = np.stack([right, down, fwd])
    w2c = np.eye(4)
    w2c[:3, :3], w2c[:3, 3] = R, -R @ centre
    f = 0.8 * width
    K = [[f, 0.0, width / 2], [0.0, f, height / 2], [0.0, 0.0, 1.0]]
    return K, w2c.tolist()


class Pattern:
    """Frames of the synthetic captures: a smooth per-camera pattern, a blob moving over time, fixed noise."""

    def __init__(self, width: int, height: int, seed: int = 0):
        import numpy as np

        self.rng = np.random.default_rng(seed)
        self.width, self.height = width, height
        self.yy, self.xx = np.mgrid[0:height, 0:width].astype(np.float32)
        self.noise = self.rng.integers(0, 12, (height, width, 3), dtype=np.uint8)
        self._base: dict = {}  # (camera, tint) -> its still pattern [H, W, 3] (computed once per camera)

    def frame(self, c: int, k: int, frames: int, tint) -> "np.ndarray":
        """uint8 [H, W, 3] of camera ``c`` at step ``k`` of ``frames``."""
        import numpy as np

        w, h, xx, yy = self.width, self.height, self.xx, self.yy
        t = k / max(1, frames - 1)
        cx, cy = w * (0.3 + 0.4 * t), h * (0.5 + 0.2 * math.sin(6 * t + c))
        blob = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * (0.08 * w) ** 2))
        key = (c, tuple(np.asarray(tint).tolist()))
        if key not in self._base:
            self._base = {key: (0.5 + 0.25 * np.sin(xx / w * 6 + c) * np.cos(yy / h * 4))[..., None] * tint}
        img = np.clip((self._base[key] + blob[..., None] * np.array([0.9, 0.2, 0.1])) * 230, 0, 243)
        return img.astype(np.uint8) + self.noise


def write_synthetic_n3dv(root: Path, cameras: int, frames: int, width: int, height: int) -> dict:
    """A Neural-3D-Video-layout capture (poses_bounds.npy, camNN.mp4 of the patterns, 30 fps); its facts."""
    import imageio.v2 as iio2
    import numpy as np

    if (root / "synthetic.json").is_file():
        return json.loads((root / "synthetic.json").read_text())
    root.mkdir(parents=True, exist_ok=True)
    pattern = Pattern(width, height)
    rows = []
    for c in range(cameras):
        K, w2c = ring_camera(c, cameras, width, height)
        c2w = np.linalg.inv(np.array(w2c))
        right, down, fwd, centre = c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3]
        pose = np.stack([down, right, -fwd, centre, [height, width, K[0][0]]], axis=1)
        rows.append(np.concatenate([pose.ravel(), [0.5, 20.0]]))
        tint = pattern.rng.uniform(0.6, 1.0, 3).astype(np.float32)
        with iio2.get_writer(root / f"cam{c:02d}.mp4", fps=30, codec="libx264", quality=7, macro_block_size=2,
                             ffmpeg_params=["-preset", "ultrafast"]) as writer:  # 6,000 frames: encode cheaply
            for k in range(frames):
                writer.append_data(pattern.frame(c, k, frames, tint))
    np.save(root / "poses_bounds.npy", np.stack(rows))
    video_bytes = sum(p.stat().st_size for p in root.glob("cam*.mp4"))
    facts = {"layout": "n3dv", "cameras": cameras, "frames": frames, "width": width, "height": height,
             "video_megabytes": round(video_bytes / 1e6, 1),
             "decoded_rgba_gib": round(cameras * frames * width * height * 4 / 2**30, 2)}
    (root / "synthetic.json").write_text(json.dumps(facts))
    return facts


def write_synthetic_panoptic(root: Path, cameras: int, frames: int, width: int, height: int,
                             test_cameras: int = 0) -> dict:
    """A Panoptic-layout capture of smooth moving patterns plus noise (module docstring); its facts."""
    import numpy as np
    from PIL import Image

    done = root / "train_meta.json"
    if done.is_file():
        return json.loads((root / "synthetic.json").read_text())
    pattern = Pattern(width, height)
    rng = pattern.rng
    cams = [ring_camera(c, cameras, width, height) for c in range(cameras)]
    split = {"test": list(range(0, cameras, max(1, cameras // max(1, test_cameras))))[:test_cameras]}
    split["train"] = [c for c in range(cameras) if c not in split["test"]]
    for c in range(cameras):
        (root / "ims" / str(c)).mkdir(parents=True, exist_ok=True)
        tint = rng.uniform(0.6, 1.0, 3).astype(np.float32)
        for k in range(frames):
            img = pattern.frame(c, k, frames, tint)
            Image.fromarray(img).save(root / "ims" / str(c) / f"{k:06d}.jpg", quality=90)
    for name, ids in split.items():
        if not ids:
            continue
        meta = {"w": width, "h": height, "k": [[cams[c][0] for c in ids]] * frames,
                "w2c": [[cams[c][1] for c in ids]] * frames,
                "fn": [[f"{c}/{k:06d}.jpg" for c in ids] for k in range(frames)], "cam_id": [ids] * frames}
        (root / f"{name}_meta.json").write_text(json.dumps(meta))
    jpeg_bytes = sum(p.stat().st_size for p in (root / "ims").rglob("*.jpg"))
    facts = {"layout": "panoptic", "cameras": cameras, "frames": frames, "width": width, "height": height,
             "train_cameras": len(split["train"]), "test_cameras": len(split["test"]),
             "jpeg_megabytes": round(jpeg_bytes / 1e6, 1),
             "decoded_rgba_gib": round(cameras * frames * width * height * 4 / 2**30, 2)}
    (root / "synthetic.json").write_text(json.dumps(facts))
    return facts


def synthetic_suite(code: Path, out: Path, root: Path, args) -> dict:
    """The four runs of ``--synthetic`` (module docstring) and their summary."""
    width, height = (int(v) for v in args.size.split("x"))
    t0 = time.perf_counter()
    write = write_synthetic_n3dv if args.layout == "n3dv" else write_synthetic_panoptic
    facts = write(root, args.cameras, args.frames, width, height)
    facts["write_seconds"] = round(time.perf_counter() - t0, 1)
    cache = Path(str(root) + ".frame-cache")
    if args.fresh_cache and cache.exists():
        shutil.rmtree(cache)
    base = ["--method", "4dgs", "--data", str(root), "--steps", str(args.steps), "--device", args.device,
            "--no-progress", "--save-every", "0", "--init-num-random", str(args.init_num_random), *args.extra]
    env = {"SPLATFORGE_CACHE": str(cache)}
    if args.eval_views is not None:
        env["BENCH_EVAL_VIEWS"] = str(args.eval_views)
    recipes = {"cold": ([], env), "warm": ([], env), "warm_budget": (["--cache-bytes", str(args.budget)], env),
               "in_memory": (["--frame-cache", "off", "--cache-bytes", str(1 << 40)], {**env, "BENCH_PRELOAD": "1"})}
    runs, seen = {}, {}
    for name in args.runs.split(","):
        extra, run_env = recipes[name]
        seen[name] = seen.get(name, 0) + 1
        runs[name if seen[name] == 1 else f"{name}_{seen[name]}"] = measure(code, out / name, [*base, *extra], run_env)
    ref = runs["in_memory"]["steps_per_second"] if "in_memory" in runs else None
    summary = {name: {"peak_rss_gib": r["peak_rss_gib"], "first_step_seconds": round(r["first_step_seconds"], 2),
                      "first_step_cpu_seconds": r["first_step_cpu_seconds"] and round(r["first_step_cpu_seconds"], 2),
                      "steps_per_second": r["steps_per_second"],
                      "steps_per_second_vs_in_memory": round(r["steps_per_second"] / ref, 3) if ref else None}
               for name, r in runs.items()}
    return {"capture": facts, "frame_cache": str(cache), "runs": runs, "summary": summary,
            "targets": {"peak_rss_gib": 3.0, "first_step_seconds_warm": 30.0, "steps_per_second_vs_in_memory": 0.9}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1],
                        help="splatforge checkout whose recon/ runs (default: this one)")
    parser.add_argument("--out", type=Path, required=True, help="run folder (overwritten; --synthetic: a parent)")
    parser.add_argument("--synthetic", type=Path, default=None,
                        help="write (once) and measure a synthetic Panoptic-layout capture in this folder")
    parser.add_argument("--layout", choices=("panoptic", "n3dv"), default="panoptic",
                        help="--synthetic: Panoptic JPEGs or Neural 3D Video mp4s (poses_bounds.npy, camNN.mp4)")
    parser.add_argument("--cameras", type=int, default=31)
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--size", default="640x360", help="WxH of the synthetic frames")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--init-num-random", type=int, default=20_000)
    parser.add_argument("--budget", type=int, default=1 << 30, help="--cache-bytes of the warm_budget run")
    parser.add_argument("--eval-views", type=int, default=None,
                        help="--synthetic: the final evaluation renders only the first N test views (default all; "
                             "the N3DV layout's cam00 has one per frame: 300 full-size renders would dominate)")
    parser.add_argument("--fresh-cache", action="store_true", help="delete the synthetic capture's frame cache first")
    parser.add_argument("--runs", default="cold,warm,warm_budget,in_memory",
                        help="--synthetic: which of the runs, in this order (e.g. warm,in_memory,warm,in_memory to "
                             "interleave: a repeat is reported as NAME_2, ...)")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then (more) arguments of splatforge train")
    args = parser.parse_args()
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    code = args.code.resolve()
    if args.synthetic is not None:
        args.extra = train_args
        result = synthetic_suite(code, args.out.resolve(), args.synthetic.resolve(), args)
    else:
        result = measure(code, args.out.resolve(), train_args)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
