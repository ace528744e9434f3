"""``splatforge train --remove-floaters [--floater-threshold W]``: after training, clean the run's splats.ply.

Runs once :func:`recon.training.train_run.train_model` has returned (the final checkpoint, splats.ply, the
evaluation and metrics.json are written), holding the run folder's lock again: the Gaussians of splats.ply
whose blending weight stays below the threshold in every training view go (:mod:`recon.run.floaters`, the
same call as ``export --remove-floaters``), the rest replace splats.ply atomically, and metrics.json gains a
``floaters`` entry (removed, kept, threshold, test PSNR before / after, the checkpoint holding the model as
trained). The trainer (layer 6) never imports :mod:`recon.run` (layer 7); this command module (layer 10) does.
Rerunning the same command resumes from that checkpoint and cleans the trained model again, so nothing is lost.
"""

from __future__ import annotations

from recon.core.errors import UsageError
from recon.core.splat_data import SplatData
from recon.training.trainer import TrainConfig


def check_floater_method(cfg: TrainConfig) -> None:
    """UsageError (before training) when ``--remove-floaters`` is given for a method whose splats.ply is not
    the model itself (a 4D run's time slice, a NeRF's baked Gaussians)."""
    if not cfg.remove_floaters:
        return
    from recon.models.base import model_class

    cls = model_class(cfg.method)
    if getattr(cls, "SPLAT_FILE_IS_SLICE", False) or getattr(cls, "MODEL_IN_CHECKPOINTS", False):
        raise UsageError(f"--remove-floaters: --method {cfg.method} runs' splats.ply is not the model itself "
                         f"(a time slice or baked Gaussians); it applies to 3dgs and 2dgs runs")


def floater_summary(result, psnr: tuple[float, float] | None, why: str, checkpoint: str | None) -> dict:
    """The ``floaters`` entry of metrics.json from a :class:`recon.run.floaters.FloaterResult` and the test
    PSNR (before, after) or None (then ``note`` says why)."""
    summary = {"removed": result.removed, "kept": len(result.kept), "threshold": result.threshold,
               "psnr_before": None if psnr is None else round(psnr[0], 4),
               "psnr_after": None if psnr is None else round(psnr[1], 4),
               "uncleaned_checkpoint": checkpoint}
    if psnr is None:
        summary["note"] = why
    return summary


def psnr_line(psnr: tuple[float, float] | None, why: str) -> str:
    """One log line on the test PSNR before and after floater removal."""
    if psnr is None:
        return f"floaters: {why}"
    return (f"floaters: test PSNR {psnr[0]:.2f} dB before, {psnr[1]:.2f} dB after "
            f"({psnr[1] - psnr[0]:+.3f} dB)")


def clean_run(cfg: TrainConfig, metrics: dict, log=print) -> tuple[dict, SplatData]:
    """Clean the finished run ``cfg.out`` (module docstring); returns ``metrics`` with ``floaters`` added (also
    written to metrics.json) and the cleaned model (what splats.ply now holds). UsageError when the run's
    training cameras are not available."""
    from recon.core.devices import resolve_device
    from recon.export import write_splats
    from recon.outputs import files as rf
    from recon.run.export_psnr import export_psnr
    from recon.run.floaters import remove_run_floaters
    from recon.run.folder import Run

    run = Run.open(cfg.out)
    lock = rf.RunLock(run.dir).acquire()
    try:
        data, _ = run.read_splats().drop_nonfinite()
        device = resolve_device(cfg.device)
        result = remove_run_floaters(run, data, cfg.floater_threshold, device=device)
        log(result.note())
        psnr, why = export_psnr(run, result.kept, original=data, device=device)
        write_splats(run.splats_path, result.kept, force=True)  # atomic
        found = rf.list_checkpoints(run.dir)
        checkpoint = found[-1][1].relative_to(run.dir).as_posix() if found else None
        log(psnr_line(psnr, why) + (f"; the model as trained stays in {checkpoint}" if checkpoint else ""))
        metrics = {**metrics, "floaters": floater_summary(result, psnr, why, checkpoint)}
        rf.write_json(run.metrics_path, metrics)
    finally:
        lock.release()
    return metrics, result.kept
