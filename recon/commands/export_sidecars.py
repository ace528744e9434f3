"""The view sidecars of ``export``'s outputs (FILE.cameras.json, FILE.view.json: :mod:`recon.export.view_sidecar`):
a run's training cameras (named, the mean camera up, start camera 0: the one ``view RUN`` starts at), or the
input file's own sidecars carried over. One source for every output kind: a 3D file, a ply4d file, and each
frame file of a ``--times`` sequence."""

from __future__ import annotations

import os
from pathlib import Path

from recon.export import SplatFileError
from recon.export.atomic import refuse_overwrite
from recon.export.glb import format_key
from recon.export.view_sidecar import (ViewSidecar, read_view_sidecar, sidecar_paths, up_from_world_to_cams,
                                       write_view_sidecars)
from recon.run.cameras import run_cameras


def run_sidecar(run) -> ViewSidecar | None:
    """The view sidecar of a run: its training cameras (named), the mean camera up, start camera 0; None when
    its dataset is not here."""
    cameras, _ = run_cameras(run)
    if cameras is None:
        return None
    names = [f.name for f in run.scene.frames_train]  # the scene run_cameras loaded: one name per camera
    up = up_from_world_to_cams([c.world_to_cam_numpy() for c in cameras])
    return ViewSidecar(cameras, names, up, 0)


def source_sidecar(run, model_path) -> tuple[ViewSidecar | None, str]:
    """(the sidecar for the outputs of an export of ``run`` (a Run) or, without a run, of the model file
    ``model_path``; or None and a note saying why there is none)."""
    if run is not None:
        sidecar = run_sidecar(run)
        return (sidecar, "") if sidecar is not None else \
            (None, "no view sidecar: the run's training cameras are not available")
    try:
        sidecar = read_view_sidecar(model_path, format_key(model_path))
    except SplatFileError as err:
        return None, f"no view sidecar: {err}"
    return (sidecar, "") if sidecar is not None else (None, "no view sidecar: the input file has none")


def refuse_existing_sidecars(out: str | os.PathLike, force: bool) -> None:
    """FileExistsError naming the first sidecar of ``out`` that exists, unless ``force`` (before slow work)."""
    for side in sidecar_paths(out):
        refuse_overwrite(side, force)


def write_sidecars(config, run, model_path, fmt: str) -> str:
    """Write the sidecars of ``config.out`` in the axes of ``fmt`` (:func:`source_sidecar`); a report note."""
    sidecar, why = source_sidecar(run, model_path)
    if sidecar is None:
        return why
    paths = write_view_sidecars(config.out, sidecar, fmt, force=config.force)
    return "view sidecars: " + ", ".join(Path(p).name for p in paths)
