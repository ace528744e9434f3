"""Strategy hyper-parameters and learning rates are nested sections of TrainConfig (``lr``, ``adc``,
``mcmc``): set from the CLI as ``--adc.grow-grad2d``, saved in config.yaml as nested mappings, read back
with every value checked, compared on resume by dotted key; old config files without them still load."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

from recon.outputs import files as rf
from recon.cli import main
from recon.commands import train as train_command
from recon.core.errors import ConfigValueError
from recon.models.gaussians import LearningRates
from recon.strategy import STRATEGIES, ADCConfig, ADCStrategy, MCMCConfig, MCMCStrategy
from recon.training.trainer import (ConfigMismatchError, TrainConfig, Trainer, build_model, build_strategy,
                           check_resumable, stored_config, validate_config)


@pytest.fixture
def parsed(monkeypatch):
    """Run `splatforge ARGS` with training replaced by recording the config it was given."""
    seen = []
    monkeypatch.setattr(train_command, "train_model", lambda cfg, **kw: seen.append(cfg) or {
        "test": {"psnr": None, "num_views": 0}, "steps": 0, "num_gaussians": 0})

    def parse(*args: str) -> TrainConfig:
        main(list(args))
        return seen[-1]
    return parse


def test_sections_are_cli_flags(parsed):
    cfg = parsed("train", "--adc.grow-grad2d", "0.0003", "--lr.means", "1e-4", "--mcmc.noise-lr", "1e5",
                 "--adc.no-absgrad", "--lr.shN", "0.001")
    assert cfg.adc.grow_grad2d == 0.0003 and cfg.lr.means == 1e-4 and cfg.mcmc.noise_lr == 1e5
    assert cfg.lr.shN == 0.001
    assert cfg.adc.refine_every == ADCConfig().refine_every and cfg.strategy == "adc"


def test_presets_take_section_flags(parsed):
    cfg = parsed("train", "mcmc", "--mcmc.refine-every", "7", "--steps", "9")
    assert cfg.strategy == "mcmc" and cfg.mcmc.refine_every == 7 and cfg.steps == 9


def test_config_file_sections_and_flags(parsed, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"steps": 5, "adc": {"grow_grad2d": 0.0005}, "lr": {"quats": 0.002}}))
    cfg = parsed("train", "--config", str(path), "--adc.refine-every", "50")
    assert cfg.steps == 5 and cfg.adc.grow_grad2d == 0.0005 and cfg.adc.refine_every == 50
    assert cfg.lr.quats == 0.002 and cfg.lr.means == LearningRates().means and cfg.mcmc == MCMCConfig()


def test_saved_as_nested_mappings_and_read_back(tmp_path):
    cfg = TrainConfig(out=tmp_path, adc=ADCConfig(grow_grad2d=3e-4, absgrad=True),
                      mcmc=MCMCConfig(growth=0.1), lr=LearningRates(means=1e-4, eps=1e-12))
    rf.write_config(tmp_path, cfg)
    raw = yaml.safe_load((tmp_path / rf.CONFIG_FILE).read_text())
    assert raw["adc"]["grow_grad2d"] == 3e-4 and raw["adc"]["absgrad"] is True
    assert raw["lr"]["eps"] == 1e-12 and raw["mcmc"]["growth"] == 0.1
    assert rf.config_from_dict(TrainConfig, rf.read_config_dict(tmp_path / rf.CONFIG_FILE)) == cfg


def test_old_config_without_sections_loads_with_defaults(tmp_path):
    data = {k: v for k, v in rf.config_to_dict(TrainConfig(steps=7)).items() if k not in ("lr", "adc", "mcmc")}
    data["adc"] = {"refine_every": 40}  # a partial section: the rest keeps its defaults
    cfg = rf.config_from_dict(TrainConfig, data)
    assert cfg.steps == 7 and cfg.lr == LearningRates() and cfg.mcmc == MCMCConfig()
    assert cfg.adc == ADCConfig(refine_every=40)
    assert rf.config_from_dict(TrainConfig, {"adc": None}).adc == ADCConfig()  # `adc:` left empty in YAML


@pytest.mark.parametrize("data, message", [
    ({"adc": {"grow_grad2d": "abc"}}, r"c\.yaml: adc\.grow_grad2d: 'abc' is not a number"),
    ({"mcmc": {"refine_every": 2.5}}, r"c\.yaml: mcmc\.refine_every: 2\.5 is not an integer"),
    ({"adc": {"bogus": 1}}, r"c\.yaml: unknown config field\(s\) \['adc\.bogus'\] for ADCConfig"),
    ({"lr": 0.1}, r"c\.yaml: lr: 0\.1 is not a mapping of LearningRates fields"),
])
def test_section_values_checked(data, message):
    with pytest.raises(ConfigValueError, match=message):
        rf.config_from_dict(TrainConfig, data, source="c.yaml")


@pytest.mark.parametrize("cfg, message", [
    (TrainConfig(adc=ADCConfig(refine_every=0)), r"--adc\.refine-every 0: must be >= 1"),
    (TrainConfig(lr=LearningRates(means=-1.0)), r"--lr\.means -1\.0: must be >= 0"),
    (TrainConfig(mcmc=MCMCConfig(min_opacity=1.5)), r"--mcmc\.min-opacity 1\.5: must be in \[0, 1\)"),
    (TrainConfig(mcmc=MCMCConfig(noise_lr=float("nan"))), r"--mcmc\.noise-lr nan: must be >= 0"),
    (TrainConfig(adc=ADCConfig(reset_every="10")), r"--adc\.reset-every: '10' is not an integer"),
    (TrainConfig(adc={"refine_every": 5}), r"adc: \{'refine_every': 5\} is not a ADCConfig section"),
])
def test_section_ranges_and_types_validated(cfg, message):
    with pytest.raises(ConfigValueError, match=message):
        validate_config(cfg)


def test_resume_compares_section_values_by_dotted_key(tmp_path):
    saved = rf.config_to_dict(stored_config(TrainConfig(out=tmp_path)))
    changed = TrainConfig(out=tmp_path, adc=ADCConfig(grow_grad2d=0.0003))
    with pytest.raises(ConfigMismatchError, match=r"adc\.grow_grad2d: saved 0\.0002, now 0\.0003"):
        check_resumable(saved, changed, tmp_path)
    with pytest.raises(ConfigMismatchError, match=r"lr\.means: saved 0\.00016, now 0\.001"):
        check_resumable(saved, TrainConfig(out=tmp_path, lr=LearningRates(means=1e-3)), tmp_path)
    old = {k: v for k, v in saved.items() if k not in ("lr", "adc", "mcmc")}  # before the sections existed
    check_resumable(old, TrainConfig(out=tmp_path), tmp_path)
    with pytest.raises(ConfigMismatchError, match=r"mcmc\.growth: saved 0\.05, now 0\.2"):
        check_resumable(old, TrainConfig(out=tmp_path, strategy="mcmc", mcmc=MCMCConfig(growth=0.2)), tmp_path)
    # the section of a strategy the run does not use changes nothing: an adc run ignores mcmc.*
    check_resumable(saved, TrainConfig(out=tmp_path, mcmc=MCMCConfig(growth=0.2)), tmp_path)


def test_old_run_folder_resumes(tmp_path):
    cfg = TrainConfig(data=Path("procedural"), out=tmp_path / "run", steps=2, data_factor=4, save_every=0,
                      progress=False, init_num_random=500)
    Trainer(cfg, log=lambda *a: None).run()
    config_file = tmp_path / "run" / rf.CONFIG_FILE
    data = yaml.safe_load(config_file.read_text())
    config_file.write_text(yaml.safe_dump({k: v for k, v in data.items() if k not in ("lr", "adc", "mcmc")},
                                          sort_keys=False))
    lines = []
    metrics = Trainer(dataclasses.replace(cfg, steps=3), log=lines.append).run()
    assert metrics["steps"] == 3 and any("resuming" in line for line in lines)
    assert yaml.safe_load(config_file.read_text())["adc"] == dataclasses.asdict(ADCConfig())


def test_strategy_built_from_registry_and_section():
    assert set(STRATEGIES) <= {f.name for f in dataclasses.fields(TrainConfig)}  # section name = strategy name
    adc = build_strategy(TrainConfig(steps=3000, max_gaussians=77, adc=ADCConfig(grow_grad2d=0.5,
                                                                                   refine_stop_iter=10_000)))
    assert type(adc) is ADCStrategy and adc.grow_grad2d == 0.5 and adc.max_gaussians == 77
    assert adc.refine_stop_iter == 1000 and adc.refine_every == 20  # 10 000 x 0.1; 100 x 0.1 kept >= 20
    mcmc = build_strategy(TrainConfig(strategy="mcmc", steps_scaler=0.5, max_gaussians=99,
                                      mcmc=MCMCConfig(growth=0.2, refine_every=40)))
    assert type(mcmc) is MCMCStrategy and mcmc.growth == 0.2 and mcmc.cap_max == 99 and mcmc.refine_every == 20


def test_section_scaling_matches_strategy_scaling():
    assert ADCStrategy.from_config(ADCConfig().scaled(0.1)) == ADCStrategy().scaled(0.1)
    assert MCMCStrategy.from_config(MCMCConfig().scaled(0.3)) == MCMCStrategy().scaled(0.3)
    assert isinstance(ADCConfig().scaled(0.5), ADCConfig)


def test_learning_rates_reach_the_model():
    from recon.data.procedural_scene import procedural_scene

    scene = procedural_scene(data_factor=4, seed=0)
    cfg = TrainConfig(init_num_random=50, lr=LearningRates(quats=0.0123, means=2e-4))
    model = build_model(cfg, scene, torch.Generator().manual_seed(0), log=lambda *a: None)
    groups = {g["name"]: g["lr"] for g in model.optimizer.param_groups}
    assert groups["quats"] == 0.0123 and groups["means"] == pytest.approx(2e-4 * model.extent)
