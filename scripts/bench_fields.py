#!/usr/bin/env python
"""Neural-field decoders side by side (issue 54), printed as JSON: MLP + hash grid against Gaussian RBF + dense grid.

1. ``layer``: one decoder head at a NeRF step's sample count (``--samples``, default 65,536), forward and backward,
   median of ``--repeats`` interleaved runs (same load for all): the RBF layer through its three implementations
   (Numba kernels, matrix products, the chunked reference: fewer repeats) and the MLP it replaces, at the density
   head's shape (16 features -> 64 -> 16) and the colour head's (32 -> 64 -> 64 -> 3).
2. ``radiance`` (unless ``--no-radiance``): ``--method nerf`` on ``--data`` at ``--data-factor`` twice, hash + mlp
   (the default field) and ``--field.encoding dense --field.decoder rbf``, their steps interleaved one by one (the
   machine's load hits both alike) for ``--steps`` steps; then the test PSNR over every ``--test-every``-th test view
   and the seconds of one test-view render. Parameters counted; times as the ratio rbf / mlp within the run.
3. ``image`` (with ``--images``): `splatforge image fit --model rbf` against image Gaussians at the same parameter
   count on each image (PSNR, seconds; recon/image/rbf_image.py).

The machine (CPU count, torch threads, load average before and after) is in the output: timings on a shared
machine are only comparable within one run.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from recon.nerf.field import mlp, parameter_count  # noqa: E402
from recon.nerf.rbf import RBFLayer, rbf_matmul, rbf_numba, rbf_reference  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
HEADS = {"density": (16, 16, 1), "color": (32, 3, 2)}  # name -> (inputs, outputs, MLP hidden layers)


def machine() -> dict:
    return {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "processor": platform.processor(),
            "python": platform.python_version(), "torch": torch.__version__, "load_average": os.getloadavg()}


def _time_once(fn, inputs) -> tuple[float, float]:
    for t in inputs:
        t.grad = None
    t0 = time.perf_counter()
    out = fn()
    t1 = time.perf_counter()
    out.sum().backward()
    return t1 - t0, time.perf_counter() - t1


def bench_layer(samples: int, neurons: int, repeats: int) -> dict:
    """Forward / backward medians (ms) of each implementation at each head's shape (module docstring)."""
    gen = torch.Generator().manual_seed(0)
    result = {}
    for head, (d_in, d_out, layers) in HEADS.items():
        f = ((torch.rand(samples, d_in, generator=gen) * 2 - 1) * 0.1).requires_grad_()
        layer = RBFLayer(d_in, neurons, d_out, gen, sample=f.detach()[:4096])
        net = mlp(d_in, 64, d_out, layers)
        p = [layer.centres, layer.log_precision, layer.weight, layer.bias]
        runs = {"rbf_numba": lambda: rbf_numba(f, *p), "rbf_matmul": lambda: rbf_matmul(f, *p),
                "mlp": lambda: net(f)}
        times = {name: ([], []) for name in runs}
        for r in range(repeats + 1):
            for name, fn in runs.items():
                fwd, bwd = _time_once(fn, [f, *p, *net.parameters()])
                if r:  # the first round compiles / warms up
                    times[name][0].append(fwd)
                    times[name][1].append(bwd)
        ref = [_time_once(lambda: rbf_reference(f, *p), [f, *p]) for _ in range(max(1, repeats // 3))]
        times["rbf_reference"] = ([a for a, _ in ref], [b for _, b in ref])
        result[head] = {"shape": {"samples": samples, "inputs": d_in, "neurons": neurons, "outputs": d_out},
                        "parameters": {"rbf": parameter_count(layer), "mlp": parameter_count(net)},
                        **{name: {"forward_ms": round(1e3 * statistics.median(a), 2),
                                  "backward_ms": round(1e3 * statistics.median(b), 2)} for name, (a, b) in times.items()}}
    return result


def _trainer(data: Path, data_factor: int, steps: int, field):
    from recon.training.presets import preset_config
    from recon.training.trainer import Trainer

    cfg = preset_config("nerf", data=data, data_factor=data_factor, steps=steps, progress=False, device="cpu",
                        out=Path("unused"))
    cfg = dataclasses.replace(cfg, field=field)
    return Trainer(cfg, log=lambda s: None, writes_outputs=False)


def bench_radiance(data: Path, data_factor: int, steps: int, test_every: int) -> dict:
    """Two NeRF fields trained with interleaved steps, then evaluated (module docstring)."""
    from recon.nerf.config import FieldConfig

    fields = {"hash+mlp": FieldConfig(), "dense+rbf": FieldConfig(encoding="dense", decoder="rbf")}
    trainers = {name: _trainer(data, data_factor, steps, f) for name, f in fields.items()}
    seconds = {name: 0.0 for name in fields}
    for step in range(steps):
        for name, tr in trainers.items():
            t0 = time.perf_counter()
            tr.advance(step)
            seconds[name] += time.perf_counter() - t0
    out = {}
    for name, tr in trainers.items():
        n_test = len(tr.scene.frames_test)
        tr.scene.frames_test = tr.scene.frames_test[::test_every]
        test = tr.evaluate(None)
        cam = tr.scene.frames_test[0].camera if hasattr(tr.scene.frames_test[0], "camera") else None
        render_s = None
        if cam is not None:
            t0 = time.perf_counter()
            with torch.no_grad():
                tr.model.render([cam])
            render_s = round(time.perf_counter() - t0, 3)
        out[name] = {"field": dataclasses.asdict(fields[name]), "parameters": parameter_count(tr.model.field),
                     "train_seconds": round(seconds[name], 1), "test_psnr": round(test["psnr"], 3),
                     "test_ssim": round(test["ssim"], 4), "test_views": f"{test['num_views']} of {n_test}",
                     "render_seconds_one_view": render_s}
    out["time_ratio_rbf_over_mlp"] = round(seconds["dense+rbf"] / seconds["hash+mlp"], 3)
    out["parameter_ratio_rbf_over_mlp"] = round(out["dense+rbf"]["parameters"] / out["hash+mlp"]["parameters"], 3)
    out["data"], out["data_factor"], out["steps"] = str(data), data_factor, steps
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1 << 16)
    ap.add_argument("--neurons", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data", type=Path, default=SHARED / "lego_400")
    ap.add_argument("--data-factor", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--test-every", type=int, default=10, help="evaluate every Nth test view")
    ap.add_argument("--no-radiance", action="store_true")
    ap.add_argument("--no-layer", action="store_true")
    args = ap.parse_args()
    report = {"machine": machine()}
    if not args.no_layer:
        report["layer"] = bench_layer(args.samples, args.neurons, args.repeats)
    if not args.no_radiance:
        report["radiance"] = bench_radiance(args.data, args.data_factor, args.steps, args.test_every)
    report["machine"]["load_average_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
