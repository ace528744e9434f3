"""`--field.encoding triplane` (issue 54): the tri-plane encoding's interpolation against hand computations (cell
centres at +0.5, the three planes summed), its gradient, the layout's size, the NeRF trainer with both decoders
(trains, saves, its checkpoint loads back, resumes bit for bit), and `sdf fit` with a tri-plane."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from recon.nerf.config import FieldConfig
from recon.nerf.field import build_field
from recon.nerf.rbf import RBFLayer
from recon.nerf.triplane import TriPlaneConfig, plane_layout, triplane_encode
from recon.training.trainer import Trainer
from tests.recon.nerf.test_nerf_train import SMALL, tiny
from tests.recon.tiny_runs import quiet, train_from_untrained


def one_level(r: int, features: int = 2, dtype=torch.float64):
    """(table [3 r^2, F] random, resolutions, offsets) of a single level of r x r cells."""
    res, offsets = plane_layout(TriPlaneConfig(1, features, r, r))
    return torch.rand(int(offsets[-1]), features, generator=torch.Generator().manual_seed(0), dtype=dtype), res, offsets


def cell(table, r, plane, i, j):
    """[F] features of cell (i along the plane's first axis, j along its second) of plane 0 (xy), 1 (xz), 2 (yz)."""
    return table[plane * r * r + j * r + i]


def test_cell_centre_returns_the_cells_features_summed_over_planes():
    r = 4
    table, res, offsets = one_level(r)
    i, j, k = 1, 2, 3
    x = torch.tensor([[(i + 0.5) / r, (j + 0.5) / r, (k + 0.5) / r]], dtype=torch.float64)
    want = cell(table, r, 0, i, j) + cell(table, r, 1, i, k) + cell(table, r, 2, j, k)
    assert torch.allclose(triplane_encode(x, table, res, offsets)[0], want, atol=1e-12)


def test_halfway_between_two_centres_is_their_mean():
    r = 4
    table, res, offsets = one_level(r)
    # x halfway between cells 1 and 2; y, z on the centres of cells 0 and 3
    x = torch.tensor([[2.0 / r, 0.5 / r, 3.5 / r]], dtype=torch.float64)
    want = (0.5 * (cell(table, r, 0, 1, 0) + cell(table, r, 0, 2, 0))
            + 0.5 * (cell(table, r, 1, 1, 3) + cell(table, r, 1, 2, 3)) + cell(table, r, 2, 0, 3))
    assert torch.allclose(triplane_encode(x, table, res, offsets)[0], want, atol=1e-12)
    # within half a cell of a face the edge cell holds (border padding); outside the cube is clamped
    edge = torch.tensor([[0.0, 0.5 / r, 0.5 / r], [-3.0, 0.5 / r, 0.5 / r]], dtype=torch.float64)
    out = triplane_encode(edge, table, res, offsets)
    assert torch.allclose(out[0], out[1]) and torch.allclose(out[0], sum(cell(table, r, p, 0, 0) for p in range(3)))


def test_levels_are_level_major_and_sized():
    cfg = TriPlaneConfig(3, 2, 4, 16)
    res, offsets = plane_layout(cfg)
    assert res.tolist() == [4, 8, 16] and torch.equal(offsets[1:] - offsets[:-1], 3 * res * res)
    table = torch.rand(int(offsets[-1]), 2, dtype=torch.float64)
    x = torch.rand(7, 3, dtype=torch.float64)
    out = triplane_encode(x, table, res, offsets)
    assert out.shape == (7, cfg.output_dim)
    lvl1 = slice(int(offsets[1]), int(offsets[2]))
    alone = triplane_encode(x, table[lvl1], res[1:2], offsets[1:3] - offsets[1])
    assert torch.allclose(out[:, 2:4], alone)
    with pytest.raises(ValueError, match="base_res <= max_res"):
        TriPlaneConfig(2, 2, 16, 8)


def test_gradcheck_table():
    table, res, offsets = one_level(3, features=2)
    x = torch.rand(5, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    table.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: triplane_encode(x, t, res, offsets), (table,))


def test_default_size_is_comparable_to_dense():
    f = FieldConfig()
    _, planes = plane_layout(f.triplane())
    dense = sum((r + 1) ** 3 for r in (16, 32, 64, 128))
    assert f.triplane().output_dim == f.dense_levels * f.dense_features
    assert 0.8 < int(planes[-1]) / dense < 1.2


TRI = dict(encoding="triplane", triplane_levels=2, triplane_features=2, triplane_base_res=8, triplane_max_res=32)


@pytest.mark.parametrize("decoder", ["mlp", "rbf"])
def test_field_takes_the_unfused_path(decoder, monkeypatch):
    import recon.nerf.field as field_mod

    def boom(*_, **__):
        raise AssertionError("a fused table kernel was called for a tri-plane")

    monkeypatch.setattr(field_mod, "grid_rbf_layer", boom)
    monkeypatch.setattr(field_mod, "encode_mlp_numba", boom)
    field = build_field(SMALL, FieldConfig(decoder=decoder, rbf_neurons=8, **TRI), torch.Generator().manual_seed(0))
    u = torch.rand(40, 3)
    sigma, geo = field.density(u)
    sigma.sum().backward()
    assert field.table.grad is not None and float(field.table.grad.abs().sum()) > 0
    assert isinstance(field.density_mlp, RBFLayer) == (decoder == "rbf")
    with pytest.raises(ValueError, match="fused kernel reads hash / dense tables"):
        build_field(dataclasses.replace(SMALL, encoding_mlp="fused"), FieldConfig(**TRI))


@pytest.mark.parametrize("decoder", ["mlp", "rbf"])
def test_trains_saves_resumes(decoder, tmp_path):
    from recon.run.folder import Run

    field = FieldConfig(decoder=decoder, rbf_neurons=16, **TRI)
    cfg, trainer, before, metrics = train_from_untrained(tiny(tmp_path / "run", 40, field=field))
    assert metrics["test"]["psnr"] > before + 1.0, (before, metrics)
    model = Run.open(cfg.out).load_model()  # the run's checkpoint rebuilds the same field
    assert model.field_cfg == field and model.field.triplane
    for name, p in trainer.model.params.items():
        assert torch.equal(p.detach(), model.params[name].detach()), name
    same = dataclasses.replace(cfg, out=tmp_path / "resumed")
    first = Trainer(same, log=quiet)
    first.prepare_out()
    for step in range(20):
        first.advance(step)
    first.save()
    resumed = Trainer(same, log=quiet)
    resumed.run()
    assert resumed.step == 40
    for name, p in trainer.model.params.items():
        assert torch.equal(p.detach(), resumed.model.params[name].detach()), name


def test_old_checkpoint_field_config_loads_triplane_defaults():
    state = {k: v for k, v in dataclasses.asdict(FieldConfig(encoding="triplane")).items()
             if not k.startswith("triplane_")}
    assert FieldConfig(**state).triplane() == FieldConfig().triplane()


@pytest.mark.parametrize("decoder", ["rbf", "mlp"])
def test_sdf_fit_triplane(decoder, tmp_path):
    import trimesh

    from recon.geometry.mesh_metrics import chamfer_distance
    from recon.geometry.sdf_fit import SDFConfig, extract_mesh, fit_sdf, load_sdf, save_sdf

    m = trimesh.creation.icosphere(subdivisions=3, radius=0.8)
    v, f = np.asarray(m.vertices), np.asarray(m.faces)
    cfg = SDFConfig(encoding="triplane", decoder=decoder, levels=2, features=4, base_res=16, max_res=64, neurons=16,
                    hidden=32, steps=300, batch=4096, pool=1 << 15, resolution=32)
    field, norm, _ = fit_sdf(v, f, cfg)
    mv, mf = extract_mesh(field, norm, 32)
    assert chamfer_distance(mv, mf, v, f, samples=10_000)["chamfer_pct"] < 1.0  # measured 0.08 (rbf), 0.04 (mlp)
    save_sdf(tmp_path / "sdf.pt", field, norm)
    again, _ = load_sdf(tmp_path / "sdf.pt")
    u = torch.rand(50, 3)
    assert torch.equal(again(u), field(u).detach())


def test_config_refusals_are_one_line(tmp_path):
    from recon.core.errors import ConfigValueError
    from recon.models import NerfModel

    with pytest.raises(ConfigValueError, match="--field.triplane-base-res 900: must be <= --field.triplane-max-res"):
        NerfModel.check_config(tiny(tmp_path, 1, field=FieldConfig(encoding="triplane", triplane_base_res=900)))
    with pytest.raises(ConfigValueError, match="--nerf.encoding-mlp fused"):
        NerfModel.check_config(tiny(tmp_path, 1, nerf=dataclasses.replace(SMALL, encoding_mlp="fused"),
                                    field=FieldConfig(encoding="triplane")))
    NerfModel.check_config(tiny(tmp_path, 1, field=FieldConfig(**TRI)))
