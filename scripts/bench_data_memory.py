"""Peak resident memory and seconds per step of one ``splatforge train`` (issue 55: data in bounded memory).

Runs ``python -m recon.cli train ARGS --out OUT`` as a child process from ``--code`` (a checkout of splatforge:
its ``recon`` is imported, so a worktree at another commit measures that commit), then prints JSON: the
child's peak RSS (``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``), wall seconds, and ``seconds_per_step`` /
``train_seconds`` from the run's metrics.json.

    python scripts/bench_data_memory.py --out /tmp/run -- --method 4dgs --data ../shared/data/d3dgs_classroom \
        --data-factor 2 --steps 50 --device cpu --no-progress
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def measure(code: Path, out: Path, train_args: list[str]) -> dict:
    """Run the training in a child process; its peak RSS (bytes), wall seconds and the run's step timing."""
    cmd = [sys.executable, "-m", "recon.cli", "train", *train_args, "--out", str(out), "--overwrite"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=code, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"training failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: KiB
    metrics = json.loads((out / "metrics.json").read_text())
    return {"code": str(code), "args": train_args, "peak_rss_bytes": peak_kib * 1024,
            "peak_rss_gib": round(peak_kib / 2**20, 3), "wall_seconds": round(wall, 2),
            "train_seconds": metrics.get("train_seconds"), "seconds_per_step": metrics.get("seconds_per_step")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1],
                        help="splatforge checkout whose recon/ runs (default: this one)")
    parser.add_argument("--out", type=Path, required=True, help="run folder (overwritten)")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then the arguments of splatforge train")
    args = parser.parse_args()
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    print(json.dumps(measure(args.code.resolve(), args.out.resolve(), train_args), indent=1))


if __name__ == "__main__":
    main()
