"""Where one object's time goes in ``splatforge mesh2splat`` (issue 49): a fresh process, end to end, as JSON.

    python scripts/profile_mesh2splat.py [--mesh PATH] [--category box] [--steps N ...preset flags] [--threads 1]

Starts a fresh Python process (as a worker is) that times: the interpreter start, the imports (torch and
the rasterizer, then recon's mesh2splat and its libraries), the kernels' warm-up (a toy object converted
twice: the first time loads the compiled Numba kernels from the cache and sets up the libraries, the
second shows what is left), then converts the object with the given preset and reports its
``stage_seconds`` (load, render, setup, train, test_eval, train_eval, chamfer, write; recon.mesh2splat.convert).
A long-lived worker pays the start, imports and warm-up once per batch, a fresh process per object paid them
per object: ``per_process_seconds`` is that sum. The object is ``--mesh`` or a procedural mesh of
``--category`` (recon.data.procedural_meshes, seed 0). Times are wall seconds on this machine under
whatever load it has (printed): an upper bound on a shared machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, sys, time
t_exec = time.time()
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
import rasterizer  # noqa: F401
import torch
torch.set_num_threads({threads})
t1 = time.perf_counter()
import numba
numba.set_num_threads(min({threads}, numba.config.NUMBA_NUM_THREADS))
from pathlib import Path
from recon.mesh2splat.convert import convert_object
from recon.mesh2splat.preset import ObjectPreset
import recon.core.open3d_import as o3i
o3i.open3d("profile")
import trimesh  # noqa: F401
t2 = time.perf_counter()
tiny = ObjectPreset(views=2, test_views=1, size=16, samples=1, steps=3, init_points=64, max_gaussians=64)
mesh_dir, source, out = Path({mesh_dir!r}), {source!r}, Path({out!r})
first = convert_object(mesh_dir, out / "tiny1", source, tiny, {method!r}, "cpu")
t3 = time.perf_counter()
again = convert_object(mesh_dir, out / "tiny2", source, tiny, {method!r}, "cpu")
t4 = time.perf_counter()
row = convert_object(mesh_dir, out / "object", source, ObjectPreset(**{preset!r}), {method!r}, "cpu")
t5 = time.perf_counter()
print(json.dumps({{"t_exec": t_exec, "imports_torch_rasterizer": t1 - t0, "imports_recon_libraries": t2 - t1,
                  "tiny_first": t3 - t2, "tiny_again": t4 - t3, "object_wall": t5 - t4, "row": row,
                  "tiny_status": [first["status"], again["status"]]}}))
"""


def object_mesh(args, scratch: Path) -> tuple[Path, str]:
    """(mesh folder, source) of the object to profile."""
    if args.mesh is not None:
        return args.mesh.resolve().parent, args.mesh.name
    from recon.data.procedural_meshes import make_mesh

    folder = scratch / "meshes"
    folder.mkdir(parents=True)
    make_mesh(args.category, 0, coloured=True).export(folder / f"{args.category}.ply")
    return folder, f"{args.category}.ply"


def main(argv=None) -> int:
    from recon.mesh2splat.preset import ObjectPreset

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mesh", type=Path, default=None)
    parser.add_argument("--category", default="box", choices=("box", "sphere", "torus", "cylinder", "blob"))
    parser.add_argument("--method", default="3dgs", choices=("3dgs", "2dgs"))
    parser.add_argument("--threads", type=int, default=1)
    for f in dataclasses.fields(ObjectPreset):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    args = parser.parse_args(argv)
    preset = {f.name: getattr(args, f.name) for f in dataclasses.fields(ObjectPreset)}
    with tempfile.TemporaryDirectory(prefix="profile_m2s_") as tmp:
        mesh_dir, source = object_mesh(args, Path(tmp))
        code = CHILD.format(root=str(ROOT), threads=args.threads, mesh_dir=str(mesh_dir), source=source,
                            out=str(Path(tmp) / "out"), method=args.method, preset=preset)
        load_before = os.getloadavg()
        t_spawn = time.time()
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        t_end = time.time()
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    row = child["row"]
    interpreter = child["t_exec"] - t_spawn
    warmup = child["tiny_first"] - child["tiny_again"]
    per_process = interpreter + child["imports_torch_rasterizer"] + child["imports_recon_libraries"] + warmup
    r3 = lambda v: round(v, 3)  # noqa: E731
    print(json.dumps({
        "profile": "mesh2splat, one object", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average_before": [round(v, 2) for v in load_before],
                    "load_average_after": [round(v, 2) for v in os.getloadavg()]},
        "object": source, "method": args.method, "threads": args.threads, "preset": preset,
        "process": {"interpreter_start": r3(interpreter), "imports_torch_rasterizer": r3(child["imports_torch_rasterizer"]),
                    "imports_recon_libraries": r3(child["imports_recon_libraries"]),
                    "kernel_warmup": r3(warmup), "toy_object_first": r3(child["tiny_first"]),
                    "toy_object_again": r3(child["tiny_again"])},
        "per_process_seconds": r3(per_process),
        "object_seconds": row["seconds"], "stage_seconds": row["stage_seconds"],
        "stages_sum": r3(sum(row["stage_seconds"].values())),
        "status": row["status"], "reason": row["reason"], "test_psnr": row["test_psnr"],
        "train_psnr": row["train_psnr"], "chamfer_pct": row["chamfer_pct"], "gaussians": row["gaussians"],
        "whole_process_wall": r3(t_end - t_spawn),
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
