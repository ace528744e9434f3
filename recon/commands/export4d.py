"""The 4D parts of ``splatforge export``: the whole 4D model as ply4d, a 3D slice at ``--time``, and a
sequence folder of slices at ``--times A:B:N`` (:mod:`recon.export.sequence`, manifest.json).

A source is 4D when it is a run of a 4D method (``--method 4dgs``: its splats4d.ply, or its newest
checkpoint before the run ends) or a ply4d file (recon/export/PLY4D.md). Every write is atomic: a file
appears only complete, a sequence folder only with all its frames and its manifest. Like 3D exports, the
outputs get view sidecars (:mod:`recon.commands.export_sidecars`; off with --no-view-sidecars): beside a
ply4d file, and beside each frame file of a sequence (in the frame format's axes).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from recon.core.errors import OutputError, SplatforgeError, UsageError
from recon.export import ModelKindError, SplatFileError, is_ply4d, read_ply4d, write_ply4d
from recon.export.ply4d import read_ply4d_finite
from recon.export.ply4d import ply4d_duration
from recon.export.atomic import refuse_overwrite
from recon.export.budget import apply_budget, resolve_budget
from recon.export.budget4d import apply_budget4
from recon.export.glb import all_formats
from recon.export.report import ExportReport
from recon.export.view_sidecar import CAMERAS_SUFFIX, VIEW_SUFFIX
from recon.outputs.paths import ensure_writable_folder
from recon.commands.export_sidecars import refuse_existing_sidecars, source_sidecar, write_sidecars


def open_source(src: Path):
    """(Run or None, the model's path, whether it is 4D) for a run folder or a model file; FileNotFoundError
    when ``src`` does not exist. A 4D run's path is its folder (the model may be in a checkpoint)."""
    from recon.run.folder import Run  # torch and the trainer's modules: only for run folders

    if src.is_dir():
        run = Run.open(src)
        if run.is_4d:
            return run, run.dir, True
        return run, run.require_splats(), False
    if not src.is_file():
        raise FileNotFoundError(f"{src} does not exist")
    return None, src, is_ply4d(src)


def check_times_fit(src: Path, is_4d: bool, times: list[float] | None, fmt: str) -> None:
    """UsageError for a 4D source exported to a 3D format without a time, and for time flags on a 3D source."""
    if is_4d and times is None:
        raise UsageError(f"{src}: holds a 4D model (4D Gaussians), which a 3D .{fmt} file cannot store; give --time T "
                         f"for its 3D slice at normalised time T in [0, 1], --times START:END:COUNT for a folder of "
                         f"slices, or --format ply4d (a .ply out) for the whole 4D model")
    if not is_4d and times is not None:
        raise UsageError(f"--time / --times: {src} holds 3D Gaussians, which do not change with time; leave the "
                         f"time flags out (they apply to 4D models: a --method 4dgs run or a ply4d file)")


def load_4d_model(run, path: Path):
    """The :class:`recon.models.SpaceTimeGaussians` of a 4D run (``run``) or ply4d file (``path``), on the CPU."""
    if run is not None:
        return run.load_model(None, "cpu")
    from recon.models.base import model_class

    return model_class("4dgs").from_spacetime_data(read_ply4d_finite(path))


def slice_model(model, t: float, path: Path):
    """The 3D slice (SplatData) of a 4D model at normalised time ``t``; SplatFileError naming ``path`` when
    no Gaussian is visible then."""
    data = model.to_splat_data(t)
    if len(data) == 0:
        raise SplatFileError(path, f"no Gaussian of the 4D model is visible at time {t:g} (all temporal "
                                   f"factors are below 1/255); pick another time")
    return data


def slice_source(run, path: Path, t: float):
    """:func:`slice_model` of the 4D source (a run or a ply4d file) at ``t``."""
    return slice_model(load_4d_model(run, path), t, path)


def _check_out_file(config) -> None:
    if Path(config.out).is_dir():
        raise OutputError(f"--out {config.out}: is a folder; give a file path")
    refuse_overwrite(config.out, config.force)
    ensure_writable_folder(Path(config.out).parent, f"--out {config.out}: folder")


def known_duration(run, path: Path | None = None) -> tuple[float | None, str]:
    """(seconds the normalised span [0, 1] lasts, where that came from), or (None, "") when unknown: the ply4d
    file's own (``path``; written from the dataset at training), else the run's dataset's ``Scene.duration``
    (captured videos)."""
    stored = ply4d_duration(path) if path is not None and is_ply4d(path) else None
    if stored:
        return stored, f"stored in {Path(path).name}"
    if run is not None and run.dataset_known:
        try:
            known = run.scene.duration
        except (SplatforgeError, OSError):  # the dataset is not here or does not load: unknown
            known = None
        if known:
            return float(known), "the dataset's"
    return None, ""


def sequence_duration(duration: float | None, run, path: Path | None = None) -> tuple[float, str]:
    """(seconds the normalised span [0, 1] lasts, a note saying where that came from): ``--duration``, else
    :func:`known_duration`, else 1."""
    if duration is not None:
        return float(duration), f"time span {duration:g} s (--duration)"
    known, source = known_duration(run, path)
    if known:
        return known, f"time span {known:g} s ({source}; --duration overrides)"
    return 1.0, "time span 1 s (the model's times are normalised and no duration is known; give --duration)"


def export_ply4d(config) -> ExportReport:
    """``--format ply4d``: the whole 4D model of a 4D run or file (SH truncated by --sh-degree)."""
    src, out = Path(config.input), Path(config.out)
    if out.suffix.lower() != ".ply":
        raise UsageError(f"--format ply4d writes a PLY file: give --out ending in .ply, not {out}")
    if config.time is not None:
        raise UsageError("--format ply4d writes the whole 4D model; --time exports a 3D slice (use "
                         "--format ply|splat|spz|glb with it)")
    max_splats, sh_degree = resolve_budget(config.target, config.max_splats, config.sh_degree)
    _check_out_file(config)
    if config.view_sidecars:
        refuse_existing_sidecars(out, config.force)
    run, path, is_4d = open_source(src)
    if not is_4d:
        raise ModelKindError(path, "holds 3D Gaussians; --format ply4d stores 4D models (a --method 4dgs run or a "
                                   "ply4d file): export this one as ply, splat, spz or glb")
    data = read_ply4d(path) if run is None else load_4d_model(run, path).to_spacetime_data()
    clean, dropped = data.drop_nonfinite()
    if len(clean) == 0:
        raise SplatFileError(path, f"all {dropped} 4D Gaussians hold NaN/Inf values")
    if config.duration is not None:
        if not (math.isfinite(config.duration) and config.duration > 0):
            raise UsageError(f"--duration {config.duration}: must be a positive number of seconds")
        clean.duration = float(config.duration)
    elif clean.duration is None:
        clean.duration = known_duration(run, path)[0]
    notes = ["the whole 4D model (4D Gaussians; layout: recon/export/PLY4D.md)"]
    cameras = None
    if max_splats is not None and len(clean) > max_splats and run is not None:
        from recon.commands.budget_cameras import run_cameras

        cameras, why = run_cameras(run)
        notes += [why] if why else []
    budgeted, info = apply_budget4(clean, max_splats, sh_degree, cameras=cameras)
    write_ply4d(out, budgeted, force=config.force)
    if config.view_sidecars:
        notes.append(write_sidecars(config, run, path, "ply"))
    return ExportReport(path=out, format="ply4d", splats=len(budgeted), bytes=os.path.getsize(out),
                        sh_degree=budgeted.sh_degree, input_splats=len(data), dropped_nonfinite=dropped,
                        dropped_budget=info.dropped, importance=info.importance, target=config.target, notes=notes)


def export_sequence(config, times: list[float]) -> ExportReport:
    """``--times A:B:N``: a sequence folder (--out) of N 3D slices, budgets applied to each, and manifest.json
    whose times are seconds from the first frame (``|t - A| x --duration``)."""
    from rich.progress import track

    from recon.commands.budget_cameras import run_cameras
    from recon.export.sequence import MANIFEST_NAME, SequenceWriter

    src, out = Path(config.input), Path(config.out)
    fmt = (config.format or "ply").lower()
    if fmt == "ply4d":
        raise UsageError("--times exports 3D slices; --format ply4d is the whole 4D model in one file (leave "
                         "--times out)")
    if fmt not in all_formats():
        raise UsageError(f"--format {fmt}: unknown (sequences take ply, splat, spz or glb)")
    if config.duration is not None and not (math.isfinite(config.duration) and config.duration > 0):
        raise UsageError(f"--duration {config.duration}: must be a positive number of seconds")
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: is a file; --times writes a folder (frames and manifest.json)")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST_NAME).is_file():
        raise OutputError(f"--out {out}: is a folder holding other files than a sequence (no {MANIFEST_NAME}); give "
                          f"a new folder name (only an earlier sequence is replaced, with --force)")
    refuse_overwrite(out, config.force)
    ensure_writable_folder(out.parent if str(out.parent) else Path("."), f"--out {out}: folder")
    max_splats, sh_degree = resolve_budget(config.target, config.max_splats, config.sh_degree)
    run, path, is_4d = open_source(src)
    check_times_fit(src, is_4d, times, fmt)
    model = load_4d_model(run, path)
    cameras, notes = None, []
    if max_splats is not None and run is not None:
        cameras, why = run_cameras(run)
        if why:
            notes.append(why)
    sidecar = None
    if config.view_sidecars:
        sidecar, why = source_sidecar(run, path)
        notes.append(why or f"view sidecars beside each frame (FRAME{CAMERAS_SUFFIX}, FRAME{VIEW_SUFFIX})")
    duration, why = sequence_duration(config.duration, run, path)
    notes.append(why)
    span = abs(times[-1] - times[0]) * duration
    fps = (len(times) - 1) / span if len(times) > 1 and span > 0 else 1.0
    written = sliced = dropped = budget_dropped = 0
    degree = model.sh_degree
    with SequenceWriter(out, fps, fmt, force=config.force, sidecar=sidecar) as writer:
        for t in track(times, description="slicing", disable=config.quiet):
            clean, bad = slice_model(model, t, path).drop_nonfinite()
            budgeted, info = apply_budget(clean, max_splats, sh_degree, cameras=cameras)
            writer.add(budgeted, time=abs(t - times[0]) * duration)
            sliced, dropped, budget_dropped = sliced + len(clean) + bad, dropped + bad, budget_dropped + info.dropped
            written, degree = written + len(budgeted), budgeted.sh_degree
        manifest = writer.manifest()
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    notes.append(f"a sequence of {len(manifest)} 3D slices at normalised times {times[0]:g}..{times[-1]:g} "
                 f"({span:g} s); counts are summed over the frames")
    return ExportReport(path=out, format=fmt, splats=written, bytes=size, sh_degree=degree, input_splats=sliced,
                        dropped_nonfinite=dropped, dropped_budget=budget_dropped, target=config.target,
                        importance="per frame" if budget_dropped else "none", notes=notes)
