"""`splatforge train`: fit 3D Gaussians to a dataset (resumes an interrupted run in the same --out)."""

from __future__ import annotations

import sys
from typing import Annotated

import tyro

from recon.trainer import TrainConfig, train_model

# errors that mean "bad input" (named file / field in the message), reported without a traceback
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError)


def fail(command: str, err: BaseException) -> None:
    """Print ``splatforge <command>: error: <message>`` to stderr and exit with status 2."""
    print(f"splatforge {command}: error: {err}", file=sys.stderr)
    raise SystemExit(2)


def train(cfg: Annotated[TrainConfig, tyro.conf.OmitArgPrefixes]) -> None:
    """Train 3D Gaussian splatting on a dataset folder (COLMAP, nerfstudio, Blender) or "procedural".

    Writes OUT/config.yaml, OUT/checkpoints/, OUT/splats.ply, OUT/metrics.json, OUT/loss.png and
    OUT/renders/. Running the same command again resumes from the newest checkpoint.
    """
    try:
        metrics = train_model(cfg)
    except USER_ERRORS as err:
        fail("train", err)
    test = metrics["test"]
    psnr = "n/a" if test["psnr"] is None else f"{test['psnr']:.2f} dB"
    print(f"done: {metrics['steps']} steps, {metrics['num_gaussians']:,} Gaussians, test PSNR {psnr} "
          f"over {test['num_views']} views; outputs in {cfg.out}")
