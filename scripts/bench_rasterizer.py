#!/usr/bin/env python
"""Benchmark rasterize_gaussians (forward + backward) on the issue's synthetic scene; prints JSON.

Scene: means uniform in x [-1,1], y [-0.8,0.8], z [2.5,5]; log-scales uniform in [-4.5,-2.6]; random
rotations; opacities uniform in [0.3,0.95]; RGB colours; one camera at the origin looking down +z with
focal length 1.2 x width. Reports the median of --repeats timed runs after --warmup runs.

``--primitive surfels`` renders the same scene as 2D surfels (rasterize_surfels; the first two scales,
the same rotations, opacities and colours), the loss summing every output a 2DGS step uses (colour,
alpha, expected depth, normals, distortion); ``both`` times 3D Gaussians and surfels interleaved, run by
run, and reports their ratio (surfels / 3D, of the medians).

Example: python scripts/bench_rasterizer.py --cases a b c --backend cpu
         python scripts/bench_rasterizer.py --cases b --primitive both
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rasterizer import rasterize_gaussians, rasterize_surfels  # noqa: E402

CASES = {
    "a": dict(n=6_500, width=480, height=272, backward=True),
    "b": dict(n=100_000, width=400, height=400, backward=True),
    "c": dict(n=1_000_000, width=800, height=800, backward=False),
}


def make_scene(n: int, width: int, height: int, device: str = "cpu", seed: int = 0):
    """Benchmark Gaussians and camera (float32)."""
    g = torch.Generator().manual_seed(seed)
    u = lambda *s: torch.rand(*s, generator=g)  # noqa: E731
    means = torch.stack([u(n) * 2 - 1, u(n) * 1.6 - 0.8, u(n) * 2.5 + 2.5], dim=-1)
    log_scales = u(n, 3) * 1.9 - 4.5
    quats = torch.randn(n, 4, generator=g)
    opacities = u(n) * 0.65 + 0.3
    colors = u(n, 3)
    f = 1.2 * width
    K = torch.tensor([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])
    params = [t.to(device) for t in (means, quats, log_scales, opacities, colors)]
    return params, torch.eye(4, device=device)[None], K[None].to(device)


def time_once(params, viewmats, Ks, width, height, backend, backward):
    """Seconds for one forward (+ backward) pass, parameters as leaf tensors with grad."""
    leaves = [p.detach().clone().requires_grad_(backward) for p in params]
    means, quats, log_scales, opacities, colors = leaves
    sync = torch.cuda.synchronize if means.is_cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    render, alpha, _ = rasterize_gaussians(means, quats, torch.exp(log_scales), opacities, colors, viewmats, Ks,
                                           width, height, backend=backend)
    if backward:
        (render.sum() + alpha.sum()).backward()
    sync()
    return time.perf_counter() - t0


def surfel_params(params):
    """The scene's parameters as a surfel model holds them: log-scales [N, 2] (the first two, their own
    contiguous tensor, as ``recon``'s SurfelModel stores them)."""
    means, quats, log_scales, opacities, colors = params
    return [means, quats, log_scales[:, :2].contiguous(), opacities, colors]


def time_surfels_once(params, viewmats, Ks, width, height, backend, backward):
    """Seconds for one surfel forward (+ backward) pass; params from ``surfel_params``."""
    leaves = [p.detach().clone().requires_grad_(backward) for p in params]
    means, quats, log_scales, opacities, colors = leaves
    sync = torch.cuda.synchronize if means.is_cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    out = rasterize_surfels(means, quats, torch.exp(log_scales), opacities, colors, viewmats, Ks, width,
                            height, backend=backend)
    if backward:
        (out.render.sum() + out.alpha.sum() + out.depth.sum() + out.normals.sum() + out.distortion.sum()).backward()
    sync()
    return time.perf_counter() - t0


TIMERS = {"gaussians": time_once, "surfels": time_surfels_once}


def run_case(name, backend, repeats, warmup, device, primitive="gaussians"):
    """Timings of one case; primitive "gaussians", "surfels" or "both" (interleaved run by run)."""
    cfg = CASES[name]
    params, viewmats, Ks = make_scene(cfg["n"], cfg["width"], cfg["height"], device)
    kinds = ["gaussians", "surfels"] if primitive == "both" else [primitive]
    scene = {"gaussians": params, "surfels": surfel_params(params)}
    times = {k: [] for k in kinds}
    for i in range(warmup + repeats):
        for kind in kinds:
            t = TIMERS[kind](scene[kind], viewmats, Ks, cfg["width"], cfg["height"], backend, cfg["backward"])
            if i >= warmup:
                times[kind].append(t)
    result = {"case": name, "backend": backend, "gaussians": cfg["n"], "width": cfg["width"],
              "height": cfg["height"], "pass": "forward+backward" if cfg["backward"] else "forward"}
    for kind in kinds:
        prefix = "" if kind == "gaussians" else "surfels_"
        result[prefix + "median_ms"] = round(1000 * statistics.median(times[kind]), 2)
        result[prefix + "min_ms"] = round(1000 * min(times[kind]), 2)
    if primitive == "both":
        result["surfels_over_gaussians"] = round(statistics.median(times["surfels"]) /
                                                 statistics.median(times["gaussians"]), 3)
    result.update(runs=repeats, primitive=primitive,
                  peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
    return result


def machine() -> dict:
    import numba

    from rasterizer.cpu import placement
    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "numba_threads": numba.get_num_threads(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
            "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT"),
            "spin_set_too_late": rasterizer.runtime.SPIN_SET_TOO_LATE,
            "keeps_freed_memory": rasterizer.runtime.KEEPS_FREED_MEMORY,
            "numba_workers_pinned": placement.enabled()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["a", "b", "c"], choices=sorted(CASES))
    ap.add_argument("--backend", default="cpu", choices=["cpu", "reference", "cuda", "auto"])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--primitive", default="gaussians", choices=["gaussians", "surfels", "both"],
                    help="3D Gaussians, 2D surfels, or both interleaved with their ratio")
    args = ap.parse_args()
    device = "cuda" if args.backend == "cuda" else "cpu"
    results = []
    for name in args.cases:
        results.append(run_case(name, args.backend, args.repeats, args.warmup, device, args.primitive))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"machine": machine(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
