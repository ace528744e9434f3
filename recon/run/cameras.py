"""The training cameras of a run folder, or why they are not available (no config.yaml, the dataset is not
here or does not load, no training views). Export budgets rank splats with them, floater removal measures
what they see, and a run's view sidecars list them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rasterizer.camera import Camera
from recon.core.errors import SplatforgeError
from recon.outputs import files as rf

if TYPE_CHECKING:
    from recon.run.folder import Run


def run_cameras(run: "Run") -> tuple[list[Camera] | None, str]:
    """(training cameras of the run's dataset, "") or (None, a short reason naming what is missing)."""
    if not run.dataset_known:
        return None, f"run has no {rf.CONFIG_FILE}"
    try:
        cams = list(run.cameras)
    except FileNotFoundError:
        return None, f"dataset {run.config.data} not available"
    except (SplatforgeError, OSError) as exc:  # a dataset that fails to load: the caller says what it costs
        return None, f"could not load dataset {run.config.data} ({exc})"
    if not cams:
        return None, "dataset has no training views"
    return cams, ""
