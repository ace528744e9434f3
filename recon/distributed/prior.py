"""A coarse global model before the blocks (CityGaussian): ``--prior-steps N``.

Independent blocks spend their steps on views that mostly show other blocks (a street view looks down the
street): on the 402-image city, four blocks of 500 steps ended 3.6 dB below one process trained 2,000 steps.
With a prior, worker 0 first trains the whole scene ``N`` steps (``RUN/prior``, a normal run folder: it resumes
and is skipped once finished; the other workers wait, watching its step count so that a stalled worker 0 is
an error after ``--timeout-seconds``). Each block then starts from the prior's Gaussians whose centres lie in
its expanded box and refines them for ``--steps`` steps without densification (refine_config). With
``--prior-context frozen`` (the default) the block also holds the prior's other Gaussians, unchanged (their
gradients are zeroed), so every pixel of its views is explained and no step goes into covering other blocks'
content. The merge keeps each block's core Gaussians as before. The job's total is ``N + blocks x --steps`` steps.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from recon.distributed.merge import run_finished, without_densification
from recon.distributed.partition import Block, Partition, in_box
from recon.core.errors import RunFolderError
from recon.core.splat_data import FIELDS, SplatData
from recon.training.trainer import TrainConfig, TrainingHook

PRIOR_DIR = "prior"
PRIOR_KEY, PRIOR_STEP_KEY = "prior", "prior_step"  # the store's keys: worker 0's outcome, its last step


def prior_dir(out: Path) -> Path:
    """The prior's run folder in job folder ``out`` (its splats.ply, metrics.json, momentum mode's
    appearance.pt)."""
    return Path(out) / PRIOR_DIR


def prior_config(cfg: TrainConfig, out: Path, steps: int) -> TrainConfig:
    """The prior's training config: the job's flags, ``steps`` steps in ``out/prior``, no progress bar."""
    return dataclasses.replace(cfg, out=prior_dir(out), steps=steps, progress=False, viewer=False,
                               overwrite=False)


def prior_finished(out: Path, steps: int) -> bool:
    """Whether ``out/prior`` finished training ``steps`` steps."""
    return run_finished(prior_dir(out), steps)


def refine_config(cfg: TrainConfig) -> TrainConfig:
    """A block's config when it starts from the prior: merge.without_densification, the learning rates' own
    schedule over the block's steps. (Starting the means learning rate where a schedule ends, as the merged
    fine-tune does, measured 0.17 dB lower: 24.32 vs 24.49 dB, prior 1,000 + 4 x 250 steps.)"""
    return without_densification(cfg)


class PriorProgress(TrainingHook):
    """Worker 0, training the prior: its step count on the store (the waiting workers' sign of life)."""

    def __init__(self, store):
        self.store = store

    def on_step(self, trainer, result) -> None:
        self.store.set(PRIOR_STEP_KEY, str(trainer.step))


def wait_for_prior(store, timeout_seconds: float, poll_seconds: float, log=print, stopped=lambda: False) -> None:
    """Workers other than 0: return when worker 0 reports the prior done; RunFolderError when it reports a
    failure, or when its step count has not moved for ``timeout_seconds``; KeyboardInterrupt once ``stopped()``
    (SIGTERM)."""
    last, since = None, time.monotonic()
    while not store.check([PRIOR_KEY]):
        if stopped():
            raise KeyboardInterrupt
        step = store.get(PRIOR_STEP_KEY).decode() if store.check([PRIOR_STEP_KEY]) else None
        if step != last:
            last, since = step, time.monotonic()
        elif time.monotonic() - since > timeout_seconds:
            raise RunFolderError(f"worker 0 made no progress on the prior for {timeout_seconds:.0f} s (last step "
                                 f"{last or 'none'}); see its log")
        time.sleep(poll_seconds)
    status = store.get(PRIOR_KEY).decode()
    if status != "ok":
        err = json.loads(status)
        raise RunFolderError(f"worker 0 could not train the prior ({err['type']}: {err['message']})")
    log("the prior is ready")


def block_start(prior: SplatData, part: Partition, block: Block, context: str) -> tuple[SplatData, np.ndarray | None]:
    """(the block's initial Gaussians, the mask [M] of those it trains or None: all): the prior's Gaussians in
    the block's expanded box, and with ``context == "frozen"`` all the others too (masked out)."""
    inside = in_box(part.ground(prior.means), block.expanded)
    if context == "frozen":
        return prior, inside
    return SplatData(*(getattr(prior, f)[inside] for f in FIELDS), antialiased=prior.antialiased), None


class FrozenContext(TrainingHook):
    """Zeroes the gradients of the Gaussians outside ``trained`` [M] (the prior's context) on every parameter,
    from the start of training (after a resume too); Adam then never moves them. Refinement without
    densification keeps the Gaussians' order, so the mask stays valid."""

    def __init__(self, trained: np.ndarray):
        self.trained = torch.from_numpy(np.asarray(trained, bool))

    def on_train_start(self, trainer) -> None:
        mask = self.trained.to(next(iter(trainer.model.params.values())).device)
        for param in trainer.model.params.values():
            if param.shape[0] != mask.shape[0]:
                raise RuntimeError(f"the block model has {param.shape[0]} Gaussians, its prior mask {mask.shape[0]}")
            shape = (-1,) + (1,) * (param.dim() - 1)
            param.register_hook(lambda g, m=mask.to(param.dtype).view(shape): g * m)
