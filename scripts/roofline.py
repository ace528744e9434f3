#!/usr/bin/env python
"""A measured roofline of one training step (issue 53), printed as JSON, with roofline.png beside it.

1. The machine's roofs, measured in this run (scripts/roofline_peaks.py): float32 flop/s of a Numba FMA
   loop on the threads, bytes/s of a stream copy.
2. The 3DGS step (scripts/bench_train.py's problem: colmap_bird at --data-factor 2, about 6.3k Gaussians,
   480 x 272; the procedural 480 x 272 scene with 6,500 random Gaussians without it) and the NeRF step
   (the nerf preset on lego_400 at --data-factor 2; procedural without it), and the 2DGS (colmap_bird) and
   4DGS (dnerf_mutant) steps at --data-factor 2, whose own kernels (surfel projection and compositing, 4D
   slicing) are timed but their work not counted yet: each kernel timed where it
   runs inside real training steps (scripts/roofline_timing.py), its median seconds per step, its share
   of the step (its mean seconds over the mean step: the shares and the rest's add up to 1), its work
   (flops and bytes, counted from the problem sizes by the rule printed beside it:
   scripts/roofline_work.py), arithmetic intensity, achieved flop/s and bytes/s, and the fraction of its
   roof: max(achieved flop/s / compute roof, achieved bytes/s / memory roof), which is achieved /
   min(compute roof, intensity x memory roof); launch_floor_share: the part of the kernel's time that
   empty parallel Numba launches take (near 1: launch-bound, too little work to fill the threads). What
   no kernel entry covers (PyTorch glue: activations, the L1 loss, conversions, zeroing gradients,
   densification bookkeeping) is the step's "rest".
3. With several --threads counts (e.g. ``--threads 1,2``), everything at each, and per kernel the
   speed-up from the first count to the last.

--quick: a small problem (procedural scenes at 64 x 64, few steps) for tests and a first look.
Timings on a shared machine are upper bounds; the load average is in the output.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
_sys.path.insert(0, str(_Path(__file__).resolve().parent))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numba  # noqa: E402
import torch  # noqa: E402

import roofline_work as W  # noqa: E402
from roofline_peaks import launch_overhead, peak_bandwidth, peak_flops  # noqa: E402
from roofline_timing import KernelTimer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
GROUPS = ("3dgs", "2dgs", "4dgs", "nerf")


def load_average() -> list[float]:
    try:
        return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


# ---------------------------------------------------------------------------- the problems
def gaussian_trainer(quick: bool, tmp: Path):
    """(trainer, description) of the 3DGS step: bench_train's problem, or a 64 x 64 procedural one."""
    from recon.data.frame_images import FrameImages
    from recon.data.procedural_scene import procedural_scene
    from recon.models.gaussians import GaussianModel
    from recon.training.trainer import TrainConfig, Trainer

    bird = SHARED / "colmap_bird"
    if bird.is_dir() and not quick:
        cfg = TrainConfig(data=bird, out=tmp, data_factor=2, progress=False, device="cpu")
        return Trainer(cfg, log=lambda *a: None, writes_outputs=False), "colmap_bird --data-factor 2"
    w, h, n = (64, 64, 800) if quick else (480, 272, 6500)
    cfg = TrainConfig(out=tmp, progress=False, device="cpu")
    trainer = Trainer(cfg, log=lambda *a: None, writes_outputs=False)
    trainer.scene = procedural_scene(width=w, height=h)
    trainer.images = FrameImages(trainer.scene.frames_train, trainer.device)
    g = torch.Generator().manual_seed(0)
    trainer.model = GaussianModel.random_in_box(n, (0.0, 0.25, 0.0), 1.0, 3, trainer.scene.extent, generator=g)
    trainer.strategy_state = trainer.strategy.initialize_state(trainer.model)
    return trainer, f"procedural {w}x{h}, {n} random Gaussians"


def nerf_trainer(quick: bool, tmp: Path):
    """(trainer, description) of the NeRF step: the nerf preset on lego_400 at data factor 2, or a small
    procedural one."""
    from recon.training.presets import preset_config
    from recon.training.trainer import Trainer

    lego = SHARED / "lego_400"
    if lego.is_dir() and not quick:
        cfg = preset_config("nerf", data=lego, data_factor=2, steps=20_000, progress=False, device="cpu", out=tmp)
        return Trainer(cfg, log=lambda *a: None, writes_outputs=False), "nerf preset, lego_400 --data-factor 2"
    cfg = preset_config("nerf", data_factor=2, steps=20_000, progress=False, device="cpu", out=tmp)
    cfg = dataclasses.replace(cfg, nerf=dataclasses.replace(cfg.nerf, target_samples=1 << 12, max_rays=512,
                                                            hash_log2_table=14))
    return (Trainer(cfg, log=lambda *a: None, writes_outputs=False),
            "nerf preset, procedural 64x64, 4096 samples, hash table 2^14")


def method_trainer(method: str, dataset: str, quick_data: str):
    """A maker of (trainer, description) for ``method`` on ../shared/data/``dataset`` at data factor 2, or on
    the procedural scene ``quick_data`` (--quick, or without the dataset)."""

    def make(quick: bool, tmp: Path):
        from recon.training.trainer import TrainConfig, Trainer

        data = SHARED / dataset
        if data.is_dir() and not quick:
            cfg = TrainConfig(method=method, data=data, out=tmp, data_factor=2, progress=False, device="cpu")
            return Trainer(cfg, log=lambda *a: None, writes_outputs=False), f"{method}, {dataset} --data-factor 2"
        cfg = TrainConfig(method=method, data=Path(quick_data), out=tmp, data_factor=2, progress=False, device="cpu")
        return Trainer(cfg, log=lambda *a: None, writes_outputs=False), f"{method}, {quick_data} --data-factor 2"

    return make


# ---------------------------------------------------------------------------- what is timed
def gaussian_kernels(timer: KernelTimer, model) -> list[tuple[str, object]]:
    """Wrap the 3DGS step's kernels; [(name, work function of the calls)]."""
    import importlib

    import rasterizer.cpu.binning as B
    import rasterizer.cpu.compositing as K
    import rasterizer.cpu.projection_kernels as PK
    import rasterizer.cpu.sh as SH
    import recon.losses.ssim as SS

    CO = importlib.import_module("rasterizer.cpu.composite")  # the package's ``composite`` is the function

    table = [
        (PK, "project_forward_kernel", "projection forward", W.project_forward),
        (SH, "sh_forward_kernel", "SH colour forward", W.sh_forward),
        (CO, "depth_order", "depth sort (radix)", W.depth_sort),
        (B, "gaussian_extents", "binning: tile reach test", W.tile_extents),
        (B, "touched_tiles", "binning: tile lists", W.tile_lists),
        (B, "sort_pairs_by_tile", "binning: sort by tile (counting)", W.tile_sort),
        (K, "pack_intersections", "pack intersections", W.pack),
        (K, "forward_kernel", "composite forward", W.composite_forward),
        (SS, "ssim_forward_kernel", "SSIM forward (fused)", W.ssim_forward),
        (SS, "ssim_backward_kernel", "SSIM backward (fused)", W.ssim_backward),
        (K, "backward_kernel", "composite backward", W.composite_backward),
        (K, "sum_per_gaussian", "gradient sums per Gaussian", W.gradient_sums),
        (SH, "sh_backward_kernel", "SH colour backward", W.sh_backward),
        (PK, "project_backward_kernel", "projection backward", W.project_backward),
    ]
    for owner, attr, name, _ in table:
        timer.wrap(owner, attr, name)
    timer.wrap(model, "step", "Adam (torch fused, all groups)")  # recon.core.adam_step: the groups' kernels
    params = [p for g in model.optimizer.param_groups for p in g["params"]]
    return [(name, fn) for _, _, name, fn in table] + [("Adam (torch fused, all groups)",
                                                        lambda calls: W.adam(calls, params))]


def not_counted(what: str):
    return lambda calls: W.Work(0.0, 0.0, f"not counted yet ({what})")


def surfel_kernels(timer: KernelTimer, model) -> list[tuple[str, object]]:
    """The 2DGS step: the 3DGS step's shared kernels (depth sort, binning, SSIM, SH, Adam) and the surfels' own
    projection and compositing (their work not counted yet: time and share only)."""
    import importlib

    import rasterizer.surfels.cpu_kernels as SK
    import rasterizer.surfels.cpu_projection as SP

    SC = importlib.import_module("rasterizer.surfels.cpu")
    own = [(SP, "project_forward_kernel", "surfel projection forward", not_counted("surfel projection")),
           (SK, "pack_surfels", "surfel packing", not_counted("surfel packing")),
           (SK, "forward_kernel", "surfel composite forward", not_counted("surfel compositing")),
           (SC, "major_rows", "surfel gradient rows", not_counted("index permutation")),
           (SK, "backward_kernel", "surfel composite backward", not_counted("surfel compositing")),
           (SC, "sum_major_rows", "surfel gradient sums", W.major_row_sums),
           (SP, "project_backward_kernel", "surfel projection backward", not_counted("surfel projection"))]
    for owner, attr, name, _ in own:
        timer.wrap(owner, attr, name)
    return [(name, fn) for _, _, name, fn in own] + gaussian_kernels(timer, model)


def spacetime_kernels(timer: KernelTimer, model) -> list[tuple[str, object]]:
    """The 4DGS step: slicing the 4D Gaussians at the view's time (work not counted yet), then the 3DGS step's
    kernels."""
    import rasterizer.spacetime.cpu_kernels as ST

    own = [(ST, "condition_forward_kernel", "4D slicing forward", not_counted("4D conditioning")),
           (ST, "condition_backward_kernel", "4D slicing backward", not_counted("4D conditioning"))]
    for owner, attr, name, _ in own:
        timer.wrap(owner, attr, name)
    return [(name, fn) for _, _, name, fn in own] + gaussian_kernels(timer, model)


def nerf_kernels(timer: KernelTimer, model) -> list[tuple[str, object]]:
    """Wrap the NeRF step's kernels and regions; [(name, work function of the calls)]."""
    import recon.models.nerf as NM
    import recon.nerf.fused_encoding_mlp as FE
    import recon.nerf.hash_encoding as HE

    field = model.field
    timer.wrap(HE, "_forward_kernel", "hash encoding forward")
    timer.wrap(HE, "_backward_kernel", "hash encoding backward")
    timer.wrap(FE, "_forward_kernel", "fused encoding + density MLP forward")
    timer.wrap(FE, "_mlp_backward_kernel", "fused encoding + density MLP backward")
    timer.region(field.density_mlp, "forward", "density MLP")
    timer.region(field.color_mlp, "forward", "colour MLP")
    timer.region(NM, "transmittance_weights", "transmittance")
    timer.region(NM, "composite", "volume compositing")
    timer.wrap(model, "march", "ray marching (occupancy grid)")
    timer.wrap(model, "step", "Adam (torch, all groups)")  # recon.core.adam_step: the groups' kernels
    params = [p for g in model.optimizer.param_groups for p in g["params"]]
    fused = FE.use_fused(field.encoding_mlp, field.backend, field.table.new_zeros(1, 3), None, field.table,
                         field.density_mlp)  # the path the step takes (--nerf.encoding-mlp)
    encoder = [
        ("fused encoding + density MLP forward", W.fused_encoding_mlp_forward),
        ("fused encoding + density MLP backward", W.fused_encoding_mlp_backward),
    ] if fused else [
        ("hash encoding forward", W.hash_forward),
        ("density MLP forward", lambda c: W.mlp_forward(c, field.density_mlp)),
        ("density MLP backward", lambda c: W.mlp_backward(c, field.density_mlp)),
    ]
    return [("hash encoding backward", W.hash_backward)] + encoder + [
        ("colour MLP forward", lambda c: W.mlp_forward(c, field.color_mlp)),
        ("colour MLP backward", lambda c: W.mlp_backward(c, field.color_mlp)),
        ("transmittance forward", W.transmittance_forward),
        ("transmittance backward", W.transmittance_backward),
        ("volume compositing forward", W.volume_composite_forward),
        ("volume compositing backward", W.volume_composite_backward),
        ("ray marching (occupancy grid)", lambda c: W.Work(0.0, 0.0, "not counted (integer grid walk)")),
        ("Adam (torch, all groups)", lambda c: W.adam(c, params)),
    ]


# ---------------------------------------------------------------------------- measuring
def timed_steps(trainer, timer: KernelTimer, first_step: int, n: int, warmup: int) -> list[float]:
    """Seconds of ``n`` train steps after ``warmup`` untimed ones, from ``first_step`` on, skipping
    refinement steps (every 100th), as bench_train; the kernels' times of the timed steps in ``timer``."""
    out, step = [], first_step
    while len(out) < n:
        step += 1
        if step % 100 == 0:
            continue
        timer.start_step()
        t = time.perf_counter()
        trainer.train_step(step)
        dt = time.perf_counter() - t
        timer.end_step(record=warmup <= 0)
        if warmup > 0:
            warmup -= 1
            continue
        out.append(dt)
    return out


def roof_fraction(flops: float, nbytes: float, seconds: float, peak_flops: float, peak_bytes: float) -> float:
    """Achieved fraction of the roof: achieved flop/s over min(compute roof, intensity x memory roof),
    written as max(flop/s / compute roof, bytes/s / memory roof), which is the same where both are counted
    and also holds for kernels without flops (their bandwidth fraction)."""
    return max(flops / seconds / peak_flops, nbytes / seconds / peak_bytes)


def kernel_rows(group: str, kernels, timer: KernelTimer, mean_step_s: float, peaks: dict) -> list[dict]:
    """The JSON entries of one step's kernels: seconds the median over the timed steps (for the rates), share
    the mean over the steps over the mean step (shares and the rest's add up to 1); work from the last step."""
    pf, pb = peaks["flops_per_s"], peaks["bytes_per_s"]
    rows = []
    for name, work_fn in kernels:
        secs = statistics.median(s.get(name, 0.0) for s in timer.steps)
        share = statistics.fmean(s.get(name, 0.0) for s in timer.steps) / mean_step_s
        calls = timer.last_calls.get(name, [])
        work = work_fn(calls)
        fps = work.flops / secs if secs > 0 else 0.0
        bps = work.bytes / secs if secs > 0 else 0.0
        ai = work.flops / work.bytes if work.bytes > 0 else None
        counted = work.flops > 0 or work.bytes > 0
        frac = roof_fraction(work.flops, work.bytes, secs, pf, pb) if secs > 0 and counted else None
        bound = None if ai is None else ("compute" if ai * pb >= pf else "memory")
        rows.append({"group": group, "kernel": name, "calls_per_step": len(calls), "seconds": round(secs, 6),
                     "share": round(share, 4), "flops": work.flops, "bytes": work.bytes,
                     "intensity": None if ai is None else round(ai, 4), "flops_per_s": round(fps),
                     "bytes_per_s": round(bps), "roof": bound,
                     "fraction_of_roof": None if frac is None else round(frac, 4),
                     "launch_floor_share": round(len(calls) * peaks["launch_seconds"] / secs, 4) if secs > 0 else None,
                     "rule": work.rule})
    return rows


def measure_step(group: str, make, kernels_of, quick: bool, steps: int, warmup: int, first_step: int,
                 peaks: dict) -> dict:
    """Train ``warmup`` + ``steps`` steps of the trainer ``make`` builds, with the kernels of ``kernels_of``
    timed; the step's JSON section."""
    with tempfile.TemporaryDirectory() as tmp:
        trainer, source = make(quick, Path(tmp))
        if group == "nerf":  # the occupancy grid and the sample estimate settle over the first steps
            for s in range(first_step):
                trainer.advance(s)
        timer = KernelTimer()
        kernels = kernels_of(timer, trainer.model)
        try:
            step_times = timed_steps(trainer, timer, first_step, steps, warmup)
        finally:
            timer.restore()
        n_items = len(trainer.model)
    step_s, mean_s = statistics.median(step_times), statistics.fmean(step_times)
    rows = kernel_rows(group, kernels, timer, mean_s, peaks)
    unused = [r["kernel"] for r in rows if r["calls_per_step"] == 0]
    if group in ("2dgs", "4dgs"):  # lists shared with the 3DGS step: what this method never calls is left out
        rows = [r for r in rows if r["calls_per_step"] > 0]
    rest = statistics.fmean(t - sum(s.values()) for t, s in zip(step_times, timer.steps))
    return {"source": source, "size": n_items, "first_step": first_step, "steps_timed": len(step_times),
            "median_step_seconds": round(step_s, 5), "mean_step_seconds": round(mean_s, 5), "kernels": rows,
            "not_called": unused,
            "sum_of_kernel_shares": round(sum(r["share"] for r in rows), 4),
            "rest": {"seconds": round(rest, 6), "share": round(rest / mean_s, 4),
                     "what": "PyTorch glue outside the timed kernels (mean over steps of step - kernels)"}}


def run_at(threads: int, args) -> dict:
    """Everything at ``threads`` threads (Numba and PyTorch)."""
    numba.set_num_threads(threads)
    torch.set_num_threads(threads)
    q = args.quick
    fl = peak_flops(threads, iters=200_000 if q else 2_000_000, repeats=9)
    bw = peak_bandwidth(threads, mib=32 if q else 256, repeats=3 if q else 7)
    peaks = {"flops_per_s": fl["flops_per_s"], "bytes_per_s": bw["bytes_per_s"], "flops_rule": fl["rule"],
             "bytes_rule": bw["rule"], "ridge_intensity": round(fl["flops_per_s"] / bw["bytes_per_s"], 3),
             "launch_seconds": launch_overhead(threads)["seconds"]}
    out = {"threads": threads, "load_average_before": load_average(), "peaks": peaks}
    steps, warm = (3, 2) if q else (args.steps, 3)
    if "3dgs" in args.only:
        out["3dgs"] = measure_step("3dgs", gaussian_trainer, gaussian_kernels, q, steps, warm,
                                   10 if q else args.first_step, peaks)
    if "2dgs" in args.only:
        out["2dgs"] = measure_step("2dgs", method_trainer("2dgs", "colmap_bird", "procedural"), surfel_kernels, q,
                                   steps, warm, 10 if q else args.first_step, peaks)
    if "4dgs" in args.only:
        out["4dgs"] = measure_step("4dgs", method_trainer("4dgs", "dnerf_mutant", "procedural-4d"), spacetime_kernels,
                                   q, steps, warm, 10 if q else args.first_step, peaks)
    if "nerf" in args.only:
        out["nerf"] = measure_step("nerf", nerf_trainer, nerf_kernels, q, steps, warm, 5 if q else args.nerf_warm,
                                   peaks)
        enc = [r for r in out["nerf"]["kernels"]
               if r["kernel"].startswith(("hash", "fused", "density MLP", "colour MLP"))]
        out["nerf"]["encoding_plus_mlp_share"] = round(sum(r["share"] for r in enc), 4)
    out["load_average_after"] = load_average()
    return out


def scaling(runs: list[dict]) -> list[dict]:
    """Per kernel: seconds at the first and the last thread count, and their ratio."""
    a, b = runs[0], runs[-1]
    rows = []
    for group in GROUPS:
        if group not in a:
            continue
        for ra, rb in zip(a[group]["kernels"], b[group]["kernels"]):
            rows.append({"group": group, "kernel": ra["kernel"], f"seconds_{a['threads']}": ra["seconds"],
                         f"seconds_{b['threads']}": rb["seconds"],
                         "speedup": round(ra["seconds"] / rb["seconds"], 3) if rb["seconds"] > 0 else None})
        rows.append({"group": group, "kernel": "whole step", f"seconds_{a['threads']}": a[group]["median_step_seconds"],
                     f"seconds_{b['threads']}": b[group]["median_step_seconds"],
                     "speedup": round(a[group]["median_step_seconds"] / b[group]["median_step_seconds"], 3)})
    return rows


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", default=str(os.cpu_count() or 1),
                   help="thread count, or several comma-separated (e.g. 1,2: scaling from the first to the last)")
    p.add_argument("--out", type=Path, default=Path("roofline_out"), help="folder for roofline.json and roofline.png")
    p.add_argument("--quick", action="store_true", help="small procedural problems, few steps (tests)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per problem")
    p.add_argument("--first-step", type=int, default=3000,
                   help="3DGS steps are timed from here (3000: SH degree 3, as bench_train's sh3 figure)")
    p.add_argument("--nerf-warm", type=int, default=30, help="NeRF steps trained before timing")
    p.add_argument("--only", default="3dgs,2dgs,4dgs,nerf",
                   help="which steps (comma-separated): 3dgs, 2dgs, 4dgs, nerf")
    p.add_argument("--no-plot", action="store_true")
    args = p.parse_args(argv)
    counts = [int(t) for t in args.threads.split(",")]
    limit = numba.config.NUMBA_NUM_THREADS
    if any(t < 1 or t > limit for t in counts):
        p.error(f"--threads: each count must be in [1, {limit}] (NUMBA_NUM_THREADS)")
    args.only = set(args.only.split(","))
    runs = [run_at(t, args) for t in counts]
    report = {"benchmark": "roofline", "machine": {"cpu": platform.processor() or platform.machine(),
                                                   "cpus": os.cpu_count(), "python": platform.python_version(),
                                                   "torch": torch.__version__, "numba": numba.__version__},
              "quick": args.quick, "runs": runs}
    if len(runs) > 1:
        report["scaling"] = scaling(runs)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.no_plot:
        from roofline_plot import plot_roofline

        last = runs[-1]
        rows = [r for g in GROUPS if g in last for r in last[g]["kernels"]]
        plot_roofline(rows, last["peaks"]["flops_per_s"], last["peaks"]["bytes_per_s"],
                      f"splatforge training steps, {last['threads']} threads (3DGS circles, 2DGS diamonds, "
                      "4DGS triangles, NeRF squares; size: share of its step)", args.out / "roofline.png")
        report["plot"] = str(args.out / "roofline.png")
    (args.out / "roofline.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
