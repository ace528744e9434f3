"""`splatforge train --method nerf` (issue 20) through the shared trainer, registry and run object: a few
steps on the procedural scene (32 x 32, a small hash grid) improve the test PSNR and prune the occupancy
grid; checkpoints resume bit for bit; eval reads the run's checkpoint; depth renders; the clear errors
(nerf checkpoint as Gaussians and the reverse, a splat file as a nerf, the wrong strategy); the preset."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from recon.outputs import files as rf
from recon.core.errors import ConfigValueError, UsageError
from recon.export import read_splats
from recon.models import GaussianModel, NerfModel, model_class
from recon.models.nerf import scene_space
from recon.nerf.config import NerfConfig
from recon.strategy.occupancy import OccupancyConfig
from recon.training.trainer import ConfigMismatchError, TrainConfig, Trainer
from tests.recon.tiny_runs import quiet, tiny_config, train_from_untrained

SMALL = NerfConfig(hash_levels=4, hash_log2_table=12, hash_base_res=4, hash_max_res=64, hidden=32, geo_dim=8,
                   occupancy_resolution=32, target_samples=8192, max_rays=1024, steps_per_diagonal=512,
                   eval_rays=4096, lr_warmup_steps=10)


def tiny(out, steps, **kw) -> TrainConfig:
    return tiny_config(out, steps, dict(method="nerf", strategy="occupancy", nerf=SMALL,
                                        occupancy=OccupancyConfig(update_every=8, warmup_steps=32)), **kw)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_from_untrained(tiny(tmp_path_factory.mktemp("runnerf"), 120, save_every=60))


def test_registered_trains_and_prunes(trained):
    cfg, trainer, before, metrics = trained
    assert model_class("nerf") is NerfModel and isinstance(trainer.model, NerfModel)
    assert metrics["test"]["psnr"] > before + 3.0, (before, metrics)
    assert metrics["steps"] == 120
    assert 0 < len(trainer.model) < 32**3  # empty space was found
    assert rf.read_config_dict(cfg.out / rf.CONFIG_FILE)["method"] == "nerf"
    assert (cfg.out / rf.RENDERS_DIR / "test_000_depth.png").is_file()
    baked = read_splats(cfg.out / rf.SPLATS_FILE)  # the baked approximation for viewers and exporters
    assert 0 < len(baked.means) <= len(trainer.model)


def test_eval_reads_the_checkpoint(trained):
    from recon.commands.evaluate import _evaluate
    from recon.run.folder import Run

    cfg, trainer, _, metrics = trained
    model = Run.open(cfg.out).load_model()
    assert isinstance(model, NerfModel)
    again = _evaluate(cfg.out, None, None, None, cfg.out / "eval_again", "cpu")
    assert again["psnr"] == pytest.approx(metrics["test"]["psnr"], abs=1e-6)


def test_resume_is_bit_exact(trained, tmp_path):
    """Interrupted at step 60 (checkpoint written), then resumed to 120: the same field and grid as the
    uninterrupted run (RNG states, occupancy grid, batch-size estimate and Adam state are checkpointed)."""
    cfg, trainer, _, _ = trained
    same = dataclasses.replace(cfg, out=tmp_path)
    first = Trainer(same, log=quiet)
    first.prepare_out()
    for step in range(60):
        first.advance(step)
    first.save()
    resumed = Trainer(same, log=quiet)
    resumed.run()
    assert resumed.step == 120
    for name, p in trainer.model.params.items():
        assert torch.equal(p.detach(), resumed.model.params[name].detach()), name
    assert torch.equal(trainer.model.grid.bits, resumed.model.grid.bits)


def test_wrong_method_errors(trained, tmp_path):
    cfg, trainer, _, _ = trained
    state = trainer.model.state_dict()
    with pytest.raises(ValueError, match="holds a 'nerf' model, not a '3dgs' one"):
        GaussianModel.from_state_dict(state)
    gaussians = GaussianModel.from_splat_data(read_splats(cfg.out / rf.SPLATS_FILE))
    with pytest.raises(ValueError, match="holds a '3dgs' model, not a 'nerf' one"):
        NerfModel.from_state_dict(gaussians.state_dict())
    with pytest.raises(UsageError, match="not a nerf model"):
        NerfModel.from_splat_data(read_splats(cfg.out / rf.SPLATS_FILE))
    with pytest.raises(ConfigMismatchError, match="--method 3dgs cannot resume it"):
        Trainer(TrainConfig(data="procedural", data_factor=4, steps=130, out=cfg.out, progress=False), log=quiet).run()


def test_strategy_errors():
    with pytest.raises(ConfigValueError, match="--strategy occupancy"):
        Trainer(TrainConfig(method="nerf", data="procedural", progress=False), log=quiet)
    with pytest.raises(ConfigValueError, match="not available with --method 3dgs"):
        Trainer(TrainConfig(strategy="occupancy", data="procedural", progress=False), log=quiet)
    with pytest.raises(ConfigValueError, match="--supersample 2: --method nerf"):
        Trainer(TrainConfig(method="nerf", strategy="occupancy", supersample=2, data="procedural", progress=False),
                log=quiet)
    with pytest.raises(ConfigValueError, match="--batch 2: --method nerf .*--nerf.target-samples"):
        Trainer(TrainConfig(method="nerf", strategy="occupancy", batch=2, data="procedural", progress=False),
                log=quiet)


def test_view_options_are_refused_for_every_ray_batch_method():
    """check_view_options reads the class's RAY_BATCHES, not the method name: a class with it set is refused
    --batch/--supersample other than 1; 3dgs and 2dgs (rendered views) are not."""
    from recon.training.trainer import check_view_options

    class RayMethod:
        RAY_BATCHES = True
        RAY_BATCH_SIZE_HINT = "size it with --rays.count"
        method = "rays"

    with pytest.raises(ConfigValueError, match="--supersample 3: --method rays trains on rays"):
        check_view_options(RayMethod, TrainConfig(supersample=3))
    with pytest.raises(ConfigValueError, match="--batch 4: --method rays .*--rays.count"):
        check_view_options(RayMethod, TrainConfig(batch=4))
    check_view_options(RayMethod, TrainConfig())
    for method in ("3dgs", "2dgs"):
        check_view_options(model_class(method), TrainConfig(method=method, batch=4, supersample=3))


def test_method_picks_its_preset():
    from recon.cli import with_default_preset
    from recon.training.presets import PRESETS

    assert with_default_preset(["train", "--method", "nerf", "--data", "x"])[:2] == ["train", "nerf"]
    assert with_default_preset(["train", "--method=nerf"])[:2] == ["train", "nerf"]
    assert with_default_preset(["train", "--method", "2dgs"])[:2] == ["train", "default"]
    assert PRESETS["nerf"][0].strategy == "occupancy"


def test_scene_space_says_what_it_assumes():
    lines = []
    blender = SimpleNamespace(source_format="blender", points=None)
    space = scene_space(NerfConfig(), blender, lines.append)
    assert not space.contracted and space.lo == (-1.5, -1.5, -1.5)
    assert "no bounds information" in lines[0] and "--nerf.box" in lines[0]
    boxed = scene_space(NerfConfig(box="1,0,0,2"), blender, quiet)
    assert boxed.lo == (-1.0, -2.0, -2.0) and boxed.size == (4.0, 4.0, 4.0)
    colmap = SimpleNamespace(source_format="colmap", points=None, nerfpp_norm=lambda: (torch.zeros(3).numpy(), 2.0))
    assert scene_space(NerfConfig(), colmap, quiet).contracted
    with pytest.raises(ConfigValueError, match="--nerf.box"):
        scene_space(NerfConfig(box="1,2"), blender, quiet)


def test_depth_for_mesh_extraction(trained):
    """The mesh command's seam: median and expected camera-z depth where the field is opaque, 0 elsewhere."""
    from recon.geometry.mesh_extraction import render_depth

    cfg, trainer, _, _ = trained
    cam = trainer.scene.frames_test[0].camera
    for kind in ("median", "expected"):
        rgb, depth, alpha = render_depth(trainer.model, [cam], kind, torch.ones(3))
        assert rgb.shape == (1, cam.height, cam.width, 3) and depth.shape == alpha.shape == (1, cam.height, cam.width, 1)
        seen = alpha >= 0.5
        assert bool(seen.any()) and bool((depth[seen] > 0).all()) and bool((depth[~seen] == 0).all())
