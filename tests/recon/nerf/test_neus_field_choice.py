"""NeuS through the one field interface (issue 54): ``--method neus --field.encoding hash|dense|triplane
--field.decoder mlp|rbf``. Each pair starts as the sphere |x| - r, trains a few steps on the procedural scene,
saves, and loads back the same field; the fused CPU paths agree with the unfused ones; checkpoints from before
--field load as the hash grid + MLPs; the refusals left are one line."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from recon.core.errors import ConfigValueError
from recon.models import NeusModel
from recon.nerf.config import FieldConfig, NeusConfig
from recon.nerf.field import field_grid_config
from recon.nerf.neus_field import NeusField
from recon.nerf.rbf import RBFLayer
from recon.nerf.space import FieldSpace
from tests.recon.nerf.test_neus_train import SMALL, tiny
from tests.recon.tiny_runs import quiet

SIZES = dict(dense_levels=3, dense_features=2, dense_base_res=4, dense_max_res=16, triplane_levels=3,
             triplane_features=2, triplane_base_res=8, triplane_max_res=32, rbf_neurons=16)
FIELDS = {f"{enc}+{dec}": FieldConfig(encoding=enc, decoder=dec, **SIZES)
          for enc in ("hash", "dense", "triplane") for dec in ("mlp", "rbf")}
RADIUS = 0.5
STEPS = 6


def neus_field(field_cfg: FieldConfig, seed: int = 0, **kw) -> NeusField:
    """A NeusField of ``field_cfg`` on the small test grid (the model's constructor arguments)."""
    return NeusField(field_grid_config(SMALL, field_cfg), 1.0, 64, SMALL.geo_dim, SMALL.hidden, SMALL.color_layers,
                     RADIUS, generator=torch.Generator().manual_seed(seed), decoder=field_cfg.decoder,
                     rbf_neurons=field_cfg.rbf_neurons, **kw)


def points(n: int = 2000, seed: int = 1) -> torch.Tensor:
    return torch.rand(n, 3, generator=torch.Generator().manual_seed(seed)) * 2.0 - 1.0


@pytest.mark.parametrize("name", list(FIELDS))
def test_starts_as_a_sphere(name):
    """The SDF starts as |x| - r for every pair, progressive levels or not: an RBF decoder exactly (the analytic
    base, its SDF read-out at 0) with unit gradients; an MLP by its geometric initialisation, approximately (a
    64-unit layer: mean error about 0.1 of the box's half side, right sign away from the surface)."""
    field = neus_field(FIELDS[name])
    x = points()
    sphere = x.norm(dim=1) - RADIUS
    with torch.no_grad():
        sdf, feats = field.sdf(x)
        _, _, grad = field.sdf_and_gradient(x)
        field.set_active_levels(1)
        coarse, _ = field.sdf(x)
    assert feats.shape == (len(x), SMALL.geo_dim)
    assert isinstance(field.geo_mlp, RBFLayer) == (FIELDS[name].decoder == "rbf")
    for values in (sdf, coarse):
        if FIELDS[name].decoder == "rbf":
            assert float((values - sphere).abs().max()) < 1e-6
        else:
            far = sphere.abs() > 0.2
            assert float((values - sphere).abs().mean()) < 0.2
            assert float((values[far].sign() == sphere[far].sign()).float().mean()) > 0.98
    if FIELDS[name].decoder == "rbf":
        assert float((grad.norm(dim=1) - 1.0).abs().mean()) < 0.01  # central differences of |x|: ~1


@pytest.mark.parametrize("name", ["hash+rbf", "dense+rbf", "dense+mlp"])
def test_fused_paths_match_unfused(name):
    """The fused CPU kernels (grid + RBF for an RBF head, encoding + MLP for an MLP head on a table grid) give the
    unfused path's SDF and gradients to the parameters."""
    cfg = FIELDS[name]
    fused, plain = neus_field(cfg), neus_field(cfg, backend="torch", encoding_mlp="unfused")
    with torch.no_grad():  # features that matter
        fused.table.uniform_(-0.3, 0.3, generator=torch.Generator().manual_seed(2))
        plain.table.copy_(fused.table)
    x = points(500)
    out = [f.sdf(x) for f in (fused, plain)]
    for a, b in zip(out[0], out[1]):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
    for f, (sdf, feats) in zip((fused, plain), out):
        (sdf.sum() + feats.sum()).backward()
    torch.testing.assert_close(fused.table.grad, plain.table.grad, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", list(FIELDS))
def test_trains_saves_and_loads_back(name, tmp_path):
    """A few steps of ``--method neus`` with the pair, then the run's checkpoint rebuilds the same field: the same
    config, parameters, active levels and SDF."""
    from recon.run.folder import Run
    from recon.training.trainer import Trainer

    cfg = tiny(tmp_path / "run", STEPS, field=FIELDS[name], neus=NeusConfig(start_levels=1, level_every=2,
                                                                          geo_hidden=16))
    NeusModel.check_config(cfg)
    trainer = Trainer(cfg, log=quiet)
    before = {n: p.detach().clone() for n, p in trainer.model.params.items()}
    metrics = trainer.run()
    assert torch.isfinite(torch.tensor(metrics["test"]["psnr"]))
    model, loaded = trainer.model, Run.open(cfg.out).load_model()
    assert loaded.field_cfg == FIELDS[name] and loaded.field.active_levels == model.field.active_levels == 3
    assert any(not torch.equal(before[n], p.detach()) for n, p in model.params.items() if n != "variance")
    for n, p in model.params.items():
        assert torch.equal(p.detach(), loaded.params[n].detach()), n
    x = points(300)
    with torch.no_grad():
        assert torch.equal(model.field.sdf(x)[0], loaded.field.sdf(x)[0])


def test_checkpoint_without_field_config_is_the_hash_mlp_field():
    """A neus checkpoint from before --field (no "field_config") loads as the hash grid + MLPs, weights and all."""
    model = NeusModel(SMALL, FieldSpace.box((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0)), 1.0,
                      torch.Generator().manual_seed(0), neus_cfg=NeusConfig(geo_hidden=16))
    state = model.state_dict()
    del state["field_config"]
    again = NeusModel.from_state_dict(state)
    assert again.field_cfg == FieldConfig() and not isinstance(again.field.geo_mlp, RBFLayer)
    for n, p in model.params.items():
        assert torch.equal(p.detach(), again.params[n].detach()), n


@pytest.mark.parametrize("field, match", [(FIELDS["triplane+mlp"], "triplane"), (FIELDS["dense+rbf"], "decoder")])
def test_refusals_left_are_one_line(field, match):
    """--nerf.encoding-mlp fused where the fused encoding + MLP kernel cannot serve: one line, before training."""
    cfg = tiny("x", 1, field=field, nerf=dataclasses.replace(SMALL, encoding_mlp="fused"))
    with pytest.raises(ConfigValueError, match=match) as err:
        NeusModel.check_config(cfg)
    assert "\n" not in str(err.value)
    NeusModel.check_config(tiny("x", 1, field=field))  # the pair itself is accepted
