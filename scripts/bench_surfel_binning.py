#!/usr/bin/env python
"""Surfel tile binning on the cpu backend: by the surfels' alpha regions (row chords, the default) against
every tile of their boxes (as before stop 42, and as gsplat bins them); prints JSON.

Per view: (tile, surfel) pairs and pairs per visible surfel, binning milliseconds (BinnedTiles alone),
forward and backward milliseconds of a rasterize_surfels call (colour, alpha, depth, normals, median depth
and distortion in the loss), medians of --repeats runs alternated between the two binnings, and whether
every output and every gradient is the same bit for bit (``identical``). Without --run: the synthetic
scene of ``bench_rasterizer.py`` case b (100k surfels, 400x400); with --run: a 2dgs run folder's newest
checkpoint, rendered from its training views --views.

Example: python scripts/bench_surfel_binning.py
         python scripts/bench_surfel_binning.py --run runs/bird2d --views 0 40 80 120
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch, as the splatforge command)

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from rasterizer import rasterize_surfels  # noqa: E402
from rasterizer.cpu.composite import BinnedTiles  # noqa: E402
from rasterizer.surfels import cpu as surfel_cpu  # noqa: E402

OUTPUTS = ("render", "alpha", "depth", "median_depth", "normals", "distortion")


class Binning:
    """Stands in for ``rasterizer.surfels.cpu.BinnedTiles`` while a mode is timed: "chords" (the
    backend's) or "box" (the chords not passed: every tile of the box); records pairs and seconds."""

    def __init__(self) -> None:
        self.mode, self.seconds, self.pairs = "chords", [], 0

    def __call__(self, *args, chords=None):
        t0 = time.perf_counter()
        bins = BinnedTiles(*args, chords=chords if self.mode == "chords" else None)
        self.seconds.append(time.perf_counter() - t0)
        self.pairs = int(bins.ids.shape[0])
        return bins


def run_once(view, binning: Binning, seed: int = 0):
    """(forward s, backward s, outputs and gradients) of one render of ``view`` with ``binning``'s mode."""
    means, quats, scales, opacities, colors, sh_degree, viewmats, Ks, width, height = view
    leaves = [t.detach().clone().requires_grad_(True) for t in (means, quats, scales, opacities, colors)]
    t0 = time.perf_counter()
    out = rasterize_surfels(*leaves, viewmats, Ks, width, height, sh_degree=sh_degree, backend="cpu")
    t1 = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    loss = sum((getattr(out, k) * torch.rand(getattr(out, k).shape, generator=g)).sum() for k in OUTPUTS)
    loss.backward()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, [getattr(out, k).detach() for k in OUTPUTS] + [t.grad for t in leaves]


def measure(view, repeats: int, warmup: int) -> dict:
    """Both binnings on one view, alternated run by run."""
    binning = Binning()
    surfel_cpu.BinnedTiles = binning
    try:
        times = {m: {"bin": [], "forward": [], "backward": []} for m in ("box", "chords")}
        pairs, last = {}, {}
        for i in range(warmup + repeats):
            for mode in times:
                binning.mode, binning.seconds = mode, []
                fwd, bwd, values = run_once(view, binning)
                pairs[mode], last[mode] = binning.pairs, values
                if i >= warmup:
                    times[mode]["bin"].append(binning.seconds[0])
                    times[mode]["forward"].append(fwd)
                    times[mode]["backward"].append(bwd)
    finally:
        surfel_cpu.BinnedTiles = BinnedTiles
    means, width, height = view[0], view[8], view[9]
    visible = visible_count(view)
    result = {"surfels": int(means.shape[0]), "visible": visible, "width": width, "height": height,
              "identical": all(torch.equal(a, b) for a, b in zip(last["box"], last["chords"]))}
    for mode, t in times.items():
        result[mode] = {"pairs": pairs[mode], "pairs_per_visible": round(pairs[mode] / max(visible, 1), 2),
                        **{f"{k}_ms": round(1000 * statistics.median(v), 2) for k, v in t.items()}}
    return result


def visible_count(view) -> int:
    """Surfels with a non-zero radius in the view (the cpu projection's culling)."""
    from rasterizer.surfels.cpu_projection import project_surfels_cpu

    means, quats, scales, _, _, _, viewmats, Ks, width, height = view
    with torch.no_grad():
        radii = project_surfels_cpu(means, quats, scales, viewmats, Ks, width, height).radii
    return int((radii > 0).all(-1).sum())


def synthetic_view():
    """bench_rasterizer.py's case b as surfels."""
    from bench_rasterizer import make_scene, surfel_params

    params, viewmats, Ks = make_scene(100_000, 400, 400)
    means, quats, log_scales, opacities, colors = surfel_params(params)
    return [(means, quats, torch.exp(log_scales), opacities, colors, None, viewmats, Ks, 400, 400)]


def run_views(run_dir: str, views: list[int]):
    """Views of a 2dgs run's newest checkpoint (SH colours), from its training cameras."""
    from recon.run.folder import Run

    run = Run.open(run_dir)
    found = run.latest_checkpoint()
    if found is None or run.config.method != "2dgs":
        raise SystemExit(f"{run_dir}: needs a 2dgs run with a checkpoint (method {run.config.method!r})")
    p = found[1]["model"]["params"]
    colors = torch.cat([p["sh0"], p["shN"]], 1)
    sh_degree = int(round(colors.shape[1] ** 0.5)) - 1
    cams = run.cameras
    out = []
    for v in views:
        cam = cams[v % len(cams)]
        out.append((p["means"], p["quats"], torch.exp(p["log_scales"]), torch.sigmoid(p["logit_opacities"]),
                    colors, sh_degree, cam.world_to_cam[None].float(), cam.K[None].float(), cam.width, cam.height))
    return out, found[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", help="a 2dgs run folder (default: the synthetic case b scene)")
    ap.add_argument("--views", type=int, nargs="+", default=[0, 40, 80, 120], help="training views of --run")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    from bench_rasterizer import machine  # scripts/ is sys.path[0] when this script runs

    if args.run:
        views, step = run_views(args.run, args.views)
        scene = {"run": args.run, "step": step, "views": args.views}
    else:
        views, scene = synthetic_view(), {"scene": "bench_rasterizer case b"}
    results = []
    for view in views:
        results.append(measure(view, args.repeats, args.warmup))
        print(json.dumps(results[-1]), file=_sys.stderr, flush=True)
    print(json.dumps({"machine": machine(), **scene, "results": results}, indent=2))


if __name__ == "__main__":
    main()
