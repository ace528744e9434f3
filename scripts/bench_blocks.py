"""Block training benchmark: wall time of 1 vs N workers on the same blocks, and the merged model's test PSNR
against one process trained on the whole scene with the same total steps. Prints JSON.

    python scripts/bench_blocks.py --data /tmp/city --blocks-xy 2x2 --steps-per-block 500 --repeats 3
    python scripts/make_city.py --out /tmp/city_exp --exposure 0.4
    python scripts/bench_blocks.py --data /tmp/city_exp --repeats 0 --workers 2 --consistency independent momentum

``--data`` is a COLMAP folder (made with scripts/make_city.py when it does not exist: the default city,
402 images at 96 x 64). Every worker and the single process run with one thread (OMP/Numba), as
torchrun's workers do. Timings are wall-clock seconds of the whole command (start-up, data loading and
the merge's evaluation included), median over ``--repeats`` runs; each run starts from an empty folder.
"""

from __future__ import annotations

import rasterizer  # noqa: F401  (first: sets GOMP_SPINCOUNT before torch loads)
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[1]


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return e


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env(), cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return time.perf_counter() - t0


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(data: Path = Path("/tmp/city"), blocks_xy: str = "2x2", steps_per_block: int = 500, repeats: int = 3,
         workers: tuple[int, ...] = (1, 2), sh_degree: int = 1, single: bool = True, work: Path | None = None,
         consistency: tuple[str, ...] = ()) -> None:
    """Run the benchmark and print one JSON object. ``--consistency independent momentum``: also one run of
    each mode with the largest worker count (test PSNR, seam metric), e.g. on a city made with --exposure."""
    py = sys.executable
    if not data.exists():
        subprocess.run([py, "scripts/make_city.py", "--out", str(data), "--no-progress"], env=env(), cwd=ROOT, check=True)
    work = Path(work or tempfile.mkdtemp(prefix="bench_blocks_"))
    blocks = work / "blocks.json"
    subprocess.run([py, "-m", "recon.cli", "partition", "--data", str(data), "--out", str(blocks), "--blocks-xy",
                    blocks_xy], env=env(), cwd=ROOT, check=True, capture_output=True)
    nblocks = len(json.loads(blocks.read_text())["blocks"])
    common = ["--data", str(data), "--sh-degree", str(sh_degree), "--save-every", "0", "--no-progress"]
    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
              "data": str(data), "blocks": nblocks, "blocks_xy": blocks_xy, "steps_per_block": steps_per_block,
              "repeats": repeats, "runs": {}}
    for n in (workers if repeats > 0 else ()):
        times, loads = [], []
        for _ in range(repeats):
            out = work / f"w{n}"
            shutil.rmtree(out, ignore_errors=True)
            loads.append(load())
            times.append(timed([py, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", "-m",
                                "recon.distributed", "--blocks", str(blocks), "--out", str(out), "--steps",
                                str(steps_per_block), *common]))
        metrics = json.loads((out / "metrics.json").read_text())
        result["runs"][f"{n}_workers"] = {
            "wall_s": [round(t, 2) for t in times], "median_wall_s": round(statistics.median(times), 2),
            "load_before": loads, "test_psnr": metrics["test"]["psnr"], "num_gaussians": metrics["num_gaussians"],
            "block_psnr": [b["test_psnr"] for b in metrics["blocks"]],
            "peak_rss_mib": [w["peak_rss_mib"] for w in metrics["workers"]]}
    if len(workers) >= 2 and repeats > 0:
        base = result["runs"][f"{workers[0]}_workers"]["median_wall_s"]
        result["wall_ratio"] = {f"{n}_vs_{workers[0]}": round(result["runs"][f"{n}_workers"]["median_wall_s"] / base, 3)
                                for n in workers[1:]}
    for mode in consistency:
        n = max(workers)
        out = work / f"mode_{mode}"
        shutil.rmtree(out, ignore_errors=True)
        loads = load()
        t = timed([py, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", "-m",
                   "recon.distributed", "--blocks", str(blocks), "--out", str(out), "--steps", str(steps_per_block),
                   "--consistency", mode, *common])
        metrics = json.loads((out / "metrics.json").read_text())
        result.setdefault("consistency", {})[mode] = {
            "workers": n, "wall_s": round(t, 2), "load_before": loads, "test_psnr": metrics["test"]["psnr"],
            "test_ssim": metrics["test"]["ssim"], "seams": metrics.get("seams"),
            "block_psnr": [b["test_psnr"] for b in metrics["blocks"]]}
    if single:
        out = work / "single"
        shutil.rmtree(out, ignore_errors=True)
        loads = load()
        t = timed([py, "-m", "recon.cli", "train", "--out", str(out), "--steps", str(steps_per_block * nblocks),
                   *common])
        metrics = json.loads((out / "metrics.json").read_text())
        result["single_process"] = {"steps": steps_per_block * nblocks, "wall_s": round(t, 2), "load_before": loads,
                                    "test_psnr": metrics["test"]["psnr"], "num_gaussians": metrics["num_gaussians"]}
        if repeats > 0:
            merged = result["runs"][f"{workers[0]}_workers"]["test_psnr"]
            result["psnr_blocks_minus_single"] = round(merged - metrics["test"]["psnr"], 3)
    result["load_after"] = load()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    tyro.cli(main)
