"""Levels of detail (docs/lod.md): test PSNR and CPU render time of budgeted cuts, cut and export times. JSON.

    .venv/bin/python scripts/bench_lod.py --run /tmp/city_run [--budget 0.1] [--rules coverage mass]
    .venv/bin/python scripts/bench_lod.py --synthetic 2000000          # cut and export times only

With ``--run`` (a finished 3dgs run whose dataset is here): the far half of the test views (by the median depth
of the Gaussian centres each view sees) is rendered with the whole model and with the cut at ``--budget`` x N
Gaussians (recon/lod/cut.py), each opacity rule of ``--rules`` (recon/lod/merge.py) and cut metric of
``--metrics`` (recon/lod/flat.py); PSNR against the test images, the cut's PSNR drop, CPU render times (median
over the views, rasterizer cpu backend), and the cut selection time per camera. ``--spreads T ...``: merge spread factors
(recon/lod/merge.py). ``--finetune-steps N``: then
the levels are fine-tuned (recon/lod/finetune.py, N steps a level, the run's training cameras) and measured
again, with each level's PSNR against the full model before and after. ``--distill-steps N``: then the merged nodes of the
budget's cuts from the training cameras are tuned against the full model's renders (recon/lod/distill.py, a copy
of the hierarchy per metric) and measured again. ``--synthetic N``: N random small
Gaussians in a cube, cameras 1.5 cube sides away
(the whole model in view): cut time at ``--budget`` (median of ``--repeat`` cameras, each after another
camera's cut as a viewer's next frame is; wall and thread CPU time; also without a previous cut), whether the
first cut equals the plain reference (recon/lod/cut.py), hierarchy build time and
the LOD export time (``splatforge export MODEL.ply --format lod``, all of it: read, build, write) into a temporary
folder.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rasterizer import Camera, rasterize_gaussians  # noqa: E402
from recon.core.splat_data import SplatData, random_splats  # noqa: E402
from recon.lod.cut import select_cut, select_cut_reference  # noqa: E402
from recon.lod.distill import DistillConfig, distill_cuts  # noqa: E402
from recon.lod.finetune import FinetuneConfig, finetune_levels  # noqa: E402
from recon.commands.export import ExportConfig  # noqa: E402
from recon.lod.flat import DEFAULT_METRIC, flatten  # noqa: E402
from recon.lod.merge import DEFAULT_OPACITY_RULE, DEFAULT_SPREAD  # noqa: E402
from recon.lod.hierarchy import build_hierarchy, cut_splats  # noqa: E402


def machine() -> dict:
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "load_average_1min": round(os.getloadavg()[0], 2), "torch_threads": torch.get_num_threads()}


def render(data: SplatData, camera: Camera, background: torch.Tensor) -> tuple[torch.Tensor, float]:
    """([H, W, 3] render, wall seconds) with the cpu backend."""
    img, wall, _ = timed_render(data, camera, background)
    return img, wall


def timed_render(data: SplatData, camera: Camera, background: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """([H, W, 3] render, wall seconds, CPU seconds of the process) with the cpu backend."""
    t = data.to_torch()
    start, cpu = time.perf_counter(), time.process_time()
    out = rasterize_gaussians(
        t["means"], t["quats"], torch.exp(t["log_scales"]), torch.sigmoid(t["logit_opacities"]), t["sh"],
        camera.world_to_cam[None].float(), camera.K[None].float(), camera.width, camera.height,
        sh_degree=data.sh_degree, backgrounds=background[None], backend="cpu",
        rasterize_mode="antialiased" if data.antialiased else "classic")
    return out.render[0].clamp(0, 1), time.perf_counter() - start, time.process_time() - cpu


def render_times(data: SplatData, camera: Camera, background: torch.Tensor, repeats: int) -> tuple[torch.Tensor,
                                                                                                    float, float]:
    """(render, median wall seconds, median CPU seconds) of ``repeats`` renders after one warm-up render."""
    img = render(data, camera, background)[0]
    walls, cpus = [], []
    for _ in range(repeats):
        img, wall, cpu = timed_render(data, camera, background)
        walls.append(wall)
        cpus.append(cpu)
    return img, statistics.median(walls), statistics.median(cpus)


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a - b) ** 2).mean())
    return 10 * np.log10(1.0 / max(mse, 1e-12))


def view_depth(data: SplatData, camera: Camera) -> float:
    """Median camera-z depth of the Gaussian centres inside the view (inf when none)."""
    W, K = camera.world_to_cam_numpy(), camera.K_numpy()
    p = data.means.astype(np.float64) @ W[:3, :3].T + W[:3, 3]
    z = p[:, 2]
    front = z > 0.01
    u = K[0, 0] * p[front, 0] / z[front] + K[0, 2]
    v = K[1, 1] * p[front, 1] / z[front] + K[1, 2]
    inside = (u >= 0) & (u < camera.width) & (v >= 0) & (v < camera.height)
    return float(np.median(z[front][inside])) if inside.any() else float("inf")


def bench_run(args) -> dict:
    from recon.data.frame_images import FrameImages
    from recon.run.folder import Run

    run = Run.open(args.run)
    data = run.read_splats()
    frames = list(run.scene.frames_test)
    bg = run.background().float()
    depths = [view_depth(data, f.camera) for f in frames]
    order = np.argsort(depths)
    far = [int(i) for i in order[len(order) // 2:]]
    images = FrameImages(frames)
    budget = max(1, int(round(args.budget * len(data))))
    result = {"run": str(args.run), "gaussians": len(data), "budget": budget, "budget_fraction": args.budget,
              "test_views": len(frames), "far_views": len(far),
              "far_view_median_depth": float(np.median([depths[i] for i in far])),
              "near_view_median_depth": float(np.median([depths[i] for i in order[: len(order) // 2]]))}
    full_psnr, full_wall, full_cpu, full_img = [], [], [], {}
    for i in far:
        img, wall, cpu = render_times(data, frames[i].camera, bg, args.render_repeats)
        full_psnr.append(psnr(img, images.rgb(i, bg)))
        full_wall.append(wall)
        full_cpu.append(cpu)
        full_img[i] = img
    full = {"img": full_img, "repeats": args.render_repeats}
    result["full"] = {"psnr": statistics.mean(full_psnr), "render_seconds_median": statistics.median(full_wall),
                      "render_cpu_seconds_median": statistics.median(full_cpu)}
    for rule, spread in [(r, t) for r in args.rules for t in args.spreads]:
        start = time.perf_counter()
        h = build_hierarchy(data, opacity_rule=rule, spread=spread)
        build = time.perf_counter() - start
        if spread != 1.0:
            rule = f"{rule}_spread{spread:g}"  # the keys below name the merge spread t when it is not 1
        for metric in args.metrics:
            key = f"cut_{rule}" + ("" if metric == "size" else f"_{metric}")
            result[key] = {**measure_cuts(h, data, frames, far, images, bg, budget, metric, full_psnr, full),
                           "build_seconds": build, "hierarchy_nodes": h.num_nodes}
        if args.finetune_steps:
            cams = [f.camera for f in run.scene.frames_train]
            start = time.perf_counter()
            levels = finetune_levels(h, cams, FinetuneConfig(steps=args.finetune_steps, pixels=args.finetune_pixels,
                                                            lr_scale=args.finetune_lr_scale,
                                                            background=tuple(bg.tolist())),
                                     progress=lambda i, n: print(f"fine-tune {rule}: level {i}/{n}", file=_sys.stderr))
            tune = time.perf_counter() - start
            for metric in args.metrics:
                key = f"cut_{rule}_finetuned" + ("" if metric == "size" else f"_{metric}")
                result[key] = {**measure_cuts(h, data, frames, far, images, bg, budget, metric, full_psnr, full),
                               "finetune_seconds": tune, "finetune_steps_per_level": args.finetune_steps,
                               "levels": [vars(lv) for lv in levels]}
        if args.distill_steps:
            cams = [f.camera for f in run.scene.frames_train]
            for metric in args.metrics:  # each metric's cuts tuned on their own copy of the hierarchy
                hd = copy.deepcopy(h)
                start = time.perf_counter()
                tuned = distill_cuts(hd, cams, budget, DistillConfig(
                    steps=args.distill_steps, metric=metric, cameras=args.distill_cameras,
                    lr_scale=args.distill_lr_scale, background=tuple(bg.tolist())),
                    progress=lambda i, n: i % 50 == 0 and print(f"distill {rule} {metric}: {i}/{n}", file=_sys.stderr))
                seconds = time.perf_counter() - start
                key = f"cut_{rule}" + ("_finetuned" if args.finetune_steps else "") + "_distilled" + (
                    "" if metric == "size" else f"_{metric}")
                result[key] = {**measure_cuts(hd, data, frames, far, images, bg, budget, metric, full_psnr,
                                              full),
                               "distill_seconds": seconds, "distill": vars(tuned),
                               "distill_steps": args.distill_steps, "distill_lr_scale": args.distill_lr_scale}
    return result


def measure_cuts(h, data, frames, far, images, bg, budget, metric, full_psnr, full) -> dict:
    """Test PSNR, PSNR against the full render, render and cut times of the cuts of ``h`` at ``budget`` over
    the views ``far``. Render times: each view's cut and full model rendered in turn (interleaved, so both see
    the same load), ``full["repeats"]`` times each after a warm-up; the ratio is the median over the views of
    (median cut time / median full time), CPU time of the process and wall time."""
    cut_psnr, cut_time, cut_cpu, cut_sel, cut_n, vs_full, ratio_wall, ratio_cpu = [], [], [], [], [], [], [], []
    for i in far:
        cam = frames[i].camera
        select_cut(h, cam, budget=budget, metric=metric)
        t0 = time.perf_counter()
        cut = select_cut(h, cam, budget=budget, metric=metric)
        cut_sel.append(time.perf_counter() - t0)
        model = cut_splats(h, cut)
        img = render(model, cam, bg)[0]
        render(data, cam, bg)
        times = {"cut": ([], []), "full": ([], [])}
        for _ in range(full["repeats"]):
            for name, what in (("full", data), ("cut", model)):
                _, wall, cpu = timed_render(what, cam, bg)
                times[name][0].append(wall)
                times[name][1].append(cpu)
        (cw, cc), (fw, fc) = ([statistics.median(x) for x in times[k]] for k in ("cut", "full"))
        cut_psnr.append(psnr(img, images.rgb(i, bg)))
        vs_full.append(psnr(img, full["img"][i]))
        cut_time.append(cw)
        cut_cpu.append(cc)
        ratio_wall.append(cw / fw)
        ratio_cpu.append(cc / fc)
        cut_n.append(len(cut))
    return {"metric": metric, "psnr": statistics.mean(cut_psnr),
            "psnr_drop": statistics.mean(full_psnr) - statistics.mean(cut_psnr),
            "psnr_vs_full_render": statistics.mean(vs_full), "gaussians_median": statistics.median(cut_n),
            "render_seconds_median": statistics.median(cut_time),
            "render_cpu_seconds_median": statistics.median(cut_cpu),
            "render_time_ratio": statistics.median(ratio_wall),
            "render_cpu_time_ratio": statistics.median(ratio_cpu),
            "render_cpu_time_ratio_per_view": [round(r, 4) for r in ratio_cpu],
            "cut_ms_median": 1000 * statistics.median(cut_sel)}


def surface_splats(n: int, seed: int = 0) -> SplatData:
    """n random Gaussians in [-10, 10]^3 with scales about 0.02 (a dense cloud, as a big capture)."""
    data = random_splats(n, sh_degree=3, seed=seed)
    rng = np.random.default_rng(seed)
    data.log_scales[:] = np.log(0.02) + rng.uniform(-1.0, 0.5, size=(n, 3))
    return data


def orbit_camera(rng) -> Camera:
    """A 1280 x 720 camera 30 units from the origin at a random angle, looking at it (the whole cube in view)."""
    angle = rng.uniform(0, 2 * np.pi)
    eye = np.array([30 * np.sin(angle), rng.uniform(-5, 5), -30 * np.cos(angle)])
    fwd = -eye / np.linalg.norm(eye)
    right = np.cross([0.0, 1.0, 0.0], fwd)
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    w2c = np.eye(4)
    w2c[:3, :3] = np.stack([right, down, fwd])
    w2c[:3, 3] = -w2c[:3, :3] @ eye
    return Camera.from_arrays(w2c, [[900, 0, 640], [0, 900, 360], [0, 0, 1]], 1280, 720)


def bench_synthetic(args) -> dict:
    data = surface_splats(args.synthetic)
    start = time.perf_counter()
    h = build_hierarchy(data)
    build = time.perf_counter() - start
    nodes = h.num_nodes
    budget = max(1, int(round(args.budget * len(data))))
    rng = np.random.default_rng(1)
    t0 = time.perf_counter()
    flatten(h)  # the preorder arrays, once per hierarchy
    flat_seconds = time.perf_counter() - t0
    times, cpu, cold, sizes = [], [], [], []
    matches = None
    for k in range(args.repeat):
        cam = orbit_camera(rng)
        if k == 0:
            select_cut(h, cam, budget=budget)  # compile / load the kernels
            ref = select_cut_reference(h, cam, budget=budget)
            matches = bool(np.array_equal(np.sort(select_cut(h, cam, budget=budget)), ref))
        h._cut_state.last.clear()  # no previous frame: the bound is found from the root
        t0 = time.perf_counter()
        select_cut(h, cam, budget=budget)
        cold.append(time.perf_counter() - t0)
        cam = orbit_camera(rng)  # the next frame: another camera, the previous bound as the start
        t0, c0 = time.perf_counter(), time.thread_time()
        cut = select_cut(h, cam, budget=budget)
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        sizes.append(len(cut))
    result = {"gaussians": len(data), "hierarchy_nodes": nodes, "build_seconds": build, "budget": budget,
              "flatten_seconds": flat_seconds, "cut_ms_median": 1000 * statistics.median(times),
              "cut_ms_min": 1000 * min(times), "cut_ms_max": 1000 * max(times),
              "cut_cpu_ms_median": 1000 * statistics.median(cpu),
              "cut_ms_median_no_previous_frame": 1000 * statistics.median(cold),
              "cut_gaussians_median": statistics.median(sizes), "cameras": args.repeat,
              "cut_equals_reference": matches}
    if args.no_export:
        return result
    del h
    out_root = Path(tempfile.mkdtemp(prefix="bench_lod_"))
    try:  # the whole command: read the PLY, build, write the chunks and the manifest
        from recon.commands.export import run_export
        from recon.export import write_splats
        from recon.lod.export_lod import LodExport
        from recon.lod.manifest import read_manifest

        write_splats(out_root / "model.ply", data)
        t0, c0 = time.perf_counter(), time.process_time()
        run_export(ExportConfig(input=out_root / "model.ply", out=out_root / "lod", format="lod", quiet=True))
        export, export_cpu = time.perf_counter() - t0, time.process_time() - c0
        manifest = read_manifest(out_root / "lod")
        lod = LodExport(out_root / "lod")
        lod.check_files()  # every chunk listed is there with its listed size (LodManifestError otherwise)
        counts = [len(lod.read_chunk(i)) for i in range(len(manifest.chunks))]  # and holds its listed count
        same = lod.manifest == manifest and counts == [c.count for c in manifest.chunks] and sum(
            counts[i] for i in manifest.chunks_of_level(0)) == len(data)
        size = sum(c.bytes for c in manifest.chunks)
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    return {**result, "export_seconds": export, "export_cpu_seconds": export_cpu, "manifest_reads_back_equal": same,
            "export_levels": len(manifest.levels),
            "export_chunks": len(manifest.chunks),
            "export_bytes": size}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, help="a finished 3dgs run folder whose dataset is here")
    p.add_argument("--synthetic", type=int, help="N random Gaussians: cut, build and export times")
    p.add_argument("--budget", type=float, default=0.1, help="cut budget as a fraction of the Gaussians")
    p.add_argument("--rules", nargs="+", default=[DEFAULT_OPACITY_RULE],
                   help="opacity rules to compare (coverage, mass; default: the export's)")
    p.add_argument("--spreads", nargs="+", type=float, default=[DEFAULT_SPREAD],
                   help="merge spread factors t to compare (recon/lod/merge.py: merged Gaussians drawn with covariance "
                        "S_in + t S_out; default: the hierarchy's)")
    p.add_argument("--metrics", nargs="+", default=[DEFAULT_METRIC],
                   help="cut metrics to compare (size, opacity, error, error_area; default: select_cut's)")
    p.add_argument("--render-repeats", type=int, default=3,
                   help="--run: renders timed per view and model (median; after one warm-up render)")
    p.add_argument("--finetune-steps", type=int, default=0,
                   help="--run: also fine-tune the levels (recon/lod/finetune.py, the run's training cameras) and "
                        "measure again")
    p.add_argument("--finetune-pixels", type=float, default=FinetuneConfig.pixels,
                   help="the projected radius (px) at which each level is tuned (recon/lod/finetune.py)")
    p.add_argument("--finetune-lr-scale", type=float, default=FinetuneConfig.lr_scale,
                   help="x the 3DGS learning rates for the fine-tuning")
    p.add_argument("--distill-steps", type=int, default=ExportConfig.lod_distill_steps,
                   help="--run: also tune the merged nodes of the budget's cuts from the training cameras against the "
                        "full model's renders (recon/lod/distill.py), this many steps, and measure again")
    p.add_argument("--distill-lr-scale", type=float, default=DistillConfig.lr_scale,
                   help="x the 3DGS learning rates for the distillation")
    p.add_argument("--distill-cameras", type=int, default=DistillConfig.cameras,
                   help="training cameras the distillation uses (evenly spread)")
    p.add_argument("--repeat", type=int, default=21, help="cameras for the synthetic cut timing")
    p.add_argument("--no-export", action="store_true", help="--synthetic: skip the export timing")
    args = p.parse_args()
    if not args.run and not args.synthetic:
        p.error("give --run RUN_DIR and/or --synthetic N")
    out = {"machine": machine()}
    if args.run:
        out["run"] = bench_run(args)
    if args.synthetic:
        out["synthetic"] = bench_synthetic(args)
    out["machine"]["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
