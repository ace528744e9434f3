"""scripts/surface_offset.py on a tiny spot dataset: the true mesh has no offset, a grown copy lies outside,
and tangent splats on the true surface give a finite silhouette excess."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("open3d")

ROOT = Path(__file__).resolve().parents[2]
SPOT = ROOT.parent / "shared" / "data" / "meshes" / "spot" / "spot_triangulated.obj"


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not SPOT.is_file(), reason=f"{SPOT} absent (../shared data)")
def test_offsets_of_true_and_grown_meshes(tmp_path, capsys):
    mmd, so = load("make_mesh_dataset"), load("surface_offset")
    data = tmp_path / "spot"
    mmd.make_dataset(SPOT, data, views=2, test_views=1, size=48)
    truth = so.true_mesh_in_scene(data, SPOT)
    truth.export(tmp_path / "same.ply")
    grown = truth.copy()
    grown.vertices = grown.vertices + 0.01 * grown.vertex_normals  # 0.01 scene units outwards
    grown.export(tmp_path / "grown.ply")
    argv = ["--data", str(data), "--mesh", str(SPOT), "--extracted", str(tmp_path / "same.ply"),
            str(tmp_path / "grown.ply"), "--splat-sizes", "0.05", "--views", "2"]
    assert so.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    diag = report["diagonal"]
    same, out = report["extracted"][str(tmp_path / "same.ply")], report["extracted"][str(tmp_path / "grown.ply")]
    assert abs(same["signed_median_pct"]) < 1e-3
    assert out["signed_median_pct"] == pytest.approx(0.01 / diag * 100, rel=0.1)
    (sil,) = report["silhouette"]
    assert sil["splat_size"] == 0.05 and sil["true_coverage_px"] > 0
    assert np.isfinite(sil["surfels_excess_pct"]) and np.isfinite(sil["gaussians_3d_excess_pct"])
