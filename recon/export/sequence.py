"""4D-ready splat sequences: one model file per frame plus a small JSON manifest.

Layout of a sequence folder::

    <out>/manifest.json
    <out>/frame_00000.spz
    <out>/frame_00001.spz
    ...

``manifest.json``::

    {
      "version": 1,
      "fps": 30.0,
      "format": "spz",                       # ply | splat | spz | glb, the same for every frame
      "frames": [{"time": 0.0, "file": "frame_00000.spz"}, ...],
      "camera": {                            # optional shared camera, our conventions:
        "world_to_cam": [[...4...] x 4],     #   OpenCV axes, x_cam = R x_world + t
        "K": [[fx, 0, cx], [0, fy, cy], [0, 0, 1]],
        "width": 1920, "height": 1080
      }
    }

``time`` is in seconds from the start of the sequence (players need wall time; the default is
``index / fps``). Frame files are relative to the manifest, plain names without folders. Every frame
file is in the file format's own axes (SPZ/GLB: +Y up, PLY/.splat: OpenCV), exactly as a single
export would write it; given a :class:`~recon.export.view_sidecar.ViewSidecar`, :class:`SequenceWriter`
writes its view sidecars beside every frame (``frame_00000.spz.cameras.json``, ``.view.json``), as a
single export does.

Writes are all-or-nothing: frames and manifest go into a hidden temporary folder beside ``<out>``,
which is renamed onto ``<out>`` only when everything is written; an existing ``<out>`` is refused
unless ``force`` (then it is replaced, after the new sequence is complete). Use
:func:`write_sequence` for a list of models, or :class:`SequenceWriter` to add frames one at a time
(what a 4D trainer or renderer will do).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from rasterizer.camera import Camera, camera_to_dict
from recon.core.atomic import atomic_write_bytes, refuse_overwrite
from recon.core.splat_data import SplatData
from recon.core.errors import UsageError
from recon.core.limits import load_json

from .glb import all_formats, read_any, write_any
from .splats import SplatFileError
from .view_sidecar import ViewSidecar, write_view_sidecars

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


def camera_from_json(obj: dict, path) -> Camera:
    """The manifest's optional shared camera as a float64 :class:`Camera`; SplatFileError naming ``path``
    when a field is missing or malformed. Written by :func:`rasterizer.camera.camera_to_dict`."""
    try:
        w2c = np.asarray(obj["world_to_cam"], dtype=np.float64)
        K = np.asarray(obj["K"], dtype=np.float64)
        width, height = int(obj["width"]), int(obj["height"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SplatFileError(path, f"bad camera in manifest ({exc!r})") from None
    if w2c.shape != (4, 4) or K.shape != (3, 3) or width <= 0 or height <= 0:
        raise SplatFileError(path, "bad camera in manifest: world_to_cam must be 4x4, K 3x3, "
                                   "width and height positive")
    return Camera.from_arrays(w2c, K, width, height)


@dataclass(frozen=True)
class SequenceFrame:
    """One manifest entry: time in seconds and the frame's file name (relative to the manifest)."""

    time: float
    file: str


@dataclass
class SequenceManifest:
    """A parsed ``manifest.json``; ``root`` is the folder holding it (None before writing)."""

    fps: float
    format: str
    frames: list[SequenceFrame] = field(default_factory=list)
    camera: Camera | None = None
    version: int = MANIFEST_VERSION
    root: Path | None = None

    def to_json(self) -> dict:
        obj = {"version": self.version, "fps": self.fps, "format": self.format,
               "frames": [{"time": f.time, "file": f.file} for f in self.frames]}
        if self.camera is not None:
            obj["camera"] = camera_to_dict(self.camera)
        return obj

    def __len__(self) -> int:
        return len(self.frames)

    def frame_path(self, index: int) -> Path:
        return (self.root or Path(".")) / self.frames[index].file

    def load_frame(self, index: int) -> SplatData:
        """Read frame ``index`` with the reader of the manifest's format."""
        return read_any(self.frame_path(index), self.format)

    def __iter__(self) -> Iterator[tuple[float, SplatData]]:
        """(time, model) for every frame, in order."""
        for i, frame in enumerate(self.frames):
            yield frame.time, self.load_frame(i)


def _check_fps(fps: float) -> float:
    fps = float(fps)
    if not (math.isfinite(fps) and fps > 0):
        raise UsageError(f"fps must be a positive number, got {fps}")
    return fps


def _check_file_name(path, name: str) -> str:
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name
            or "\\" in name or name.startswith(".") or name == MANIFEST_NAME):
        raise SplatFileError(path, f"bad frame file name {name!r} (plain file names only)")
    return name


def parse_manifest(path, obj) -> SequenceManifest:
    """Validate a manifest JSON object; SplatFileError naming ``path`` on any problem."""
    if not isinstance(obj, dict):
        raise SplatFileError(path, "manifest is not a JSON object")
    if obj.get("version") != MANIFEST_VERSION:
        raise SplatFileError(path, f"unsupported manifest version {obj.get('version')!r} "
                                   f"(this reader handles {MANIFEST_VERSION})")
    try:
        fps = _check_fps(obj["fps"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SplatFileError(path, f"bad or missing fps ({exc})") from None
    fmt = obj.get("format")
    if fmt not in all_formats():
        raise SplatFileError(path, f"unknown frame format {fmt!r}")
    frames_obj = obj.get("frames")
    if not isinstance(frames_obj, list) or not frames_obj:
        raise SplatFileError(path, "manifest has no frames")
    frames = []
    for i, f in enumerate(frames_obj):
        try:
            t = float(f["time"])
            name = f["file"]
        except (KeyError, TypeError, ValueError) as exc:
            raise SplatFileError(path, f"frame {i}: bad entry ({exc!r})") from None
        if not math.isfinite(t):
            raise SplatFileError(path, f"frame {i}: time {t} is not finite")
        frames.append(SequenceFrame(t, _check_file_name(path, name)))
    if any(b.time < a.time for a, b in zip(frames, frames[1:])):
        raise SplatFileError(path, "frame times are not in increasing order")
    camera = obj.get("camera")
    camera = camera_from_json(camera, path) if camera is not None else None
    return SequenceManifest(fps, fmt, frames, camera, MANIFEST_VERSION)


def read_sequence(path: str | os.PathLike) -> SequenceManifest:
    """Open a sequence (its folder or its manifest.json); frames are read lazily
    (:meth:`SequenceManifest.load_frame`, iteration). Missing frame files raise FileNotFoundError."""
    path = Path(path)
    manifest_path = path / MANIFEST_NAME if path.is_dir() else path
    if not manifest_path.exists():
        raise FileNotFoundError(f"{manifest_path}: no such sequence manifest")
    obj = load_json(manifest_path, "manifest", SplatFileError)
    manifest = parse_manifest(manifest_path, obj)
    manifest.root = manifest_path.parent
    for i in range(len(manifest)):
        if not manifest.frame_path(i).is_file():
            raise FileNotFoundError(f"{manifest_path}: frame {i} file "
                                    f"{manifest.frames[i].file!r} is missing")
    return manifest


class SequenceWriter:
    """Write a sequence frame by frame; published atomically on :meth:`close` (or leaving a
    ``with`` block without an error). On error (or :meth:`abort`) nothing appears at ``out``."""

    def __init__(self, out: str | os.PathLike, fps: float, format: str = "spz",
                 camera: Camera | None = None, force: bool = False,
                 name_pattern: str = "frame_{index:05d}.{ext}", sidecar: ViewSidecar | None = None):
        self.out = Path(out)
        self.sidecar = sidecar  # written beside every frame (FRAME.cameras.json, FRAME.view.json) when given
        self.fps = _check_fps(fps)
        self.format = format.lower().lstrip(".")
        if self.format not in all_formats():
            raise SplatFileError(self.out, f"unknown frame format {format!r}")
        self.camera = camera
        self.force = force
        self.name_pattern = name_pattern
        refuse_overwrite(self.out, force)
        parent = self.out.parent if str(self.out.parent) else Path(".")
        parent.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", suffix=".tmp", dir=parent))
        self.frames: list[SequenceFrame] = []
        self.dropped = 0
        self._done = False

    def add(self, data: SplatData, time: float | None = None) -> SequenceFrame:
        """Write the next frame (NaN/Inf splats dropped, counted in ``dropped``)."""
        if self._done:
            raise RuntimeError("sequence already closed")
        index = len(self.frames)
        t = index / self.fps if time is None else float(time)
        if not math.isfinite(t) or (self.frames and t < self.frames[-1].time):
            raise ValueError(f"frame {index}: time {t} must be finite and not decrease")
        name = _check_file_name(self.out, self.name_pattern.format(index=index, ext=self.format))
        result = write_any(self._tmp / name, data, self.format)
        if self.sidecar is not None:
            write_view_sidecars(self._tmp / name, self.sidecar, self.format)
        self.dropped += result.dropped
        frame = SequenceFrame(t, name)
        self.frames.append(frame)
        return frame

    def manifest(self) -> SequenceManifest:
        return SequenceManifest(self.fps, self.format, list(self.frames), self.camera,
                                root=self.out)

    def close(self) -> SequenceManifest:
        """Write the manifest and move the finished folder onto ``out``."""
        if self._done:
            raise RuntimeError("sequence already closed")
        if not self.frames:
            self.abort()
            raise SplatFileError(self.out, "refusing to write a sequence with no frames")
        manifest = self.manifest()
        atomic_write_bytes(self._tmp / MANIFEST_NAME,
                           (json.dumps(manifest.to_json(), indent=1) + "\n").encode("utf-8"))
        os.chmod(self._tmp, 0o777 & ~_umask())
        self._publish()
        self._done = True
        return manifest

    def _publish(self) -> None:
        if not os.path.lexists(self.out):
            try:
                os.rename(self._tmp, self.out)  # fails if out appeared meanwhile and is non-empty
                return
            except OSError:
                pass
        refuse_overwrite(self.out, self.force)
        old = self.out.with_name(f".{self.out.name}.old.{os.getpid()}")
        os.rename(self.out, old)
        try:
            os.rename(self._tmp, self.out)
        except BaseException:
            os.rename(old, self.out)
            raise
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()

    def abort(self) -> None:
        """Discard everything written so far."""
        self._done = True
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "SequenceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if not self._done:
                self.close()
        else:
            self.abort()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_sequence(out: str | os.PathLike, frames: Iterable[SplatData], fps: float,
                   format: str = "spz", times: Sequence[float] | None = None,
                   camera: Camera | None = None, force: bool = False) -> SequenceManifest:
    """Write ``frames`` as a sequence folder (see the module docstring); returns the manifest."""
    frames = list(frames)
    if times is not None and len(times) != len(frames):
        raise ValueError(f"{len(times)} times for {len(frames)} frames")
    with SequenceWriter(out, fps, format, camera, force) as writer:
        for i, data in enumerate(frames):
            writer.add(data, None if times is None else times[i])
    return writer.manifest()
