"""The object preset of mesh2splat: the command's flags default to :class:`ObjectPreset` and reach it, and an
object trains with the means learning rate of its method (or the preset's own), as the trainer's optimizer sees
it. Toy sizes (16 px, 3 steps)."""

import dataclasses

import pytest

pytest.importorskip("trimesh")
pytest.importorskip("open3d")

from recon.commands.mesh2splat import Mesh2SplatConfig, batch_config  # noqa: E402
from recon.data.procedural_meshes import make_mesh  # noqa: E402
from recon.mesh2splat.convert import convert_object  # noqa: E402
from recon.mesh2splat.preset import MEANS_LR, ObjectPreset  # noqa: E402

TINY = ObjectPreset(views=2, test_views=1, size=16, samples=1, steps=3, init_points=64, max_gaussians=64)
FLAGS = ("views", "test_views", "size", "steps", "sh_degree", "init_points", "max_gaussians", "means_lr", "seed")


def test_command_flags_default_to_the_preset_and_reach_it(tmp_path):
    cfg = Mesh2SplatConfig(mesh_dir=tmp_path, out=tmp_path / "out")
    assert {f: getattr(cfg, f) for f in FLAGS} == {f: getattr(ObjectPreset(), f) for f in FLAGS}
    changed = {"views": 5, "test_views": 3, "size": 40, "steps": 7, "sh_degree": 1, "init_points": 99,
               "max_gaussians": 123, "means_lr": 2.5e-5, "seed": 4}
    preset = batch_config(dataclasses.replace(cfg, **changed)).preset
    assert {f: getattr(preset, f) for f in FLAGS} == changed


class MeansLr:
    """Training hook: the means learning rate of the optimizer at the first step, over the scene extent."""

    def on_train_start(self, trainer) -> None:
        model = trainer.model
        group = next(g for g in model.optimizer.param_groups if g["name"] == "means")
        self.rate = group["lr"] / model.extent

    def on_step(self, trainer, result) -> None:
        pass

    def on_train_end(self, trainer) -> None:
        pass


@pytest.mark.parametrize("method,means_lr,expected", [("3dgs", None, MEANS_LR["3dgs"]),
                                                      ("2dgs", None, MEANS_LR["2dgs"]),
                                                      ("2dgs", 3e-5, 3e-5)])
def test_an_object_trains_with_its_methods_means_learning_rate(tmp_path, method, means_lr, expected):
    meshes = tmp_path / "meshes"
    meshes.mkdir()
    make_mesh("box", 0, coloured=True).export(meshes / "a.ply")
    hook = MeansLr()
    row = convert_object(meshes, tmp_path / "out", "a.ply", dataclasses.replace(TINY, means_lr=means_lr), method,
                         "cpu", hooks=[hook])
    assert row["status"] == "done", row["reason"]
    assert hook.rate == pytest.approx(expected, rel=1e-6)
    assert row["cpu_seconds"] > 0


class GaussianCount:
    """Training hook: the Gaussian count when training starts."""

    def on_train_start(self, trainer) -> None:
        self.start = len(trainer.model)

    def on_step(self, trainer, result) -> None:
        pass

    def on_train_end(self, trainer) -> None:
        pass


def test_the_3dgs_preset_trains_a_fixed_count_from_its_surface_samples(tmp_path):
    """An object starts from ``init_points`` surface samples and ends within ``max_gaussians``; the default
    preset holds the count fixed (init = cap: the time per object is predictable, docs/mesh2splat.md)."""
    default = ObjectPreset()
    assert default.init_points == default.max_gaussians
    meshes = tmp_path / "meshes"
    meshes.mkdir()
    make_mesh("torus", 0, coloured=True).export(meshes / "a.ply")
    hook = GaussianCount()
    preset = dataclasses.replace(TINY, init_points=48, max_gaussians=64, steps=5)
    row = convert_object(meshes, tmp_path / "out", "a.ply", preset, "3dgs", "cpu", hooks=[hook])
    assert row["status"] == "done", row["reason"]
    assert hook.start == 48
    assert 48 <= row["gaussians"] <= 64
