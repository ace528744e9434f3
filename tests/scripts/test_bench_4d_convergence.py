"""scripts/bench_4d_convergence.py end to end on a tiny Panoptic capture: one JSON line per step count, held-out
times and cameras scored apart, eval of training views beside the progress bar's PSNR, train flags after --."""

import importlib.util
import json
import math
from pathlib import Path

from tests.recon.data.test_panoptic_segmentation import write_tiny_panoptic

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_4d_convergence", ROOT / "scripts" / "bench_4d_convergence.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_bench_4d_convergence_tiny(tmp_path, capsys):
    root = write_tiny_panoptic(tmp_path / "pan")
    bench.main(["--data", str(root), "--data-factor", "1", "--steps", "2,3", "--test-every", "3",
                "--test-cameras", "1", "--train-every", "1", "--window", "2", "--renders", str(tmp_path / "r"),
                "--", "--init-num-random", "60", "--sh-degree", "0"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["steps"] for r in lines] == [2, 3]
    for r in lines:
        assert r["cameras"] == ["0"] and r["train_cameras"] == 1 and r["config"]["init_num_random"] == 60 and r["config"]["test_cameras"] == "1"
        assert r["held_out_cameras"]["views"] == 3 and r["held_out_times"]["views"] == 1  # camera 0 at step 1
        assert r["held_out"]["views"] == 4 and math.isfinite(r["held_out"]["psnr"])
        assert r["train_eval_views"] == 2 and math.isfinite(r["train_eval_psnr"]) and math.isfinite(r["progress_psnr"])
        assert r["num_gaussians"] > 0 and r["train_seconds"] > 0
    assert len(list((tmp_path / "r").glob("test_*.png"))) == 4  # the last run's held-out renders


def test_the_dome_proxys_test_cameras_are_scored_as_held_out_cameras():
    """The dome proxy names no camera folders: its 4 test cameras are told apart from the 27 training cameras by
    pose, so every held-out view counts as a held-out camera (not as a training camera at a held-out time)."""
    from recon.data.procedural_4d import procedural_4d_scene

    scene = procedural_4d_scene(width=32, height=18, n_train=27, n_test=4, n_times=6, rig="dome", test_time_stride=3,
                                n_points=50)
    unseen = bench.unseen_camera_views(scene.frames_test, scene.frames_train)
    assert unseen == {f.name for f in scene.frames_test} and len(unseen) == 4 * 2
    assert len({bench.pose_key(f) for f in scene.frames_train}) == 27
    scores = bench.group_scores([{"name": f.name, "psnr": 20.0, "ssim": 0.5} for f in scene.frames_test], unseen)
    assert scores["held_out_times"] is None and scores["held_out_cameras"]["views"] == 8
