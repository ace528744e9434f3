"""``splatforge export (RUN_DIR | FILE) --out PATH [--format ply|splat|spz|glb] [--sh-degree D]
[--max-splats N] [--target desktop|web|android|iphone|quest3|visionpro] [--force]``

Input: a run folder (recognised by holding ``splats.ply``; its ``config.yaml`` names the dataset) or a
model file (``.ply``, ``.splat``, ``.spz``, ``.glb``, by suffix). The format defaults to the suffix of
``--out``. Splats holding NaN/Inf are dropped (counted); then the budget is applied
(:mod:`recon.export.budget`: importance = opacity x footprint over the run's training views when the
dataset is available, else opacity x volume); then the model is written atomically. An existing
output is refused without ``--force``. A short report follows (:mod:`recon.export.report`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Optional

from recon.errors import USER_ERRORS, OutputError, UsageError, fail
from recon.export import SplatFileError
from recon.export.atomic import refuse_overwrite
from recon.export.budget import ViewCamera, apply_budget, resolve_budget
from recon.export.glb import format_key, read_any, write_any
from recon.export.report import ExportReport, print_report, psnr_before_after
from recon.outputs import ensure_writable_folder

try:
    import tyro

    _Positional = tyro.conf.Positional
    _NoPrefix = tyro.conf.arg(name="")
except ImportError:  # pragma: no cover - tyro is a dependency; keeps the module importable
    _Positional = None
    _NoPrefix = None

Format = Literal["ply", "splat", "spz", "glb"]
Target = Literal["desktop", "web", "android", "iphone", "quest3", "visionpro"]
RUN_MODEL = "splats.ply"
RUN_CONFIG = "config.yaml"


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
    """For run folders: report test PSNR before and after (needs recon.evaluation and the dataset)."""
    quiet: bool = False
    """Do not print the report."""


def is_run_dir(path: Path) -> bool:
    """A run folder holds ``splats.ply`` (and normally ``config.yaml``)."""
    return path.is_dir() and (path / RUN_MODEL).is_file()


def _dataset_from_config(cfg: dict) -> tuple[Path | None, int]:
    """(dataset folder, data_factor) from a run's config.yaml, trying the usual key layouts:
    ``data_dir`` / ``dataset`` / ``data_path`` / ``data`` (a path or a mapping with ``path``,
    ``dir``, ``root`` or ``data_dir``) and ``data_factor`` at the top level or under ``data``."""
    def find(mapping, keys):
        for k in keys:
            v = mapping.get(k) if isinstance(mapping, dict) else None
            if isinstance(v, (str, os.PathLike)) and str(v):
                return Path(v)
        return None

    sub = cfg.get("data") if isinstance(cfg.get("data"), dict) else {}
    path = (find(cfg, ("data_dir", "dataset", "data_path", "data", "scene_dir"))
            or find(sub, ("path", "dir", "root", "data_dir", "dataset")))
    factor = cfg.get("data_factor", sub.get("data_factor", sub.get("factor", 1)))
    try:
        factor = int(factor)
    except (TypeError, ValueError):
        factor = 1
    return path, max(factor, 1)


def run_cameras(run_dir: Path) -> tuple[list[ViewCamera] | None, str]:
    """(training cameras of the run's dataset or None, a note on why not)."""
    cfg_path = run_dir / RUN_CONFIG
    if not cfg_path.is_file():
        return None, "run has no config.yaml: importance by opacity x volume"
    try:
        import yaml

        cfg = yaml.safe_load(cfg_path.read_text()) or {}
    except Exception as exc:  # noqa: BLE001 - a broken config only costs the footprint ranking
        return None, f"config.yaml unreadable ({exc}): importance by opacity x volume"
    data_path, factor = _dataset_from_config(cfg if isinstance(cfg, dict) else {})
    if data_path is None:
        return None, "config.yaml names no dataset: importance by opacity x volume"
    if not data_path.is_absolute() and not data_path.exists():
        data_path = run_dir / data_path
    if not data_path.exists():
        return None, f"dataset {data_path} not available: importance by opacity x volume"
    try:
        from recon.data.detect import load_scene

        scene = load_scene(data_path, data_factor=factor)
        cams = [ViewCamera.from_camera(f.camera) for f in scene.frames_train]
    except Exception as exc:  # noqa: BLE001
        return None, f"could not load dataset {data_path} ({exc}): importance by opacity x volume"
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

    run_dir = src if src.is_dir() else None
    if run_dir is not None:
        if not is_run_dir(run_dir):
            raise FileNotFoundError(f"{src} is a folder without {RUN_MODEL}; not a run folder")
        model_path = run_dir / RUN_MODEL
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
    if max_splats is not None and len(clean) > max_splats and run_dir is not None:
        cameras, why = run_cameras(run_dir)
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
    if run_dir is not None and config.evaluate:
        exported = read_any(config.out, fmt)  # what a viewer sees, quantisation included
        psnr = psnr_before_after(run_dir, exported, original=clean)
        if psnr is not None:
            report.psnr_before, report.psnr_after = psnr
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
