"""``splatforge export (RUN_DIR | FILE) --out PATH [--format ply|splat|spz|glb|ply4d|lod] [--sh-degree D]
[--max-splats N] [--target desktop|web|android|iphone|phone|quest3|visionpro] [--time T | --times A:B:N
[--duration S]] [--no-view-sidecars] [--remove-floaters [--floater-threshold W]] [--force]``

Input: a run folder (opened with :meth:`recon.run.folder.Run.open`; its ``config.yaml`` names the dataset) or a
model file (``.ply``, ``.splat``, ``.spz``, ``.glb``, by suffix). The format defaults to the suffix of
``--out``. Splats holding NaN/Inf are dropped (counted); then the budget is applied
(:mod:`recon.export.budget`: importance = opacity x footprint over the run's training views when the
dataset is available, else opacity x volume); then the model is written atomically, with its view sidecars
(FILE.cameras.json, FILE.view.json: :mod:`recon.export.view_sidecar`) unless ``--no-view-sidecars``.
``--remove-floaters`` (run folders) first drops the Gaussians no training view sees (:mod:`recon.run.floaters`). An existing
output is refused without ``--force``. A short report follows (:mod:`recon.export.report`; test PSNR
before and after from :mod:`recon.run.export_psnr`).

4D models (a ``--method 4dgs`` run, a ply4d file): ``--format ply4d`` writes the whole 4D model;
``--time T`` exports its 3D slice at T like any 3D model; ``--times A:B:N`` writes a sequence folder of
N slices with manifest.json (:mod:`recon.commands.export4d`). Without one of those a 4D source is
refused, as are the time flags for a 3D source.

``--format lod`` writes a folder of levels of detail instead (:mod:`recon.commands.export_lod`, docs/lod.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Optional

from recon.core.errors import USER_ERRORS, OutputError, UsageError, fail
from recon.export import SplatFileError
from recon.export.atomic import refuse_overwrite
from recon.export.budget import apply_budget, resolve_budget
from recon.export.glb import format_key, read_any, write_any
from recon.export.report import ExportReport, print_report
from recon.commands.budget_cameras import run_cameras
from recon.commands.export_sidecars import refuse_existing_sidecars, write_sidecars
from recon.outputs.paths import ensure_writable_folder
from recon.run.time_args import resolve_times

try:
    import tyro

    _Positional = tyro.conf.Positional
    _NoPrefix = tyro.conf.arg(name="")
except ImportError:  # pragma: no cover - tyro is a dependency; keeps the module importable
    _Positional = None
    _NoPrefix = None

Format = Literal["ply", "splat", "spz", "glb", "ply4d", "lod"]
Target = Literal["desktop", "web", "android", "iphone", "phone", "quest3", "visionpro"]


@dataclass
class ExportConfig:
    """Export a trained model (run folder) or a splat file to PLY, .splat, SPZ or GLB; a 4D model to ply4d,
    or its 3D slices at --time / --times."""

    input: Annotated[Path, _Positional] if _Positional else Path
    """Run folder (holding splats.ply and config.yaml) or a .ply/.splat/.spz/.glb file, or a ply4d file."""
    out: Path
    """Output file (with --times or --format lod: a folder, written with manifest.json)."""
    format: Optional[Format] = None
    """Output format; default: from the suffix of --out (ply with --times). ply4d: the whole 4D model of a
    4D run or file (recon/export/PLY4D.md). lod: a folder of levels of detail, SPZ chunks by octree cell and
    level plus manifest.json, that `splatforge view DIR` streams (docs/lod.md)."""
    time: Optional[float] = None
    """4D models: export the 3D slice at this normalised time in [0, 1] (0 = first frame, 1 = last)."""
    times: Optional[str] = None
    """4D models: START:END:COUNT, a sequence: --out becomes a folder of COUNT 3D slices and manifest.json."""
    duration: Optional[float] = None
    """4D: seconds that the normalised span [0, 1] lasts (sequence manifest.json times are seconds; stored in a
    ply4d export's header); default: the ply4d file's stored duration, else the run's dataset's (captured
    videos), else 1 (sequences) or none (ply4d)."""
    sh_degree: Optional[int] = None
    """Truncate spherical harmonics to this degree (0-3)."""
    max_splats: Optional[int] = None
    """Keep at most this many splats, the most important ones (4D models with --format ply4d: the most
    important 4D Gaussians, recon/export/budget4d.py; --format lod: the Gaussians a viewer draws at once)."""
    target: Optional[Target] = None
    """Device preset for splat and SH budgets (explicit --max-splats / --sh-degree win)."""
    force: bool = False
    """Overwrite an existing output."""
    evaluate: bool = True
    """For run folders: report test PSNR before and after (needs the run's dataset)."""
    quiet: bool = False
    """Do not print the report."""
    view_sidecars: bool = True
    """Write FILE.cameras.json (3DGS layout) and FILE.view.json (up axis, start camera) beside the output, in its
    axes (recon/export/view_sidecar.py): a run's training cameras, or the input file's sidecars carried over; 4D
    models: beside a --format ply4d file and beside each frame file of a --times sequence."""
    remove_floaters: bool = False
    """For run folders: drop the Gaussians whose blending weight (alpha x transmittance) stays below
    --floater-threshold in every training view (recon/run/floaters.py); the report counts them."""
    floater_threshold: float = 0.005
    """Blending weight below which a Gaussian counts as a floater (0.005: lego loses 24% of its Gaussians at
    -0.02 dB; 0.05 removed 79% at -6.6 dB there, docs/export.md)."""
    lod_opacity: Literal["coverage", "mass"] = "mass"
    """--format lod: the merged Gaussians' opacity rule (recon/lod/merge.py, docs/lod.md): mass keeps more of the
    light of overlapping Gaussians (far test views at a 10% budget: city -0.16 dB against coverage's -0.67 dB,
    colmap_bird -2.76 against -4.83); coverage keeps a Gaussian merged with its own copy unchanged."""
    lod_spread: float = 0.3
    """--format lod: the merged Gaussians' spread t in (0, 1], drawn with covariance S_in + t S_out (the children's
    own spread plus t times the spread of their means; recon/lod/merge.py, docs/lod.md): 0.3 renders a 10% cut
    faster for a little PSNR (colmap_bird 20.7 % of the full model's CPU time at -1.16 dB, against 22.2 % at
    -1.05 dB with 1); 1 draws the moment-matched merges (the exports of before 7 Dec 2026)."""
    lod_finetune_steps: int = 0
    """--format lod from a run folder: fine-tune each merged level this many Adam steps against renders of the
    full model from the run's training cameras (at most 8, at their own image scale; a level is kept only if it
    got closer to the full model: recon/lod/finetune.py, docs/lod.md); 0: the merges as built."""
    lod_distill_steps: int = 480
    """--format lod from a run folder: tune the merged Gaussians of the cuts at min(view budget, 10% of the
    Gaussians) from up to 24 training cameras against the full model's renders, this many Adam steps
    (recon/lod/distill.py, docs/lod.md; colmap_bird's far views at 10%: -1.53 -> -0.99 dB, ~5 min); 0: off.
    Skipped for a model file (no cameras)."""
    lod_web: Literal["none", "streamed-sog"] = "none"
    """--format lod: also write the levels as PlayCanvas' Streamed SOG (lod-meta.json + SOG chunks, what SuperSplat
    and the PlayCanvas engine stream) into OUT/streamed-sog, encoded by splat-transform (needs node and
    `bash scripts/install_outside_readers.sh`; docs/lod.md)."""


def run_export(config: ExportConfig) -> ExportReport:
    """Do the export (raises on errors: FileExistsError, FileNotFoundError, SplatFileError,
    ValueError). Returns the report without printing it. 4D sources (a 4dgs run, a ply4d file) need
    --format ply4d, --time or --times (:mod:`recon.commands.export4d`); 3D sources refuse those."""
    from recon.commands import export4d

    src = Path(config.input)
    if config.format == "lod":
        from recon.commands.export_lod import run_lod_export

        return run_lod_export(config)
    from recon.commands.export_avatar import export_avatar, is_avatar_run

    if is_avatar_run(src):
        return export_avatar(config, format_key(config.out, config.format))
    times = resolve_times(config.time, config.times)
    if config.times is not None:
        return export4d.export_sequence(config, times)
    if config.format == "ply4d":
        return export4d.export_ply4d(config)
    fmt = format_key(config.out, config.format)
    suffix = config.out.suffix.lower().lstrip(".")
    if config.format and suffix and suffix != fmt and suffix in ("ply", "splat", "spz", "glb"):
        raise UsageError(f"--format {fmt} does not match the suffix of --out {config.out}")
    if Path(config.out).is_dir():
        raise OutputError(f"--out {config.out}: is a folder; give a file path")
    refuse_overwrite(config.out, config.force)  # before any slow work
    if config.view_sidecars:
        refuse_existing_sidecars(config.out, config.force)
    ensure_writable_folder(Path(config.out).parent, f"--out {config.out}: folder")
    max_splats, sh_degree = resolve_budget(config.target, config.max_splats, config.sh_degree)

    run, model_path, is_4d = export4d.open_source(src)
    export4d.check_times_fit(src, is_4d, times, fmt)
    data = export4d.slice_source(run, model_path, times[0]) if is_4d else read_any(model_path)
    clean, dropped_nan = data.drop_nonfinite()
    if len(clean) == 0:
        raise SplatFileError(model_path, f"all {dropped_nan} splats hold NaN/Inf values")
    notes = []
    cameras = None
    if max_splats is not None and len(clean) > max_splats and run is not None:
        cameras, why = run_cameras(run)
        if why:
            notes.append(why)
    original = clean  # the PSNR before: the model as trained
    if config.remove_floaters:
        clean = drop_floaters(config, run, clean, notes)
    budgeted, info = apply_budget(clean, max_splats, sh_degree, cameras=cameras)
    result = write_any(config.out, budgeted, fmt, force=config.force)
    if config.view_sidecars:
        notes.append(write_sidecars(config, run, model_path, fmt))
    report = ExportReport(
        path=Path(config.out), format=fmt, splats=result.written,
        bytes=os.path.getsize(config.out), sh_degree=budgeted.sh_degree,
        input_splats=len(data), dropped_nonfinite=dropped_nan + result.dropped,
        dropped_budget=info.dropped, importance=info.importance, target=config.target,
        notes=notes)
    if is_4d:
        notes.append(f"the 3D slice of the 4D model at time {times[0]:g}")
    if run is not None and config.evaluate:
        from recon.run.export_psnr import export_psnr

        exported = read_any(config.out, fmt)  # what a viewer sees, quantisation included
        psnr, why = export_psnr(run, exported, original=original)
        if psnr is not None:
            report.psnr_before, report.psnr_after = psnr
        else:
            report.notes.append(why)
    return report


def drop_floaters(config: ExportConfig, run, data, notes: list[str]):
    """``data`` less its floaters (:func:`recon.run.floaters.remove_run_floaters`, the run's training views); a
    note in ``notes``. UsageError for a file input or a run whose dataset is not here."""
    from recon.run.floaters import remove_run_floaters

    if run is None:
        raise UsageError(f"--remove-floaters: {config.input} is a file; it needs a run folder (its training "
                         f"cameras decide what was seen)")
    result = remove_run_floaters(run, data, config.floater_threshold)
    notes.append(result.note())
    return result.kept


def export(config: Annotated[ExportConfig, _NoPrefix] if _NoPrefix else ExportConfig) -> ExportReport:
    """Export a run folder or splat file to PLY / .splat / SPZ / GLB with optional budgets.

    Prints a short report. Errors (existing output without --force, missing or bad input, an input
    declaring more data than memory holds) print one line on stderr and exit with status 2, as in every
    command.
    """
    try:
        report = run_export(config)
    except (*USER_ERRORS, MemoryError) as exc:  # SplatFileError is a ValueError
        fail("export", exc, inputs=str(config.input))
    if not config.quiet:
        print_report(report)
    return report
