#!/usr/bin/env python
"""The fixed cost of one cpu render without gradients (docs/lod.md, issue 48); prints JSON.

One Gaussian (SH degree 3, a white background) rendered by ``rasterize_gaussians(..., backend="cpu")`` under
``torch.no_grad()`` into each image size of ``--sizes``: what a render costs besides its Gaussians and pixels
(input checks, kernel launches, tile set-up and write-out, the background blend, Python and PyTorch glue).
Per size: ``--calls`` renders timed together, ``--repeats`` times after a warm-up; the median and the runs of
the CPU time of the process per call (and wall time). Run it with ``OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1`` for
the one-thread figures of docs/lod.md.

Example: OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python scripts/bench_render_fixed.py --sizes 240x136 96x64
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numba  # noqa: E402
import torch  # noqa: E402

from rasterizer import rasterize_gaussians  # noqa: E402


def one_gaussian_render(width: int, height: int):
    """A no-argument function rendering one Gaussian in front of a pinhole camera (focal 0.8 x width)."""
    g = torch.Generator().manual_seed(0)
    means = torch.randn(1, 3, generator=g) * 0.3 + torch.tensor([0.0, 0.0, 4.0])
    quats = torch.nn.functional.normalize(torch.randn(1, 4, generator=g), dim=-1)
    scales, opacities = torch.full((1, 3), 0.02), torch.full((1,), 0.5)
    sh = torch.randn(1, 16, 3, generator=g) * 0.1
    viewmats = torch.eye(4)[None]
    Ks = torch.tensor([[[width * 0.8, 0, width / 2], [0, width * 0.8, height / 2], [0, 0, 1.0]]])
    background = torch.ones(1, 3)

    def render():
        with torch.no_grad():
            return rasterize_gaussians(means, quats, scales, opacities, sh, viewmats, Ks, width, height, sh_degree=3,
                                       backend="cpu", backgrounds=background)
    return render


def time_calls(render, calls: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per call of ``calls`` calls."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        render()
    return (time.process_time() - cpu) / calls, (time.perf_counter() - wall) / calls


def size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes: {text!r} is not WIDTHxHEIGHT (e.g. 240x136)") from None
    if w <= 0 or h <= 0:
        raise argparse.ArgumentTypeError(f"--sizes: {text!r} needs a positive width and height")
    return w, h


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="+", type=size, default=[(240, 136), (96, 64)], help="WIDTHxHEIGHT ...")
    p.add_argument("--calls", type=int, default=500, help="renders timed together")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per size (median)")
    args = p.parse_args()
    if args.calls < 1 or args.repeats < 1:
        p.error("--calls and --repeats must be >= 1")
    out = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "load_average_1min": round(os.getloadavg()[0], 2), "torch_threads": torch.get_num_threads(),
                       "numba_threads": numba.get_num_threads()}, "sizes": []}
    for w, h in args.sizes:
        render = one_gaussian_render(w, h)
        time_calls(render, 20)  # warm-up (compilation, caches)
        runs = [time_calls(render, args.calls) for _ in range(args.repeats)]
        out["sizes"].append({"width": w, "height": h, "cpu_ms_median": 1e3 * statistics.median(c for c, _ in runs),
                             "cpu_ms_runs": [round(1e3 * c, 4) for c, _ in runs],
                             "wall_ms_median": 1e3 * statistics.median(wt for _, wt in runs)})
    out["machine"]["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
