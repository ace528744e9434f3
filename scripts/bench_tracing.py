#!/usr/bin/env python
"""Benchmark rasterizer.tracing (secondary rays through Gaussians); prints JSON.

Scene (``--scene random``): the rasterizer benchmark's synthetic Gaussians (means uniform in x [-1, 1],
y [-0.8, 0.8], z [2.5, 5]; log-scales uniform in [-4.5, -2.6]; random rotations; opacities in [0.3, 0.95])
with SH degree 3 coefficients, ``--n`` of them (default 200k); or ``--splats FILE`` (a splats.ply, e.g. a
trained run's). Rays: ``--rays`` counts (default 20k and 130k = 480 x 272): the pixel rays of a camera at
the origin looking down +z (480 x 272, focal 1.2 x width, a random subset of pixels in pixel order: in
random order the walk was 25% slower, the cache), reflected off a
mirror plane z = 3.0 tilted by 20 degrees (origins on the mirror, t_min 1e-4, t_max inf): a mirror
inside the scene, the hard case (every reflected ray passes through Gaussians). ``--scene surface``: flat
Gaussians on the spot mesh (a stand-in for a trained object scene) and the mirror behind it, at z = 5.0.

Times (median of --repeats after one warm-up): ``build`` (the grid, once per parameter version),
``candidates`` (cpu grid walk, lists), ``evaluate`` (differentiable PyTorch compositing of the lists),
``evaluate_backward`` (evaluation + backward of sum(rgb) + sum(distance)), ``forward_fused`` (walk + shading in
one kernel: every forward of the cpu backend), ``trace_forward_backward`` (trace_gaussians with gradients:
the fused forward, then a second walk and the evaluation in its backward). ``--open3d`` also times open3d's RaycastingScene.list_intersections over
per-Gaussian bounding octahedra (the alternative the grid was chosen over).

Example: python scripts/bench_tracing.py --rays 20000 130000 --repeats 5
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT)

import argparse
import json
import math
import os
import platform
import statistics
import time

import numpy as np
import torch

from rasterizer.tracing import build_gaussian_accel, candidates_cpu, trace_gaussians
from rasterizer.tracing.evaluate import composite_candidates
from rasterizer.tracing.geometry import GAUSSIAN, gaussian_frames
from recon.core.open3d_import import open3d


def make_scene(n: int, seed: int = 0, sh_degree: int = 3):
    g = torch.Generator().manual_seed(seed)
    u = lambda *s: torch.rand(*s, generator=g)  # noqa: E731
    means = torch.stack([u(n) * 2 - 1, u(n) * 1.6 - 0.8, u(n) * 2.5 + 2.5], dim=-1)
    scales = torch.exp(u(n, 3) * 1.9 - 4.5)
    quats = torch.randn(n, 4, generator=g)
    opacities = u(n) * 0.65 + 0.3
    sh = torch.randn(n, (sh_degree + 1) ** 2, 3, generator=g) * 0.2
    return means, quats, scales, opacities, sh, sh_degree


def make_surface_scene(n: int, seed: int = 0, sh_degree: int = 3):
    """A stand-in for a trained object scene: ``n`` flat Gaussians on the surface of ../shared/data/meshes/spot
    (scaled to about 2 units, centred at z = 3.75 in front of the benchmark camera), tangent to it, each
    1.5 x the mean sample spacing wide and a tenth of that thick, opacities in [0.5, 0.95]."""
    import trimesh

    mesh_path = _Path(__file__).resolve().parents[2] / "shared" / "data" / "meshes" / "spot" / "spot_triangulated.obj"
    if not mesh_path.exists():
        cands = sorted((_Path(__file__).resolve().parents[2] / "shared" / "data" / "meshes" / "spot").glob("*.obj"))
        if not cands:
            raise SystemExit("--scene surface needs ../shared/data/meshes/spot (not found)")
        mesh_path = cands[0]
    mesh = trimesh.load(str(mesh_path), force="mesh")
    rng = np.random.default_rng(seed)
    pts, faces = trimesh.sample.sample_surface(mesh, n, seed=seed)
    normals = mesh.face_normals[faces]
    lo, hi = mesh.bounds
    scale = 2.0 / float(np.max(hi - lo))
    pts = (pts - (lo + hi) / 2) * scale + np.array([0.0, 0.0, 3.75])
    spacing = math.sqrt(mesh.area * scale * scale / n)
    # rotation whose third column is the normal: quaternion from the z axis to n
    z = np.array([0.0, 0.0, 1.0])
    axis = np.cross(z, normals)
    w = 1.0 + normals @ z
    q = np.concatenate([w[:, None], axis], axis=1)
    flip = w < 1e-8
    q[flip] = np.array([0.0, 1.0, 0.0, 0.0])
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    s = np.stack([np.full(n, 1.5 * spacing), np.full(n, 1.5 * spacing), np.full(n, 0.15 * spacing)], 1)
    s *= rng.uniform(0.7, 1.3, (n, 1))
    f = lambda x: torch.as_tensor(np.asarray(x), dtype=torch.float32)  # noqa: E731
    sh = torch.randn(n, (sh_degree + 1) ** 2, 3, generator=torch.Generator().manual_seed(seed)) * 0.2
    return f(pts), f(q), f(s), f(rng.uniform(0.5, 0.95, n)), sh, sh_degree


def load_splats(path: str):
    from recon.export import read_splats  # noqa: PLC0415 (optional: a trained run)

    data = read_splats(path)
    t = data.to_torch()
    return (t["means"], t["quats"], torch.exp(t["log_scales"]), torch.sigmoid(t["logit_opacities"]), t["sh"],
            data.sh_degree)


def mirror_rays(count: int, seed: int = 1, width: int = 480, height: int = 272, z_mirror: float = 3.0,
                tilt_deg: float = 20.0):
    """Pixel rays of a camera at the origin (looking down +z) reflected off a tilted plane through z_mirror."""
    g = torch.Generator().manual_seed(seed)
    pix = torch.randperm(width * height, generator=g)[:count].sort().values  # in pixel order, as a renderer passes them
    f = 1.2 * width
    x = ((pix % width).float() + 0.5 - width / 2) / f
    y = ((pix // width).float() + 0.5 - height / 2) / f
    d = torch.nn.functional.normalize(torch.stack([x, y, torch.ones_like(x)], -1), dim=-1)
    a = math.radians(tilt_deg)
    n = torch.tensor([math.sin(a), 0.0, -math.cos(a)])
    p0 = torch.tensor([0.0, 0.0, z_mirror])
    t = (p0 @ n) / (d @ n)
    origins = d * t[:, None]
    refl = d - 2 * (d @ n)[:, None] * n
    return origins, torch.nn.functional.normalize(refl, dim=-1), torch.full((count,), 1e-4), \
        torch.full((count,), float("inf"))


def timed(fn, repeats: int):
    fn()
    times = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times), out


def octahedra(means, A, opacities):
    """Vertices [6N, 3] (6 per Gaussian: the ends of the principal axes at sqrt(3) k sigma, which
    circumscribe the k-sigma ellipsoid) and faces [8N, 3] of the Gaussians' bounding octahedra."""
    Ainv = torch.linalg.inv(A.double())  # columns: principal axes x sigma
    k = torch.sqrt(torch.clamp(2 * torch.log(opacities.double() * 255), min=0))
    axes = Ainv.transpose(-1, -2) * (math.sqrt(3) * k)[:, None, None]  # rows: scaled axes
    v = torch.cat([means.double()[:, None] + axes, means.double()[:, None] - axes], dim=1)  # [N, 6, 3]
    base = torch.tensor([[0, 1, 2], [1, 3, 2], [3, 4, 2], [4, 0, 2], [1, 0, 5], [3, 1, 5], [4, 3, 5], [0, 4, 5]])
    # vertex order +a0 +a1 +a2 -a0 -a1 -a2: the faces above are those of (0: +x, 1: +y, 2: +z, 3: -x, 4: -y, 5: -z)
    faces = base[None] + 6 * torch.arange(means.shape[0])[:, None, None]
    return v.reshape(-1, 3).float().numpy(), faces.reshape(-1, 3).int().numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--splats", default=None)
    ap.add_argument("--scene", choices=["random", "surface"], default="random",
                    help="random: the rasterizer benchmark's fog of Gaussians; surface: flat Gaussians on the spot mesh")
    ap.add_argument("--rays", type=int, nargs="+", default=[20_000, 130_560])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--open3d", action="store_true")
    args = ap.parse_args()
    if args.splats:
        means, quats, scales, opacities, sh, degree = load_splats(args.splats)
    elif args.scene == "surface":
        means, quats, scales, opacities, sh, degree = make_surface_scene(args.n)
    else:
        means, quats, scales, opacities, sh, degree = make_scene(args.n)
    result = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads":
                          torch.get_num_threads(), "load": os.getloadavg()},
              "scene": args.splats or f"{args.scene} {args.n}", "n": int(means.shape[0]), "sh_degree": degree, "cases": []}
    build_ms, _, accel = timed(lambda: build_gaussian_accel(means, quats, scales, opacities), args.repeats)
    result["build_ms"] = build_ms
    result["grid"] = {"dims": accel.dims.tolist(), "entries": int(len(accel.cell_items)), "loose": int(len(accel.loose))}
    for R in args.rays:
        o, d, lo, hi = mirror_rays(R, z_mirror=5.0 if args.scene == "surface" and not args.splats else 3.0)
        case = {"rays": R}
        with torch.no_grad():
            case["forward_fused_ms"], case["forward_fused_min_ms"], out = timed(
                lambda: trace_gaussians(means, quats, scales, opacities, sh, o, d, lo, hi, sh_degree=degree,
                                        accel=accel), args.repeats)
        case["mean_alpha"] = float(1 - out[1].mean())
        case["candidates_ms"], _, (ids, counts) = timed(lambda: candidates_cpu(accel, o, d, lo, hi), args.repeats)
        case["mean_candidates"] = float(counts.float().mean())
        case["max_candidates"] = int(counts.max())
        if not args.no_backward:
            params = [x.clone().requires_grad_(True) for x in (means, quats, scales, opacities, sh)]

            def evaluate():
                m, q, s, op, c = params
                A = gaussian_frames(q, s)
                return composite_candidates(m, A, op, c, degree, GAUSSIAN, o, d, lo, hi, ids, counts)

            case["evaluate_ms"], _, outs = timed(evaluate, args.repeats)

            def backward():
                rgb, T, dist = evaluate()
                (rgb.sum() + dist.sum()).backward()

            case["evaluate_backward_ms"], _, _ = timed(backward, args.repeats)

            def trace_backward():  # what a differentiated render pays: fused forward, walk + evaluation in backward
                m, q, s, op, c = params
                rgb, T, dist = trace_gaussians(m, q, s, op, c, o, d, lo, hi, sh_degree=degree, accel=accel)
                (rgb.sum() + dist.sum()).backward()

            case["trace_forward_backward_ms"], _, _ = timed(trace_backward, args.repeats)
        if args.open3d:
            o3d = open3d("bench_tracing.py --open3d")

            with torch.no_grad():
                A = gaussian_frames(quats, scales)
                v, f = octahedra(means, A, opacities)
            scene = o3d.t.geometry.RaycastingScene()
            mesh = o3d.t.geometry.TriangleMesh()
            mesh.vertex.positions = o3d.core.Tensor(v)
            mesh.triangle.indices = o3d.core.Tensor(f)
            scene.add_triangles(mesh)
            rays = o3d.core.Tensor(torch.cat([o, d], 1).float().numpy())
            t0 = time.perf_counter()
            scene.list_intersections(o3d.core.Tensor(rays.numpy()[:16]))  # builds the BVH
            case["open3d_build_ms"] = (time.perf_counter() - t0) * 1e3
            case["open3d_list_intersections_ms"], _, ans = timed(lambda: scene.list_intersections(rays), args.repeats)
            case["open3d_mean_crossings"] = float(ans["ray_splits"].numpy()[-1] / R)
        result["cases"].append(case)
    result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
