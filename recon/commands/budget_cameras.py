"""The cameras that rank splats for an export budget (``--max-splats`` / ``--target``): a run's training
views (:func:`recon.run.cameras.run_cameras`), or why not (then splats are ranked by opacity x volume). Used
by ``export`` and by 4D sequence exports (:mod:`recon.commands.export4d`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rasterizer.camera import Camera
from recon.run.cameras import run_cameras as training_cameras

if TYPE_CHECKING:
    from recon.run.folder import Run


def run_cameras(run: "Run") -> tuple[list[Camera] | None, str]:
    """(training cameras of the run's dataset or None, a note on why not and what the budget falls back to)."""
    cams, why = training_cameras(run)
    return (cams, "") if cams is not None else (None, f"{why}: importance by opacity x volume")
