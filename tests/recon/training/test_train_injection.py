"""The trainer can be handed its scene, model, device and output folder, and told not to write outputs
(issue 15, item 2: what block training needs)."""

from __future__ import annotations

import torch

from recon.outputs import files as rf
from recon.data.procedural_scene import procedural_scene
from recon.training.trainer import TrainConfig, Trainer, build_model


def small_scene():
    return procedural_scene(data_factor=8, n_train=4, n_test=2)


def test_handed_scene_model_device_and_out(tmp_path, monkeypatch):
    monkeypatch.setattr("recon.training.trainer.load_training_scene", lambda cfg: (_ for _ in ()).throw(
        AssertionError("the trainer loaded a scene although it was handed one")))
    scene = small_scene()
    cfg = TrainConfig(data="procedural", out=tmp_path / "not-this", steps=3, init_num_random=100, progress=False)
    model = build_model(cfg, scene, torch.Generator().manual_seed(5), lambda _: None)
    n = len(model)
    trainer = Trainer(cfg, lambda _: None, scene=scene, model=model, device="cpu", out=tmp_path / "block")
    assert trainer.scene is scene and trainer.model is model and trainer.device == torch.device("cpu")
    assert trainer.out == tmp_path / "block" and trainer.cfg.out == tmp_path / "block"
    metrics = trainer.run()
    assert metrics["steps"] == 3 and len(trainer.model) == n
    assert (tmp_path / "block" / rf.SPLATS_FILE).is_file() and not (tmp_path / "not-this").exists()
    assert rf.read_config_dict(tmp_path / "block" / rf.CONFIG_FILE)["out"] == str((tmp_path / "block").resolve())


def test_a_worker_that_does_not_write(tmp_path):
    out = tmp_path / "shared"
    cfg = TrainConfig(data="procedural", out=out, steps=4, save_every=2, init_num_random=100, progress=False)
    trainer = Trainer(cfg, lambda _: None, scene=small_scene(), writes_outputs=False)
    metrics = trainer.run()
    assert metrics["steps"] == 4 and metrics["test"]["psnr"] is not None and len(trainer.history.loss) == 4
    assert not out.exists()  # no lock, config, checkpoints, splats, renders, history or metrics
    assert trainer.save() is None


def test_default_still_builds_everything_from_the_config(tmp_path):
    cfg = TrainConfig(data="procedural", data_factor=8, out=tmp_path / "run", steps=1, init_num_random=50,
                      progress=False, device="cpu")
    trainer = Trainer(cfg, lambda _: None)
    assert len(trainer.scene.frames_train) > 0 and len(trainer.model) == len(trainer.scene.points) and trainer.out == tmp_path / "run"
