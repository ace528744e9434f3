"""A tiny procedural city (COLMAP folder, ~150 images of 48 x 32) and its 3 x 2 partition, made once per session."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_city(tmp_path_factory) -> Path:
    from recon.data.procedural_city import CityConfig, make_city

    out = tmp_path_factory.mktemp("city") / "city"
    make_city(out, CityConfig(spacing=1.5, heights=(0.8,), width=48, height=32, surfel_spacing=0.1,
                              num_points=3000), progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_blocks(tiny_city, tmp_path_factory) -> Path:
    from recon.distributed.partition import PartitionConfig, partition_scene, write_partition
    from recon.training.trainer import TrainConfig, load_training_scene

    scene = load_training_scene(TrainConfig(data=tiny_city))
    part = partition_scene(scene, PartitionConfig(blocks_xy="3x2"), source=str(tiny_city))
    out = tmp_path_factory.mktemp("blocks") / "blocks.json"
    write_partition(part, out, scene)
    return out


def worker_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def torchrun(workers: int, args: list[str], max_restarts: int = 0, **popen) -> subprocess.Popen:
    """Start torchrun with ``workers`` local workers of ``python -m recon.distributed ARGS``."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={workers}",
           f"--max-restarts={max_restarts}", "-m", "recon.distributed", *args]
    return subprocess.Popen(cmd, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT, **popen)
