"""Bad inputs to training give a clear error naming the problem (no deep traceback)."""

import json
from pathlib import Path

import pytest

from recon.commands.evaluate import evaluate
from recon.commands.train import train
from recon.training.trainer import TrainConfig


def run_cli(fn, capsys, *args, **kw):
    with pytest.raises(SystemExit) as exc:
        fn(*args, **kw)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_missing_data_dir(tmp_path, capsys):
    missing = tmp_path / "no_such_dataset"
    err = run_cli(train, capsys, TrainConfig(data=missing, out=tmp_path / "out", steps=5, progress=False))
    assert "error" in err and str(missing) in err


def test_unreadable_image_named(tmp_path, capsys):
    data = tmp_path / "scene"
    (data / "images").mkdir(parents=True)
    frames = []
    for i in range(3):
        (data / "images" / f"im{i}.png").write_bytes(b"this is not a png")
        frames.append({"file_path": f"images/im{i}.png",
                       "transform_matrix": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 3.0 + i], [0, 0, 0, 1]]})
    (data / "transforms.json").write_text(json.dumps(
        {"fl_x": 50.0, "fl_y": 50.0, "cx": 16.0, "cy": 16.0, "w": 32, "h": 32, "frames": frames}))
    err = run_cli(train, capsys, TrainConfig(data=data, out=tmp_path / "out", steps=5, progress=False))
    assert "im" in err and ".png" in err and "error" in err


def test_eval_needs_run_or_splats(capsys):
    err = run_cli(evaluate, capsys)
    assert "--run" in err


def test_eval_missing_splat_file(tmp_path, capsys):
    err = run_cli(evaluate, capsys, splats=tmp_path / "nope.ply", data=Path("procedural"))
    assert "nope.ply" in err
