"""Config values are checked against their field types the same way from a file, the CLI and Python."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from recon.outputs import files as rf
from recon.core.errors import ConfigValueError
from recon.training.trainer import TrainConfig, Trainer


@pytest.mark.parametrize("tp, value, expected", [
    (float, "1e-3", 0.001),  # YAML 1.1 reads a number without a dot as a string
    (float | None, 3, 3.0),
    (float | None, None, None),
    (Path, "a/b", Path("a/b")),
    (int, 7, 7),
])
def test_values_converted(tp, value, expected):
    assert rf.check_field_value("f", tp, value) == expected


@pytest.mark.parametrize("tp, value, message", [
    (float, "abc", r"f: 'abc' is not a number"),
    (int, "5", r"f: '5' is not an integer"),
    (int, True, r"f: True is not an integer"),
    (bool, 1, r"f: 1 is not true or false"),
    (Path, "", r"f: '' is not a path"),
    (int | None, 2.5, r"f: 2\.5 is not an integer"),
])
def test_values_refused(tp, value, message):
    with pytest.raises(ConfigValueError, match=message):
        rf.check_field_value("f", tp, value)


def test_saved_config_round_trips(tmp_path):
    cfg = TrainConfig(out=tmp_path, strategy="mcmc", init_opacity=0.3, steps_scaler=0.5, background="random")
    rf.write_config(tmp_path, cfg)
    assert rf.config_from_dict(TrainConfig, rf.read_config_dict(tmp_path / rf.CONFIG_FILE)) == cfg


def test_config_file_names_itself(tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"strategy": "bogus"}))
    with pytest.raises(ConfigValueError, match=r"c\.yaml: strategy: 'bogus' is not one of adc, mcmc"):
        rf.config_from_dict(TrainConfig, rf.read_config_dict(tmp_path / "c.yaml"), source=tmp_path / "c.yaml")


@pytest.mark.parametrize("field, value, message", [
    ("strategy", "bogus", r"--strategy: 'bogus' is not one of adc, mcmc"),
    ("sh_degree", 4, r"--sh-degree 4: must be 0\.\.3"),
    ("steps", "10", r"--steps: '10' is not an integer"),
    ("init_opacity", 1.5, r"--init-opacity 1\.5: must be between 0 and 1"),
])
def test_python_api_checks_before_loading_anything(tmp_path, field, value, message):
    cfg = TrainConfig(data=tmp_path / "no_such_dataset", out=tmp_path / "run", **{field: value})
    with pytest.raises(ConfigValueError, match=message):
        Trainer(cfg)
    assert not (tmp_path / "run").exists()
