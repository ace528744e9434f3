"""``recon.run.folder.Run``: one way to open a run folder (issue 15, item 2): older runs, laziness, not-a-run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recon.outputs import files as rf
from recon.export import random_splats, write_splats
from recon.run.folder import NotARunError, Run
from recon.training.trainer import TrainConfig


def old_run(tmp_path: Path, config: str) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / rf.CONFIG_FILE).write_text(config)
    write_splats(run / rf.SPLATS_FILE, random_splats(50, sh_degree=1, extent=1.0))
    return run


def count_scene_loads(monkeypatch) -> list:
    loads = []

    def fake_load(cfg):
        loads.append(cfg)
        from recon.data.procedural_scene import procedural_scene

        return procedural_scene(data_factor=8, n_train=3, n_test=2)

    monkeypatch.setattr("recon.run.folder.load_training_scene", fake_load)
    return loads


def test_older_config_with_some_keys_and_a_dataset_beside_the_run(tmp_path, monkeypatch):
    """An older config.yaml: few keys (the rest take their defaults), the dataset relative to the run folder,
    ``out`` naming where the folder was before it moved. The dataset is loaded only when asked for."""
    loads = count_scene_loads(monkeypatch)
    run = old_run(tmp_path, "data: dataset\ndata_factor: 2\nout: /somewhere/else\nsteps: 500\n")
    (run / "dataset").mkdir()
    monkeypatch.chdir(tmp_path)  # "dataset" is not there from the working directory
    opened = Run.open(run)
    assert opened.config.data == run / "dataset" and opened.config.data_factor == 2
    assert opened.config.out == run and opened.config.steps == 500
    assert opened.config.sh_degree == TrainConfig().sh_degree and opened.config.method == "3dgs"
    assert loads == []  # opening does not load the dataset
    assert opened.splats_path == run / "splats.ply" and opened.metrics() is None
    assert len(opened.cameras) == 3 and len(loads) == 1
    assert opened.background().shape == (3,) and len(loads) == 1  # loaded once
    assert len(opened.load_model()) == 50


def test_relative_dataset_from_the_working_directory(tmp_path, monkeypatch):
    run = old_run(tmp_path, "data: ds\n")
    (tmp_path / "ds").mkdir()
    monkeypatch.chdir(tmp_path)
    assert Run.open(run).config.data == Path("ds")


def test_data_flags_override_the_config(tmp_path):
    run = old_run(tmp_path, "data: /gone\ndata_factor: 2\n")
    opened = Run.open(run, data="procedural", data_factor=4)
    assert str(opened.config.data) == "procedural" and opened.config.data_factor == 4


def test_dataset_gone_is_one_line_naming_config_and_flag(tmp_path):
    run = old_run(tmp_path, f"data: {tmp_path / 'moved'}\n")
    opened = Run.open(run)  # fine until the scene is asked for
    with pytest.raises(FileNotFoundError) as err:
        opened.scene
    message = str(err.value)
    assert "\n" not in message and "moved: the dataset named in" in message and "config.yaml" in message
    assert "--data" in message


def test_checkpoint_with_losses_instead_of_history(tmp_path):
    run = old_run(tmp_path, "data: procedural\n")
    rf.save_checkpoint(run, 3, {"step": 3, "model": {}, "losses": [1.0, 0.5, 0.25]})
    history = Run.open(run).history()
    assert history.loss == [1.0, 0.5, 0.25]


def test_history_file_wins(tmp_path):
    from recon.outputs.history import RunHistory

    run = old_run(tmp_path, "data: procedural\n")
    rf.save_checkpoint(run, 1, {"step": 1, "losses": [9.0]})
    h = RunHistory()
    h.record_step(0.5, 10, 0.01)
    rf.write_history(run, h)
    assert Run.open(run).history().loss == [0.5]


@pytest.mark.parametrize("kind", ["empty", "missing", "file"])
def test_not_a_run_is_one_clear_line(tmp_path, kind):
    path = tmp_path / "thing"
    if kind == "empty":
        path.mkdir()
    elif kind == "file":
        path.write_text("hello")
    with pytest.raises(NotARunError) as err:
        Run.open(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "splatforge train" in message
    assert isinstance(err.value, FileNotFoundError)  # the CLI's user errors print it as one line


def test_not_a_run_through_the_cli(tmp_path, capsys):
    from recon.cli import main

    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--run", str(tmp_path / "empty")])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and "not a run folder" in err


def test_splats_only_folder_opens_without_a_dataset(tmp_path):
    run = tmp_path / "copied"
    run.mkdir()
    write_splats(run / rf.SPLATS_FILE, random_splats(20, sh_degree=0))
    opened = Run.open(run)
    assert not opened.has_config and not opened.dataset_known and len(opened.read_splats()) == 20
    with pytest.raises(FileNotFoundError, match="has no config.yaml, so its dataset is unknown; give"):
        opened.scene


def test_bad_config_names_the_file(tmp_path):
    run = old_run(tmp_path, "data: procedural\nsh_degree: lots\n")
    with pytest.raises(ValueError, match=r"config\.yaml: sh_degree: 'lots' is not an integer"):
        Run.open(run)


def test_model_of_the_runs_method(tmp_path):
    run = old_run(tmp_path, "data: procedural\nmethod: 3dgs\n")
    model = Run.open(run).load_model(device="cpu")
    rgb, _, _ = model.render([_camera()], None, torch.zeros(3))
    assert rgb.shape == (1, 8, 8, 3)


def _camera():
    from rasterizer import Camera

    K = torch.tensor([[8.0, 0, 4], [0, 8.0, 4], [0, 0, 1]])
    w2c = torch.eye(4)
    w2c[2, 3] = 4.0
    return Camera(w2c, K, 8, 8)
