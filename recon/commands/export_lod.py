"""``splatforge export (RUN_DIR | FILE) --format lod --out DIR [--target quest3|phone|...] [--max-splats B]
[--sh-degree D] [--lod-opacity mass|coverage] [--lod-finetune-steps N] [--lod-distill-steps N]
[--lod-web none|streamed-sog] [--force]``: the model's LOD hierarchy (:mod:`recon.lod.hierarchy`) written as SPZ
chunks by octree cell and level plus ``DIR/manifest.json`` (:mod:`recon.lod.export_lod`, layout in docs/lod.md).

Here ``--max-splats`` (or the target's preset) is the view budget recorded in the manifest: how many Gaussians
a viewer draws at once; ``--sh-degree`` (or the preset's) truncates the SH of every chunk. Every level is
written; nothing is dropped. ``--lod-finetune-steps N`` (a run folder only: its training cameras) fine-tunes
the merged levels first (:mod:`recon.lod.finetune`); the report gives each level's PSNR change.
``--lod-distill-steps N`` (480 by default; a run folder: its training cameras; a model file skips it) then tunes
the merged nodes of the budgeted cuts (:func:`distill_budget`) against the full model's renders
(:mod:`recon.lod.distill`); the report gives the cuts' PSNR before and after.
``--lod-web streamed-sog`` also writes ``DIR/streamed-sog/`` (PlayCanvas' Streamed SOG, :mod:`recon.lod.streamed_sog`).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from recon.core.errors import SplatforgeError, UsageError
from recon.export import SplatFileError
from recon.export.budget import DEVICE_BUDGETS, resolve_budget
from recon.export.glb import read_any
from recon.export.report import ExportReport
from recon.lod.export_lod import write_lod
from recon.lod.hierarchy import build_hierarchy
from recon.lod.streamed_sog import INSTALL, describe, find_splat_transform, write_streamed_sog

DEFAULT_VIEW_BUDGET = DEVICE_BUDGETS["web"].max_splats  # without a target or --max-splats


def check_lod_flags(config) -> None:
    """UsageError for flags that do not apply to an LOD export."""
    if config.time is not None or config.times is not None:
        raise UsageError("--format lod: --time / --times apply to 4D models; an LOD export takes a 3D model")
    if config.remove_floaters:
        raise UsageError("--format lod: --remove-floaters is not supported yet; export the cleaned model to a "
                         ".ply first (splatforge export RUN --out clean.ply --remove-floaters), then that file")
    if config.lod_web != "none" and find_splat_transform() is None:  # before the slow work
        raise UsageError(f"--lod-web {config.lod_web}: needs PlayCanvas' splat-transform and node, not found; "
                         f"{INSTALL}")
    if config.lod_finetune_steps < 0:
        raise UsageError(f"--lod-finetune-steps {config.lod_finetune_steps}: give 0 (off) or a number of steps")
    if config.lod_finetune_steps and not Path(config.input).is_dir():
        raise UsageError(f"--lod-finetune-steps: {config.input} is a file; fine-tuning renders from a run's "
                         f"training cameras, so give the run folder")
    if config.lod_distill_steps < 0:
        raise UsageError(f"--lod-distill-steps {config.lod_distill_steps}: give 0 (off) or a number of steps")
    if Path(config.out).suffix.lower() in (".ply", ".splat", ".spz", ".glb"):
        raise UsageError(f"--format lod writes a folder; --out {config.out} looks like a file name")


def finetune(h, run, config) -> list:
    """Fine-tune ``h``'s merged levels (recon/lod/finetune.py) from the run's training cameras, with a progress
    bar unless quiet; the per-level results."""
    from rich.progress import Progress

    from recon.lod.finetune import FinetuneConfig, finetune_levels

    cams = [f.camera for f in run.scene.frames_train] or [f.camera for f in run.scene.frames_test]
    cfg = FinetuneConfig(steps=config.lod_finetune_steps, background=tuple(run.background().float().tolist()))
    if config.quiet:
        return finetune_levels(h, cams, cfg)
    with Progress(transient=True) as bar:
        task = bar.add_task("fine-tuning the levels", total=None)
        return finetune_levels(h, cams, cfg, progress=lambda i, n: bar.update(task, completed=i, total=n))


DISTILL_FRACTION = 0.1  # the distillation's cuts hold at most this fraction of the Gaussians (docs/lod.md)


def distill_budget(num_gaussians: int, view_budget: int) -> int:
    """Gaussians in each cut the export's distillation tunes: min(view budget, DISTILL_FRACTION x the model)."""
    return max(1, min(int(view_budget), int(round(DISTILL_FRACTION * num_gaussians))))


def distill(h, run, config, budget: int):
    """Tune ``h``'s merged nodes of the cuts at ``budget`` from the run's training cameras (recon/lod/distill.py),
    with a progress bar unless quiet; the :class:`recon.lod.distill.DistillResult`."""
    from rich.progress import Progress

    from recon.lod.distill import DistillConfig, distill_cuts

    cams = [f.camera for f in run.scene.frames_train] or [f.camera for f in run.scene.frames_test]
    cfg = DistillConfig(steps=config.lod_distill_steps, background=tuple(run.background().float().tolist()))
    if config.quiet:
        return distill_cuts(h, cams, budget, cfg)
    with Progress(transient=True) as bar:
        task = bar.add_task("distilling the budgeted cuts", total=config.lod_distill_steps)
        return distill_cuts(h, cams, budget, cfg, progress=lambda i, n: bar.update(task, completed=i))


def run_lod_export(config) -> ExportReport:
    """Do the LOD export of ``config`` (an :class:`recon.commands.export.ExportConfig`); the report."""
    from recon.commands.export4d import open_source

    check_lod_flags(config)
    view_budget, sh_degree = resolve_budget(config.target, config.max_splats, config.sh_degree)
    if Path(config.out).exists() and not config.force:
        raise FileExistsError(f"{config.out} already exists; pass --force to overwrite it")
    run, model_path, is_4d = open_source(Path(config.input))
    if is_4d:
        raise UsageError(f"{config.input}: holds a 4D model; --format lod takes 3D models (export a slice with "
                         f"--time T to a .ply first)")
    data = read_any(model_path)
    clean, dropped = data.drop_nonfinite()
    if len(clean) == 0:
        raise SplatFileError(model_path, f"all {dropped} splats hold NaN/Inf values")
    start = time.perf_counter()
    if not 0.0 < config.lod_spread <= 1.0:  # (NaN fails too)
        raise UsageError(f"--lod-spread {config.lod_spread}: the merge spread t must lie in (0, 1] (1: the moments "
                         f"matched, docs/lod.md)")
    h = build_hierarchy(clean, opacity_rule=config.lod_opacity, spread=config.lod_spread)
    tuned = finetune(h, run, config) if config.lod_finetune_steps else []
    view_budget = view_budget or DEFAULT_VIEW_BUDGET
    distilled, why_not = None, None
    if config.lod_distill_steps and h.num_nodes > h.num_leaves:
        why_not = "a model file has no training cameras (export the run folder to distill)"
        if run is not None:
            try:
                run.scene  # the training cameras: the run's dataset must be here
                why_not = None
            except (FileNotFoundError, SplatforgeError) as e:  # gone or damaged: the levels are written as built
                why_not = str(e)
        if why_not is None:
            distilled = distill(h, run, config, distill_budget(len(clean), view_budget))
    manifest = write_lod(h, Path(config.out), sh_degree=sh_degree, view_budget=view_budget, target=config.target,
                         force=config.force, progress=not config.quiet)
    seconds = time.perf_counter() - start
    total = sum(c.count for c in manifest.chunks)
    size = sum(c.bytes for c in manifest.chunks) + os.path.getsize(Path(config.out) / "manifest.json")
    levels = ", ".join(f"L{lv.level} {lv.count:,}" for lv in manifest.levels)
    notes = [f"{len(manifest.levels)} levels ({levels}), {len(manifest.chunks)} chunks, view budget "
             f"{manifest.view_budget:,} Gaussians, {seconds:.1f} s", "test PSNR of the levels: scripts/bench_lod.py"]
    if config.lod_web == "streamed-sog":
        meta = write_streamed_sog(Path(config.out), Path(config.out) / "streamed-sog", force=True)
        notes.append(describe(meta) + f" in {Path(config.out) / 'streamed-sog'}")
    if tuned:
        notes.append("fine-tuned levels (depth: PSNR vs the full model, before -> after; levels that did not improve "
                     "keep their merges): " + ", ".join(
                         f"d{t.depth} {t.psnr_before:.2f} -> {t.psnr_after:.2f} dB{'' if t.kept else ' (not kept)'}"
                         for t in tuned))
    if distilled is not None:
        notes.append(f"distilled the cuts of {distilled.budget:,} Gaussians from {distilled.cameras} training cameras "
                     f"({config.lod_distill_steps} steps, {distilled.tuned:,} merged Gaussians): PSNR vs the full "
                     f"model {distilled.psnr_before:.2f} -> {distilled.psnr_after:.2f} dB"
                     + ("" if distilled.kept else " (not better: the merges as built are kept)")
                     if math.isfinite(distilled.psnr_before) else
                     f"not distilled: the cuts of {distilled.budget:,} Gaussians already render as the full model")
    elif why_not:
        notes.append(f"not distilled: {why_not}")
    return ExportReport(path=Path(config.out), format="lod", splats=total, bytes=size, sh_degree=manifest.sh_degree,
                        input_splats=len(data), dropped_nonfinite=dropped, target=config.target, notes=notes)
