"""scripts/sfm_distance.py on a written COLMAP model: the filters drop short tracks, large errors and far
outliers; distances to a plane are the points' heights, in % of the kept points' box diagonal; bad input
is refused with the file named."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import trimesh

from recon.data.colmap import ColmapCamera, ColmapImage, ColmapModel, ColmapPoints, write_model

pytest.importorskip("open3d")

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("sfm_distance", ROOT / "scripts" / "sfm_distance.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def capture(tmp_path: Path, xyz: np.ndarray, tracks: list[int], errors: np.ndarray) -> Path:
    """A COLMAP folder (sparse/0, binary) whose points are ``xyz`` with those track lengths and errors."""
    cams = {1: ColmapCamera(1, "PINHOLE", 64, 48, np.array([50.0, 50.0, 32.0, 24.0]))}
    ims = {i: ColmapImage(i, np.array([1.0, 0, 0, 0]), np.array([0.0, 0, 3]), 1, f"{i:03d}.png") for i in (1, 2, 3, 4)}
    tr = [np.array([[1 + k, 0] for k in range(n)], np.int64).reshape(-1, 2) for n in tracks]
    pts = ColmapPoints(np.arange(len(xyz), dtype=np.int64), xyz, np.zeros((len(xyz), 3), np.uint8), errors, tr)
    write_model(ColmapModel(cams, ims, pts), tmp_path / "cap" / "sparse" / "0")
    return tmp_path / "cap"


def plane(tmp_path: Path, z: float = 0.0) -> Path:
    """A 4x4 square at height z, written as PLY."""
    v = np.array([[-2, -2, z], [2, -2, z], [2, 2, z], [-2, 2, z]], float)
    path = tmp_path / f"plane_{z:g}.ply"
    trimesh.Trimesh(v, [[0, 1, 2], [0, 2, 3]], process=False).export(path)
    return path


def test_distances_and_filters(tmp_path, capsys):
    sd = load()
    rng = np.random.default_rng(0)
    n = 400
    heights = rng.uniform(-0.01, 0.01, n)  # all within 0.5 % of the diagonal
    xyz = np.column_stack([rng.uniform(-1, 1, n), rng.uniform(-1, 1, n), heights])
    tracks, errors = [3] * n, np.full(n, 0.5)
    xyz = np.vstack([xyz, [[0, 0, 5.0], [0, 0, -5.0], [50.0, 50.0, 50.0]]])  # unreliable, and a far outlier
    tracks += [2, 3, 9]
    errors = np.concatenate([errors, [0.1, 3.0, 0.1]])
    data = capture(tmp_path, xyz, tracks, errors)
    kept = sd.reliable_points(sd.read_model(data / "sparse" / "0").points, 3, 1.5, (0.0, 100.0))
    assert len(kept) == n + 1 and 50.0 in kept  # the track-2 and error-3 points are gone, the outlier not yet
    pts = sd.reliable_points(sd.read_model(data / "sparse" / "0").points, 3, 1.5, (1.0, 99.0))
    assert 0.9 * n < len(pts) < n and not (np.abs(pts) > 2).any()  # the percentile box drops the outlier

    assert sd.main(["--data", str(data), "--mesh", str(plane(tmp_path)), str(plane(tmp_path, 0.1))]) == 0
    report = json.loads(capsys.readouterr().out)
    diag = np.linalg.norm(pts.max(0) - pts.min(0))
    assert report["points"] == len(pts) and report["diagonal"] == pytest.approx(diag, rel=1e-9)
    assert diag == pytest.approx(2 * np.sqrt(2), rel=0.05)
    on, off = report["meshes"][str(plane(tmp_path))], report["meshes"][str(plane(tmp_path, 0.1))]
    assert on["median_pct"] == pytest.approx(np.median(np.abs(pts[:, 2])) / diag * 100, rel=1e-3)
    assert on["median"] == pytest.approx(np.median(np.abs(pts[:, 2])), rel=1e-3)
    assert off["mean_pct"] == pytest.approx(np.mean(0.1 - pts[:, 2]) / diag * 100, rel=1e-3)
    assert on["within_0.5_pct"] == 1.0 and off["within_0.5_pct"] == 0.0


def test_bad_input_is_named(tmp_path):
    sd = load()
    data = capture(tmp_path, np.zeros((20, 3)) + np.arange(20)[:, None], [3] * 20, np.full(20, 0.5))
    empty = tmp_path / "empty.ply"
    empty.write_text("ply\nformat ascii 1.0\nelement vertex 0\nproperty float x\nproperty float y\n"
                     "property float z\nelement face 0\nproperty list uchar int vertex_indices\nend_header\n")
    with pytest.raises(SystemExit, match="empty.ply: the mesh has no triangles"):
        sd.main(["--data", str(data), "--mesh", str(empty)])
    garbage = tmp_path / "garbage.ply"
    garbage.write_bytes(b"not a mesh at all")
    with pytest.raises(SystemExit, match="garbage.ply: not a readable mesh"):
        sd.main(["--data", str(data), "--mesh", str(garbage)])
    with pytest.raises(SystemExit, match="nope.ply: no such mesh file"):
        sd.main(["--data", str(data), "--mesh", str(tmp_path / "nope.ply")])
    with pytest.raises(SystemExit, match="only 0 points pass"):
        sd.main(["--data", str(data), "--mesh", str(plane(tmp_path)), "--min-track", "4"])
    with pytest.raises(Exception, match="no COLMAP model"):
        sd.main(["--data", str(tmp_path / "nowhere"), "--mesh", str(plane(tmp_path))])
