"""A held-out split for multi-view video that ships none (issue 55): ``--test-cameras`` / ``--test-every`` move
whole cameras / time steps of a Panoptic-layout capture to the test split; config.yaml records them and
``splatforge eval`` on the run scores those frames."""

from __future__ import annotations

import json

import pytest
import yaml

from recon.core.errors import UsageError
from recon.data import load_scene
from recon.data.holdout import camera_name, held_out_steps
from tests.recon.data.test_panoptic_segmentation import CAMS, STEPS, write_tiny_panoptic


def test_no_options_keep_the_capture_as_it_is(tmp_path):
    scene = load_scene(write_tiny_panoptic(tmp_path / "pan"))
    assert len(scene.frames_train) == CAMS * STEPS and not scene.frames_test


def test_test_cameras_hold_out_whole_cameras(tmp_path):
    scene = load_scene(write_tiny_panoptic(tmp_path / "pan"), test_cameras="1")
    assert {camera_name(f) for f in scene.frames_test} == {"1"} and len(scene.frames_test) == STEPS
    assert {camera_name(f) for f in scene.frames_train} == {"0"} and len(scene.frames_train) == STEPS


def test_test_every_holds_out_time_steps_of_every_camera(tmp_path):
    scene = load_scene(write_tiny_panoptic(tmp_path / "pan"), test_time_every=2)
    times = sorted({f.time for f in scene.frames_train})
    assert [f.time for f in scene.frames_test] == [0.5] * CAMS  # step 1 of 0, 1, 2: between training times
    assert times == [0.0, 1.0] and len(scene.frames_train) == CAMS * (STEPS - 1)
    assert held_out_steps([0.0, 0.25, 0.5, 0.75, 1.0], 3) == {0.25, 1.0} and held_out_steps([0.0], 0) == set()


def test_unknown_camera_is_a_one_line_error(tmp_path):
    with pytest.raises(UsageError) as exc:
        load_scene(write_tiny_panoptic(tmp_path / "pan"), test_cameras="0,cam9")
    msg = str(exc.value)
    assert "'cam9'" in msg and "cameras: 0, 1" in msg and "\n" not in msg


@pytest.mark.parametrize("cams, every", [("0,1", 0), (None, 1)])
def test_a_split_without_training_frames_is_a_one_line_error(tmp_path, cams, every):
    with pytest.raises(UsageError) as exc:
        load_scene(write_tiny_panoptic(tmp_path / "pan"), test_cameras=cams, test_time_every=every)
    assert "no training frame is left" in str(exc.value) and "\n" not in str(exc.value)


def test_static_formats_refuse_the_options(tmp_path):
    from tests.recon.data.test_data_nerfstudio import make_dataset

    root, _ = make_dataset(tmp_path / "ns")
    with pytest.raises(UsageError, match="multi-view video"):
        load_scene(root, test_time_every=2)


def test_cli_train_records_the_split_and_eval_scores_it(tmp_path, capsys):
    from recon.cli import main

    root = write_tiny_panoptic(tmp_path / "pan")
    run = tmp_path / "run"
    main(["train", "--method", "4dgs", "--data", str(root), "--out", str(run), "--steps", "2", "--device", "cpu",
          "--no-progress", "--init-num-random", "200", "--save-every", "0", "--test-cameras", "1"])
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["test_cameras"] == "1" and config["test_every"] == 0
    trained = json.loads((run / "metrics.json").read_text())
    main(["eval", "--run", str(run), "--device", "cpu"])
    assert "test PSNR" in capsys.readouterr().out
    metrics = json.loads((run / "eval" / "metrics.json").read_text())
    assert metrics["test"]["num_views"] == STEPS  # camera 1's frames, the held-out split
    assert trained["test"]["num_views"] == STEPS


def test_cli_unknown_camera_is_one_line(tmp_path, capsys):
    from recon.cli import main

    root = write_tiny_panoptic(tmp_path / "pan")
    with pytest.raises(SystemExit) as exc:
        main(["train", "--method", "4dgs", "--data", str(root), "--out", str(tmp_path / "run"), "--steps", "1",
              "--device", "cpu", "--no-progress", "--test-cameras", "7"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and "'7'" in err, err
