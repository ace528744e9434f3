"""Time exporting 1,000,000 random splats to SPZ (SH degree 3 and 0): median of 3 runs, and size.

Prints JSON. Also times the gzip step alone at a few compression levels (``--levels``), which is
how the SPZ writer's level was chosen, and the whole ``splatforge export`` path from a PLY file
(read, NaN check, write; ``cli_ply_to_spz_seconds_median``). Usage: .venv/bin/python scripts/bench_export.py [--n N]

With ``--trained RUN_DIR`` (a finished ``splatforge train`` run, e.g. lego_400 at data factor 2) it
instead exports the run's splats.ply to SPZ and evaluates both files on the run's test views:
size ratio PLY / SPZ and test PSNR / SSIM of each (the SPZ is decoded by our reader).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse
import gzip
import json
import os
import platform
import statistics
import tempfile
import time

from pathlib import Path

from recon.commands.export import ExportConfig, run_export
from recon.export import random_splats, write_splats
from recon.export import spz as spz_mod


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_trained(run: str, data: str | None, data_factor: int | None) -> dict:
    """PLY vs SPZ of a trained run: sizes and test metrics of both files."""
    from pathlib import Path

    from recon.commands.evaluate import _evaluate
    from recon.export import read_splats
    from recon.run.folder import Run

    ply = Run.open(run).require_splats()
    with tempfile.TemporaryDirectory() as tmp:
        spz = Path(tmp) / "splats.spz"
        t0 = time.perf_counter()
        write_splats(spz, read_splats(ply), force=True)
        export_s = time.perf_counter() - t0
        m_ply = _evaluate(Path(run), ply, data, data_factor, Path(tmp) / "eval_ply", "cpu")
        m_spz = _evaluate(Path(run), spz, data, data_factor, Path(tmp) / "eval_spz", "cpu")
        sizes = {"ply_bytes": ply.stat().st_size, "spz_bytes": spz.stat().st_size}
    return {"benchmark": "trained_ply_vs_spz", "run": str(run), **sizes,
            "ratio_ply_over_spz": round(sizes["ply_bytes"] / sizes["spz_bytes"], 2),
            "export_seconds": round(export_s, 3),
            "ply_test": {k: m_ply[k] for k in ("psnr", "ssim", "num_views")},
            "spz_test": {k: m_spz[k] for k in ("psnr", "ssim", "num_views")},
            "psnr_drop_db": round(m_ply["psnr"] - m_spz["psnr"], 3),
            "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trained", help="a training run folder: compare its splats.ply with its SPZ export")
    ap.add_argument("--data", help="dataset for --trained (default: the run's)")
    ap.add_argument("--data-factor", type=int, help="data factor for --trained (default: the run's)")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--levels", type=int, nargs="*", default=[1, 6, 9])
    args = ap.parse_args()
    if args.trained:
        print(json.dumps(bench_trained(args.trained, args.data, args.data_factor), indent=1))
        return
    result = {"n": args.n, "repeats": args.repeats, "machine": platform.processor() or platform.machine(),
              "cpus": os.cpu_count(), "spz": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for degree in (3, 0):
            data = random_splats(args.n, sh_degree=degree, seed=0, extent=50.0)
            path = os.path.join(tmp, f"bench_{degree}.spz")
            secs = median_time(lambda: write_splats(path, data, force=True), args.repeats)
            payload = spz_mod.encode_spz_payload(data, path)
            t_payload = median_time(lambda: spz_mod.encode_spz_payload(data, path), args.repeats)
            gz = {}
            for level in args.levels:
                t = median_time(lambda: gzip.compress(payload, compresslevel=level, mtime=0),
                                args.repeats)
                gz[str(level)] = {"seconds": round(t, 3),
                                  "bytes": len(gzip.compress(payload, compresslevel=level, mtime=0))}
            ply = os.path.join(tmp, f"bench_{degree}.ply")
            write_splats(ply, data, force=True)
            cli_secs = median_time(lambda: run_export(ExportConfig(input=Path(ply), out=Path(path), force=True,
                                                                   evaluate=False, quiet=True)), args.repeats)
            result["spz"][f"sh{degree}"] = {
                "seconds_median": round(secs, 3),
                "cli_ply_to_spz_seconds_median": round(cli_secs, 3),
                "bytes": os.path.getsize(path),
                "bytes_per_splat": round(os.path.getsize(path) / args.n, 2),
                "uncompressed_bytes": len(payload),
                "encode_without_gzip_seconds": round(t_payload, 3),
                "gzip_by_level": gz,
            }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
