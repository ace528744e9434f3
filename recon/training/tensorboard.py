"""``--logger tensorboard``: a :class:`recon.training.trainer.TrainingHook` writing TensorBoard event files.

Writes to ``OUT/tensorboard/`` (view with ``tensorboard --logdir OUT/tensorboard``, or a parent folder to
see several runs) with :class:`torch.utils.tensorboard.SummaryWriter`:

- every ``every`` steps (and at the last step): ``train/loss`` and ``train/ms_per_step`` (means over the
  steps since the previous write, from ``trainer.history``), ``train/psnr`` (mean over those steps of
  each step's full-image PSNR, as ``eval`` measures it), ``train/masked_psnr`` (the same over the pixels a
  loss mask keeps; only when the views have loss masks), ``train/num_gaussians``, ``train/sh_degree``;
- at each evaluation on the test views (``eval_every`` and the final one): ``test/psnr``, ``test/ssim``,
  ``test/lpips`` (when its weights are present) and the first ``num_renders`` test views as images
  ``test_renders/XXX`` (ground truth | render | error, as ``OUT/renders/``).

A resumed run opens its writer with ``purge_step`` = the checkpoint's step + 1, so TensorBoard hides
what a crashed run had logged past its checkpoint (everything up to the checkpoint's step is logged before
that checkpoint is saved). Nothing here syncs the GPU except the test renders at evaluations.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from recon.core.errors import ConfigValueError
from recon.training.evaluation import side_by_side
from recon.data.frame_images import FrameImages
from recon.training.trainer import StepResult, Trainer, TrainingHook, background_color

NUM_RENDERS = 3  # test views written as images at each evaluation


class TensorBoardLogger(TrainingHook):
    """Training hook writing scalars every ``every`` steps and test metrics / renders at evaluations."""

    def __init__(self, log_dir: str | Path, every: int = 100, num_renders: int = NUM_RENDERS):
        if every < 1:
            raise ConfigValueError(f"--logger-every must be >= 1, got {every}")
        self.log_dir = Path(log_dir)
        self.every = int(every)
        self.num_renders = int(num_renders)
        self.writer = None  # torch.utils.tensorboard.SummaryWriter while training
        self.last_logged = 0  # step of the last scalar write
        self.last_evaluated = -1  # step of the last test write (the final evaluation may repeat the last one)

    # ------------------------------------------------------------------------------------ writer

    def open(self, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: only with --logger tensorboard

        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(self.log_dir), purge_step=purge_step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    # ------------------------------------------------------------------------------------ hook API

    def on_train_start(self, trainer: Trainer) -> None:
        self.open(purge_step=trainer.step + 1)
        self.last_logged = trainer.step

    def on_step(self, trainer: Trainer, result: StepResult) -> None:
        if trainer.step % self.every == 0:
            self.write_train_scalars(trainer)

    def on_evaluate(self, trainer: Trainer, test: dict) -> None:
        if trainer.step == self.last_evaluated:
            return
        self.last_evaluated = trainer.step
        reopened = self.writer is None  # the final evaluation comes after on_train_end
        if reopened:
            self.open()
        for key in ("psnr", "ssim", "lpips"):
            if test.get(key) is not None:
                self.writer.add_scalar(f"test/{key}", test[key], trainer.step)
        for i, image in enumerate(test_renders(trainer, self.num_renders)):
            self.writer.add_image(f"test_renders/{i:03d}", image, trainer.step, dataformats="HWC")
        self.writer.flush()
        if reopened:
            self.close()

    def on_train_end(self, trainer: Trainer) -> None:
        if self.writer is not None and trainer.step > self.last_logged:
            self.write_train_scalars(trainer)
        self.close()

    # ------------------------------------------------------------------------------------ scalars

    def write_train_scalars(self, trainer: Trainer) -> None:
        """Means over the steps since the last write (from ``trainer.history``), at ``trainer.step``."""
        history, step = trainer.history, trainer.step
        start = min(self.last_logged, step - 1)
        losses = history.loss[start:step]
        seconds = [x for x in history.step_seconds[start:step] if x is not None]
        w = self.writer
        w.add_scalar("train/loss", float(np.mean(losses)), step)
        if seconds:
            w.add_scalar("train/ms_per_step", 1000.0 * float(np.mean(seconds)), step)
        for key in ("psnr", "masked_psnr"):
            values = [x for x in getattr(history, key)[start:step] if x is not None]
            if values:
                w.add_scalar(f"train/{key}", float(np.mean(values)), step)
        w.add_scalar("train/num_gaussians", len(trainer.model), step)
        w.add_scalar("train/sh_degree", trainer.active_sh_degree(max(step - 1, 0)), step)
        self.last_logged = step


@torch.no_grad()
def test_renders(trainer: Trainer, count: int) -> list[np.ndarray]:
    """uint8 [H, 3W, 3] ground truth | render | error of the first ``count`` test views (the run's background)."""
    frames = trainer.scene.frames_test[:count]
    if not frames:
        return []
    bg = background_color(trainer.cfg, trainer.scene).to(trainer.device)
    images = FrameImages(frames, trainer.device)
    out = []
    for i, frame in enumerate(frames):
        render, _, _ = trainer.model.render([frame.camera], trainer.cfg.sh_degree, bg)
        out.append(side_by_side(images.rgb(i, bg), render[0].clamp(0, 1)))
    return out
