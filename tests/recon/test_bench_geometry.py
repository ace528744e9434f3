"""scripts/bench_geometry.py end to end at a tiny size: spot dataset, 3dgs and 2dgs, JSON fields, reuse."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("open3d")

ROOT = Path(__file__).resolve().parents[2]
SPOT = ROOT.parent / "shared" / "data" / "meshes" / "spot" / "spot_triangulated.obj"
spec = importlib.util.spec_from_file_location("bench_geometry", ROOT / "scripts" / "bench_geometry.py")
bg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bg)


@pytest.mark.slow
@pytest.mark.skipif(not SPOT.is_file(), reason=f"{SPOT} absent (../shared data)")
def test_bench_geometry_tiny_spot(tmp_path, capsys):
    argv = ["--datasets", "spot", "--steps", "12", "--data-factor", "1", "--spot-views", "6", "--spot-size", "32",
            "--init-num-random", "300", "--mesh-resolution", "32", "--out", str(tmp_path)]
    assert bg.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    spot = report["results"]["spot"]
    assert set(spot) == {"3dgs", "2dgs"}
    for method, res in spot.items():
        assert res["steps"] == 12 and res["train_seconds"] > 0 and res["seconds_per_step"] > 0
        assert math.isfinite(res["psnr"]) and res["depth_mae"] >= 0 and 0 <= res["normal_deg"] <= 180
        assert res["depth_pixels"] > 0 and res["normal_pixels"] > 0 and res["chamfer_pct"] > 0
        assert math.isfinite(res["mesh_signed_median_pct"])
        assert Path(res["mesh"]).is_file()
    assert spot["2dgs"]["depth_kind"] == "median" and spot["3dgs"]["depth_kind"] == "expected"
    assert "rendered normals" in spot["2dgs"]["normal_source"]
    assert "depth_to_normal" in spot["3dgs"]["normal_source"]
    # both scored on pixels seen with their four neighbours; 2dgs also reports the score with the silhouette ring
    assert spot["2dgs"]["normal_all_seen_pixels"] >= spot["2dgs"]["normal_pixels"]  # equal when all is seen
    assert 0 <= spot["2dgs"]["normal_deg_all_seen"] <= 180 and "normal_deg_all_seen" not in spot["3dgs"]
    assert "chamfer_ratio_2dgs_over_3dgs" in report["comparisons"]["spot"]
    assert json.loads((tmp_path / "bench_geometry.json").read_text())["results"] == report["results"]
    # a second call reuses the runs and the cached evaluation (no training: no load record)
    mtime = (tmp_path / "runs" / f"spot-p{bg.DEFAULT_SAMPLES}-2dgs-f1-s12-n300" / "splats.ply").stat().st_mtime
    assert bg.main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["results"] == report["results"]
    assert (tmp_path / "runs" / f"spot-p{bg.DEFAULT_SAMPLES}-2dgs-f1-s12-n300" / "splats.ply").stat().st_mtime == mtime
