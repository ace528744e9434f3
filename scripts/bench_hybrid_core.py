"""Hybrid renderer frame time (recon.hybrid.render): a mesh asset inside N Gaussians, per stage. Prints JSON.

    python scripts/bench_hybrid_core.py --gaussians 200000 --width 480 --height 272 --repeats 5
    python scripts/bench_hybrid_core.py --run runs/bird --asset ../shared/data/meshes/spot/spot_triangulated.obj

Without ``--run`` the scene is synthetic: N Gaussians (a floor layer and a cloud around the asset, seeded),
the asset at the origin, a sun; the camera looks at the asset from 3 units. With ``--run`` the run's model,
ground frame and proxy mesh come from :meth:`HybridRenderer.for_run` (the proxy is built once and cached in
RUN/hybrid/; its build time is reported separately) and the camera is the first training camera resized to
the width asked. Reported: median over ``--repeats`` frames (after one warm-up) of each stage's ms, for
shadows on and off; the machine (CPU count, load average) is noted.
"""

from __future__ import annotations

import rasterizer  # noqa: F401  (first: sets GOMP_SPINCOUNT before torch loads)
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import tyro

ROOT = Path(__file__).resolve().parents[1]
SPOT = ROOT / ".." / "shared" / "data" / "meshes" / "spot" / "spot_triangulated.obj"


@dataclass
class Args:
    gaussians: int = 200_000
    """Gaussians in the synthetic scene."""
    width: int = 480
    height: int = 272
    repeats: int = 5
    asset: Path = SPOT
    """Mesh asset (OBJ / PLY / GLB)."""
    material: str = "diffuse"
    run: Optional[Path] = None
    """A training run to insert into (else a synthetic scene)."""
    pose: str = "0,0,0,30,0,0,1"
    bounces: int = 1
    """Secondary-ray bounce limit (mirror / glass)."""
    seed: int = 0


def look_at(center, target) -> np.ndarray:
    center, target = np.asarray(center, float), np.asarray(target, float)
    fwd = (target - center) / np.linalg.norm(target - center)
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    R = np.stack([right, np.cross(fwd, right), fwd])
    w2c = np.eye(4)
    w2c[:3, :3], w2c[:3, 3] = R, -R @ center
    return w2c


def synthetic(args: Args):
    from rasterizer import Camera
    from recon.hybrid.assets import Light, PlacedAsset, load_mesh, parse_material, parse_pose
    from recon.hybrid.render import HybridRenderer
    from recon.models.gaussians import GaussianModel, rgb_to_sh0

    g = torch.Generator().manual_seed(args.seed)
    N = args.gaussians
    n_floor = N // 2
    floor = torch.cat([(torch.rand(n_floor, 2, generator=g) * 2 - 1) * 4, torch.zeros(n_floor, 1)], 1)
    cloud = (torch.rand(N - n_floor, 3, generator=g) * 2 - 1) * torch.tensor([3.0, 3.0, 1.5])
    cloud = cloud + torch.tensor([0, 0, 1.5])
    means = torch.cat([floor, cloud])
    scales = torch.cat([torch.tensor([[0.03, 0.03, 0.003]]).repeat(n_floor, 1), torch.full((N - n_floor, 3), 0.01)])
    op = torch.cat([torch.full((n_floor,), 0.9), torch.full((N - n_floor,), 0.05)])
    params = {"means": means, "quats": torch.tensor([[1.0, 0, 0, 0]]).repeat(N, 1), "log_scales": scales.log(),
              "logit_opacities": torch.log(op / (1 - op)), "sh0": rgb_to_sh0(torch.rand(N, 3, generator=g))[:, None],
              "shN": torch.zeros(N, 15, 3)}
    model = GaussianModel(params, 3, 1.0)
    asset = PlacedAsset(load_mesh(args.asset), parse_pose(args.pose), parse_material(args.material))
    sun = Light("sun", direction=tuple(np.array([0.4, 0.3, 1.0]) / np.linalg.norm([0.4, 0.3, 1.0])))
    f = 0.9 * args.width
    K = [[f, 0, args.width / 2], [0, f, args.height / 2], [0, 0, 1]]
    cam = Camera.from_arrays(look_at([2.2, -2.2, 1.4], [0, 0, 0.5]), K, args.width, args.height, torch.float32)
    return HybridRenderer(model, [asset], [sun], np.eye(3), background=[1.0, 1.0, 1.0], bounces=args.bounces), cam, {}


def from_run(args: Args):
    from recon.hybrid.assets import PlacedAsset, load_mesh, parse_light, parse_material, parse_pose
    from recon.hybrid.render import HybridRenderer, ground_frame_of
    from recon.run.folder import Run

    run = Run.open(args.run)
    frame = ground_frame_of(run.scene.frames_train)
    asset = PlacedAsset(load_mesh(args.asset), parse_pose(args.pose), parse_material(args.material))
    t0 = time.perf_counter()
    r = HybridRenderer.for_run(run, [asset], [parse_light("sun:45,60", frame)], progress=True, bounces=args.bounces)
    load_s = time.perf_counter() - t0
    cam0 = run.cameras[0]
    cam = cam0.scaled(args.width / cam0.width)
    return r, cam, {"load_and_proxy_s": round(load_s, 2), "gaussians": len(r.model)}


def main(args: Args) -> dict:
    torch.set_grad_enabled(False)
    renderer, cam, extra = from_run(args) if args.run else synthetic(args)
    out = {"width": cam.width, "height": cam.height, "gaussians": len(renderer.model), "material": args.material,
           "bounces": args.bounces,
           **extra, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                "torch_threads": torch.get_num_threads()}}
    for shadows in (True, False):
        renderer.render(cam, shadows=shadows)  # warm-up
        runs = [renderer.render(cam, shadows=shadows).timings for _ in range(args.repeats)]
        stages = {k: round(statistics.median(t.get(k, 0.0) for t in runs), 1) for k in runs[0]}
        out["shadows_on" if shadows else "shadows_off"] = stages
    out["load_average"] = os.getloadavg()
    return out


if __name__ == "__main__":
    print(json.dumps(main(tyro.cli(Args)), indent=1))
