"""`splatforge train --method neus` (issue 50) through the shared trainer: a few steps on the procedural scene
improve the test PSNR; the eikonal term is in the loss; progressive levels; checkpoints resume bit for bit;
eval reads the checkpoint; `splatforge mesh` on the run gives the SDF's zero level set; marching cubes on a
known SDF (a sphere) puts the vertices on it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from recon.core.errors import ConfigValueError
from recon.models import NerfModel, NeusModel, model_class
from recon.nerf.config import FieldConfig, NerfConfig, NeusConfig
from recon.strategy.occupancy import OccupancyConfig
from recon.training.trainer import ConfigMismatchError, TrainConfig, Trainer
from tests.recon.tiny_runs import quiet, tiny_config, train_from_untrained

SMALL = NerfConfig(hash_levels=4, hash_log2_table=12, hash_base_res=4, hash_max_res=64, hidden=32, geo_dim=8,
                   occupancy_resolution=32, target_samples=4096, max_rays=512, steps_per_diagonal=256,
                   eval_rays=4096, lr_warmup_steps=5)
STEPS = 30


def tiny(out, steps, **kw) -> TrainConfig:
    return tiny_config(out, steps, dict(method="neus", strategy="occupancy", nerf=SMALL,
                                        occupancy=OccupancyConfig(update_every=8, warmup_steps=16),
                                        neus=NeusConfig(start_levels=2, level_every=10, geo_hidden=32)), **kw)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_from_untrained(tiny(tmp_path_factory.mktemp("runneus"), STEPS, save_every=STEPS // 2))


def test_registered_trains(trained):
    cfg, trainer, before, metrics = trained
    assert model_class("neus") is NeusModel and isinstance(trainer.model, NeusModel)
    assert isinstance(trainer.model, NerfModel)  # the nerf method's sampling, rendering, IO
    assert metrics["test"]["psnr"] > before + 2.0, (before, metrics)
    assert trainer.model.field.active_levels == 4  # 2 + 30 // 10, clamped to the 4 levels


def test_eikonal_term_and_variance_group(trained):
    _, trainer, _, _ = trained
    model = trainer.model
    with torch.enable_grad():
        o = torch.tensor([[0.0, 0.0, -3.0]], dtype=torch.float64).expand(64, 3)
        d = torch.nn.functional.normalize(torch.randn(64, 3, generator=torch.Generator().manual_seed(0),
                                                      dtype=torch.float64) * 0.1 + torch.tensor([0, 0, 1.0]), dim=1)
        out = model.render_rays(o, d, torch.zeros(3))
    grads = out["train_meta"]["gradients"]
    assert grads.shape[1] == 3 and grads.requires_grad
    terms = model.loss_terms({"gradients": grads}, 0, None)
    assert set(terms) == {"eikonal"} and float(terms["eikonal"]) >= 0
    names = [g["name"] for g in model.optimizer.param_groups]
    assert names == ["table", "mlp", "variance"]
    var = model.optimizer.param_groups[2]
    assert var["lr"] == pytest.approx(model.optimizer.param_groups[1]["lr"] * model.neus.variance_lr_scale)


def test_eval_reads_the_checkpoint(trained):
    from recon.commands.evaluate import _evaluate
    from recon.run.folder import Run

    cfg, trainer, _, metrics = trained
    model = Run.open(cfg.out).load_model()
    assert isinstance(model, NeusModel) and model.field.active_levels == trainer.model.field.active_levels
    again = _evaluate(cfg.out, None, None, None, cfg.out / "eval_again", "cpu")
    assert again["psnr"] == pytest.approx(metrics["test"]["psnr"], abs=1e-6)


def test_resume_is_bit_exact(trained, tmp_path):
    cfg, trainer, _, _ = trained
    same = dataclasses.replace(cfg, out=tmp_path)
    first = Trainer(same, log=quiet)
    first.prepare_out()
    for step in range(STEPS // 2):
        first.advance(step)
    first.save()
    resumed = Trainer(same, log=quiet)
    resumed.run()
    assert resumed.step == STEPS
    for name, p in trainer.model.params.items():
        assert torch.equal(p.detach(), resumed.model.params[name].detach()), name
    assert torch.equal(trainer.model.grid.bits, resumed.model.grid.bits)


def test_a_run_from_before_sharp_step_resumes_as_it_was_trained(trained, tmp_path):
    """A run whose config.yaml predates ``--neus.sharp-step`` (no ``neus.sharp_step``) resumes from the same command
    (today's default 0.5) or with ``--neus.sharp-step 0``, marching at the nerf step it was trained with, and its
    config.yaml then records 0 (trainer.LEGACY_VALUES); a run that has the key resumes with its own value."""
    import yaml

    from recon.outputs import files as rf

    cfg, _, _, _ = trained
    same = dataclasses.replace(cfg, out=tmp_path, steps=4)
    first = Trainer(same, log=quiet)
    first.prepare_out()
    first.advance(0)
    first.save()
    assert first.model.neus.sharp_step == 0.5
    saved = rf.read_config_dict(tmp_path / rf.CONFIG_FILE)
    del saved["neus"]["sharp_step"]  # as written before the option
    (tmp_path / rf.CONFIG_FILE).write_text(yaml.safe_dump(saved))
    for neus_cfg in (same.neus, dataclasses.replace(same.neus, sharp_step=0.0), same.neus):  # and again
        resumed = Trainer(dataclasses.replace(same, neus=neus_cfg), log=quiet)
        resumed.prepare_out()
        assert resumed.step == 1 and resumed.model.neus.sharp_step == 0.0
        assert rf.read_config_dict(tmp_path / rf.CONFIG_FILE)["neus"]["sharp_step"] == 0.0
    again = Trainer(dataclasses.replace(same, neus=dataclasses.replace(same.neus, sharp_step=0.25)), log=quiet)
    with pytest.raises(ConfigMismatchError, match="neus.sharp_step"):  # it now holds 0: a change is refused
        again.prepare_out()


def test_mesh_command_writes_the_zero_level_set(trained, tmp_path):
    import trimesh

    from recon.commands.mesh import MeshConfig, extract_run_mesh

    cfg, trainer, _, _ = trained
    out = tmp_path / "neus.ply"
    summary = extract_run_mesh(MeshConfig(run=cfg.out, out=out, sdf_resolution=48, progress=False))
    mesh = trimesh.load(out, process=False)
    assert summary["faces"] == len(mesh.faces) > 100
    model = trainer.model
    with torch.no_grad():
        sdf = model.field.sdf(model.normalised(torch.from_numpy(np.asarray(mesh.vertices))).float())[0]
    cell = 2.0 / 48  # normalised units per marching-cubes cell
    assert float(sdf.abs().max()) < cell
    assert mesh.visual.vertex_colors.shape[0] == len(mesh.vertices)


def test_marching_cubes_on_a_sphere():
    """recon.geometry.mesh_extraction.zero_level_mesh on an exact sphere SDF: every vertex within a voxel of
    radius r (world units, a box that is not centred at the origin)."""
    from recon.geometry.mesh_extraction import zero_level_mesh

    centre, side, r, res = np.array([0.3, -0.2, 1.0]), 2.0, 0.6, 40

    class Sphere:
        def sdf_function(self):
            return (lambda v: ((v.double() - 0.5) * side).norm(dim=1) - r), tuple(centre), side

        def surface_colors(self, points):
            n = torch.nn.functional.normalize(points - torch.from_numpy(centre), dim=1)
            return (n + 1) / 2, n

    mesh = zero_level_mesh(Sphere(), res)
    radius = np.linalg.norm(mesh.vertices - centre, axis=1)
    assert len(mesh.faces) > 1000
    assert np.abs(radius - r).max() < side / res
    assert np.abs(radius - r).mean() < 0.1 * side / res
    assert mesh.colors.min() >= 0 and mesh.colors.max() <= 1


def test_config_errors():
    with pytest.raises(ConfigValueError, match="--method neus has no densification"):
        NeusModel.check_config(tiny("x", 1, strategy="adc"))
    NeusModel.check_config(tiny("x", 1, field=FieldConfig(encoding="dense")))  # a field choice (issue 54)


def test_method_picks_its_preset():
    from recon.cli import method_preset
    from recon.training.presets import PRESETS

    assert method_preset(["--method", "neus"]) == "neus"
    assert PRESETS["neus"][0].strategy == "occupancy"
    assert math.isfinite(PRESETS["neus"][0].neus.eikonal_weight)
