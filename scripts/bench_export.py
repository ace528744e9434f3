"""Time exporting 1,000,000 random splats to SPZ (SH degree 3 and 0): median of 3 runs, and size.

Prints JSON. Also times the gzip step alone at a few compression levels (``--levels``), which is
how the SPZ writer's level was chosen. Usage: .venv/bin/python scripts/bench_export.py [--n N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import tempfile
import time

from recon.export import random_splats, write_splats
from recon.export import spz as spz_mod


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--levels", type=int, nargs="*", default=[1, 6, 9])
    args = ap.parse_args()
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
            result["spz"][f"sh{degree}"] = {
                "seconds_median": round(secs, 3),
                "bytes": os.path.getsize(path),
                "bytes_per_splat": round(os.path.getsize(path) / args.n, 2),
                "uncompressed_bytes": len(payload),
                "encode_without_gzip_seconds": round(t_payload, 3),
                "gzip_by_level": gz,
            }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
