#!/usr/bin/env python
"""Benchmark Gaussians bound to a skinned mesh (--method meshgs); prints JSON.

- **posing**: the cost of computing world Gaussians (means, wxyz quaternions, log-scales) for N bound
  Gaussians (default 100,000) from a new pose, on the CPU, without gradients: linear-blend skinning of the
  template, the posed triangles' frames and the binding (recon/avatar). The template is a capture's
  (--data DIR, an avatar dataset) or the shared spot mesh rigged with the procedural bone chain; Gaussians
  are spread uniformly over the triangles. Each timed run draws a fresh random pose. Median and minimum of
  --repeats runs after --warmup, at torch's thread count and single-threaded, for the PyTorch reference
  (recon/avatar/binding.py, what training differentiates) and the fused Numba kernel
  (recon/avatar/posing_kernel.py; skinning and triangle frames stay in PyTorch in both).
- **binding** (--run RUN, a meshgs run): in every captured pose (training and unseen) the largest distance
  of a Gaussian's centre from its triangle's plane, as a fraction of the template's bounding-box diagonal
  (the issue's target: <= 2 %), and the share of Gaussians beyond 1 % and 2 %.
- **ablation** (--ablation DATA): the pose-dependent MLP (recon/avatar/pose_mlp.py). Runs on the avatar
  capture DATA with the same seed and steps, without and with ``--meshgs.pose-mlp-width W`` (one run per
  width and regulariser weight given; gains against the run without), trained through
  the trainer into --out-dir; for each: PSNR on test views of training poses and of unseen poses, training
  seconds, Gaussians and the binding measure; for the MLP run also its PSNR with the MLP switched off (what
  the avatar GLB export gives an engine: the MLP is not exported). Run it single-threaded
  (OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1); posing is not timed in this mode.

The 2-core machine is shared: timings are upper bounds under load (the load average is printed).

Examples: python scripts/bench_avatar.py --run output/avatar --repeats 30
          python scripts/bench_avatar.py --ablation avatar_data --steps 1500 --pose-mlp-width 32 \
                 --pose-mlp-reg 0.01 1.0 --out-dir abl
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from recon.avatar.binding import PosedTriangles, bind, plane_distances  # noqa: E402
from recon.avatar.config import MeshGSConfig  # noqa: E402
from recon.avatar.bone_chain import bone_chain, principal_axes, random_poses  # noqa: E402
from recon.avatar.posing_kernel import bind_numba  # noqa: E402
from recon.avatar.quaternions import normalize  # noqa: E402
from recon.avatar.skinning import pose_vertices  # noqa: E402

SPOT = _Path(__file__).resolve().parents[1].parent / "shared" / "data" / "meshes" / "spot" / "spot_triangulated.obj"


def template(data: _Path | None):
    """(rest vertices [V, 3], faces [F, 3], skeleton, weights [V, J]) of --data's capture or of rigged spot."""
    if data is not None:
        from recon.data.detect import load_scene

        av = load_scene(data).avatar
        return av.rest_vertices, av.faces, av.skin.skeleton, av.skin.weights
    if not SPOT.is_file():
        raise SystemExit(f"bench_avatar: {SPOT} not found; give --data DIR (an avatar capture)")
    from recon.data.mesh_render import load_mesh, normalised_mesh

    mesh, _ = normalised_mesh(load_mesh(SPOT))
    v = np.asarray(mesh.vertices)
    skeleton, weights = bone_chain(v)
    return (torch.tensor(v, dtype=torch.float32), torch.tensor(np.asarray(mesh.faces), dtype=torch.int64), skeleton,
            torch.tensor(weights))


def time_posing(rest, faces, skeleton, weights, n: int, repeats: int, warmup: int, binder=bind, seed: int = 0) -> dict:
    """Milliseconds to pose N bound Gaussians (skinning + frames + ``binder``), median and min over ``repeats``."""
    g = torch.Generator().manual_seed(seed)
    face_ids = torch.randint(0, len(faces), (n,), generator=g)
    bary = torch.softmax(torch.randn(n, 3, generator=g), -1)
    offset = 0.1 * torch.randn(n, generator=g)
    quats = normalize(torch.randn(n, 4, generator=g))
    log_scales = torch.randn(n, 3, generator=g) - 1
    _, axes = principal_axes(rest.double().numpy())
    poses = torch.tensor(random_poses(skeleton, repeats + warmup, 25.0, axes[1:], np.random.default_rng(seed)),
                         dtype=torch.float32)
    times = []
    with torch.no_grad():
        for k in range(repeats + warmup):
            t0 = time.perf_counter()
            v = pose_vertices(skeleton, rest, weights, poses[k])
            w = binder(PosedTriangles.of(v, faces), face_ids, bary, offset, quats, log_scales)
            _ = w.means.sum().item()
            if k >= warmup:
                times.append(time.perf_counter() - t0)
    return {"median_ms": round(1000 * statistics.median(times), 3), "min_ms": round(1000 * min(times), 3),
            "repeats": repeats}


def binding_holds(run: _Path) -> dict:
    """Per captured pose, the largest centre-to-plane distance / template diagonal (see the module docstring)."""
    from recon.run.folder import Run

    model = Run.open(run).load_model()
    av = model.avatar
    diagonal = float((av.rest_vertices.max(0).values - av.rest_vertices.min(0).values).norm())
    poses = []
    with torch.no_grad():
        for k, name in enumerate(av.names):
            v = av.posed_vertices(av.rotations[k], av.translations[k])
            means = model.world_gaussians(v, av.rotations[k]).means  # with the pose MLP's correction, if any
            d = plane_distances(model.triangles(v), model.face_ids, means) / diagonal
            poses.append({"pose": name, "unseen": bool(av.unseen[k]), "max_fraction": round(float(d.max()), 6),
                          "beyond_1pct": round(float((d > 0.01).float().mean()), 6),
                          "beyond_2pct": round(float((d > 0.02).float().mean()), 6)})
    worst = max(p["max_fraction"] for p in poses)
    return {"run": str(run), "gaussians": len(model), "diagonal": round(diagonal, 6), "max_fraction": worst,
            "target": 0.02, "holds": worst <= 0.02, "poses": poses}


def pose_groups(model, scene, sh_degree: int) -> dict:
    """Test PSNR of ``model`` on ``scene``'s test views: overall, training poses and unseen poses."""
    from recon.data.frame_images import FrameImages
    from recon.training.evaluation import evaluate_model

    bg = torch.tensor(scene.background, dtype=torch.float32)
    test = evaluate_model(model, scene.frames_test, FrameImages(scene.frames_test, torch.device("cpu")), bg,
                          sh_degree)
    groups = model.metric_groups(test["per_view"])
    return {"psnr": round(test["psnr"], 3), "train_poses": round(groups["train_poses"]["psnr"], 3),
            "unseen_poses": round(groups["unseen_poses"]["psnr"], 3),
            "gap": round(groups["train_poses"]["psnr"] - groups["unseen_poses"]["psnr"], 3)}


def ablation(data: _Path, out_dir: _Path, steps: int, widths: list[int], sh_degree: int, seed: int,
             regs: list[float]) -> dict:
    """The pose-MLP ablation (module docstring): a run without the MLP and one with it per (width, reg) of
    ``widths`` x ``regs``, same seed and steps; each MLP run's gains are against the run without."""
    from recon.data.detect import load_scene
    from recon.run.folder import Run
    from recon.training.trainer import TrainConfig, Trainer

    scene = load_scene(data)
    result = {"data": str(data), "steps": steps, "sh_degree": sh_degree, "seed": seed, "runs": {}}
    configs = [("no_mlp", 0, regs[0])] + [(f"mlp_{w}_reg_{r:g}", w, r) for w in widths for r in regs]
    for name, w, reg in configs:
        out = out_dir / name
        cfg = TrainConfig(data=data, out=out, method="meshgs", steps=steps, sh_degree=sh_degree, seed=seed,
                          progress=True, meshgs=MeshGSConfig(pose_mlp_width=w, pose_mlp_reg=reg))
        with contextlib.redirect_stdout(_sys.stderr):  # the progress bar: stdout holds only the JSON
            metrics = Trainer(cfg, log=lambda s: print(f"{name}: {s}", file=_sys.stderr), device="cpu").run()
        model = Run.open(out).load_model()
        entry = {"pose_mlp_width": w, "pose_mlp_reg": reg if w else None, "train_seconds": metrics.get("train_seconds"), "gaussians": len(model),
                 **{k: v for k, v in pose_groups(model, scene, sh_degree).items()},
                 "binding_max_fraction": binding_holds(out)["max_fraction"]}
        if w:
            model.pose_mlp = None  # what an engine gets from the GLB
            entry["without_mlp_at_test"] = pose_groups(model, scene, sh_degree)
            base = result["runs"]["no_mlp"]
            entry["unseen_gain_db"] = round(entry["unseen_poses"] - base["unseen_poses"], 3)
            entry["train_pose_gain_db"] = round(entry["train_poses"] - base["train_poses"], 3)
        result["runs"][name] = entry
        print(json.dumps({name: entry}), file=_sys.stderr)  # each run as it ends (the JSON comes at the end)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=_Path, default=None, help="an avatar capture (default: rigged spot)")
    parser.add_argument("--gaussians", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--run", type=_Path, default=None, help="a meshgs run: measure whether the binding holds")
    parser.add_argument("--ablation", type=_Path, default=None, metavar="DATA",
                        help="an avatar capture: train without and with the pose MLP and compare (no posing timing)")
    parser.add_argument("--steps", type=int, default=1500, help="--ablation: training steps of each run")
    parser.add_argument("--pose-mlp-width", type=int, nargs="+", default=[32],
                        help="--ablation: the MLP runs' widths (one run per width and regulariser)")
    parser.add_argument("--pose-mlp-reg", type=float, nargs="+", default=[MeshGSConfig.pose_mlp_reg],
                        help="--ablation: the MLP runs' regulariser weights")
    parser.add_argument("--sh-degree", type=int, default=1, help="--ablation: SH degree of both runs")
    parser.add_argument("--seed", type=int, default=0, help="--ablation: seed of both runs")
    parser.add_argument("--out-dir", type=_Path, default=_Path("avatar_ablation"), help="--ablation: run folders")
    args = parser.parse_args(argv)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "threads": torch.get_num_threads(), "torch": torch.__version__}
    if args.ablation is not None:
        t0 = time.perf_counter()
        out = {"machine": machine, "ablation": ablation(args.ablation, args.out_dir, args.steps, args.pose_mlp_width,
                                                        args.sh_degree, args.seed, args.pose_mlp_reg)}
        out["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        out["wall_seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(out, indent=1))
        return 0
    rest, faces, skeleton, weights = template(args.data)
    threads = torch.get_num_threads()
    out = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "load_average": [round(x, 2) for x in os.getloadavg()], "torch": torch.__version__},
           "template": {"vertices": len(rest), "triangles": len(faces), "joints": skeleton.num_joints},
           "gaussians": args.gaussians, "target_ms": 10.0}
    out["posing"] = {}
    for name, binder in (("pytorch", bind), ("numba", bind_numba)):
        for count in sorted({threads, 1}, reverse=True):
            torch.set_num_threads(count)
            numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))
            out["posing"][f"{name}_threads_{count}"] = time_posing(rest, faces, skeleton, weights, args.gaussians,
                                                                   args.repeats, args.warmup, binder)
    torch.set_num_threads(threads)
    if args.run is not None:
        out["binding"] = binding_holds(args.run)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    _sys.exit(main())
