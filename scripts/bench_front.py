#!/usr/bin/env python
"""Cost of the per-pixel depth limit (issue 21's seams), printed as JSON: median of several runs.

    python scripts/bench_front.py [--surfels 50000] [--width 480] [--height 272] [--repeats 5]
        [--nerf-size 100] [--skip-nerf]

- ``surfels``: rasterize_surfels, cpu backend, float32, forward + backward of every output, random surfels
  (tests/rasterizer/scenes.random_scene's first two scales, depths 2.5..5) without a limit, with a limit of +inf everywhere
  and with a ramp 2.5..4.0 across the image that cuts through the scene (``cut_fraction``: pixels whose
  colour it changed), the three interleaved;
- ``nerf``: NerfModel.render (no gradients) against render_front with +inf and with a limit at the
  middle of the box (no gradients, and with gradients), on the random initial field of a small hash grid
  with every occupancy cell set (a fixed sample load, not a trained scene), --nerf-size pixels square.
The machine (platform, cores, load average before and after) is recorded.
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
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402


def median_ms(fns: dict, repeats: int) -> dict:
    """{name: median ms} of the callables ``fns``, run interleaved (one of each per round: load changes on a
    shared machine hit all of them alike) after one warm-up round (Numba compilation, caches)."""
    times = {k: [] for k in fns}
    for r in range(repeats + 1):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            if r:
                times[k].append((time.perf_counter() - t) * 1e3)
    return {k: round(statistics.median(v), 2) for k, v in times.items()}


def bench_surfels(n: int, width: int, height: int, repeats: int) -> dict:
    from rasterizer import rasterize_surfels
    from tests.rasterizer.scenes import random_scene

    p, viewmats, Ks = random_scene(n=n, width=width, height=height, n_cams=1, seed=0, dtype=torch.float32)
    leaves = {k: v.detach() for k, v in p.items()}
    leaves["scales"] = leaves["scales"][:, :2]
    x = torch.arange(width, dtype=torch.float32) / width
    ramp = (2.5 + 1.5 * x)[None, None, :].expand(1, height, width).contiguous()
    limits = {"none": None, "inf": torch.full((1, height, width), math.inf), "ramp": ramp}

    def run(limit, backward=True):
        args = {k: v.clone().requires_grad_(backward) for k, v in leaves.items()}
        out = rasterize_surfels(args["means"], args["quats"], args["scales"], args["opacities"], args["colors"],
                                viewmats, Ks, width, height, backend="cpu", surfel_depth="intersection",
                                depth_limit=limit)
        if backward:
            (out.render.sum() + out.depth.sum() + out.meta.transmittance.sum() + out.distortion.sum()).backward()
        return out

    with torch.no_grad():
        free, cut = run(None, False), run(ramp, False)
    cut_fraction = float(((free.render - cut.render).abs().amax(-1) > 1e-3).float().mean())
    res = {"n": n, "width": width, "height": height, "cut_fraction": round(cut_fraction, 3),
           "opaque_fraction": round(float((free.alpha > 0.99).float().mean()), 3)}
    res.update(median_ms({f"fwd_bwd_ms_{k}": (lambda lim=v: run(lim)) for k, v in limits.items()}, repeats))
    with torch.no_grad():
        res.update(median_ms({f"fwd_ms_{k}": (lambda lim=v: run(lim, False)) for k, v in limits.items()}, repeats))
    return res


def bench_nerf(size: int, repeats: int) -> dict:
    from rasterizer import Camera
    from recon.models import NerfModel
    from recon.nerf.config import NerfConfig
    from recon.nerf.space import FieldSpace

    cfg = NerfConfig(hash_levels=8, hash_log2_table=14, hash_base_res=8, hash_max_res=128, hidden=32, geo_dim=8,
                     occupancy_resolution=32, steps_per_diagonal=256, eval_rays=8192)
    m = NerfModel(cfg, FieldSpace.box((-1.5,) * 3, (1.5,) * 3), 1.0, torch.Generator().manual_seed(0))
    m.grid.bits[:] = True
    w2c = torch.eye(4)
    w2c[2, 3] = 4.0
    K = torch.tensor([[size * 1.2, 0.0, size / 2], [0.0, size * 1.2, size / 2], [0.0, 0.0, 1.0]])
    cam = Camera(w2c, K, size, size)
    inf = torch.full((1, size, size), math.inf)
    mid = torch.full((1, size, size), 4.0)
    def with_grad():
        rgb, T, _ = m.render_front([cam], mid)
        (rgb.sum() + T.sum()).backward()

    def no_grad(fn):
        with torch.no_grad():
            fn()

    res = {"size": size}
    res.update(median_ms({"render_ms": lambda: m.render([cam]),
                          "front_inf_ms": lambda: no_grad(lambda: m.render_front([cam], inf)),
                          "front_mid_ms": lambda: no_grad(lambda: m.render_front([cam], mid)),
                          "front_mid_fwd_bwd_ms": with_grad}, repeats))
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--surfels", type=int, default=50_000)
    ap.add_argument("--width", type=int, default=480)
    ap.add_argument("--height", type=int, default=272)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--nerf-size", type=int, default=64)
    ap.add_argument("--skip-nerf", action="store_true")
    args = ap.parse_args(argv)
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
               "load_before": [round(v, 2) for v in os.getloadavg()]}
    out = {"surfels": bench_surfels(args.surfels, args.width, args.height, args.repeats)}
    if not args.skip_nerf:
        out["nerf"] = bench_nerf(args.nerf_size, args.repeats)
    machine["load_after"] = [round(v, 2) for v in os.getloadavg()]
    out["machine"] = machine
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
