"""Named presets of `splatforge train` (default, mcmc, fast): a preset name picks the starting config,
flags override it, and `splatforge train --data X` (no preset name) still means the default preset."""

from __future__ import annotations

from pathlib import Path

import pytest

from recon.outputs import files as rf
from recon.cli import main, with_default_preset
from recon.training.presets import PRESETS, preset_config
from recon.training.trainer import TrainConfig


def test_preset_table():
    assert set(PRESETS) >= {"default", "mcmc", "fast"}
    assert PRESETS["default"][0] == TrainConfig()
    assert preset_config("mcmc").strategy == "mcmc"
    fast = preset_config("fast", steps=10)
    assert fast.steps == 10 and fast.sh_degree == PRESETS["fast"][0].sh_degree
    assert PRESETS["fast"][0].steps == 7000  # the table itself is not changed by overrides
    with pytest.raises(ValueError, match="unknown preset"):
        preset_config("nope")


def test_argv_without_preset_means_default():
    assert with_default_preset(["train", "--data", "x"]) == ["train", "default", "--data", "x"]
    assert with_default_preset(["train"]) == ["train", "default"]
    assert with_default_preset(["train", "mcmc", "--steps", "5"]) == ["train", "mcmc", "--steps", "5"]
    assert with_default_preset(["train", "--help"]) == ["train", "--help"]  # help lists the presets
    assert with_default_preset(["export", "a.ply"]) == ["export", "a.ply"]


def train_cli(*args: str) -> None:
    main(["train", *args, "--data", "procedural", "--data-factor", "4", "--steps", "3", "--save-every", "0",
          "--no-progress"])


def test_cli_presets_and_flags(tmp_path, capsys):
    train_cli("fast", "--out", str(tmp_path / "fast"), "--seed", "3")
    saved = rf.read_config_dict(tmp_path / "fast" / rf.CONFIG_FILE)
    assert saved["sh_degree"] == PRESETS["fast"][0].sh_degree and saved["steps"] == 3 and saved["seed"] == 3

    train_cli("mcmc", "--out", str(tmp_path / "mcmc"), "--max-gaussians", "2000")
    saved = rf.read_config_dict(tmp_path / "mcmc" / rf.CONFIG_FILE)
    assert saved["strategy"] == "mcmc" and saved["max_gaussians"] == 2000

    train_cli("--out", str(tmp_path / "plain"))  # no preset name: the default preset
    saved = rf.read_config_dict(tmp_path / "plain" / rf.CONFIG_FILE)
    assert saved["strategy"] == "adc" and saved["sh_degree"] == TrainConfig().sh_degree
    assert capsys.readouterr().out.count("done: 3 steps") == 3
    assert Path(tmp_path / "plain" / "splats.ply").is_file()


def test_cli_help_lists_presets(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in PRESETS)


def test_cli_config_file_with_overrides(tmp_path, capsys):
    """`splatforge train --config RUN/config.yaml --flag X`: the saved run's settings, flags on top."""
    train_cli("mcmc", "--out", str(tmp_path / "first"), "--max-gaussians", "1500", "--seed", "7")
    saved = tmp_path / "first" / rf.CONFIG_FILE
    main(["train", "--config", str(saved), "--out", str(tmp_path / "second"), "--steps", "2"])
    second = rf.read_config_dict(tmp_path / "second" / rf.CONFIG_FILE)
    first = rf.read_config_dict(saved)
    assert second["steps"] == 2 and second["out"] == str(tmp_path / "second")
    assert {k: v for k, v in second.items() if k not in ("steps", "out")} == \
        {k: v for k, v in first.items() if k not in ("steps", "out")}
    assert second["strategy"] == "mcmc" and second["max_gaussians"] == 1500 and second["seed"] == 7
    assert "done: 2 steps" in capsys.readouterr().out


@pytest.mark.parametrize("content,message", [(None, "no such file"), ("[1, 2]", "expected a mapping"),
                                             ("steps: 3\nbogus: 1\n", "unknown config field")])
def test_cli_config_file_errors(tmp_path, capsys, content, message):
    path = tmp_path / "config.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as exc:
        main(["train", f"--config={path}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "config.yaml" in err
