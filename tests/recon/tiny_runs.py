"""A tiny run folder for command tests: config.yaml for the procedural scene and 400 random coloured splats
near the origin (no training)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from recon.outputs import files as rf
from recon.export import SplatData, write_splats
from recon.training.trainer import TrainConfig


def tiny_run(tmp_path: Path) -> Path:
    """``tmp_path``/run: config.yaml (procedural scene, data factor 4) and splats.ply (400 random splats)."""
    run = tmp_path / "run"
    run.mkdir()
    rf.write_config(run, TrainConfig(out=run, data_factor=4, progress=False))
    rng = np.random.default_rng(0)
    n = 400
    data = SplatData(rng.uniform(-0.8, 0.8, (n, 3)).astype(np.float32), rng.normal(size=(n, 4)).astype(np.float32),
                     np.log(rng.uniform(0.05, 0.15, (n, 3))).astype(np.float32), np.full(n, 2.0, np.float32),
                     rng.uniform(-1.5, 1.5, (n, 1, 3)).astype(np.float32))
    write_splats(run / "splats.ply", data, force=True)
    return run


def quiet(*_) -> None:
    """A trainer log that prints nothing."""


def tiny_config(out, steps: int, defaults: dict, **kw) -> TrainConfig:
    """A procedural-scene TrainConfig at data factor 4, no progress bar, no periodic saves, from a test module's
    ``defaults`` (method, strategy, sizes...) overridden by ``kw``."""
    base = dict(data="procedural", data_factor=4, steps=steps, save_every=0, progress=False, out=out)
    base.update(defaults)
    base.update(kw)
    return TrainConfig(**base)


def train_from_untrained(cfg: TrainConfig):
    """Train ``cfg`` quietly; returns (cfg, trainer, the untrained model's test PSNR, the run's metrics)."""
    from recon.data.frame_images import FrameImages
    from recon.training.evaluation import evaluate_model
    from recon.training.trainer import Trainer, background_color

    trainer = Trainer(cfg, log=quiet)
    scene = trainer.scene
    before = evaluate_model(trainer.model, scene.frames_test, FrameImages(scene.frames_test),
                            background_color(cfg, scene))["psnr"]
    return cfg, trainer, before, trainer.run()
