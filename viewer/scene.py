"""Loading what the viewer shows, validated before any server starts: a splat FILE or RUN_DIR as a
:class:`viewer.splat_scene.SplatScene` (4D runs and ply4d files as :class:`viewer.spacetime.SpaceTimeScene`,
meshgs (avatar) runs as :class:`viewer.avatar.AvatarScene`, frame-by-frame sequence runs as
:class:`viewer.frame_sequence.FrameSequenceScene`),
the run's training cameras and up direction, and meshes. The records themselves (and their arrays for viser)
are :mod:`viewer.splat_scene`, which this module re-exports.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from recon.core.errors import SplatforgeError
from recon.export import SplatFileError, read_splats
from recon.export.view_sidecar import read_view_sidecar, up_from_world_to_cams
from viewer.errors import ViewerInputError
from viewer.splat_scene import BrowserSplats, SplatScene, TrainingCamera, browser_splats, robust_bounds

__all__ = ["BrowserSplats", "SplatScene", "TrainingCamera", "ViewerInputError", "browser_splats", "load_meshes",
           "load_run_cameras", "load_scene", "resolve_splat_file", "robust_bounds", "spacetime_source",
           "training_cameras", "up_from_cameras"]


def resolve_splat_file(path: str | os.PathLike) -> tuple[Path, Path | None]:
    """(splat file, run folder or None) for a FILE or RUN_DIR argument; ViewerInputError if neither."""
    path = Path(path)
    if path.is_dir():
        from recon.run.folder import Run  # the trainer's modules (torch): only for run folders

        try:
            return Run.open(path).require_splats(), path
        except (OSError, ValueError) as err:
            raise ViewerInputError(str(err) if str(path) in str(err) else f"{path}: {err}") from None
    if not path.exists():
        raise ViewerInputError(f"{path}: no such file or run folder")
    return path, None


def load_run_cameras(run_dir: Path) -> list[TrainingCamera]:
    """Training cameras of a run (:class:`recon.run.folder.Run`; optional: [] when the config or the dataset is
    unavailable). Never raises."""
    try:
        from recon.run.folder import Run

        return training_cameras(Run.open(run_dir).scene)
    except (SplatforgeError, OSError):  # no config, no dataset, a bad dataset: no frustums (a bug still raises)
        return []


def training_cameras(scene) -> list[TrainingCamera]:
    """Frustums for the viewer from a :class:`recon.data.scene.Scene`'s training frames."""
    return [TrainingCamera(f.name, f.camera) for f in scene.frames_train]


VIEWER_UP_AGREEMENT = 0.5
"""Cameras whose mean up is shorter than this disagree: the viewer keeps OpenCV -y."""
VIEWER_KEEP_MINUS_Y_DEG = 45.0
"""A mean camera up this close to -y keeps -y (cameras looking down on an object tilt their ups)."""


def up_from_cameras(cameras: list[TrainingCamera]) -> np.ndarray:
    """World up of a run for the viewer: :func:`recon.export.view_sidecar.up_from_world_to_cams` (the one
    rule) over the training cameras, keeping OpenCV -y unless the cameras agree on an up more than
    :data:`VIEWER_KEEP_MINUS_Y_DEG` away from it."""
    return up_from_world_to_cams([c.camera.world_to_cam_numpy() for c in cameras],
                                 min_agreement=VIEWER_UP_AGREEMENT, keep_fallback_within_deg=VIEWER_KEEP_MINUS_Y_DEG)


def load_scene(path: str | os.PathLike, cameras: bool = True) -> SplatScene:
    """Load and validate a splat FILE (.ply/.splat/.spz) or RUN_DIR; raises ViewerInputError naming the
    file on missing, corrupt or empty input (before anything is served). An LOD export folder
    (``export --format lod``) streams its chunks (:mod:`viewer.lod`)."""
    from recon.lod.export_lod import is_lod_export

    if is_lod_export(path):
        from viewer.lod import load_lod_scene

        return load_lod_scene(Path(path))
    four = spacetime_source(path)
    if sequence_run(path):
        scene = _load_sequence(Path(path))
    elif four is not None:
        scene = _load_4d(*four)
    elif avatar_run(path):
        scene = _load_avatar(Path(path))
    elif unbaked_sequence_frame(path):
        scene = _load_sequence_frame(Path(path))
    else:
        scene = _load_3d(path)
    if scene.run_dir is not None and cameras:
        scene.cameras = load_run_cameras(scene.run_dir)
        scene.up = up_from_cameras(scene.cameras)
        if scene.cameras:
            scene.up_known, scene.start_camera = True, 0
    elif scene.run_dir is None and cameras:
        apply_sidecar(scene)
    return scene


def apply_sidecar(scene: SplatScene) -> None:
    """Give a splat file's scene the cameras, up axis and start camera of its view sidecar
    (FILE.view.json / FILE.cameras.json, :mod:`recon.export.view_sidecar`) when it has one; a malformed
    sidecar is ViewerInputError naming it."""
    try:
        sidecar = read_view_sidecar(scene.source)
    except (SplatFileError, OSError) as err:
        raise ViewerInputError(f"{err} (move the sidecar away to view {scene.source} without it)") from None
    if sidecar is None:
        return
    scene.cameras = [TrainingCamera(n, c) for n, c in zip(sidecar.names, sidecar.cameras)]
    scene.up, scene.up_known, scene.start_camera = sidecar.up, True, sidecar.start


def spacetime_source(path: str | os.PathLike) -> tuple[Path, Path | None] | None:
    """(source, run folder or None) when ``path`` is a 4D model: a run of a 4D method (source: its
    splats4d.ply, or the folder when the model is still in a checkpoint) or a ply4d file; else None."""
    from recon.export import is_ply4d

    path = Path(path)
    if path.is_dir():
        from recon.run.folder import Run

        try:
            run = Run.open(path)
            if not run.is_4d:
                return None
        except (SplatforgeError, OSError, ValueError) as err:
            raise ViewerInputError(str(err) if str(path) in str(err) else f"{path}: {err}") from None
        return (run.splats4d_path if run.splats4d_path.is_file() else path), path
    try:
        return (path, None) if path.is_file() and is_ply4d(path) else None
    except (SplatFileError, OSError) as err:
        raise ViewerInputError(str(err) if str(path) in str(err) else f"{path}: {err}") from None


def avatar_run(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a run folder of a method posed by time (meshgs: :mod:`viewer.avatar`)."""
    path = Path(path)
    if not path.is_dir():
        return False
    from recon.run.folder import Run
    from viewer.avatar import is_avatar_run

    try:
        return is_avatar_run(Run.open(path))
    except (SplatforgeError, OSError, ValueError) as err:
        raise ViewerInputError(str(err) if str(path) in str(err) else f"{path}: {err}") from None


def sequence_run(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a frame-by-frame sequence run (``--method neus`` on dynamic data: RUN/frames/)."""
    from recon.run.sequence import is_sequence_run

    return is_sequence_run(path)


def unbaked_sequence_frame(path: str | os.PathLike) -> bool:
    """Whether ``path`` is one frame folder of a sequence run (RUN/frames/frame_NNNNN/) without a splats.ply (frames
    write one only with ``--neus.frame-splats``)."""
    from recon.outputs import files as rf
    from recon.run.sequence import FRAMES_DIR

    path = Path(path)
    return (path.is_dir() and path.parent.name == FRAMES_DIR and sequence_run(path.parent.parent)
            and not (path / rf.SPLATS_FILE).is_file())


def _load_sequence_frame(frame_dir: Path) -> SplatScene:
    """One frame of a sequence run, baked from its newest checkpoint (:func:`viewer.frame_sequence.frame_splats`)."""
    from viewer.frame_sequence import frame_splats

    try:
        return SplatScene(frame_splats(frame_dir), frame_dir, frame_dir)
    except (SplatforgeError, OSError, ValueError) as e:
        raise ViewerInputError(str(e) if str(frame_dir) in str(e) else f"{frame_dir}: {e}") from e


def _load_sequence(run_dir: Path) -> SplatScene:
    from viewer.frame_sequence import load_frame_sequence_scene

    try:
        return load_frame_sequence_scene(run_dir)
    except (SplatforgeError, OSError, ValueError) as e:
        raise ViewerInputError(str(e) if str(run_dir) in str(e) else f"{run_dir}: {e}") from e


def _load_avatar(run_dir: Path) -> SplatScene:
    from viewer.avatar import load_avatar_scene

    try:
        return load_avatar_scene(run_dir)
    except (SplatforgeError, OSError, ValueError) as e:
        raise ViewerInputError(str(e) if str(run_dir) in str(e) else f"{run_dir}: {e}") from e


def _load_4d(source: Path, run_dir: Path | None) -> SplatScene:
    from viewer.spacetime import load_spacetime_scene

    try:
        scene = load_spacetime_scene(source, run_dir)
    except (SplatforgeError, OSError, ValueError) as e:
        raise ViewerInputError(str(e) if str(source) in str(e) else f"{source}: {e}") from e
    if len(scene.model) == 0:
        raise ViewerInputError(f"{source}: holds no 4D Gaussians")
    return scene


def _load_3d(path) -> SplatScene:
    file, run_dir = resolve_splat_file(path)
    try:
        data = read_splats(file)
    except (SplatFileError, OSError) as e:
        msg = str(e) if str(file) in str(e) else f"{file}: {e}"
        raise ViewerInputError(msg) from e
    except Exception as e:  # noqa: BLE001 - third-party parsers raise anything on corrupt input
        raise ViewerInputError(f"{file}: cannot read splats ({type(e).__name__}: {e})") from e
    if len(data.means) == 0:
        raise ViewerInputError(f"{file}: holds no splats")
    data, dropped = data.drop_nonfinite()  # splats with NaN/Inf in any field cannot be drawn
    if len(data) == 0:
        raise ViewerInputError(f"{file}: all {dropped} splats hold NaN/Inf values; there is nothing to show")
    return SplatScene(data, file, run_dir)


def load_meshes(paths) -> list[tuple[Path, object]]:
    """[(path, trimesh.Trimesh)] for OBJ/PLY/GLB files (scenes are concatenated); ViewerInputError
    naming the file when it is missing, unreadable or has no triangles."""
    import trimesh

    out = []
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise ViewerInputError(f"{p}: no such mesh file")
        try:
            mesh = trimesh.load(p, force="mesh")
        except Exception as e:  # noqa: BLE001
            raise ViewerInputError(f"{p}: cannot read mesh ({type(e).__name__}: {e})") from e
        if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
            raise ViewerInputError(f"{p}: holds no triangles")
        out.append((p, mesh))
    return out
