#!/usr/bin/env python
"""Fused hash encoding + MLP against the unfused path (issue 53), printed as JSON.

For each ``--samples`` count: the NeRF density decoder (the nerf preset's hash grid, 16 levels x 2 features,
2^19 rows; Linear(32, 64), ReLU, Linear(64, 16), no biases) on points uniform in a box of side 0.4 (about the
occupied part of lego's unit cube), evaluated (a) unfused: recon.nerf.hash_encoding.hash_encode_numba then the
torch MLP, (b) fused: recon.nerf.fused_encoding_mlp.encode_mlp_numba; forward without gradients (rendering,
the occupancy update, the no-gradient pass of a training step) and forward + backward (a training step's
gradient pass). Per case the median over ``--repeats`` runs (after one warm-up) of the process CPU seconds
(robust on a shared machine: waiting for a core is not counted) and of the wall seconds; the two paths are
alternated run by run. The machine and the load average before and after are in the output.
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

from recon.nerf.field import mlp  # noqa: E402
from recon.nerf.fused_encoding_mlp import encode_mlp_numba  # noqa: E402
from recon.nerf.hash_encoding import HashGridConfig, hash_encode_numba, init_table, level_layout  # noqa: E402


def load_average() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def paths(n: int, seed: int = 0):
    """{name: (forward, forward + backward)} callables of the unfused and fused paths on n points."""
    g = torch.Generator().manual_seed(seed)
    res, offsets = level_layout(HashGridConfig())
    table = init_table(offsets, 2, g).requires_grad_()
    u = 0.3 + 0.4 * torch.rand(n, 3, generator=g)
    net = mlp(32, 64, 16, 1)
    upstream = torch.randn(n, 16, generator=g)

    def unfused():
        return net(hash_encode_numba(u, table, res, offsets))

    def fused():
        return encode_mlp_numba(u, None, table, res, offsets, 16, net)

    def forward(fn):
        def run():
            with torch.no_grad():
                fn()
        return run

    def train(fn):
        def run():
            (fn() * upstream).sum().backward()
        return run

    return {"unfused": (forward(unfused), train(unfused)), "fused": (forward(fused), train(fused))}


def measure(n: int, repeats: int) -> dict:
    cases = paths(n)
    times = {(name, kind): ([], []) for name in cases for kind in ("forward", "forward_backward")}
    for rep in range(repeats + 1):
        for name, (fwd, train) in cases.items():
            for kind, fn in (("forward", fwd), ("forward_backward", train)):
                c, w = time.process_time(), time.perf_counter()
                fn()
                if rep:  # the first round warms up (and compiles)
                    times[(name, kind)][0].append(time.process_time() - c)
                    times[(name, kind)][1].append(time.perf_counter() - w)
    out = {"samples": n}
    for (name, kind), (cpu, wall) in times.items():
        out[f"{name}_{kind}"] = {"cpu_s": round(statistics.median(cpu), 5), "wall_s": round(statistics.median(wall), 5)}
    for kind in ("forward", "forward_backward"):
        out[f"speedup_{kind}_cpu"] = round(out[f"unfused_{kind}"]["cpu_s"] / out[f"fused_{kind}"]["cpu_s"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", default="4096,16384,65536", help="comma-separated point counts")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    report = {"benchmark": "fused_encoding_mlp",
              "machine": {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                          "numba_threads": numba.get_num_threads(), "torch_threads": torch.get_num_threads(),
                          "python": platform.python_version(), "torch": torch.__version__,
                          "numba": numba.__version__},
              "load_average_before": load_average()}
    report["sizes"] = [measure(int(n), args.repeats) for n in args.samples.split(",")]
    report["load_average_after"] = load_average()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
