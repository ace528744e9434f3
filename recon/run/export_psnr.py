"""The report of a run's export: test PSNR of the run's model before and after the export.

Lives beside :mod:`recon.run.folder` (it evaluates through the run's scene and method); :mod:`recon.export`
stays a file-format layer that never imports the trainer, evaluation or run code.
"""

from __future__ import annotations

import math

from recon.run.folder import Run


def export_psnr(run: Run, exported, original=None, device: str = "cpu") -> tuple[tuple[float, float] | None, str]:
    """((test PSNR of ``original``, test PSNR of ``exported``), "") on the run's test views, with the run's
    background and method; ``original`` defaults to the run's splats.ply. (None, a note saying why) when
    the run's splat file is one time's slice of a 4D model (``SPLAT_FILE_IS_SLICE``), the run names no dataset, its dataset is not here, it has no test views, or a PSNR is not finite."""
    from recon.training.evaluation import evaluate_on_scene

    if getattr(run.model_class, "SPLAT_FILE_IS_SLICE", False):
        return None, (f"test PSNR not evaluated (a {run.config.method} run's splat file is its 3D slice at one "
                      f"time, and its test views are at many)")
    if getattr(run.model_class, "MODEL_IN_CHECKPOINTS", False):
        return None, (f"test PSNR not evaluated (a {run.config.method} run's splat file is a baked Gaussian "
                      f"approximation of its field, not the field)")
    try:
        scene = run.scene
        background = run.background().tolist()
        if original is None:
            original = run.read_splats()
    except (FileNotFoundError, OSError, ValueError) as err:
        return None, f"test PSNR not evaluated ({err})"
    if not scene.frames_test:
        return None, "test PSNR not evaluated (the dataset has no test views)"
    values = []
    for data in (original, exported):
        model = run.model_of(data, device, extent=scene.extent)
        values.append(evaluate_on_scene(model, scene, background=background,
                                        supersample=run.config.supersample)["psnr"])
    if not all(v is not None and math.isfinite(v) for v in values):
        return None, "test PSNR not evaluated (not finite)"
    return (values[0], values[1]), ""
