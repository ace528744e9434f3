"""The cameras that rank splats for an export budget (``--max-splats`` / ``--target``): a run's training
views, or why not (then splats are ranked by opacity x volume). Used by ``export`` and by 4D sequence
exports (:mod:`recon.commands.export4d`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rasterizer.camera import Camera
from recon.outputs import files as rf
from recon.core.errors import SplatforgeError

if TYPE_CHECKING:
    from recon.run.folder import Run


def run_cameras(run: "Run") -> tuple[list[Camera] | None, str]:
    """(training cameras of the run's dataset or None, a note on why not)."""
    if not run.dataset_known:
        return None, f"run has no {rf.CONFIG_FILE}: importance by opacity x volume"
    try:
        cams = list(run.cameras)
    except FileNotFoundError:
        return None, f"dataset {run.config.data} not available: importance by opacity x volume"
    except (SplatforgeError, OSError) as exc:  # a dataset that fails to load only costs the footprint ranking
        return None, f"could not load dataset {run.config.data} ({exc}): importance by opacity x volume"
    if not cams:
        return None, "dataset has no training views: importance by opacity x volume"
    return cams, ""
