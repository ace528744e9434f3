"""`--field.encoding dense --field.decoder rbf` (issue 54): the NeRF trains with a Gaussian RBF decoder on dense
low-resolution grids through the same trainer, its checkpoint rebuilds the same field (eval agrees), a run
cannot be resumed with another field, and checkpoints from before --field load as the default field."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from recon.models import NerfModel
from recon.nerf.config import FieldConfig
from recon.nerf.field import build_field, parameter_count
from recon.nerf.hash_encoding import level_layout
from recon.nerf.rbf import RBFLayer
from recon.training.trainer import ConfigMismatchError, Trainer
from tests.recon.nerf.test_nerf_train import SMALL, tiny
from tests.recon.tiny_runs import quiet, train_from_untrained

RBF = FieldConfig(encoding="dense", decoder="rbf", dense_levels=3, dense_features=2, dense_base_res=4,
                  dense_max_res=16, rbf_neurons=16)


def test_dense_grid_hashes_no_level():
    grid = RBF.dense_grid()
    res, offsets = level_layout(grid)
    rows = offsets[1:] - offsets[:-1]
    assert torch.equal(rows, (res + 1) ** 3)  # every level stored whole


def test_build_field_decoders():
    gen = torch.Generator().manual_seed(0)
    rbf = build_field(SMALL, RBF, gen)
    mlp = build_field(SMALL, FieldConfig(), gen)
    assert isinstance(rbf.density_mlp, RBFLayer) and isinstance(rbf.color_mlp, RBFLayer)
    assert not isinstance(mlp.density_mlp, RBFLayer)
    u = torch.rand(50, 3, generator=gen)
    sigma, geo = rbf.density(u)
    rgb = rbf.color(geo, torch.nn.functional.normalize(torch.randn(50, 3, generator=gen), dim=1))
    assert sigma.shape == (50,) and geo.shape == (50, SMALL.geo_dim) and rgb.shape == (50, 3)
    (sigma.sum() + rgb.sum()).backward()
    for name, p in rbf.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    # centres start spread over the features (k-means of random points' features), not all equal
    assert float(rbf.density_mlp.centres.detach().std(0).min()) > 0
    assert parameter_count(rbf) == sum(p.numel() for p in rbf.parameters())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_from_untrained(tiny(tmp_path_factory.mktemp("runrbf"), 120, field=RBF))


def test_rbf_field_trains_and_eval_reads_it_back(trained):
    from recon.commands.evaluate import _evaluate
    from recon.run.folder import Run

    cfg, trainer, before, metrics = trained
    assert isinstance(trainer.model.field.density_mlp, RBFLayer)
    assert metrics["test"]["psnr"] > before + 3.0, (before, metrics)
    model = Run.open(cfg.out).load_model()
    assert model.field_cfg == RBF and isinstance(model.field.color_mlp, RBFLayer)
    again = _evaluate(cfg.out, None, None, None, cfg.out / "eval_again", "cpu")
    assert again["psnr"] == pytest.approx(metrics["test"]["psnr"], abs=1e-6)


def test_resume_with_another_field_is_refused(trained, tmp_path):
    cfg, _, _, _ = trained
    with pytest.raises(ConfigMismatchError, match="field.decoder"):
        Trainer(dataclasses.replace(cfg, field=dataclasses.replace(RBF, decoder="mlp")), log=quiet).prepare_out()


def test_checkpoint_without_field_config_is_the_default_field():
    gen = torch.Generator().manual_seed(0)
    from recon.nerf.space import FieldSpace

    model = NerfModel(SMALL, FieldSpace.box((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0)), 1.0, gen)
    state = model.state_dict()
    del state["field_config"]
    again = NerfModel.from_state_dict(state)
    assert again.field_cfg == FieldConfig()
    for name, p in model.params.items():
        assert torch.equal(p.detach(), again.params[name].detach()), name


def test_rbf_density_starts_at_the_configured_bias():
    """--field.rbf-density-bias b: a fresh RBF field's log density is the same field's with bias 0 shifted by b at
    every point (sigma = exp(b) times it), so a fresh field is nearly empty; the default starts low."""
    u = torch.rand(200, 3, generator=torch.Generator().manual_seed(1))
    log_sigma = {}
    for bias in (0.0, -2.0):
        field = build_field(SMALL, dataclasses.replace(RBF, rbf_density_bias=bias), torch.Generator().manual_seed(0))
        with torch.no_grad():
            log_sigma[bias] = torch.log(field.density(u)[0])
    assert torch.allclose(log_sigma[-2.0], log_sigma[0.0] - 2.0, atol=1e-5)
    assert FieldConfig().rbf_density_bias < -1.0  # the default: sigma < exp(-1) at a fresh field's typical point


def test_a_run_from_before_rbf_density_bias_resumes_as_it_was_trained(tmp_path):
    """A run whose config.yaml predates --field.rbf-density-bias (densities started at exp(0)) resumes from the
    same command (today's default) or with --field.rbf-density-bias 0: it continues from its checkpoint's weights and
    its config.yaml then records 0 (trainer.LEGACY_VALUES; as --neus.sharp-step's): the same command resumes it
    again; another value is refused."""
    import yaml

    from recon.outputs import files as rf

    cfg = tiny(tmp_path, 3, field=dataclasses.replace(RBF, rbf_density_bias=0.0))
    first = Trainer(cfg, log=quiet)
    first.prepare_out()
    first.advance(0)
    first.save()
    saved = rf.read_config_dict(tmp_path / rf.CONFIG_FILE)
    del saved["field"]["rbf_density_bias"]  # as written before the option
    (tmp_path / rf.CONFIG_FILE).write_text(yaml.safe_dump(saved))
    for field in (RBF, cfg.field, RBF):  # today's default bias, the value the first resume wrote back, the default
        resumed = Trainer(dataclasses.replace(cfg, field=field), log=quiet)
        resumed.prepare_out()
        assert resumed.step == 1 and resumed.cfg.field.rbf_density_bias == 0.0
        assert rf.read_config_dict(tmp_path / rf.CONFIG_FILE)["field"]["rbf_density_bias"] == 0.0
        for name, p in first.model.params.items():
            assert torch.equal(p.detach(), resumed.model.params[name].detach()), name
    with pytest.raises(ConfigMismatchError, match="field.rbf_density_bias"):  # another value given: refused
        Trainer(dataclasses.replace(cfg, field=dataclasses.replace(RBF, rbf_density_bias=-4.0)), log=quiet).prepare_out()


def test_a_run_with_the_old_default_neurons_resumes_as_it_was_trained(tmp_path):
    """A run trained with 256 neurons per head (the default until 7 Dec 2026; config.yaml records it) resumes from a
    command that leaves --field.rbf-neurons at today's default (128): its checkpoint's 256 neurons, not a refusal or
    a field of 128 (trainer.LEGACY_VALUES); another count given explicitly is refused."""
    today = FieldConfig().rbf_neurons
    assert today == 128
    cfg = tiny(tmp_path, 3, field=dataclasses.replace(RBF, rbf_neurons=256))
    first = Trainer(cfg, log=quiet)
    first.prepare_out()
    first.advance(0)
    first.save()
    resumed = Trainer(dataclasses.replace(cfg, field=dataclasses.replace(RBF, rbf_neurons=today)), log=quiet)
    resumed.prepare_out()
    assert resumed.step == 1 and resumed.cfg.field.rbf_neurons == 256
    assert resumed.model.field.density_mlp.centres.shape[0] == 256
    for name, p in first.model.params.items():
        assert torch.equal(p.detach(), resumed.model.params[name].detach()), name
    with pytest.raises(ConfigMismatchError, match="field.rbf_neurons"):
        Trainer(dataclasses.replace(cfg, field=dataclasses.replace(RBF, rbf_neurons=64)), log=quiet).prepare_out()


def test_a_run_without_checkpoint_restarts_with_its_own_density_bias(tmp_path):
    """A run folder whose config.yaml holds --field.rbf-density-bias -4 but no checkpoint yet (stopped before its
    first), started again by a command that leaves the option at its default: the model is built with -4, as
    config.yaml says, not with today's default."""
    from recon.outputs import files as rf

    cfg = tiny(tmp_path, 3, field=dataclasses.replace(RBF, rbf_density_bias=-4.0))
    first = Trainer(cfg, log=quiet)
    first.prepare_out()
    assert not rf.list_checkpoints(tmp_path)
    again = Trainer(dataclasses.replace(cfg, field=RBF), log=quiet)
    again.prepare_out()
    assert again.cfg.field.rbf_density_bias == -4.0
    assert rf.read_config_dict(tmp_path / rf.CONFIG_FILE)["field"]["rbf_density_bias"] == -4.0
    for name, p in first.model.params.items():
        assert torch.equal(p.detach(), again.model.params[name].detach()), name
