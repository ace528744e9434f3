#!/usr/bin/env python
"""Neural fields side by side (issue 54), printed as JSON: encodings (hash grid, dense grids, tri-plane) and decoders
(MLP, Gaussian RBF layer), each pair with the defaults the CLI gives it.

1. ``layer``: one decoder head at a NeRF step's sample count (``--samples``, default 65,536), forward and backward,
   median of ``--repeats`` interleaved runs (same load for all): the RBF layer through its three implementations
   (Numba kernels, matrix products, the chunked reference: fewer repeats) and the MLP it replaces, at the density
   head's shape (16 features -> 64 -> 16) and the colour head's (32 -> 64 -> 64 -> 3).
   ``grid_rbf``: the whole head on the dense grids (--field.encoding dense: 4 levels of 4 features, 16 to 128 cells):
   the fused grid + RBF kernel against the unfused path (encoding kernel, then the matrix products), forward and
   backward CPU milliseconds (medians, interleaved), at the SDF fit's shape (16,384 points, 64 neurons, 1 output) and
   the NeRF density head's (--samples points, 256 neurons, 16 outputs).
2. ``radiance`` (unless ``--no-radiance``): ``--method nerf`` on ``--data`` at ``--data-factor`` once per pair of
   ``--radiance-fields`` (default hash + mlp, the nerf preset's field; dense + rbf; triplane + rbf), their steps
   interleaved one by one (the machine's load hits all alike) for ``--steps`` steps; then the test PSNR over every
   ``--test-every``-th test view and the seconds of one test-view render. Parameters counted; wall and CPU seconds of
   training, and each field's CPU seconds and parameters as ratios to hash + mlp's within the run.
   ``--radiance-curve N``: also that test PSNR every N steps against the training CPU seconds so far (``curve``;
   each point printed to stderr as it comes), to compare the fields per CPU second when a run is cut short. Each
   point and field also has the occupancy grid's occupied cells and the samples per ray (what a render marches).
   ``dense+rbf64`` / ``dense+rbf128``: dense + rbf with 64 / 128 neurons per head (``--field.rbf-neurons``);
   ``dense+rbf-bias0``: dense + rbf whose density starts at exp(0) (``--field.rbf-density-bias 0``, the start before
   7 Dec 2026). ``dense8x2+rbf128``: 128 neurons on 8 dense levels of 2 features, 16 to 144 cells (10.0M grid values
   against the default's 9.85M; the same 16 features into the heads).
3. ``shapes`` (unless ``--no-shapes``): `splatforge sdf fit` on ``--mesh`` (default spot) with each pair of
   ``--fields`` (default all four: hash + mlp, dense + rbf (the fused grid + RBF kernel on the CPU), triplane + rbf,
   triplane + mlp), each for every count of ``--sdf-steps``, all fits from one
   pool of samples (drawn once, its seconds reported apart); per fit: fitting seconds (wall and CPU), Chamfer distance
   in % of the bounding diagonal and normal consistency of the marching-cubes mesh at ``--sdf-resolution`` (256),
   the seconds of that extraction; then, per field, the fewest steps (and their seconds) that reach
   ``--chamfer-bound`` (0.2 %), and each field's ratio of those CPU seconds to hash + mlp's.
4. ``images`` (unless ``--no-images``): each image of ``--images`` (default the shared Kodak 1-12) fitted with
   ``--image-gaussians`` image Gaussians (`image fit`'s defaults: ``--image-steps`` 3,000) and then with a Gaussian RBF
   field at the same parameter count (N (5 + C); `image fit --model rbf`'s defaults otherwise, ``--rbf-steps``), one
   after the other per image; per image and on average: parameters, PSNR, CPU seconds of the fit; the target (issue
   54): mean RBF PSNR within 1 dB of the Gaussians' (or better) in no more CPU time.

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
# encoding + decoder side by side (the sdf fit / --field defaults of each, as the CLI builds them)
SHAPE_FIELDS = {"hash+mlp": dict(encoding="hash", decoder="mlp"), "dense+rbf": dict(encoding="dense", decoder="rbf"),
                "triplane+rbf": dict(encoding="triplane", decoder="rbf"),
                "triplane+mlp": dict(encoding="triplane", decoder="mlp")}
# the radiance section's pairs: the shapes', dense + rbf with 64 or 128 neurons per head (4x / 2x fewer than the
# default: the layer's cost is linear in the neurons) and dense + rbf started at sigma = exp(0)
# (--field.rbf-density-bias 0, the start before 7 Dec 2026: its occupancy grid pruned late); 8 finer-spaced dense
# levels of 2 features up to 144 cells (the same 16 features, about the same grid values)
RADIANCE_FIELDS = {**SHAPE_FIELDS, "dense+rbf64": dict(encoding="dense", decoder="rbf", rbf_neurons=64),
                   "dense+rbf128": dict(encoding="dense", decoder="rbf", rbf_neurons=128),
                   "dense+rbf-bias0": dict(encoding="dense", decoder="rbf", rbf_density_bias=0.0),
                   "dense8x2+rbf128": dict(encoding="dense", decoder="rbf", rbf_neurons=128, dense_levels=8,
                                           dense_features=2, dense_max_res=144)}


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


def bench_grid_rbf(samples: int, repeats: int) -> dict:
    """Fused against unfused grid + RBF heads, CPU milliseconds (module docstring)."""
    from recon.nerf.config import FieldConfig
    from recon.nerf.grid_rbf import grid_rbf_numba, grid_rbf_unfused
    from recon.nerf.hash_encoding import hash_encode, init_table, level_layout
    from recon.nerf.rbf import FEATURE_INIT

    gen = torch.Generator().manual_seed(0)
    grid = FieldConfig().dense_grid()
    res, off = level_layout(grid)
    table = init_table(off, grid.features, gen, scale=FEATURE_INIT).requires_grad_()
    result = {}
    for head, (n, k, o) in {"sdf": (1 << 14, 64, 1), "nerf_density": (samples, 256, 16)}.items():
        x = torch.rand(n, 3, generator=gen)
        with torch.no_grad():
            layer = RBFLayer(grid.output_dim, k, o, gen, sample=hash_encode(x[:4096], table, res, off))
        p = [table, res, off, layer.centres, layer.log_precision, layer.weight, layer.bias]
        times = {"fused": ([], []), "unfused": ([], [])}
        for r in range(repeats + 1):
            for name, fn in (("fused", grid_rbf_numba), ("unfused", grid_rbf_unfused)):
                for t in (table, *layer.parameters()):
                    t.grad = None
                c0 = time.process_time()
                out = fn(x, *p)
                c1 = time.process_time()
                out.sum().backward()
                if r:
                    times[name][0].append(c1 - c0)
                    times[name][1].append(time.process_time() - c1)
        result[head] = {"shape": {"points": n, "features": grid.output_dim, "neurons": k, "outputs": o},
                        **{name: {"forward_cpu_ms": round(1e3 * statistics.median(a), 1),
                                  "backward_cpu_ms": round(1e3 * statistics.median(b), 1)}
                           for name, (a, b) in times.items()}}
        result[head]["speedup_fused"] = round(sum(map(statistics.median, times["unfused"])) /
                                              sum(map(statistics.median, times["fused"])), 2)
    return result


def _trainer(data: Path, data_factor: int, steps: int, field):
    from recon.training.presets import preset_config
    from recon.training.trainer import Trainer

    cfg = preset_config("nerf", data=data, data_factor=data_factor, steps=steps, progress=False, device="cpu",
                        out=Path("unused"))
    cfg = dataclasses.replace(cfg, field=field)
    return Trainer(cfg, log=lambda s: None, writes_outputs=False)


def _marching(model) -> dict:
    """What a render of ``model`` marches: the occupancy grid's occupied cells and the training's running estimate of
    samples per ray (a young RBF field started at sigma = exp(0) kept about half its cells occupied: its renders
    marched 3-5x the hash NeRF's samples; started at exp(-2), about as many as the hash NeRF's)."""
    return {"occupied_cells": model.grid.occupied, "samples_per_ray": round(float(model.samples_per_ray), 1)}


def bench_radiance(data: Path, data_factor: int, steps: int, test_every: int,
                   names: list[str] = ("hash+mlp", "dense+rbf"), curve_every: int | None = None) -> dict:
    """Two NeRF fields trained with interleaved steps, then evaluated (module docstring); ``curve_every``: also
    the test PSNR every that many steps against the training CPU seconds so far (``curve``, printed to stderr as
    it runs; the evaluations' own seconds are not counted)."""
    from recon.nerf.config import FieldConfig

    fields = {name: FieldConfig(**RADIANCE_FIELDS[name]) for name in names}
    trainers = {name: _trainer(data, data_factor, steps, f) for name, f in fields.items()}
    n_test = {name: len(tr.scene.frames_test) for name, tr in trainers.items()}
    for tr in trainers.values():
        tr.scene.frames_test = tr.scene.frames_test[::test_every]
    seconds = {name: 0.0 for name in fields}
    cpu = {name: 0.0 for name in fields}
    curve = {name: [] for name in fields}
    for step in range(steps):
        for name, tr in trainers.items():
            t0, c0 = time.perf_counter(), time.process_time()
            tr.advance(step)
            seconds[name] += time.perf_counter() - t0
            cpu[name] += time.process_time() - c0
        if curve_every and (step + 1) % curve_every == 0 and step + 1 < steps:
            for name, tr in trainers.items():
                point = {"step": step + 1, "train_cpu_seconds": round(cpu[name], 1),
                         "test_psnr": round(tr.evaluate(None)["psnr"], 3), **_marching(tr.model)}
                curve[name].append(point)
                print(json.dumps({"radiance": name, **point, "load_average": os.getloadavg()[0]}),
                      file=_sys.stderr, flush=True)
    out = {}
    for name, tr in trainers.items():
        test = tr.evaluate(None)
        cam = tr.scene.frames_test[0].camera if hasattr(tr.scene.frames_test[0], "camera") else None
        render_s = render_cpu = None
        if cam is not None:
            t0, c0 = time.perf_counter(), time.process_time()
            with torch.no_grad():
                tr.model.render([cam])
            render_s, render_cpu = round(time.perf_counter() - t0, 3), round(time.process_time() - c0, 3)
        out[name] = {"field": dataclasses.asdict(fields[name]), "parameters": parameter_count(tr.model.field),
                     "train_seconds": round(seconds[name], 1), "train_cpu_seconds": round(cpu[name], 1),
                     "test_psnr": round(test["psnr"], 3),
                     "test_ssim": round(test["ssim"], 4), "test_views": f"{test['num_views']} of {n_test[name]}",
                     "render_seconds_one_view": render_s, "render_cpu_seconds_one_view": render_cpu,
                     **_marching(tr.model)}
        if curve_every:
            out[name]["curve"] = curve[name] + [{"step": steps, "train_cpu_seconds": round(cpu[name], 1),
                                                 "test_psnr": round(test["psnr"], 3)}]
    if "hash+mlp" in out:  # every other field against the hash-grid NeRF
        base = out["hash+mlp"]
        for name in fields:
            if name != "hash+mlp":
                out[name]["cpu_time_ratio_over_hash_mlp"] = round(cpu[name] / max(cpu["hash+mlp"], 1e-9), 3)
                out[name]["parameter_ratio_over_hash_mlp"] = round(out[name]["parameters"] / base["parameters"], 3)
    out["data"], out["data_factor"], out["steps"] = str(data), data_factor, steps
    return out


def bench_shapes(mesh: Path, steps_list: list[int], resolution: int, bound: float,
                 names: list[str] = tuple(SHAPE_FIELDS)) -> dict:
    """Both SDF fields at each step count on one pool of samples (module docstring)."""
    import numpy as np

    from recon.geometry.mesh_metrics import chamfer_distance, normal_consistency
    from recon.geometry.sdf_fit import Normalisation, SDFConfig, extract_mesh, fit_sdf, load_closed_mesh, sdf_samples

    vertices, faces, _ = load_closed_mesh(mesh)
    t0 = time.perf_counter()
    pool = sdf_samples(vertices, faces, Normalisation.of(vertices), SDFConfig().pool,
                       np.random.default_rng(SDFConfig().seed))
    out = {"mesh": str(mesh), "resolution": resolution, "chamfer_bound_pct": bound,
           "sample_seconds": round(time.perf_counter() - t0, 1), "fits": []}
    fields = {name: SHAPE_FIELDS[name] for name in names}
    for steps in steps_list:
        for name, kw in fields.items():
            cfg = SDFConfig(steps=steps, resolution=resolution, **kw)
            c0 = time.process_time()
            field, norm, info = fit_sdf(vertices, faces, cfg, samples=pool)
            cpu = time.process_time() - c0
            t1 = time.perf_counter()
            mv, mf = extract_mesh(field, norm, resolution)
            extract_s = time.perf_counter() - t1
            out["fits"].append({"field": name, "steps": steps, "parameters": info["parameters"],
                                "fit_seconds": round(info["seconds"], 2), "fit_cpu_seconds": round(cpu, 2),
                                "chamfer_pct": round(chamfer_distance(mv, mf, vertices, faces)["chamfer_pct"], 4),
                                "normal_consistency": round(normal_consistency(mv, mf, vertices, faces), 4),
                                "extract_seconds": round(extract_s, 1)})
    for name in fields:
        ok = [f for f in out["fits"] if f["field"] == name and f["chamfer_pct"] <= bound]
        first = min(ok, key=lambda f: f["steps"]) if ok else None
        out[f"{name}_reaches_bound"] = (None if first is None else
                                        {k: first[k] for k in ("steps", "fit_seconds", "fit_cpu_seconds")})
    b = out.get("hash+mlp_reaches_bound")
    for name in fields:  # CPU seconds to the bound against hash + mlp's
        a = out[f"{name}_reaches_bound"]
        if name != "hash+mlp":
            out[f"{name}_cpu_time_ratio_over_hash_mlp_to_bound"] = (
                round(a["fit_cpu_seconds"] / b["fit_cpu_seconds"], 2) if a and b else None)
    return out


def bench_images(folder: Path, gaussians: int, gauss_steps: int, rbf_steps: int | None, limit: int | None) -> dict:
    """Image Gaussians against Gaussian RBF fields at equal parameters, image by image (module docstring)."""
    from recon.image.fit import FitConfig, fit_image
    from recon.image.io import read_image
    from recon.image.rbf_fit import RBFFitConfig, fit_rbf_image

    rows = []
    for path in sorted(folder.glob("*.png"))[:limit]:
        pixels = read_image(path).pixels
        channels = pixels.shape[2]
        row = {"image": path.name}
        c0 = time.process_time()
        g = fit_image(pixels, FitConfig(gaussians=gaussians, steps=gauss_steps))
        row["gaussians"] = {"parameters": g.model.n * (5 + channels), "steps": gauss_steps,
                            "psnr": round(g.psnr, 3), "fit_cpu_seconds": round(time.process_time() - c0, 1)}
        cfg = RBFFitConfig(parameters=gaussians * (5 + channels))
        cfg = dataclasses.replace(cfg, steps=rbf_steps) if rbf_steps else cfg
        c0 = time.process_time()
        r = fit_rbf_image(pixels, cfg)
        row["rbf"] = {"parameters": r.model.parameters, "steps": cfg.steps, "psnr": round(r.psnr, 3),
                      "fit_cpu_seconds": round(time.process_time() - c0, 1)}
        rows.append(row)
        print(json.dumps(row), file=_sys.stderr, flush=True)
    mean = {m: {k: round(statistics.mean(r[m][k] for r in rows), 3) for k in ("psnr", "fit_cpu_seconds")}
            for m in ("gaussians", "rbf")}
    gap = mean["gaussians"]["psnr"] - mean["rbf"]["psnr"]
    ratio = mean["rbf"]["fit_cpu_seconds"] / mean["gaussians"]["fit_cpu_seconds"]
    rbf_cfg = dataclasses.asdict(RBFFitConfig(steps=rbf_steps) if rbf_steps else RBFFitConfig())
    rbf_cfg.pop("parameters")
    return {"folder": str(folder), "images": rows, "mean": mean, "rbf_config": rbf_cfg,
            "psnr_gap_db": round(gap, 3), "cpu_time_ratio_rbf_over_gaussians": round(ratio, 3),
            "target_met": bool(gap <= 1.0 and ratio <= 1.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1 << 16)
    ap.add_argument("--neurons", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data", type=Path, default=SHARED / "lego_400")
    ap.add_argument("--data-factor", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--test-every", type=int, default=10, help="evaluate every Nth test view")
    ap.add_argument("--radiance-curve", type=int, default=None, metavar="N",
                    help="radiance: also evaluate every N steps (test PSNR against training CPU seconds)")
    ap.add_argument("--no-radiance", action="store_true")
    ap.add_argument("--no-layer", action="store_true")
    ap.add_argument("--no-shapes", action="store_true")
    ap.add_argument("--mesh", type=Path, default=SHARED / "meshes" / "spot" / "spot_triangulated.obj")
    ap.add_argument("--sdf-steps", type=int, nargs="+", default=[25, 50, 150, 300, 600])
    ap.add_argument("--sdf-resolution", type=int, default=256)
    ap.add_argument("--chamfer-bound", type=float, default=0.2, help="in %% of the bounding diagonal")
    ap.add_argument("--fields", nargs="+", choices=list(SHAPE_FIELDS), default=list(SHAPE_FIELDS),
                    help="encoding+decoder pairs of the shapes section")
    ap.add_argument("--radiance-fields", nargs="+", choices=list(RADIANCE_FIELDS),
                    default=["hash+mlp", "dense+rbf", "triplane+rbf"], help="pairs of the radiance section")
    ap.add_argument("--no-images", action="store_true")
    ap.add_argument("--images", type=Path, default=SHARED / "images2d" / "kodak12")
    ap.add_argument("--image-limit", type=int, default=None, help="only the first N images")
    ap.add_argument("--image-gaussians", type=int, default=25_000)
    ap.add_argument("--image-steps", type=int, default=3000, help="the image Gaussians' steps")
    ap.add_argument("--rbf-steps", type=int, default=None, help="the RBF fields' steps (default: image fit's)")
    args = ap.parse_args()
    report = {"machine": machine()}
    if not args.no_layer:
        report["layer"] = bench_layer(args.samples, args.neurons, args.repeats)
        report["grid_rbf"] = bench_grid_rbf(args.samples, args.repeats)
    if not args.no_shapes:
        report["shapes"] = bench_shapes(args.mesh, args.sdf_steps, args.sdf_resolution, args.chamfer_bound,
                                        args.fields)
    if not args.no_radiance:
        report["radiance"] = bench_radiance(args.data, args.data_factor, args.steps, args.test_every,
                                            args.radiance_fields, args.radiance_curve)
    if not args.no_images:
        report["images"] = bench_images(args.images, args.image_gaussians, args.image_steps, args.rbf_steps,
                                        args.image_limit)
    report["machine"]["load_average_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
