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
    run_2dgs = tmp_path / "runs" / f"spot-p{bg.DEFAULT_SAMPLES}-v6-px32-2dgs-f1-s12-n300"
    mtime = (run_2dgs / "splats.ply").stat().st_mtime
    assert bg.main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["results"] == report["results"]
    assert (run_2dgs / "splats.ply").stat().st_mtime == mtime
    # another render of spot gets its own runs; a finished run of another dataset is refused, not scored
    samples = bg.DEFAULT_SAMPLES
    assert bg.spot_label(samples, bg.SPOT_MESH, 6, 40) != bg.spot_label(samples, bg.SPOT_MESH, 6, 32)
    other = tmp_path / "datasets" / "elsewhere"
    from recon.core.errors import UsageError

    with pytest.raises(UsageError, match="finished run was trained on .*, not on .*elsewhere"):
        bg.train_run(other, run_2dgs, "2dgs", 12, 1, "cpu", False, lambda *a: None)


class _PlaneModel:
    """A fake model seen through ``render_depth`` / ``render_geometry`` (each call recorded in ``calls``): a
    plane at camera z = 2 over the fine grid's columns < ``seen_cols`` (alpha 1, elsewhere 0), rendered
    normals alternating per column between two unit vectors whose mean is -z (the plane's true normal,
    facing the camera)."""

    def __init__(self, seen_cols: int):
        self.seen_cols = seen_cols
        self.calls = []

    def _maps(self, cam):
        import torch
        H, W = cam.height, cam.width
        alpha = torch.zeros(1, H, W, 1)
        alpha[:, :, :self.seen_cols] = 1.0
        depth = 2.0 * alpha
        s = math.sqrt(0.5)
        normals = torch.zeros(1, H, W, 3)
        normals[..., 2] = -s
        normals[:, :, 0::2, 0] = s
        normals[:, :, 1::2, 0] = -s
        return depth, alpha, normals

    def render_depth(self, cameras, kind, background=None):
        self.calls.append("render_depth")
        depth, alpha, _ = self._maps(cameras[0])
        return depth.expand(-1, -1, -1, 3), depth, alpha

    def render_geometry(self, cameras, kind, background=None):
        self.calls.append("render_geometry")
        depth, alpha, normals = self._maps(cameras[0])
        return depth.expand(-1, -1, -1, 3), depth, alpha, normals


def test_view_geometry_block_averages_the_supersampled_grid():
    import torch
    from rasterizer.camera import Camera

    cam = Camera(world_to_cam=torch.eye(4), K=torch.tensor([[8.0, 0, 4], [0, 8.0, 4], [0, 0, 1]]), width=8, height=8)
    # fine grid 16 x 16, seen columns 0..8: coarse column 4 is half seen (fine 8 seen, 9 not), so it does not count
    plane = _PlaneModel(9)
    depth, seen, normals, d2n, d2n_valid = bg.view_geometry(plane, cam, "median", None, 2, True)
    assert plane.calls == ["render_geometry"]  # one render for depth and normals
    assert depth.shape == seen.shape == (8, 8) and normals.shape == d2n.shape == (8, 8, 3)
    assert seen[:, :4].all() and not seen[:, 4:].any()
    assert abs(depth[seen] - 2.0).max() < 1e-12
    # each block averages one +x and one -x normal of every row: exactly the plane's normal
    assert abs(normals[seen] - [0, 0, -1]).max() < 1e-12
    # depth-to-normal on the fine grid (valid with four seen neighbours, so coarse column 0 and row 0 drop out)
    assert d2n_valid[1:-1, 1:4].all() and not d2n_valid[:, 0].any() and not d2n_valid[:, 4:].any()
    assert abs(d2n[d2n_valid] - [0, 0, -1]).max() < 1e-9
    # supersample 1: the maps as rendered, column 8 seen with each column's own normal
    depth1, seen1, normals1, _, _ = bg.view_geometry(_PlaneModel(9), cam.scaled(2), "median", None, 1, True)
    assert seen1[:, :9].all() and not seen1[:, 9:].any()
    assert abs(normals1[0, 1] - [-math.sqrt(0.5), 0, -math.sqrt(0.5)]).max() < 1e-7
    # a method without rendered normals gets None there
    plane = _PlaneModel(9)
    assert bg.view_geometry(plane, cam, "median", None, 2, False)[2] is None
    assert plane.calls == ["render_depth"]


def test_surfel_grow_grad2d_reaches_only_the_2dgs_runs_and_their_names(tmp_path, monkeypatch):
    args = bg.parse_args(["--supersample", "2", "--background", "random", "--surfel-grow-grad2d", "0.0003"])
    assert bg.run_name("lego", "2dgs", args, args.surfel_grow_grad2d) == "lego-2dgs-f2-s7000-bgrandom-ss2-gg0.0003"
    assert bg.run_name("lego", "3dgs", args, None) == "lego-3dgs-f2-s7000-bgrandom-ss2"
    plain = bg.parse_args([])
    assert plain.surfel_grow_grad2d is None and bg.run_name("spot", "2dgs", plain, None) == "spot-2dgs-f2-s7000"
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(SystemExit):
            bg.parse_args(["--surfel-grow-grad2d", bad])
    # the value becomes the run's ADC threshold; None keeps train's default
    import recon.training.train_run as train_run
    import recon.training.trainer as trainer
    seen = []
    monkeypatch.setattr(train_run, "train_model", lambda cfg, log=None: seen.append(cfg) or {"steps": cfg.steps})
    bg.train_run(tmp_path, tmp_path / "a", "2dgs", 5, 2, "cpu", False, print, grow_grad2d=0.0003)
    bg.train_run(tmp_path, tmp_path / "b", "3dgs", 5, 2, "cpu", False, print)
    assert seen[0].adc.grow_grad2d == 0.0003
    assert seen[1].adc.grow_grad2d == trainer.ADCConfig().grow_grad2d == 0.0002


def test_another_mesh_gets_its_own_dataset_and_run_names(tmp_path):
    """--spot-mesh with another mesh never reuses spot's dataset or runs: names carry its stem and content hash."""
    a, b = tmp_path / "a" / "my mesh.obj", tmp_path / "b" / "my mesh.obj"
    for path, text in ((a, "v 0 0 0\n"), (b, "v 1 0 0\n")):
        path.parent.mkdir()
        path.write_text(text)
    name_a, name_b = bg.mesh_name(a), bg.mesh_name(b)
    assert name_a.startswith("my_mesh-") and len(name_a) == len("my_mesh-") + 8 and name_a != name_b
    assert bg.mesh_name(bg.SPOT_MESH) == "spot" and bg.spot_label(4) == "spot-p4" and bg.spot_label(1) == "spot"
    assert bg.spot_label(4, bg.SPOT_MESH, 50, 200) == "spot-p4-v50-px200"
    assert bg.spot_label(4, a) == f"{name_a}-p4"
    args = bg.parse_args(["--spot-mesh", str(a)])
    assert bg.run_name(bg.spot_label(args.spot_samples, args.spot_mesh), "2dgs", args, None).startswith(name_a)


def test_neus_column_options_names_and_comparison(tmp_path, monkeypatch):
    """--methods neus: its own steps and samples reach its run (strategy occupancy, all levels by half the run)
    and its name; the comparison against 2dgs (issue 50's targets)."""
    args = bg.parse_args(["--methods", "2dgs", "neus", "--steps", "7000", "--neus-steps", "400",
                          "--neus-target-samples", "8192", "--supersample", "2"])
    assert bg.run_name("spot", "neus", args, None) == "spot-neus-f2-s400-ts8192"
    assert bg.run_name("spot", "2dgs", args, None) == "spot-2dgs-f2-s7000-ss2"
    import recon.training.train_run as train_run
    seen = []
    monkeypatch.setattr(train_run, "train_model", lambda cfg, log=None: seen.append(cfg) or {"steps": cfg.steps})
    bg.train_run(tmp_path, tmp_path / "n", "neus", 400, 2, "cpu", False, print, target_samples=8192)
    cfg = seen[0]
    assert (cfg.method, cfg.strategy, cfg.steps, cfg.nerf.target_samples) == ("neus", "occupancy", 400, 8192)
    assert cfg.neus.level_every == 400 // 24
    cmp = bg.compare_neus({"neus": {"psnr": 30.0, "normal_deg": 4.0, "chamfer_pct": 0.06},
                           "2dgs": {"psnr": 31.5, "normal_deg": 8.0, "chamfer_pct": 0.1}})
    assert cmp["psnr_neus_minus_2dgs"] == pytest.approx(-1.5)
    assert cmp["chamfer_ratio_neus_over_2dgs"] == pytest.approx(0.6)
    assert cmp["normal_deg_ratio_neus_over_2dgs"] == pytest.approx(0.5)
    assert bg.compare_neus({"neus": {"psnr": 1.0}}) == {}
