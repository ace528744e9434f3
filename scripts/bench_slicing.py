#!/usr/bin/env python
"""Benchmark slice_gaussians_4d (forward + backward) on the CPU; prints JSON.

Scene: N 4D Gaussians (default 500,000), means uniform in x [-1,1], y [-0.8,0.8], z [2.5,5], t [0,1];
spatial log-scales uniform in [-4.5,-2.6]; time log-scales uniform in [ln 0.02, ln 0.2]; random left and
right quaternions; opacities uniform in [0.3,0.95]; float32. Sliced at t = 0.5 (or at --times evenly
spaced times) with the default cull threshold 1/255; the backward pass starts from the sum of every
output (means, covars, opacities). Reports the median and minimum of --repeats timed runs after
--warmup runs, the forward alone, the fraction of Gaussians kept, and the machine with its load
average (the 2-core VM is shared: read the numbers with the load).

Example: python scripts/bench_slicing.py --repeats 15
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from rasterizer import slice_gaussians_4d  # noqa: E402
from rasterizer.spacetime import CULL_THRESHOLD  # noqa: E402


def make_gaussians(n: int, dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    """means4, quats_left, quats_right, scales4 (activated), opacities."""
    g = torch.Generator().manual_seed(seed)
    u = lambda *s: torch.rand(*s, generator=g)  # noqa: E731
    means4 = torch.stack([u(n) * 2 - 1, u(n) * 1.6 - 0.8, u(n) * 2.5 + 2.5, u(n)], dim=-1)
    log_t = u(n, 1) * (math.log(0.2) - math.log(0.02)) + math.log(0.02)
    scales4 = torch.exp(torch.cat([u(n, 3) * 1.9 - 4.5, log_t], dim=-1))
    quats_left, quats_right = torch.randn(n, 4, generator=g), torch.randn(n, 4, generator=g)
    opacities = u(n) * 0.65 + 0.3
    return [t.to(dtype) for t in (means4, quats_left, quats_right, scales4, opacities)]


def time_once(params, times, threshold, backward: bool) -> tuple[float, int]:
    """Seconds for one slice (+ backward) with the parameters as fresh leaves; Gaussians kept (summed
    over times)."""
    leaves = [p.detach().clone().requires_grad_(backward) for p in params]
    t0 = time.perf_counter()
    out = slice_gaussians_4d(*leaves, times, cull_threshold=threshold)
    out = out if isinstance(out, list) else [out]
    if backward:
        total = sum(s.means.sum() + s.covars.sum() + s.opacities.sum() for s in out)
        total.backward()
    return time.perf_counter() - t0, sum(len(s) for s in out)


def machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT"),
            "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gaussians", type=int, default=500_000)
    ap.add_argument("--times", type=int, default=1, help="slice at this many times (a [C] tensor) per run")
    ap.add_argument("--cull-threshold", type=float, default=CULL_THRESHOLD)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    params = make_gaussians(args.gaussians, dtype)
    times = 0.5 if args.times == 1 else torch.linspace(0.0, 1.0, args.times, dtype=dtype)
    load_before = [round(x, 2) for x in os.getloadavg()]
    for _ in range(args.warmup):
        time_once(params, times, args.cull_threshold, True)
    both = [time_once(params, times, args.cull_threshold, True) for _ in range(args.repeats)]
    forward = [time_once(params, times, args.cull_threshold, False) for _ in range(args.repeats)]
    kept = both[0][1]
    ms = lambda xs: round(1000 * xs, 2)  # noqa: E731
    result = {"gaussians": args.gaussians, "times": args.times, "dtype": args.dtype,
              "cull_threshold": args.cull_threshold, "kept_fraction": round(kept / (args.gaussians * args.times), 4),
              "pass": "forward+backward",
              "median_ms": ms(statistics.median(t for t, _ in both)), "min_ms": ms(min(t for t, _ in both)),
              "forward_median_ms": ms(statistics.median(t for t, _ in forward)),
              "forward_min_ms": ms(min(t for t, _ in forward)), "runs": args.repeats,
              "target_ms": 60, "load_average_before": load_before,
              "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    print(json.dumps({"machine": machine(), "result": result}, indent=2))


if __name__ == "__main__":
    main()
