#!/usr/bin/env python
"""The cuda backend's two shapes on a GPU: gsplat's fused ``rasterization`` (``rasterizer.cuda.rasterize``)
against gsplat's kernels as separate pipeline steps (``rasterizer.cuda.seam``: project -> SH -> Splats ->
composite, the seam the cpu and reference backends use; ``backend="cuda"`` renders this way while
``rasterizer.cuda.PIPELINE`` is "seam"). Prints JSON: per case the median seconds of
--repeats forward (+ backward) passes after --warmup, run interleaved (fused, seam, fused, ...), and the
largest difference between the two renders. Cases and scene: scripts/bench_rasterizer.py's.

Example (needs CUDA): python scripts/bench_cuda_seam.py --cases a b c --repeats 21
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from rasterizer.api import rasterize_through_seam  # noqa: E402

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
from bench_rasterizer import CASES, machine, make_scene  # noqa: E402

FUSED_OPTIONS = dict(sh_degree=None, near_plane=0.01, far_plane=1e10, eps2d=0.3, backgrounds=None, render_mode="RGB",
                     rasterize_mode="classic", covars=None, absgrad=False, tile_size=16)
SEAM_OPTIONS = dict(sh_degree=None, near_plane=0.01, far_plane=1e10, eps2d=0.3, backgrounds=None, render_mode="RGB",
                    rasterize_mode="classic", covars=None, absgrad=False, tile_size=16, depth_limit=None, n_color=3)


def render_once(shape, params, viewmats, Ks, width, height, backward):
    """(seconds, render) of one forward (+ backward) pass through the fused call or the seam steps."""
    from rasterizer import cuda
    from rasterizer.cuda import seam

    leaves = [p.detach().clone().requires_grad_(backward) for p in params]
    means, quats, log_scales, opacities, colors = leaves
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    scales = torch.exp(log_scales)
    if shape == "fused":
        render, alpha, _ = cuda.rasterize(means, quats, scales, opacities, colors, viewmats, Ks, width, height,
                                          **FUSED_OPTIONS)
    else:
        render, alpha, _ = rasterize_through_seam(seam, means, quats, scales, opacities, colors, viewmats, Ks,
                                                  width, height, **SEAM_OPTIONS)
    if backward:
        (render.sum() + alpha.sum()).backward()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, render.detach()


def run_case(name: str, repeats: int, warmup: int) -> dict:
    case = CASES[name]
    params, viewmats, Ks = make_scene(case["n"], case["width"], case["height"], device="cuda")
    args = (params, viewmats, Ks, case["width"], case["height"], case["backward"])
    times = {"fused": [], "seam": []}
    renders = {}
    for i in range(warmup + repeats):
        for shape in ("fused", "seam"):
            seconds, renders[shape] = render_once(shape, *args)
            if i >= warmup:
                times[shape].append(seconds)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"case": name, **case, "fused_ms": 1e3 * med["fused"], "seam_ms": 1e3 * med["seam"],
            "seam_over_fused": med["seam"] / med["fused"],
            "max_render_difference": float((renders["fused"] - renders["seam"]).abs().max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["a", "b", "c"], choices=sorted(CASES))
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_cuda_seam.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    results = [run_case(c, args.repeats, args.warmup) for c in args.cases]
    print(json.dumps({"machine": machine(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
