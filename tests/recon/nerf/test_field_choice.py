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
