"""``--data``: the procedural scene's name or a dataset path, read by one rule when training
(config.yaml), resuming (check_resumable) and reading a run back (Run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recon.outputs import files as rf
from recon.data.data_arg import PROCEDURAL, names_procedural_scene, resolved_data, saved_data_path
from recon.training.trainer import ConfigMismatchError, TrainConfig, check_resumable, stored_config


def test_procedural_unless_such_a_folder_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert names_procedural_scene("procedural") and names_procedural_scene(Path(PROCEDURAL))
    assert resolved_data("procedural") == Path("procedural")
    assert saved_data_path("procedural", tmp_path / "run") == Path("procedural")
    assert not names_procedural_scene("Procedural") and not names_procedural_scene(tmp_path / "procedural")
    (tmp_path / "procedural").mkdir()  # a dataset folder of that name is a path like any other
    assert not names_procedural_scene("procedural")
    assert resolved_data("procedural") == tmp_path / "procedural"
    assert saved_data_path("procedural", tmp_path / "run") == Path("procedural")  # there from here


def test_saved_relative_data_from_working_directory_then_run_folder(tmp_path, monkeypatch):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    (run / "ds").mkdir(parents=True)
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert saved_data_path("ds", run) == run / "ds"
    assert saved_data_path("gone", run) == Path("gone")  # kept: Run.scene names it as missing
    assert saved_data_path(tmp_path / "abs", run) == tmp_path / "abs"
    (elsewhere / "ds").mkdir()
    assert saved_data_path("ds", run) == Path("ds")


def saved_config(cfg: TrainConfig, data: str) -> dict:
    return {**rf.config_to_dict(stored_config(cfg)), "data": data}


def test_resume_reads_saved_data_as_a_run_does(tmp_path, monkeypatch):
    """An older config.yaml with a relative dataset beside the run folder resumes from another working
    directory with the same dataset, and refuses another one."""
    run = tmp_path / "run"
    (run / "ds").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    check_resumable(saved_config(TrainConfig(data=run / "ds", out=run), "ds"), TrainConfig(data=run / "ds", out=run),
                    run)
    with pytest.raises(ConfigMismatchError, match="data: saved"):
        check_resumable(saved_config(TrainConfig(out=run), "ds"), TrainConfig(data=tmp_path / "other", out=run), run)
    check_resumable(saved_config(TrainConfig(out=run), "procedural"), TrainConfig(out=run), run)
