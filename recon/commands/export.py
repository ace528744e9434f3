"""``splatforge export (RUN_DIR | FILE) --out PATH [--format ply|splat|spz|glb] [--sh-degree D]
[--max-splats N] [--target desktop|web|android|iphone|quest3|visionpro] [--force]``

Input: a run folder (opened with :meth:`recon.run.Run.open`; its ``config.yaml`` names the dataset) or a
model file (``.ply``, ``.splat``, ``.spz``, ``.glb``, by suffix). The format defaults to the suffix of
``--out``. Splats holding NaN/Inf are dropped (counted); then the budget is applied
(:mod:`recon.export.budget`: importance = opacity x footprint over the run's training views when the
dataset is available, else opacity x volume); then the model is written atomically. An existing
output is refused without ``--force``. A short report follows (:mod:`recon.export.report`; test PSNR
before and after from :mod:`recon.run_export`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Optional

from rasterizer.camera import Camera
from recon.errors import USER_ERRORS, OutputError, SplatforgeError, UsageError, fail
from recon.export import SplatFileError
from recon.export.atomic import refuse_overwrite
from recon.export.budget import apply_budget, resolve_budget
from recon.export.glb import format_key, read_any, write_any
from recon.export.report import ExportReport, print_report
from recon.outputs import ensure_writable_folder
from recon import run_files as rf

try:
    import tyro

    _Positional = tyro.conf.Positional
    _NoPrefix = tyro.conf.arg(name="")
except ImportError:  # pragma: no cover - tyro is a dependency; keeps the module importable
    _Positional = None
    _NoPrefix = None

Format = Literal["ply", "splat", "spz", "glb"]
Target = Literal["desktop", "web", "android", "iphone", "quest3", "visionpro"]


@dataclass
class ExportConfig:
    """Export a trained model (run folder) or a splat file to PLY, .splat, SPZ or GLB."""

    input: Annotated[Path, _Positional] if _Positional else Path
    """Run folder (holding splats.ply and config.yaml) or a .ply/.splat/.spz/.glb file."""
    out: Path
    """Output file."""
    format: Optional[Format] = None
    """Output format; default: from the suffix of --out."""
    sh_degree: Optional[int] = None
    """Truncate spherical harmonics to this degree (0-3)."""
    max_splats: Optional[int] = None
    """Keep at most this many splats, the most important ones."""
    target: Optional[Target] = None
    """Device preset for splat and SH budgets (explicit --max-splats / --sh-degree win)."""
    force: bool = False
    """Overwrite an existing output."""
    evaluate: bool = True
    """For run folders: report test PSNR before and after (needs the run's dataset)."""
    quiet: bool = False
    """Do not print the report."""


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


def run_export(config: ExportConfig) -> ExportReport:
    """Do the export (raises on errors: FileExistsError, FileNotFoundError, SplatFileError,
    ValueError). Returns the report without printing it."""
    src = Path(config.input)
    fmt = format_key(config.out, config.format)
    suffix = config.out.suffix.lower().lstrip(".")
    if config.format and suffix and suffix != fmt and suffix in ("ply", "splat", "spz", "glb"):
        raise UsageError(f"--format {fmt} does not match the suffix of --out {config.out}")
    if Path(config.out).is_dir():
        raise OutputError(f"--out {config.out}: is a folder; give a file path")
    refuse_overwrite(config.out, config.force)  # before any slow work
    ensure_writable_folder(Path(config.out).parent, f"--out {config.out}: folder")
    max_splats, sh_degree = resolve_budget(config.target, config.max_splats, config.sh_degree)

    from recon.run import Run  # torch and the trainer's modules: only for run folders

    run = Run.open(src) if src.is_dir() else None
    if run is not None:
        model_path = run.require_splats()
    elif src.is_file():
        model_path = src
    else:
        raise FileNotFoundError(f"{src} does not exist")

    data = read_any(model_path)
    clean, dropped_nan = data.drop_nonfinite()
    if len(clean) == 0:
        raise SplatFileError(model_path, f"all {dropped_nan} splats hold NaN/Inf values")
    notes = []
    cameras = None
    if max_splats is not None and len(clean) > max_splats and run is not None:
        cameras, why = run_cameras(run)
        if why:
            notes.append(why)
    budgeted, info = apply_budget(clean, max_splats, sh_degree, cameras=cameras)
    result = write_any(config.out, budgeted, fmt, force=config.force)
    report = ExportReport(
        path=Path(config.out), format=fmt, splats=result.written,
        bytes=os.path.getsize(config.out), sh_degree=budgeted.sh_degree,
        input_splats=len(data), dropped_nonfinite=dropped_nan + result.dropped,
        dropped_budget=info.dropped, importance=info.importance, target=config.target,
        notes=notes)
    if run is not None and config.evaluate:
        from recon.run_export import export_psnr

        exported = read_any(config.out, fmt)  # what a viewer sees, quantisation included
        psnr, why = export_psnr(run, exported, original=clean)
        if psnr is not None:
            report.psnr_before, report.psnr_after = psnr
        else:
            report.notes.append(why)
    return report


def export(config: Annotated[ExportConfig, _NoPrefix] if _NoPrefix else ExportConfig) -> ExportReport:
    """Export a run folder or splat file to PLY / .splat / SPZ / GLB with optional budgets.

    Prints a short report. Errors (existing output without --force, missing or bad input) print one
    line on stderr and exit with status 1.
    """
    try:
        report = run_export(config)
    except USER_ERRORS as exc:  # SplatFileError is a ValueError
        fail("export", exc, status=1)
    if not config.quiet:
        print_report(report)
    return report
