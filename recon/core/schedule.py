"""Run-length scaling of iteration schedules, shared by the trainer and the models' own losses.

The 3DGS recipe counts its schedule (densification, SH interval, the 2DGS losses' start steps) for a
30k-step run; a shorter or longer run multiplies those counts by :func:`schedule_scaler`.
"""

from __future__ import annotations

REFERENCE_STEPS = 30_000  # the schedules are the 3DGS recipe for this many steps


def schedule_scaler(cfg) -> float:
    """``cfg.steps_scaler`` or ``cfg.steps / 30000`` (``cfg``: a training config, e.g.
    :class:`recon.training.trainer.TrainConfig`)."""
    return cfg.steps_scaler if cfg.steps_scaler is not None else cfg.steps / REFERENCE_STEPS
