"""View sidecars: the training cameras and the up axis written beside a splat file.

Beside ``FILE`` (any splat format) ``export`` writes

- ``FILE.cameras.json``: the original 3DGS ``cameras.json`` list, one entry per training camera:
  ``{"id", "img_name", "width", "height", "position": [3], "rotation": [3][3], "fx", "fy"}`` where
  ``position`` is the camera centre and ``rotation`` the camera-to-world rotation (world-from-camera, OpenCV
  camera axes: x right, y down, z forward), as 3DGS writes it; we add ``cx``, ``cy`` (pixels; readers of
  the plain layout ignore them and assume the image centre);
- ``FILE.view.json``: ``{"format": "splatforge-view", "version": 1, "up": [x, y, z], "cameras": [...],
  "camera": i}``: the same camera entries, the scene's up direction and the index of the start camera.

Both are in the splat file's own axes: formats whose writer flips the axes (SPZ, GLB: D = diag(1, -1, -1))
get their sidecar flipped like their splats (centres and up by D, rotations D R). In memory
(:class:`ViewSidecar`) everything is in the project's OpenCV world. Writes are atomic
(:mod:`recon.core.atomic`).

Layer 2: imports recon.core and rasterizer only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rasterizer.camera import Camera, rigid_inverse
from recon.core.atomic import atomic_write_bytes, refuse_overwrite
from recon.core.limits import load_json

from .splats import SplatFileError

FORMAT = "splatforge-view"
VERSION = 1
CAMERAS_SUFFIX = ".cameras.json"
VIEW_SUFFIX = ".view.json"
FLIP = np.diag([1.0, -1.0, -1.0])
"""The axis flip of the SPZ and GLB writers (OpenCV -> RUB / glTF), its own inverse."""
FLIPPED_FORMATS = ("spz", "glb")
OPENCV_UP = np.array([0.0, -1.0, 0.0])


@dataclass
class ViewSidecar:
    """Training cameras and up axis of a splat file, in the OpenCV world of the in-memory model.

    Attributes:
        cameras: pinhole cameras (``world_to_cam`` [4, 4], OpenCV axes).
        names: image name per camera.
        up: unit [3] world up.
        start: index into ``cameras`` of the camera a viewer starts at.
    """

    cameras: list[Camera]
    names: list[str] = field(default_factory=list)
    up: np.ndarray = field(default_factory=lambda: OPENCV_UP.copy())
    start: int = 0

    def __post_init__(self):
        if len(self.names) != len(self.cameras):
            self.names = [f"{i:04d}" for i in range(len(self.cameras))]


def sidecar_paths(splat_path: str | os.PathLike) -> tuple[Path, Path]:
    """(``FILE.cameras.json``, ``FILE.view.json``) beside ``splat_path``."""
    p = os.fspath(splat_path)
    return Path(p + CAMERAS_SUFFIX), Path(p + VIEW_SUFFIX)


def axis_flip(fmt: str | None) -> np.ndarray:
    """[3, 3] from the OpenCV world to the file's axes of format ``fmt`` (identity for PLY and .splat)."""
    return FLIP.copy() if (fmt or "").lower().lstrip(".") in FLIPPED_FORMATS else np.eye(3)


def format_of(path: str | os.PathLike) -> str:
    """Format key from the suffix of a splat file path ('ply', 'spz', ...)."""
    return Path(path).suffix.lower().lstrip(".")


def up_from_world_to_cams(world_to_cams, fallback=OPENCV_UP, min_agreement: float = 0.3,
                          keep_fallback_within_deg: float = 0.0) -> np.ndarray:
    """Unit [3] world up of a capture, the one rule of splatforge (export's sidecars, ``view RUN``, the
    training viewer): the mean camera up (-y axis of each OpenCV camera, in world) of [C, 4, 4]
    world-to-camera transforms. ``fallback`` (unit [3], OpenCV -y) when there are no cameras, when they
    disagree (|mean| < ``min_agreement``), or when the mean up is within ``keep_fallback_within_deg`` degrees
    of ``fallback`` (cameras looking down on an object tilt their ups: the viewer keeps -y for such runs)."""
    fallback = np.asarray(fallback, dtype=np.float64)
    w2c = np.asarray(world_to_cams, dtype=np.float64).reshape(-1, 4, 4)
    if len(w2c) == 0:
        return fallback
    mean = (-w2c[:, 1, :3]).mean(axis=0)  # row 1 of R: the camera's y axis in world
    n = float(np.linalg.norm(mean))
    if n < min_agreement or n == 0.0:
        return fallback
    mean = mean / n
    if keep_fallback_within_deg > 0 and mean @ fallback >= np.cos(np.radians(keep_fallback_within_deg)):
        return fallback
    return mean


def camera_entry(index: int, name: str, camera: Camera, flip: np.ndarray) -> dict:
    """One 3DGS ``cameras.json`` entry of ``camera`` (world-from-camera), in axes ``flip`` @ OpenCV world."""
    c2w = rigid_inverse(camera.world_to_cam_numpy())
    K = camera.K_numpy()
    return {"id": int(index), "img_name": str(name), "width": int(camera.width), "height": int(camera.height),
            "position": (flip @ c2w[:3, 3]).tolist(), "rotation": (flip @ c2w[:3, :3]).tolist(),
            "fx": float(K[0, 0]), "fy": float(K[1, 1]), "cx": float(K[0, 2]), "cy": float(K[1, 2])}


def camera_from_entry(entry: dict, flip: np.ndarray, where: str = "cameras") -> Camera:
    """Inverse of :func:`camera_entry`: a float64 :class:`Camera` in the OpenCV world; ValueError naming
    ``where`` for a malformed entry. Missing ``cx``/``cy``: the image centre (plain 3DGS files)."""
    try:
        w, h = int(entry["width"]), int(entry["height"])
        R = np.asarray(entry["rotation"], dtype=np.float64).reshape(3, 3)
        c = np.asarray(entry["position"], dtype=np.float64).reshape(3)
        fx, fy = float(entry["fx"]), float(entry["fy"])
        cx, cy = float(entry.get("cx", 0.5 * w)), float(entry.get("cy", 0.5 * h))
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{where}: bad camera entry ({type(err).__name__}: {err})") from None
    if w <= 0 or h <= 0 or not (fx > 0 and fy > 0) or not np.all(np.isfinite(R)) or not np.all(np.isfinite(c)):
        raise ValueError(f"{where}: bad camera entry (size, focal lengths or pose)")
    c2w = np.eye(4)
    c2w[:3, :3] = flip @ R  # flip is its own inverse
    c2w[:3, 3] = flip @ c
    K = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
    return Camera.from_arrays(rigid_inverse(c2w), K, w, h)


def _json_bytes(obj) -> bytes:
    return (json.dumps(obj, indent=1) + "\n").encode()


def write_view_sidecars(splat_path: str | os.PathLike, sidecar: ViewSidecar, fmt: str | None = None,
                        force: bool = False) -> tuple[Path, Path]:
    """Write ``FILE.cameras.json`` and ``FILE.view.json`` beside ``splat_path`` in the axes of format ``fmt``
    (default: its suffix), each atomically; existing ones are refused (FileExistsError) unless ``force``.
    Returns the two paths."""
    if not sidecar.cameras:
        raise ValueError(f"{splat_path}: no cameras to write a view sidecar from")
    cams_path, view_path = sidecar_paths(splat_path)
    refuse_overwrite(cams_path, force)
    refuse_overwrite(view_path, force)
    flip = axis_flip(fmt or format_of(splat_path))
    entries = [camera_entry(i, n, c, flip) for i, (n, c) in enumerate(zip(sidecar.names, sidecar.cameras))]
    up = flip @ (np.asarray(sidecar.up, dtype=np.float64) / np.linalg.norm(sidecar.up))
    start = int(sidecar.start) if 0 <= int(sidecar.start) < len(entries) else 0
    view = {"format": FORMAT, "version": VERSION, "up": up.tolist(), "cameras": entries, "camera": start}
    atomic_write_bytes(cams_path, _json_bytes(entries), force=force)
    atomic_write_bytes(view_path, _json_bytes(view), force=force)
    return cams_path, view_path


def read_view_sidecar(splat_path: str | os.PathLike, fmt: str | None = None) -> ViewSidecar | None:
    """The sidecar of ``splat_path`` in the OpenCV world (its axes undone for SPZ/GLB), or None when it has
    none: ``FILE.view.json`` when present, else ``FILE.cameras.json`` (up from the cameras, start camera 0).
    A malformed sidecar raises SplatFileError naming it."""
    cams_path, view_path = sidecar_paths(splat_path)
    flip = axis_flip(fmt or format_of(splat_path))
    if view_path.is_file():
        doc = load_json(view_path, "view sidecar", SplatFileError)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise SplatFileError(view_path, f"not a {FORMAT} file (its \"format\" is not {FORMAT!r})")
        if int(doc.get("version", 0)) > VERSION:
            raise SplatFileError(view_path, f"version {doc.get('version')} is newer than this splatforge "
                                            f"reads ({VERSION})")
        entries, path = doc.get("cameras"), view_path
    elif cams_path.is_file():
        doc, entries, path = None, load_json(cams_path, "view sidecar", SplatFileError), cams_path
    else:
        return None
    if not isinstance(entries, list) or not entries:
        raise SplatFileError(path, "holds no cameras (expected a non-empty list of 3DGS camera entries)")
    try:
        cameras = [camera_from_entry(e, flip, where=f"camera {i}") for i, e in enumerate(entries)]
    except ValueError as err:
        raise SplatFileError(path, str(err)) from None
    names = [str(e.get("img_name", f"{i:04d}")) for i, e in enumerate(entries)]
    if doc is not None and "up" in doc:
        up = np.asarray(doc["up"], dtype=np.float64).reshape(-1)
        if up.shape != (3,) or not np.all(np.isfinite(up)) or np.linalg.norm(up) < 1e-9:
            raise SplatFileError(path, f"\"up\" must be a non-zero [x, y, z], got {doc['up']!r}")
        up = flip @ (up / np.linalg.norm(up))
    else:
        up = up_from_world_to_cams([c.world_to_cam_numpy() for c in cameras])
    start = int(doc.get("camera", 0)) if doc is not None else 0
    if not 0 <= start < len(cameras):
        raise SplatFileError(path, f"\"camera\" {start} is not an index of its {len(cameras)} cameras")
    return ViewSidecar(cameras, names, up, start)


def carry_view_sidecars(src: str | os.PathLike, dst: str | os.PathLike, src_fmt: str | None = None,
                        dst_fmt: str | None = None, force: bool = False) -> tuple[Path, Path] | None:
    """Copy the sidecars of splat file ``src`` beside ``dst``, converted from ``src``'s axes to ``dst``'s;
    None when ``src`` has none."""
    sidecar = read_view_sidecar(src, src_fmt)
    if sidecar is None:
        return None
    return write_view_sidecars(dst, sidecar, dst_fmt, force=force)
