"""``splatforge mesh2splat --distributed``: two gloo ranks on localhost (torch.distributed's env:// rendezvous,
as torchrun sets it) share one batch through the lease queue; rank 0 alone writes the index; the rows match
a one-process batch; a rerun resumes (only a new mesh is converted)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trimesh")
pytest.importorskip("open3d")

from recon.core.process_group import free_port  # noqa: E402
from recon.data.procedural_meshes import make_mesh  # noqa: E402
from recon.data.splat_index import latest_rows, read_index  # noqa: E402
from recon.mesh2splat.batch import BatchConfig, run_batch  # noqa: E402
from recon.mesh2splat.sources import WORK_DIR  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
TINY_FLAGS = ["--views", "2", "--test-views", "1", "--size", "16", "--steps", "3", "--init-points", "64",
              "--max-gaussians", "64", "--workers", "0", "--no-report", "--no-progress"]


def run_ranks(meshes: Path, out: Path, world: int = 2) -> list[dict]:
    """Run the command on ``world`` local ranks; their JSON summaries by rank."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        procs.append(subprocess.Popen([sys.executable, "-m", "recon.cli", "mesh2splat", str(meshes), "--out", str(out),
                                       "--distributed", "--lease-seconds", "60", "--timeout-seconds", "120",
                                       *TINY_FLAGS], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return sorted(results, key=lambda r: r["rank"])


def write_meshes(root: Path, which: dict) -> None:
    for rel, (category, seed) in which.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        make_mesh(category, seed, coloured=not rel.endswith(".off")).export(root / rel)


def test_two_ranks_share_a_batch_rank0_writes_the_index_and_a_rerun_resumes(tmp_path):
    meshes = tmp_path / "meshes"
    write_meshes(meshes, {"box/a.off": ("box", 0), "sphere/b.ply": ("sphere", 1), "torus/c.obj": ("torus", 2)})
    (meshes / "bad").mkdir()
    (meshes / "bad" / "empty.obj").write_text("v 0 0 0\nv 1 0 0\n")
    out = tmp_path / "out"
    first = run_ranks(meshes, out)
    assert [r["world_size"] for r in first] == [2, 2]
    assert sum(r["converted"] for r in first) == 4 and first[0]["written"] == 4 and "written" not in first[1]
    lines = (out / "index.jsonl").read_text().splitlines()
    assert len(lines) == 4  # one row per object, each written once (by rank 0)
    rows = latest_rows(read_index(out))
    assert {s: r["status"] for s, r in rows.items()} == {"bad/empty.obj": "failed", "box/a.off": "done",
                                                         "sphere/b.ply": "done", "torus/c.obj": "done"}
    assert all(r["worker"].split("@")[0] in ("rank0", "rank1") for r in rows.values())
    assert all((out / r["output"]).is_file() for r in rows.values() if r["status"] == "done")
    assert not (out / WORK_DIR).exists() and not (out / ".lock").exists()

    # the same rows as one process converting the same meshes
    single = tmp_path / "single"
    run_batch(BatchConfig(mesh_dir=meshes, out=single, preset=_tiny(), workers=0, progress=False))
    keys = ("status", "output", "label", "gaussians", "mesh_to_world", "steps", "views", "size")
    assert {s: {k: r[k] for k in keys} for s, r in rows.items()} == \
        {s: {k: r[k] for k in keys} for s, r in latest_rows(read_index(single)).items()}

    # resume: a new mesh is converted, the rest skipped; the first rows stay as they were
    write_meshes(meshes, {"cylinder/d.ply": ("cylinder", 3)})
    again = run_ranks(meshes, out)
    assert again[0]["skipped"] == 4 and sum(r["converted"] for r in again) == 1 and again[0]["written"] == 1
    lines_again = (out / "index.jsonl").read_text().splitlines()
    assert lines_again[:4] == lines and len(lines_again) == 5
    assert json.loads(lines_again[4])["source"] == "cylinder/d.ply"


def test_a_rank0_error_stops_every_rank_with_one_line(tmp_path):
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        procs.append(subprocess.Popen([sys.executable, "-m", "recon.cli", "mesh2splat", str(tmp_path / "nope"),
                                       "--out", str(tmp_path / "o"), "--distributed", "--timeout-seconds", "60"],
                                      env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for rank, proc in enumerate(procs):
        _, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 2, stderr[-2000:]
        assert "no such folder" in stderr and "Traceback" not in stderr
        assert ("rank 0 stopped the batch" in stderr) == (rank == 1)


def _tiny():
    from recon.mesh2splat.preset import ObjectPreset

    return ObjectPreset(views=2, test_views=1, size=16, steps=3, init_points=64, max_gaussians=64)
