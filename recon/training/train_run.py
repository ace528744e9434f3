"""``train_model``: one run of ``splatforge train`` from its config: the trainer, or for a method that trains
dynamic data frame by frame (neus) on a dataset with several times, the frame sequence.

It sits above :mod:`recon.training.trainer` and :mod:`recon.training.frame_sequence`, which uses the trainer, so
neither imports the other upwards.
"""

from __future__ import annotations

from recon.models.base import model_class
from recon.training.frame_sequence import FrameSequence, trains_frame_by_frame
from recon.training.trainer import TrainConfig, Trainer, check_train_config, load_training_scene


def train_model(cfg: TrainConfig, log=print, hooks=()) -> dict:
    """Train (or resume) the run described by ``cfg``; returns the metrics written to metrics.json.
    ``hooks``: :class:`recon.training.trainer.TrainingHook` objects (``cfg.viewer`` is acted on by ``splatforge
    train``, which passes the viewer hook here). A method that trains dynamic data frame by frame (neus) on a
    dataset with several times trains each time step in turn (:mod:`recon.training.frame_sequence`)."""
    if not getattr(model_class(cfg.method), "FRAME_BY_FRAME", False):
        return Trainer(cfg, log, list(hooks)).run()
    check_train_config(cfg)
    scene = load_training_scene(cfg)
    for note in scene.notes:
        log(note)
    if trains_frame_by_frame(cfg.method, scene):
        return FrameSequence(cfg, scene, log, hooks).run()
    return Trainer(cfg, log, list(hooks), scene=scene).run()
