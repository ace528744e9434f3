"""mesh2splat batches at toy sizes (16 px, 3 steps): planted bad meshes fail with reasons while the batch goes
on, a batch killed mid-object (SIGKILL) resumes to the index of an uninterrupted batch, workers enforce the
time limit."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

trimesh = pytest.importorskip("trimesh")
pytest.importorskip("open3d")

from recon.data.procedural_meshes import make_mesh  # noqa: E402
from recon.data.splat_index import latest_rows, read_index  # noqa: E402
from recon.mesh2splat.batch import BatchConfig, run_batch  # noqa: E402
from recon.mesh2splat.preset import ObjectPreset  # noqa: E402
from recon.mesh2splat.sources import WORK_DIR  # noqa: E402
from recon.core.errors import RunLockedError  # noqa: E402
from recon.outputs.files import RunLock  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
TINY = ObjectPreset(views=2, test_views=1, size=16, samples=1, steps=3, init_points=64, max_gaussians=64)
BAD_REASONS = {"bad/empty.obj": "empty mesh", "bad/nonmanifold.ply": "non-manifold",
               "bad/garbage.glb": "not a readable mesh", "bad/huge.obj": "absurd scale"}


def plant_meshes(root: Path) -> None:
    """2 good meshes in two label folders (one without colours) and the 4 bad ones of BAD_REASONS."""
    for rel, (category, seed) in {"box/a.off": ("box", 0), "torus/c.obj": ("torus", 2)}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        make_mesh(category, seed, coloured=not rel.endswith(".off")).export(root / rel)
    bad = root / "bad"
    bad.mkdir(parents=True)
    (bad / "empty.obj").write_text("v 0 0 0\nv 1 0 0\n")
    fan = trimesh.Trimesh([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1]],
                          [[0, 1, 2], [0, 1, 3], [0, 1, 4]], process=False)  # edge 0-1 in three faces
    fan.export(bad / "nonmanifold.ply")
    (bad / "garbage.glb").write_bytes(b"glTF" + os.urandom(200))
    huge = trimesh.creation.box(extents=[1, 1, 1])
    huge.apply_scale(1e9)
    huge.export(bad / "huge.obj")


def config(meshes: Path, out: Path, **kw) -> BatchConfig:
    return BatchConfig(mesh_dir=meshes, out=out, preset=TINY, workers=0, progress=False, **kw)


def comparable(out: Path) -> dict:
    """source -> the row's fields that a rerun reproduces exactly."""
    rows = latest_rows(read_index(out))
    keys = ("status", "label", "output", "gaussians", "mesh_to_world", "method", "steps")
    return {s: {k: r[k] for k in keys} | {"reason": (r["reason"] or "")[:40]} for s, r in rows.items()}


KILLER = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {root!r})
import rasterizer
import recon.mesh2splat.convert as cv
from recon.mesh2splat.batch import BatchConfig, run_batch
from recon.mesh2splat.preset import ObjectPreset

trained = []
real = cv.train_object

def train_then_die(mesh, views, *args, **kw):
    trained.append(views)
    if len(trained) == 2:  # the second good object: its views rendered, training starting
        assert any(Path(views).iterdir())
        with open(Path({out!r}) / "index.jsonl", "ab") as f:
            f.write(b'{{"source": "torus/c.o')  # a row cut short, too
        os.kill(os.getpid(), signal.SIGKILL)
    return real(mesh, views, *args, **kw)

cv.train_object = train_then_die
run_batch(BatchConfig(mesh_dir=Path({meshes!r}), out=Path({out!r}), preset=ObjectPreset(**{preset!r}), workers=0,
                      progress=False))
"""


def test_bad_meshes_fail_and_a_killed_batch_resumes(tmp_path):
    import dataclasses

    meshes = tmp_path / "meshes"
    plant_meshes(meshes)
    reference = tmp_path / "reference"
    summary = run_batch(config(meshes, reference))
    assert summary == {**summary, "objects": 6, "converted": 6, "done": 2, "failed": 4, "skipped": 0}
    rows = latest_rows(read_index(reference))
    failed = {s: r["reason"] for s, r in rows.items() if r["status"] == "failed"}
    assert set(failed) == set(BAD_REASONS)
    for source, words in BAD_REASONS.items():
        assert words in failed[source] and source.split("/")[1] in failed[source]
    for source in ("box/a.off", "torus/c.obj"):
        row = rows[source]
        assert row["status"] == "done" and (reference / row["output"]).is_file() and row["gaussians"] > 0
        assert row["label"] == source.split("/")[0] and np.isfinite(row["test_psnr"]) and row["seconds"] > 0
        assert np.asarray(row["mesh_to_world"]).shape == (4, 4)
    assert not (reference / WORK_DIR).exists()
    assert run_batch(config(meshes, reference))["skipped"] == 6  # nothing left to do

    killed = tmp_path / "killed"
    script = KILLER.format(root=str(ROOT), meshes=str(meshes), out=str(killed), preset=dataclasses.asdict(TINY))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    half = comparable(killed)
    assert len(half) == 5 and "torus/c.obj" not in half  # killed in the last object, after its views were
    assert any((killed / WORK_DIR / "torus/c.obj").rglob("*.png"))  # rendered: a half-done object left behind
    assert (killed / "index.jsonl").read_bytes().endswith(b'"torus/c.o')
    again = run_batch(config(meshes, killed))
    assert again["skipped"] == 5 and again["converted"] == 1
    assert comparable(killed) == comparable(reference)
    assert not (killed / WORK_DIR).exists()


def test_workers_run_objects_in_processes_and_enforce_the_time_limit(tmp_path):
    import dataclasses

    meshes = tmp_path / "meshes"
    plant_meshes(meshes)
    for path in (meshes / "bad").iterdir():
        if path.name != "empty.obj":
            path.unlink()
    out = tmp_path / "out"
    with RunLock(out), pytest.raises(RunLockedError, match="another"):  # a second batch on the same folder
        run_batch(BatchConfig(mesh_dir=meshes, out=out, preset=TINY, workers=2, progress=False))
    summary = run_batch(BatchConfig(mesh_dir=meshes, out=out, preset=TINY, workers=2, progress=False,
                                    time_limit=120, limit=2))  # bad/empty.obj, box/a.off
    assert summary["done"] == 1 and summary["failed"] == 1
    rows = latest_rows(read_index(out))
    assert "empty mesh" in rows["bad/empty.obj"]["reason"]
    assert rows["box/a.off"]["status"] == "done"
    # a warm worker converts TINY in well under a second: this object trains 100,000 steps, past the limit
    endless = dataclasses.replace(TINY, steps=100_000)
    slow = run_batch(BatchConfig(mesh_dir=meshes, out=out, preset=endless, workers=1, progress=False, time_limit=1.0))
    assert slow["converted"] == 1
    reason = latest_rows(read_index(out))["torus/c.obj"]["reason"]
    assert "time limit exceeded (1 s per object" in reason
    assert not (out / WORK_DIR).exists()


def test_cli_one_line_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "recon.cli", "mesh2splat", str(tmp_path / "nope"), "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    assert "MESH_DIR" in proc.stderr and "no such folder" in proc.stderr and "Traceback" not in proc.stderr


def big_texture_mesh(path: Path, side: int = 8192) -> None:
    """A box textured with a ``side`` x ``side`` image (a GLB): the renderer holds the texture as float64
    (side^2 x 24 bytes: 1.5 GiB at 8192), far past a 1 GiB per-object limit, while the file stays small."""
    from PIL import Image

    box = trimesh.creation.box(extents=[1, 1, 1])
    uv = np.asarray(box.vertices)[:, :2] + 0.5
    image = Image.new("RGB", (side, side), (200, 80, 40))
    box.visual = trimesh.visual.TextureVisuals(uv=uv, image=image)
    path.parent.mkdir(parents=True, exist_ok=True)
    box.export(path)


def test_the_memory_limit_fails_one_object_and_the_batch_goes_on(tmp_path):
    from recon.mesh2splat.convert import STAGES

    meshes = tmp_path / "meshes"
    big_texture_mesh(meshes / "big" / "textured.glb")
    (meshes / "box").mkdir()
    make_mesh("box", 0, coloured=True).export(meshes / "box" / "a.ply")
    out = tmp_path / "out"
    summary = run_batch(BatchConfig(mesh_dir=meshes, out=out, preset=TINY, workers=1, progress=False,
                                    memory_limit_gb=1.0, time_limit=300))
    assert summary == {**summary, "objects": 2, "converted": 2, "done": 1, "failed": 1}
    rows = latest_rows(read_index(out))
    big = rows["big/textured.glb"]  # sorted first: its worker runs out of memory and is replaced
    assert big["status"] == "failed" and "MemoryError" in big["reason"]
    assert "the per-object memory limit is 1 GiB: --memory-limit-gb" in big["reason"]
    box = rows["box/a.ply"]  # the next object, in a fresh worker, converts
    assert box["status"] == "done" and (out / box["output"]).is_file()
    assert set(box["stage_seconds"]) == set(STAGES) and all(v >= 0 for v in box["stage_seconds"].values())
    assert sum(box["stage_seconds"].values()) <= box["seconds"] + 0.05
    assert not (out / WORK_DIR).exists()


def test_limit_object_memory_is_relative_to_the_process_and_lifted_after():
    import resource

    from recon.mesh2splat.batch import address_space_bytes, limit_object_memory, memory_failure

    before = resource.getrlimit(resource.RLIMIT_AS)
    size = address_space_bytes()
    assert size is not None and size > 0
    limit_object_memory(0.5)
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        assert hard == before[1] and size + (1 << 29) <= soft <= address_space_bytes() + (1 << 29)
        with pytest.raises(MemoryError):
            np.ones(1 << 28)  # 2 GiB
    finally:
        limit_object_memory(0.0)
    assert resource.getrlimit(resource.RLIMIT_AS) == (before[1], before[1])
    assert memory_failure("internal error: RuntimeError: DefaultCPUAllocator: can't allocate memory: ...")
    assert not memory_failure("bad/empty.obj: empty mesh") and not memory_failure(None)


def test_mesh_files_of_formats_not_read_are_named_not_passed_over(tmp_path, capsys):
    """An STL (or glTF, FBX...) under MESH_DIR is not converted; the batch says so (stderr and "not_read"),
    instead of converting fewer objects than the folder holds without a word."""
    meshes, out = tmp_path / "meshes", tmp_path / "out"
    (meshes / "parts").mkdir(parents=True)
    make_mesh("box", 0).export(meshes / "parts" / "a.stl")
    make_mesh("box", 1).export(meshes / "parts" / "b.STL")
    (meshes / ".hidden").mkdir()
    (meshes / ".hidden" / "c.stl").write_bytes(b"solid x\nendsolid x\n")
    (meshes / "scene.gltf").write_text("{}")
    result = run_batch(BatchConfig(mesh_dir=meshes, out=out, preset=TINY, workers=0, progress=False))
    assert result["objects"] == 0 and result["not_read"] == {".gltf": 1, ".stl": 2}
    err = capsys.readouterr().err
    assert "not converting 1 .gltf, 2 .stl file(s)" in err and ".obj" in err
