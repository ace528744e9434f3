"""What the viewer shows: a splat model (plus optional training cameras), loaded and validated before
any server starts, and the arrays viser's WebGL splat renderer needs.

All positions are in the model's world frame (OpenCV: x right, y down, z forward); nothing is
re-oriented, the viewer only tells viser which way is up. The browser renders degree-0 colour (the
SH DC term) only; full-quality renders go through :mod:`rasterizer`.

Time hook: :meth:`SplatScene.set_time` is a no-op for static scenes; a dynamic (4D) scene subclasses
:class:`SplatScene`, sets ``dynamic = True`` and overrides ``set_time(t)`` (t in [0, 1], see
rasterizer/CONVENTIONS.md) to change what :meth:`SplatScene.browser` returns and return True, after which
the viewer re-sends the splats. 4D runs and ply4d files load as :class:`viewer.spacetime.SpaceTimeScene`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rasterizer.camera import Camera
from rasterizer.quaternions import quat_to_rotmat_np
from recon.export import SplatData, SplatFileError, read_splats
from recon.errors import SplatforgeError
from recon.export.splats import SH_C0


class ViewerInputError(SplatforgeError, ValueError):
    """A file or folder given to the viewer is missing or unusable; the message names it."""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass
class BrowserSplats:
    """Arrays for ``viser.scene.add_gaussian_splats`` (float32, world frame).

    centers [N, 3]; covariances [N, 3, 3] = R diag(s^2) R^T; rgbs [N, 3] in [0, 1] from the SH DC term;
    opacities [N, 1] activated.
    """

    centers: np.ndarray
    covariances: np.ndarray
    rgbs: np.ndarray
    opacities: np.ndarray

    def __len__(self) -> int:
        return len(self.centers)


def browser_splats(data: SplatData, scale_factor: float = 1.0, min_opacity: float = 0.0) -> BrowserSplats:
    """Splats in viser's format: scales multiplied by ``scale_factor``; splats with opacity below
    ``min_opacity`` dropped."""
    opac = _sigmoid(data.logit_opacities.astype(np.float64))
    keep = opac >= min_opacity
    R = quat_to_rotmat_np(data.quats[keep].astype(np.float64))
    s2 = (np.exp(data.log_scales[keep].astype(np.float64)) * scale_factor) ** 2
    cov = np.einsum("nij,nj,nkj->nik", R, s2, R)
    rgb = np.clip(0.5 + SH_C0 * data.sh[keep, 0].astype(np.float64), 0.0, 1.0)
    return BrowserSplats(data.means[keep].astype(np.float32), cov.astype(np.float32),
                         rgb.astype(np.float32), opac[keep, None].astype(np.float32))


def robust_bounds(points: np.ndarray, lo: float = 5.0, hi: float = 95.0) -> tuple[np.ndarray, float]:
    """(centre [3], radius): middle of the per-axis ``lo``..``hi`` percentile box of [N, 3] points and half
    its diagonal (floored at 1e-3), so stray far-away splats do not shrink the initial view."""
    if len(points) == 0:
        return np.zeros(3), 1.0
    a, b = np.percentile(points, [lo, hi], axis=0)
    return 0.5 * (a + b), max(0.5 * float(np.linalg.norm(b - a)), 1e-3)


@dataclass
class TrainingCamera:
    """A training view for frustum display: the frame's name and its :class:`Camera` (OpenCV axes)."""

    name: str
    camera: Camera


@dataclass
class SplatScene:
    """A static splat model with its source description and optional training cameras.

    Attributes:
        splats: the model (raw parameters, OpenCV world).
        source: file the splats came from.
        run_dir: training run folder, when the viewer was pointed at one.
        cameras: training cameras of the run (empty when unknown).
        up: world up direction (unit [3]); -y of the OpenCV world unless the run says otherwise.
    """

    splats: SplatData
    source: Path
    run_dir: Path | None = None
    cameras: list[TrainingCamera] = field(default_factory=list)
    up: np.ndarray = field(default_factory=lambda: np.array([0.0, -1.0, 0.0]))
    dynamic: bool = False

    def set_time(self, t: float) -> bool:
        """Show the model at normalised time ``t`` in [0, 1]; returns True when ``splats`` changed.
        Static scenes: nothing to do."""
        del t
        return False

    def total(self) -> int:
        """How many splats the model holds (before filters)."""
        return len(self.splats.means)

    def browser(self, scale_factor: float = 1.0, min_opacity: float = 0.0) -> BrowserSplats:
        """What the browser draws now (:func:`browser_splats` of ``splats``)."""
        return browser_splats(self.splats, scale_factor, min_opacity)

    def render_image(self, frame, background, device) -> np.ndarray:
        """[H, W, 3] float32 sRGB render of ``splats`` (all SH degrees) into ``frame`` (a Camera) over
        ``background`` (RGB), with :mod:`rasterizer` on ``device``."""
        import torch

        from rasterizer import rasterize_gaussians

        s = self.splats
        degree = int(round(np.sqrt(s.sh.shape[1]))) - 1
        t = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32, device=device)  # noqa: E731
        cam = frame.to(device=device, dtype=torch.float32)
        with torch.no_grad():
            render, _, _ = rasterize_gaussians(
                t(s.means), t(s.quats), torch.exp(t(s.log_scales)), torch.sigmoid(t(s.logit_opacities)),
                t(s.sh), cam.world_to_cam[None], cam.K[None], cam.width, cam.height,
                sh_degree=degree, backgrounds=t([background]),
                rasterize_mode="antialiased" if s.antialiased else "classic")  # backend auto: cuda on a GPU
        return render[0].clamp(0, 1).cpu().numpy()

    def facts(self) -> dict[str, str]:
        """Human-readable facts for the GUI panel."""
        s = self.splats
        degree = int(round(np.sqrt(s.sh.shape[1]))) - 1
        size = self.source.stat().st_size if self.source.exists() else 0
        return {"file": str(self.source), "splats": f"{len(s.means):,}", "SH degree": str(degree),
                "file size": f"{size / 1e6:.1f} MB", "training cameras": str(len(self.cameras))}


def resolve_splat_file(path: str | os.PathLike) -> tuple[Path, Path | None]:
    """(splat file, run folder or None) for a FILE or RUN_DIR argument; ViewerInputError if neither."""
    path = Path(path)
    if path.is_dir():
        from recon.run import Run  # the trainer's modules (torch): only for run folders

        try:
            return Run.open(path).require_splats(), path
        except (OSError, ValueError) as err:
            raise ViewerInputError(str(err) if str(path) in str(err) else f"{path}: {err}") from None
    if not path.exists():
        raise ViewerInputError(f"{path}: no such file or run folder")
    return path, None


def load_run_cameras(run_dir: Path) -> list[TrainingCamera]:
    """Training cameras of a run (:class:`recon.run.Run`; optional: [] when the config or the dataset is
    unavailable). Never raises."""
    try:
        from recon.run import Run

        return training_cameras(Run.open(run_dir).scene)
    except (SplatforgeError, OSError):  # no config, no dataset, a bad dataset: no frustums (a bug still raises)
        return []


def training_cameras(scene) -> list[TrainingCamera]:
    """Frustums for the viewer from a :class:`recon.data.scene.Scene`'s training frames."""
    return [TrainingCamera(f.name, f.camera) for f in scene.frames_train]


def up_from_cameras(cameras: list[TrainingCamera], max_angle_deg: float = 45.0) -> np.ndarray | None:
    """World up when the run says otherwise than -y: the mean camera up (-y axis of each camera, in
    world) if the cameras agree (|mean| > 0.5) and it is more than ``max_angle_deg`` away from the OpenCV
    world's -y; None (keep -y) otherwise. Cameras looking down on an object tilt their ups, hence the
    tolerance."""
    if not cameras:
        return None
    ups = np.stack([-c.camera.world_to_cam_numpy()[1, :3] for c in cameras])  # row 1 of R = camera y axis in world
    mean = ups.mean(axis=0)
    n = np.linalg.norm(mean)
    if n <= 0.5:
        return None
    mean = mean / n
    return mean if mean @ [0.0, -1.0, 0.0] < np.cos(np.radians(max_angle_deg)) else None


def load_scene(path: str | os.PathLike, cameras: bool = True) -> SplatScene:
    """Load and validate a splat FILE (.ply/.splat/.spz) or RUN_DIR; raises ViewerInputError naming the
    file on missing, corrupt or empty input (before anything is served)."""
    four = spacetime_source(path)
    if four is not None:
        scene = _load_4d(*four)
    else:
        scene = _load_3d(path)
    if scene.run_dir is not None and cameras:
        scene.cameras = load_run_cameras(scene.run_dir)
        up = up_from_cameras(scene.cameras)
        if up is not None:
            scene.up = up
    return scene


def spacetime_source(path: str | os.PathLike) -> tuple[Path, Path | None] | None:
    """(source, run folder or None) when ``path`` is a 4D model: a run of a 4D method (source: its
    splats4d.ply, or the folder when the model is still in a checkpoint) or a ply4d file; else None."""
    from recon.export import is_ply4d

    path = Path(path)
    if path.is_dir():
        from recon.run import Run

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
