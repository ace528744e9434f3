#!/usr/bin/env python
"""Geometry benchmark with ground truth: 3dgs against 2dgs (equal steps), and neus, printed as JSON.

    python scripts/bench_geometry.py [--steps 7000] [--data-factor 2] [--datasets spot lego]
        [--methods 3dgs 2dgs] [--out bench_geometry] [--spot-views 100] [--spot-size 400]
        [--geometry-views 0] [--mesh-resolution 512] [--no-keep-largest] [--supersample 1]
        [--surfel-grow-grad2d G] [--device cpu]
        [--neus-steps N] [--neus-target-samples S] [--neus-mesh-resolution R]

Datasets:

- ``spot``: rendered by scripts/make_mesh_dataset.py from ../shared/data/meshes/spot (made once into
  ``OUT/datasets/spot_v{views}_s{size}_p{samples}``, ``--spot-samples`` rays per pixel side, default 4:
  antialiased silhouettes), with exact depth and normal images and the true mesh. ``--spot-mesh M``
  runs the same pipeline on another mesh; its dataset and runs are named after it (``mesh_name``: the
  file's stem and a hash of its bytes instead of ``spot``), the JSON key stays ``spot``; other
  ``--spot-views`` / ``--spot-size`` than 100 / 400 add ``-vV`` / ``-pxS`` to its run names;
- ``lego``: ../shared/data/lego_400, whose test split has depth and normal PNGs in an encoding
  established from the data (datasets/README.md; scripts/lego_gt_encoding.py): depth everywhere on the
  object, normals only where no component was clipped by the PNG.

Per dataset and method, one training run in ``OUT/runs/{dataset}-{method}-f{factor}-s{steps}`` (a
finished run is reused; an interrupted one resumes; options other than their defaults add to the name,
e.g. ``-bgrandom``, ``-ss2``, and for 2dgs ``-gg0.0003``: ``--surfel-grow-grad2d``), then on the test
views (all of them, or ``--geometry-views`` evenly spaced ones), at the run's resolution (ground truth averaged over
factor x factor blocks, only blocks entirely on the object). A run trained with ``--supersample N`` is
rendered the way it trained: depth, normals and depth-to-normal on the N x grid, then averaged over N x N
blocks like the ground truth (a block counts where all its pixels are seen; ``geometry_supersample`` in
the JSON; results before stop 26 scored such runs at 1x):

- ``psnr``: the run's own test PSNR (metrics.json, all test views);
- ``depth_mae``: mean |rendered depth - true depth| (camera z, scene units) over pixels with true depth
  and rendered alpha >= 0.5 (``depth_coverage``: the fraction of true-depth pixels that passed); 2dgs:
  median depth, 3dgs: expected depth (the depths ``splatforge mesh`` fuses);
- ``normal_deg``: mean angle (degrees) between the method's normals and the true ones, world frame:
  2dgs its rendered normals, 3dgs the normals of its rendered expected depth (the 2DGS paper's
  depth-to-normal, recon.geometry.metrics.depth_to_normal); ``normal_source`` says which, and
  ``normal_deg_depth_to_normal`` is the depth-to-normal error of every method (2dgs: of its median depth).
  Every method is scored on the same kind of pixels: true normal known, the pixel and its four neighbours
  seen (alpha >= 0.5; depth-to-normal exists only there). Before ``EVAL_VERSION`` 5 rendered normals were
  also scored where a neighbour was not seen, which 3dgs's depth-to-normal never is; that number stays as
  ``normal_deg_all_seen`` (methods with rendered normals; lego and spot: within 0.01 degrees of the other);
- spot only, ``chamfer_pct``: Chamfer distance between the mesh of ``splatforge mesh`` (same code path:
  recon.commands.mesh.extract_run_mesh, its default depth per method) and the true mesh mapped with the
  dataset's ``mesh_to_world``, in % of the true bounding-box diagonal (recon.geometry.mesh_metrics: samples of
  each mesh against the other's triangles, exact distances); ``mesh_signed_median_pct``: the median signed
  distance of the mesh's surface to the true one (negative: inside; scripts/surface_offset.py);
- ``train_seconds``, ``seconds_per_step``: from the run's metrics.json (one training run each: training
  is not repeated for a median; the load average around it is recorded).

``--methods ... neus`` adds the NeuS column (``--method neus``, issue 50): its own step count
(``--neus-steps``, default ``--steps``; the run name carries it; all hash levels active by half of them) and samples per step (``--neus-target-samples``,
``-tsS`` in the name when given); its mesh is the SDF's zero level set (``splatforge mesh`` on a neus run,
``--neus-mesh-resolution`` cells per axis of the box); ``eikonal`` reports |grad SDF| at the mesh's vertices
(the trained field near its surface: mean, median, fraction within 5 % of 1). ``comparisons`` gains
``chamfer_ratio_neus_over_2dgs`` and ``psnr_neus_minus_2dgs`` when both ran.

Evaluations are cached in ``OUT/results/`` next to the runs and reused while their options match.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
SHARED = ROOT.parent / "shared" / "data"
SPOT_MESH = SHARED / "meshes" / "spot" / "spot_triangulated.obj"
from make_mesh_dataset import DEFAULT_SAMPLES  # noqa: E402
LEGO = SHARED / "lego_400"
SPOT_VIEWS, SPOT_SIZE = 100, 400  # the mesh dataset's default training views and image size
EVAL_VERSION = 5  # bump when the evaluation changes, so cached results are recomputed


# ------------------------------------------------------------------------------ datasets and runs

def mesh_name(mesh: Path) -> str:
    """The mesh dataset's name in folder names: "spot" for ../shared's spot (the default ``--spot-mesh``),
    else the file's stem (letters, digits, ``_`` and ``.`` kept) and the first 8 hex digits of the SHA-256
    of its bytes, so that another mesh never reuses spot's dataset and runs, nor two meshes each other's."""
    if mesh.resolve() == SPOT_MESH.resolve():
        return "spot"
    stem = "".join(ch if ch.isalnum() or ch in "_." else "_" for ch in mesh.stem)
    return f"{stem}-{hashlib.sha256(mesh.read_bytes()).hexdigest()[:8]}"


def spot_label(samples: int, mesh: Path = SPOT_MESH, views: int = SPOT_VIEWS, size: int = SPOT_SIZE) -> str:
    """Dataset label of the mesh dataset in run and result names: its :func:`mesh_name` ("spot"), with
    ``-pN`` when rendered with N x N rays per pixel (N > 1), ``-vV`` / ``-pxS`` when it has V training views
    or S pixels other than the defaults (runs on other renders of the mesh never share a folder)."""
    return (mesh_name(mesh) + ("" if samples == 1 else f"-p{samples}") + ("" if views == SPOT_VIEWS else f"-v{views}")
            + ("" if size == SPOT_SIZE else f"-px{size}"))


def ensure_spot(out: Path, views: int, size: int, mesh: Path, log, samples: int = 1) -> Path:
    """The mesh dataset's folder (rendered into a temporary folder and renamed into place on first use)."""
    from make_mesh_dataset import make_dataset

    folder = out / "datasets" / (f"{mesh_name(mesh)}_v{views}_s{size}" + ("" if samples == 1 else f"_p{samples}"))
    if (folder / "transforms_test.json").is_file() and (folder / "transforms_train.json").is_file():
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"rendering the {mesh.name} dataset ({views} views, {size} px, {samples}x{samples} rays per pixel) into "
        f"{folder}")
    make_dataset(mesh, tmp, views=views, size=size, samples=samples)
    tmp.replace(folder)
    return folder


def train_run(data: Path, run: Path, method: str, steps: int, factor: int, device: str, progress: bool,
              log, init_num_random: int | None = None, background: str | None = None,
              supersample: int = 1, grow_grad2d: float | None = None,
              target_samples: int | None = None) -> tuple[dict, bool]:
    """(metrics.json, trained now) of the run in ``run``: reused when finished at ``steps``, else trained
    (resuming its checkpoints). ``grow_grad2d``: the run's ``--adc.grow-grad2d`` (None: train's default).
    UsageError for a finished run of another dataset (its config.yaml's ``data``): never scored on this one."""
    from recon.nerf.config import NerfConfig, NeusConfig
    from recon.strategy import ADCConfig
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    from recon.core.errors import UsageError
    from recon.outputs.files import read_config_dict

    metrics_path = run / "metrics.json"
    if metrics_path.is_file() and (run / "splats.ply").is_file():
        metrics = json.loads(metrics_path.read_text())
        trained_on = read_config_dict(run / "config.yaml").get("data")
        if Path(str(trained_on)).resolve() != Path(data).resolve():
            raise UsageError(f"{run}: this finished run was trained on {trained_on}, not on {data}; remove the run "
                             f"folder or use another --out")
        if metrics.get("steps") == steps:
            return metrics, False
    log(f"training {method} on {data} ({steps} steps, data factor {factor}) into {run}")
    cfg = TrainConfig(data=data, out=run, method=method, steps=steps, data_factor=factor, device=device,
                      progress=progress, save_every=max(1000, steps // 4), supersample=supersample,
                      **({} if init_num_random is None else {"init_num_random": init_num_random}),
                      **({} if background is None else {"background": background}),
                      **({} if grow_grad2d is None else {"adc": ADCConfig(grow_grad2d=grow_grad2d)}),
                      **({"strategy": "occupancy", "neus": NeusConfig(level_every=max(1, steps // 24))}
                         if method == "neus" else {}),
                      **({} if target_samples is None else {"nerf": NerfConfig(target_samples=target_samples)}))
    return train_model(cfg, log=lambda *a: None), True


# ------------------------------------------------------------------------------ evaluation

def view_subset(frames: list, count: int) -> list:
    """All ``frames`` (count 0 or >= len) or ``count`` evenly spaced ones."""
    if count <= 0 or count >= len(frames):
        return list(frames)
    return [frames[i] for i in np.linspace(0, len(frames) - 1, count).round().astype(int)]


def view_geometry(model, cam, kind: str, bg, supersample: int, rendered_normals: bool):
    """One test view's geometry on the camera's grid: (depth, seen, rendered normals or None, depth-to-normal,
    depth-to-normal valid), numpy float64 / bool, world-frame normals.

    Rendered at ``supersample`` x the resolution (the grid a ``--supersample`` run trains on), then every
    map is averaged over supersample x supersample blocks the way the ground truth is averaged over data
    factor blocks (recon.geometry.ground_truth.downscale_gt: a block counts only where all its pixels do; normals
    renormalised); depth-to-normal is taken on the rendered grid. supersample 1: the maps as rendered
    (``downscale_gt`` returns them unchanged)."""
    import torch

    from recon.geometry import ground_truth as gg
    from recon.geometry import metrics as gm
    from recon.geometry import mesh_extraction as mx

    fine = cam.scaled(supersample)
    normals = None
    if rendered_normals:  # one render gives the depth and the normals (model.render_geometry)
        _, depth, alpha, normals = model.render_geometry([fine], kind, bg)
        normals = normals[0].double().cpu().numpy()
    else:
        _, depth, alpha = mx.render_depth(model, [fine], kind, bg)
    depth = depth[0, ..., 0].double().cpu()
    seen = (alpha[0, ..., 0] >= mx.ALPHA_MIN).cpu() & torch.isfinite(depth)
    depth = torch.where(seen, depth, torch.zeros_like(depth))
    n_cam, d2n_valid = gm.depth_to_normal(depth, fine.K.double().cpu())
    d2n = gm.camera_to_world_normals(n_cam, fine.world_to_cam.double().cpu())
    depth, seen, d2n, d2n_valid = depth.numpy(), seen.numpy(), d2n.numpy(), (d2n_valid & seen).numpy()
    placeholder = normals if normals is not None else np.zeros_like(d2n)
    rendered = gg.downscale_gt(gg.GroundTruth(depth, seen, placeholder, seen), supersample)
    from_depth = gg.downscale_gt(gg.GroundTruth(depth, seen, d2n, d2n_valid), supersample)
    return (rendered.depth, rendered.depth_valid, rendered.normals if normals is not None else None,
            from_depth.normals, from_depth.normal_valid)


def geometry_eval(run_dir: Path, source: str, geometry_views: int, device: str) -> dict:
    """Depth and normal errors of the run's final model on its scene's test views (see the module docstring),
    rendered the way the run trained (its ``--supersample``: :func:`view_geometry`)."""
    import torch

    from recon.geometry import ground_truth as gg
    from recon.geometry import metrics as gm
    from recon.commands.mesh import depth_kind
    from recon.run.folder import Run

    run = Run.open(run_dir)
    scene = run.scene
    model = run.load_model(device=device)
    bg = run.background()
    kind = depth_kind(model, "median")
    rendered_normals = hasattr(model, "render_geometry")  # 2dgs; 3dgs and nerf: normals from the depth
    frames = view_subset(scene.frames_test, geometry_views)
    factor = run.config.data_factor
    supersample = int(getattr(run.config, "supersample", 1))
    sums = {"depth": 0.0, "depth_px": 0, "gt_depth_px": 0, "normal": 0.0, "normal_px": 0, "d2n": 0.0, "d2n_px": 0,
            "normal_all_seen": 0.0, "normal_all_seen_px": 0}
    t = torch.from_numpy
    with torch.no_grad():
        for frame in frames:
            gt = gg.downscale_gt(gg.load_gt(scene.root, frame.name, source), factor)
            cam = frame.camera
            if gt.depth.shape != (cam.height, cam.width):
                raise gg.GroundTruthError(f"{frame.name}: ground truth {gt.depth.shape} does not match the "
                                          f"{cam.width}x{cam.height} view at data factor {factor}")
            depth, seen, normals, d2n, d2n_valid = view_geometry(model, cam, kind, bg, supersample, rendered_normals)
            depth, seen, d2n, d2n_valid = t(depth), t(seen), t(d2n), t(d2n_valid)
            gt_depth, gt_dv = t(gt.depth), t(gt.depth_valid)
            mask = gt_dv & seen
            if mask.any():
                err, n = gm.mean_abs_depth_error(depth, gt_depth, mask)
                sums["depth"] += err * n
                sums["depth_px"] += n
            sums["gt_depth_px"] += int(gt_dv.sum())
            gt_nv, gt_n = t(gt.normal_valid), t(gt.normals)
            nmask = gt_nv & d2n_valid  # every method on the same kind of pixels: seen with 4 neighbours
            if normals is not None:
                normals = t(normals)
                edge_mask = gt_nv & seen  # also the silhouette ring (the definition before EVAL_VERSION 5)
                if edge_mask.any():
                    err, n = gm.mean_angle_error_deg(normals, gt_n, edge_mask)
                    sums["normal_all_seen"] += err * n
                    sums["normal_all_seen_px"] += n
            else:
                normals = d2n
            if nmask.any():
                err, n = gm.mean_angle_error_deg(normals, gt_n, nmask)
                sums["normal"] += err * n
                sums["normal_px"] += n
                err, n = gm.mean_angle_error_deg(d2n, gt_n, nmask)
                sums["d2n"] += err * n
                sums["d2n_px"] += n
    return {
        "geometry_views": len(frames),
        "geometry_supersample": supersample,
        "depth_kind": kind,
        "depth_mae": sums["depth"] / sums["depth_px"] if sums["depth_px"] else None,
        "depth_pixels": sums["depth_px"],
        "depth_coverage": sums["depth_px"] / sums["gt_depth_px"] if sums["gt_depth_px"] else None,
        "normal_deg": sums["normal"] / sums["normal_px"] if sums["normal_px"] else None,
        "normal_pixels": sums["normal_px"],
        "normal_source": "rendered normals (normals_world)" if rendered_normals
        else "depth_to_normal of the rendered expected depth (2DGS paper)",
        "normal_deg_depth_to_normal": sums["d2n"] / sums["d2n_px"] if sums["d2n_px"] else None,
        **({"normal_deg_all_seen": sums["normal_all_seen"] / sums["normal_all_seen_px"]
            if sums["normal_all_seen_px"] else None, "normal_all_seen_pixels": sums["normal_all_seen_px"]}
           if rendered_normals else {}),
    }


def mesh_eval(run_dir: Path, data: Path, mesh_out: Path, resolution: int, keep_largest: bool,
              true_mesh: Path, sdf_resolution: int = 256) -> dict:
    """Chamfer distance (% of the true bounding-box diagonal) of ``splatforge mesh``'s mesh of the run."""
    import trimesh

    from recon.commands.mesh import MeshConfig, extract_run_mesh
    from recon.geometry.mesh_metrics import chamfer_distance
    from surface_offset import mesh_offset, true_mesh_in_scene

    t = time.perf_counter()
    summary = extract_run_mesh(MeshConfig(run=run_dir, out=mesh_out, resolution=resolution,
                                          keep_largest=keep_largest, force=True, progress=False,
                                          sdf_resolution=sdf_resolution))
    seconds = time.perf_counter() - t
    pred = trimesh.load(mesh_out, process=False)
    truth = true_mesh_in_scene(data, true_mesh)
    cd = chamfer_distance(np.asarray(pred.vertices), np.asarray(pred.faces), np.asarray(truth.vertices),
                          np.asarray(truth.faces))
    offset = mesh_offset(truth, pred.vertices, pred.faces)
    return {"chamfer_pct": cd["chamfer_pct"], "accuracy_pct": cd["accuracy_pct"],
            "mesh_signed_median_pct": offset["signed_median_pct"],
            "completeness_pct": cd["completeness_pct"], "mesh": str(mesh_out), "mesh_faces": summary["faces"],
            "mesh_depth": summary["depth"], "mesh_voxel_size": summary["voxel_size"],
            "mesh_seconds": round(seconds, 2)}


def eikonal_eval(run_dir: Path, mesh_path: Path, device: str) -> dict:
    """|grad SDF| of a neus run's field at the vertices of its mesh (the zero level set: near the surface),
    :func:`recon.nerf.neus.eikonal_stats` (tolerance 5 %)."""
    import torch
    import trimesh

    from recon.nerf.neus import eikonal_stats
    from recon.run.folder import Run

    model = Run.open(run_dir).load_model(device=device)
    verts = torch.from_numpy(np.asarray(trimesh.load(mesh_path, process=False).vertices, dtype=np.float64))
    return {**eikonal_stats(model.surface_gradients(verts), 0.05), "points": int(len(verts)),
            "where": "vertices of the zero-level mesh"}


# ------------------------------------------------------------------------------ driver

def machine() -> dict:
    import torch

    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def compare(res: dict) -> dict:
    """2dgs relative to 3dgs on one dataset (what the issue's targets are stated in)."""
    a, b = res.get("2dgs"), res.get("3dgs")
    if not a or not b:
        return {}
    out = {"normal_deg_ratio_2dgs_over_3dgs": ratio(a.get("normal_deg"), b.get("normal_deg")),
           "depth_mae_ratio_2dgs_over_3dgs": ratio(a.get("depth_mae"), b.get("depth_mae")),
           "train_seconds_ratio_2dgs_over_3dgs": ratio(a.get("train_seconds"), b.get("train_seconds")),
           "psnr_2dgs_minus_3dgs": (a["psnr"] - b["psnr"]) if a.get("psnr") is not None and b.get("psnr") is not None
           else None}
    if "chamfer_pct" in a and "chamfer_pct" in b:
        out["chamfer_ratio_2dgs_over_3dgs"] = ratio(a["chamfer_pct"], b["chamfer_pct"])
    return out


def compare_neus(res: dict) -> dict:
    """neus relative to 2dgs on one dataset (issue 50's targets: Chamfer <= 0.7x, PSNR within 2 dB)."""
    a, b = res.get("neus"), res.get("2dgs")
    if not a or not b:
        return {}
    out = {"psnr_neus_minus_2dgs": (a["psnr"] - b["psnr"]) if a.get("psnr") is not None and b.get("psnr") is not None
           else None, "normal_deg_ratio_neus_over_2dgs": ratio(a.get("normal_deg"), b.get("normal_deg"))}
    if "chamfer_pct" in a and "chamfer_pct" in b:
        out["chamfer_ratio_neus_over_2dgs"] = ratio(a["chamfer_pct"], b["chamfer_pct"])
    return out


def run_name(label: str, method: str, args, grow_grad2d: float | None) -> str:
    """Folder and result name of one run: dataset label, method, factor, steps, then each option that is
    not its default (``-n``: init_num_random, ``-bg``: background, ``-ss``: supersample, ``-gg``: ADC
    grow threshold)."""
    if method == "neus":
        return (f"{label}-neus-f{args.data_factor}-s{args.neus_steps or args.steps}"
                + ("" if args.neus_target_samples is None else f"-ts{args.neus_target_samples}")
                + ("" if args.background is None else f"-bg{args.background}"))
    return (f"{label}-{method}-f{args.data_factor}-s{args.steps}"
            + ("" if args.init_num_random is None else f"-n{args.init_num_random}")
            + ("" if args.background is None else f"-bg{args.background}")
            + ("" if args.supersample == 1 else f"-ss{args.supersample}")
            + ("" if grow_grad2d is None else f"-gg{grow_grad2d:g}"))


def bench(args, log=lambda msg: print(msg, file=sys.stderr)) -> dict:
    from recon.core.atomic import atomic_write_bytes
    from recon.geometry.ground_truth import detect_source

    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "meshes").mkdir(parents=True, exist_ok=True)
    report = {"machine": machine(), "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "results": {}, "comparisons": {}, "unavailable": {}}
    for dataset in args.datasets:
        if dataset == "spot":
            if not Path(args.spot_mesh).is_file():
                report["unavailable"][dataset] = f"{args.spot_mesh}: mesh not found"
                continue
            data = ensure_spot(out, args.spot_views, args.spot_size, Path(args.spot_mesh), log, args.spot_samples)
        else:
            data = Path(args.lego)
            if not (data / "transforms_test.json").is_file():
                report["unavailable"][dataset] = f"{data}: no Blender dataset there"
                continue
        source = detect_source(data)
        per_method = {}
        for method in args.methods:
            label = (spot_label(args.spot_samples, Path(args.spot_mesh), args.spot_views, args.spot_size)
                     if dataset == "spot" else dataset)
            grow = args.surfel_grow_grad2d if method == "2dgs" else None
            name = run_name(label, method, args, grow)
            run = out / "runs" / name
            cache = out / "results" / f"{name}.json"
            key = {"eval_version": EVAL_VERSION, "geometry_views": args.geometry_views,
                   "mesh_resolution": args.mesh_resolution, "keep_largest": args.keep_largest, "data": str(data)}
            if args.supersample > 1:  # scored on the supersampled grid, block-averaged (since stop 26)
                key["geometry_supersample"] = args.supersample
            load0 = os.getloadavg()[0]
            neus = method == "neus"
            if neus:
                key["neus_mesh_resolution"] = args.neus_mesh_resolution
            metrics, trained = train_run(data, run, method, (args.neus_steps or args.steps) if neus else args.steps,
                                         args.data_factor, args.device, args.progress, log,
                                         None if neus else args.init_num_random, args.background,
                                         1 if neus else args.supersample, grow,
                                         args.neus_target_samples if neus else None)
            if not trained and cache.is_file():
                cached = json.loads(cache.read_text())
                if cached.get("key") == key:
                    per_method[method] = cached["result"]
                    continue
            res = {"run": str(run), "steps": metrics["steps"], "psnr": metrics["test"]["psnr"],
                   "num_gaussians": metrics["num_gaussians"], "train_seconds": metrics["train_seconds"],
                   "seconds_per_step": metrics["seconds_per_step"]}
            if trained:
                res["load_avg_1min_before_after_training"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
            if source is None:
                res["geometry"] = f"unavailable: {data} has no ground-truth depth or normal images"
            else:
                log(f"evaluating geometry of {name}")
                res.update(geometry_eval(run, source, args.geometry_views, args.device))
                if source == "nerf_synthetic":
                    res["ground_truth_note"] = ("NeRF-synthetic test PNGs: depth = 8 (1 - v/255) along the ray "
                                                "(converted to camera z); normals only where no component was "
                                                "clipped (datasets/README.md)")
            if dataset == "spot":
                log(f"extracting the mesh of {name}")
                res.update(mesh_eval(run, data, out / "meshes" / f"{name}.ply", args.mesh_resolution,
                                     args.keep_largest, Path(args.spot_mesh), args.neus_mesh_resolution))
                if neus:
                    res["eikonal"] = eikonal_eval(run, out / "meshes" / f"{name}.ply", args.device)
            atomic_write_bytes(cache, json.dumps({"key": key, "result": res}, indent=2).encode(), force=True)
            per_method[method] = res
        report["results"][dataset] = per_method
        report["comparisons"][dataset] = {**compare(per_method), **compare_neus(per_method)}
    report["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    atomic_write_bytes(out / "bench_geometry.json", json.dumps(report, indent=2).encode(), force=True)
    return report


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=7000, help="training steps, the same for every method")
    ap.add_argument("--data-factor", type=int, default=2, help="image downscale factor of the runs")
    ap.add_argument("--datasets", nargs="+", default=["spot", "lego"], choices=["spot", "lego"])
    ap.add_argument("--methods", nargs="+", default=["3dgs", "2dgs"], choices=["3dgs", "2dgs", "neus"])
    ap.add_argument("--out", type=Path, default=Path("bench_geometry"),
                    help="output folder: datasets/, runs/, meshes/, results/ (finished runs are reused)")
    ap.add_argument("--spot-views", type=int, default=SPOT_VIEWS, help="training views of the spot dataset")
    ap.add_argument("--spot-size", type=int, default=SPOT_SIZE, help="image size of the spot dataset")
    ap.add_argument("--spot-mesh", type=Path, default=SPOT_MESH,
                    help="the mesh of the mesh dataset (default: ../shared's spot); another mesh's dataset and runs "
                         "are named after its file (stem and content hash: mesh_name)")
    ap.add_argument("--spot-samples", type=int, default=DEFAULT_SAMPLES,
                    help="rays per pixel side of the spot renders (make_mesh_dataset.py --samples; 1: aliased; "
                         "runs and datasets of other values are named apart)")
    ap.add_argument("--lego", type=Path, default=LEGO)
    ap.add_argument("--geometry-views", type=int, default=0,
                    help="test views for depth/normal errors, evenly spaced (0: all)")
    ap.add_argument("--mesh-resolution", type=int, default=512, help="splatforge mesh --resolution")
    ap.add_argument("--no-keep-largest", dest="keep_largest", action="store_false",
                    help="do not pass --keep-largest to splatforge mesh")
    ap.add_argument("--init-num-random", type=int, default=None,
                    help="random initial Gaussians of every run (default: train's, 100k); the run folder name "
                         "records it when given")
    ap.add_argument("--background", default=None, choices=["auto", "white", "black", "random"],
                    help="training background of every run (default: train's, auto); the run folder name "
                         "records it when given")
    ap.add_argument("--supersample", type=int, default=1,
                    help="train --supersample of every run (render at N x, average N x N blocks; the test PSNR "
                         "renders the same way); the run folder name records it when not 1")
    ap.add_argument("--surfel-grow-grad2d", type=float, default=None,
                    help="--adc.grow-grad2d of the 2dgs runs (default: train's, 0.0002; 3dgs runs keep theirs); "
                         "the 2dgs run folder name records it when given (-gg0.0003)")
    ap.add_argument("--neus-steps", type=int, default=None, help="training steps of the neus run (default: --steps)")
    ap.add_argument("--neus-target-samples", type=int, default=None,
                    help="--nerf.target-samples of the neus run (default: train's, 65536); the run name records it")
    ap.add_argument("--neus-mesh-resolution", type=int, default=256,
                    help="splatforge mesh --sdf-resolution of the neus run (marching-cubes cells per axis)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--progress", action="store_true", help="training progress bars (on stderr)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.data_factor < 1 or args.supersample < 1:
        ap.error("--steps, --data-factor and --supersample must be >= 1")
    if args.surfel_grow_grad2d is not None and not (math.isfinite(args.surfel_grow_grad2d)
                                                    and args.surfel_grow_grad2d >= 0):
        ap.error(f"--surfel-grow-grad2d {args.surfel_grow_grad2d}: must be a finite number >= 0")
    return args


def main(argv=None) -> int:
    from recon.core.errors import USER_ERRORS

    args = parse_args(argv)
    try:
        report = bench(args)
    except USER_ERRORS as err:
        print(f"bench_geometry: {err}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
