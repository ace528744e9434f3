"""``splatforge mesh2splat MESH_DIR --out DIR [--method 3dgs|2dgs] [--views N] [--size S] [--steps N]
[--workers K]``: every mesh under MESH_DIR (OBJ, PLY, GLB, OFF) to trained splats, DIR/<source>.ply, with a row
per object in DIR/index.jsonl and a summary in DIR/report/ (docs/mesh2splat.md).

The pipeline is :mod:`recon.mesh2splat` (one object: :mod:`recon.mesh2splat.convert`; the batch, resume,
workers and limits: :mod:`recon.mesh2splat.batch`); the per-object defaults are
:class:`recon.mesh2splat.preset.ObjectPreset`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Optional

import tyro

from recon.core.errors import USER_ERRORS, fail
from recon.mesh2splat.preset import ObjectPreset

_PRESET = ObjectPreset()


@dataclass
class Mesh2SplatConfig:
    """Convert every mesh under a folder into trained Gaussian splats (resumable; failures recorded)."""

    mesh_dir: Annotated[Path, tyro.conf.Positional]
    """folder of meshes (searched recursively; the first folder level names the label)"""
    out: Path
    """output folder: <source>.ply per object, index.jsonl, report/"""
    method: Literal["3dgs", "2dgs"] = "3dgs"
    views: int = _PRESET.views
    """training views per object"""
    test_views: int = _PRESET.test_views
    """held-out views per object (test PSNR)"""
    size: int = _PRESET.size
    """image width = height in pixels"""
    steps: int = _PRESET.steps
    """training steps per object"""
    sh_degree: int = _PRESET.sh_degree
    init_points: int = _PRESET.init_points
    """initial Gaussians sampled on the surface"""
    max_gaussians: int = _PRESET.max_gaussians
    means_lr: Optional[float] = _PRESET.means_lr
    """means learning rate (x scene extent); default: the method's (recon.mesh2splat.preset.MEANS_LR)"""
    workers: int = 1
    """worker processes converting objects in parallel (long-lived, one object at a time each); 0: in this
    process, without the limits below"""
    threads: int = 1
    """PyTorch and Numba threads per worker"""
    time_limit: float = 600.0
    """seconds per object before its worker is killed and the object marked failed"""
    memory_limit_gb: float = 8.0
    """address space in GiB an object may add to its worker process (0: none; CPU only); past it the object
    fails with a memory error and the batch goes on"""
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    distributed: bool = False
    """one batch over the ranks of a torch.distributed job (torchrun; every rank runs this command with the
    same flags, OUT on a shared file system): the ranks take objects from a lease queue, rank 0 writes the
    index (docs/mesh2splat.md)"""
    lease_seconds: float = 120.0
    """--distributed: an object whose rank stopped renewing its lease this long goes to another rank"""
    timeout_seconds: float = 600.0
    """--distributed: how long a rank waits for the others (joining, the pending list, the final barrier)"""
    limit: Optional[int] = None
    """convert at most this many of the pending objects, then stop (rerun to continue)"""
    report: bool = True
    """write DIR/report/ (summary.json, histograms.png, contact_sheet.png) at the end"""
    progress: bool = True
    seed: int = 0


def batch_config(cfg: Mesh2SplatConfig):
    """The :class:`recon.mesh2splat.batch.BatchConfig` of the command's flags."""
    from recon.mesh2splat.batch import BatchConfig

    preset = ObjectPreset(views=cfg.views, test_views=cfg.test_views, size=cfg.size, steps=cfg.steps,
                          sh_degree=cfg.sh_degree, init_points=cfg.init_points, max_gaussians=cfg.max_gaussians,
                          means_lr=cfg.means_lr, seed=cfg.seed)
    return BatchConfig(mesh_dir=cfg.mesh_dir, out=cfg.out, method=cfg.method, preset=preset, workers=cfg.workers,
                       threads=cfg.threads, time_limit=cfg.time_limit, memory_limit_gb=cfg.memory_limit_gb,
                       device=cfg.device, progress=cfg.progress, limit=cfg.limit)


def mesh2splat(config: Annotated[Mesh2SplatConfig, tyro.conf.arg(name="")]) -> dict:
    """Convert the meshes of MESH_DIR; prints a JSON summary. Bad input: one line, exit status 2."""
    from recon.mesh2splat.batch import run_batch
    from recon.mesh2splat.report import write_report

    try:
        if config.distributed:
            from recon.mesh2splat.cluster import run_distributed

            result = run_distributed(batch_config(config), config.lease_seconds, config.timeout_seconds)
        else:
            result = run_batch(batch_config(config))
        if config.report and result.get("rank", 0) == 0:
            result["report"] = write_report(config.out, seed=config.seed)["median"]
    except USER_ERRORS as err:
        fail("mesh2splat", err)
    print(json.dumps(result))
    return result
