"""COLMAP sparse models: read and write (binary and text), lens distortion math, and the loader.

File formats (COLMAP documentation, "Output Format"), all little-endian for binary:

- ``cameras.bin``: uint64 count; per camera: uint32 camera_id, int32 model_id, uint64 width,
  uint64 height, float64 params[num_params(model)].
  ``cameras.txt``: ``CAMERA_ID MODEL WIDTH HEIGHT PARAMS[]``.
- ``images.bin``: uint64 count; per image: uint32 image_id, float64 qw qx qy qz, float64 tx ty tz,
  uint32 camera_id, name (bytes ending in NUL), uint64 num_points2D, then per point float64 x, float64 y,
  int64 point3D_id (-1 = none).
  ``images.txt``: two lines per image, ``IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME`` and
  ``X Y POINT3D_ID ...`` (may be empty).
- ``points3D.bin``: uint64 count; per point: uint64 point3D_id, float64 x y z, uint8 r g b, float64 error,
  uint64 track_length, then per element uint32 image_id, uint32 point2D_idx.
  ``points3D.txt``: ``POINT3D_ID X Y Z R G B ERROR TRACK[] as (IMAGE_ID, POINT2D_IDX)``.

Images store world-to-camera ``x_cam = R(q) x_world + t`` in OpenCV axes with q = (w, x, y, z), which
is exactly our convention: :func:`colmap_world_to_cam` only assembles the 4x4 matrix.

Distortion acts on normalised image coordinates ``xy = (X/Z, Y/Z)``; pixel ``u = fx * x_d + cx``
(COLMAP pixel centres at +0.5, as ours). Distorted cameras are undistorted once at load time into a
pinhole camera; the remapped images are cached under ``undistorted/``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from recon.data.scene import (
    BLACK,
    DataFormatError,
    Distortion,
    Frame,
    Scene,
    _read_pil,
    finalize_frames,
    image_size,
    intrinsics_matrix,
    make_camera,
    relative_to_root,
    save_image_atomic,
    split_every_nth,
    undistorted_relpath,
)


class ColmapFormatError(DataFormatError):
    """A COLMAP file is truncated, malformed or inconsistent; the message names the file."""


class UnsupportedCameraModelError(DataFormatError):
    """A camera model we cannot convert to a pinhole camera; the message names the model and the file."""


# model_id -> (name, number of params), as in COLMAP's src/colmap/sensor/models.h
CAMERA_MODELS: dict[int, tuple[str, int]] = {
    0: ("SIMPLE_PINHOLE", 3),
    1: ("PINHOLE", 4),
    2: ("SIMPLE_RADIAL", 4),
    3: ("RADIAL", 5),
    4: ("OPENCV", 8),
    5: ("OPENCV_FISHEYE", 8),
    6: ("FULL_OPENCV", 12),
    7: ("FOV", 5),
    8: ("SIMPLE_RADIAL_FISHEYE", 4),
    9: ("RADIAL_FISHEYE", 5),
    10: ("THIN_PRISM_FISHEYE", 12),
}
MODEL_IDS: dict[str, int] = {name: i for i, (name, _) in CAMERA_MODELS.items()}
NUM_PARAMS: dict[str, int] = {name: n for name, n in CAMERA_MODELS.values()}
UNDISTORT_CHUNK_PIXELS = 1 << 20  # pixels remapped per block in undistort_image
SUPPORTED_MODELS = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV", "OPENCV_FISHEYE")


# --------------------------------------------------------------------------------------------------
# data model (file-level, COLMAP conventions kept verbatim so writing back is exact)


@dataclass
class ColmapCamera:
    """One COLMAP camera. ``params`` [num_params] float64 in COLMAP order (focal(s), cx, cy, extras)."""

    id: int
    model: str
    width: int
    height: int
    params: np.ndarray


@dataclass
class ColmapImage:
    """One registered image.

    Attributes:
        qvec: [4] float64 world-to-camera rotation (w, x, y, z); tvec: [3] float64 translation.
        xys: [N, 2] float64 keypoints in pixels; point3D_ids: [N] int64 (-1 = not triangulated).
    """

    id: int
    qvec: np.ndarray
    tvec: np.ndarray
    camera_id: int
    name: str
    xys: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    point3D_ids: np.ndarray = field(default_factory=lambda: np.zeros((0,), dtype=np.int64))


@dataclass
class ColmapPoints:
    """All 3D points. ids [P] int64, xyz [P, 3] float64, rgb [P, 3] uint8, errors [P] float64,
    tracks: P arrays [L, 2] int64 of (image_id, point2D_idx)."""

    ids: np.ndarray
    xyz: np.ndarray
    rgb: np.ndarray
    errors: np.ndarray
    tracks: list[np.ndarray]

    @staticmethod
    def empty() -> "ColmapPoints":
        return ColmapPoints(
            np.zeros((0,), np.int64), np.zeros((0, 3)), np.zeros((0, 3), np.uint8), np.zeros((0,)), []
        )

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class ColmapModel:
    """A sparse model: cameras and images keyed by id (file order kept), and points."""

    cameras: dict[int, ColmapCamera]
    images: dict[int, ColmapImage]
    points: ColmapPoints


# --------------------------------------------------------------------------------------------------
# binary reading


class _BinaryReader:
    """Sequential little-endian reader over a file's bytes; truncation -> ColmapFormatError naming the file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.data = self.path.read_bytes()
        except OSError as e:
            raise ColmapFormatError(f"cannot read COLMAP file {self.path}: {e}") from e
        self.offset = 0

    def take(self, n: int, what: str) -> bytes:
        if self.offset + n > len(self.data):
            raise ColmapFormatError(
                f"{self.path}: truncated file: needed {n} bytes for {what} at byte {self.offset}, "
                f"file has {len(self.data)} bytes"
            )
        out = self.data[self.offset : self.offset + n]
        self.offset += n
        return out

    def unpack(self, fmt: str, what: str) -> tuple:
        fmt = "<" + fmt
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))

    def array(self, dtype: np.dtype, count: int, what: str) -> np.ndarray:
        dtype = np.dtype(dtype)
        return np.frombuffer(self.take(dtype.itemsize * count, what), dtype=dtype, count=count).copy()

    def cstring(self, what: str) -> str:
        end = self.data.find(b"\x00", self.offset)
        if end < 0:
            raise ColmapFormatError(f"{self.path}: truncated file: {what} has no terminating NUL byte")
        raw = self.data[self.offset : end]
        self.offset = end + 1
        return raw.decode("utf-8", errors="surrogateescape")

    def count(self, what: str, min_record_bytes: int) -> int:
        (n,) = self.unpack("Q", f"number of {what}")
        remaining = len(self.data) - self.offset
        if n * min_record_bytes > remaining:
            raise ColmapFormatError(
                f"{self.path}: truncated or corrupt file: header says {n} {what} "
                f"(at least {n * min_record_bytes} bytes) but only {remaining} bytes follow"
            )
        return n

    def finish(self) -> None:
        if self.offset != len(self.data):
            raise ColmapFormatError(
                f"{self.path}: {len(self.data) - self.offset} unexpected trailing bytes after the last record"
            )


def read_cameras_binary(path: Path) -> dict[int, ColmapCamera]:
    """Read ``cameras.bin`` -> {camera_id: ColmapCamera}."""
    r = _BinaryReader(path)
    cameras: dict[int, ColmapCamera] = {}
    for i in range(r.count("cameras", 24)):
        cam_id, model_id, width, height = r.unpack("IiQQ", f"camera record {i}")
        if model_id not in CAMERA_MODELS:
            raise ColmapFormatError(f"{path}: camera {cam_id} has unknown camera model id {model_id}")
        name, n_params = CAMERA_MODELS[model_id]
        params = r.array("<f8", n_params, f"params of camera {cam_id}")
        cameras[cam_id] = ColmapCamera(cam_id, name, width, height, params)
    r.finish()
    return cameras


_POINT2D_DTYPE = np.dtype([("x", "<f8"), ("y", "<f8"), ("id", "<i8")])


def read_images_binary(path: Path) -> dict[int, ColmapImage]:
    """Read ``images.bin`` -> {image_id: ColmapImage}."""
    r = _BinaryReader(path)
    images: dict[int, ColmapImage] = {}
    for i in range(r.count("images", 64)):
        image_id, qw, qx, qy, qz, tx, ty, tz, cam_id = r.unpack("I7dI", f"image record {i}")
        name = r.cstring(f"name of image {image_id}")
        (n_pts,) = r.unpack("Q", f"number of 2D points of image {name!r}")
        pts = r.array(_POINT2D_DTYPE, n_pts, f"2D points of image {name!r}")
        xys = np.stack([pts["x"], pts["y"]], axis=-1)
        images[image_id] = ColmapImage(
            image_id, np.array([qw, qx, qy, qz]), np.array([tx, ty, tz]), cam_id, name, xys, pts["id"].copy()
        )
    r.finish()
    return images


def read_points3D_binary(path: Path) -> ColmapPoints:
    """Read ``points3D.bin`` -> ColmapPoints."""
    r = _BinaryReader(path)
    n = r.count("points", 51)
    ids = np.zeros((n,), np.int64)
    xyz = np.zeros((n, 3))
    rgb = np.zeros((n, 3), np.uint8)
    errors = np.zeros((n,))
    tracks: list[np.ndarray] = []
    for i in range(n):
        rec = r.unpack("Q3d3BdQ", f"point record {i}")
        ids[i], xyz[i], rgb[i], errors[i] = rec[0], rec[1:4], rec[4:7], rec[7]
        track = r.array("<u4", 2 * rec[8], f"track of point {rec[0]}")
        tracks.append(track.astype(np.int64).reshape(-1, 2))
    r.finish()
    return ColmapPoints(ids, xyz, rgb, errors, tracks)


# --------------------------------------------------------------------------------------------------
# text reading


def _text_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every non-comment line (blank lines kept: images.txt needs them)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as e:
        raise ColmapFormatError(f"cannot read COLMAP file {path}: {e}") from e
    return [(i + 1, ln.rstrip("\r\n")) for i, ln in enumerate(text.split("\n")) if not ln.lstrip().startswith("#")]


def _parse(path: Path, lineno: int, what: str, fn, token):
    try:
        return fn(token)
    except (ValueError, OverflowError) as e:
        raise ColmapFormatError(f"{path}, line {lineno}: cannot parse {what} from {token!r}") from e


def read_cameras_text(path: Path) -> dict[int, ColmapCamera]:
    """Read ``cameras.txt`` -> {camera_id: ColmapCamera}."""
    cameras: dict[int, ColmapCamera] = {}
    for lineno, line in _text_lines(path):
        tok = line.split()
        if not tok:
            continue
        if len(tok) < 4:
            raise ColmapFormatError(f"{path}, line {lineno}: expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS[]")
        cam_id = _parse(path, lineno, "camera id", int, tok[0])
        model = tok[1]
        if model not in NUM_PARAMS:
            raise ColmapFormatError(f"{path}, line {lineno}: unknown camera model {model!r}")
        if len(tok) - 4 != NUM_PARAMS[model]:
            raise ColmapFormatError(
                f"{path}, line {lineno}: camera model {model} takes {NUM_PARAMS[model]} params, got {len(tok) - 4}"
            )
        width = _parse(path, lineno, "width", int, tok[2])
        height = _parse(path, lineno, "height", int, tok[3])
        params = np.array([_parse(path, lineno, "params", float, t) for t in tok[4:]], dtype=np.float64)
        cameras[cam_id] = ColmapCamera(cam_id, model, width, height, params)
    return cameras


def _parse_points2d(path: Path, lineno: int, line: str) -> tuple[np.ndarray, np.ndarray]:
    tok = line.split()
    if len(tok) % 3:
        raise ColmapFormatError(f"{path}, line {lineno}: 2D points must be triples X Y POINT3D_ID, got {len(tok)} values")
    try:
        xys = np.array([float(t) for t in tok[0::3]] + [float(t) for t in tok[1::3]], dtype=np.float64)
        ids = np.array([int(t) for t in tok[2::3]], dtype=np.int64)
    except ValueError as e:
        raise ColmapFormatError(f"{path}, line {lineno}: cannot parse 2D points: {e}") from e
    return xys.reshape(2, -1).T.copy(), ids


def read_images_text(path: Path) -> dict[int, ColmapImage]:
    """Read ``images.txt`` -> {image_id: ColmapImage}."""
    lines = _text_lines(path)
    images: dict[int, ColmapImage] = {}
    i = 0
    while i < len(lines):
        lineno, line = lines[i]
        tok = line.split(maxsplit=9)
        i += 1
        if not tok:
            continue
        if len(tok) < 10:
            raise ColmapFormatError(
                f"{path}, line {lineno}: expected IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME, got {len(tok)} fields"
            )
        image_id = _parse(path, lineno, "image id", int, tok[0])
        q = np.array([_parse(path, lineno, "qvec", float, t) for t in tok[1:5]])
        t = np.array([_parse(path, lineno, "tvec", float, t) for t in tok[5:8]])
        cam_id = _parse(path, lineno, "camera id", int, tok[8])
        xys, ids = np.zeros((0, 2)), np.zeros((0,), np.int64)
        if i < len(lines):
            xys, ids = _parse_points2d(path, lines[i][0], lines[i][1])
            i += 1
        images[image_id] = ColmapImage(image_id, q, t, cam_id, tok[9], xys, ids)
    return images


def read_points3D_text(path: Path) -> ColmapPoints:
    """Read ``points3D.txt`` -> ColmapPoints."""
    ids, xyz, rgb, errors, tracks = [], [], [], [], []
    for lineno, line in _text_lines(path):
        tok = line.split()
        if not tok:
            continue
        if len(tok) < 8 or (len(tok) - 8) % 2:
            raise ColmapFormatError(
                f"{path}, line {lineno}: expected POINT3D_ID X Y Z R G B ERROR then (IMAGE_ID, POINT2D_IDX) pairs"
            )
        ids.append(_parse(path, lineno, "point id", int, tok[0]))
        xyz.append([_parse(path, lineno, "xyz", float, t) for t in tok[1:4]])
        rgb.append([_parse(path, lineno, "rgb", int, t) for t in tok[4:7]])
        errors.append(_parse(path, lineno, "error", float, tok[7]))
        tracks.append(np.array([_parse(path, lineno, "track", int, t) for t in tok[8:]], np.int64).reshape(-1, 2))
    if not ids:
        return ColmapPoints.empty()
    return ColmapPoints(
        np.array(ids, np.int64), np.array(xyz, np.float64), np.array(rgb, np.uint8), np.array(errors), tracks
    )


# --------------------------------------------------------------------------------------------------
# writing


def write_cameras_binary(cameras: dict[int, ColmapCamera], path: Path) -> None:
    """Write ``cameras.bin``."""
    out = [struct.pack("<Q", len(cameras))]
    for cam in cameras.values():
        out.append(struct.pack("<IiQQ", cam.id, MODEL_IDS[cam.model], cam.width, cam.height))
        out.append(np.asarray(cam.params, "<f8").tobytes())
    Path(path).write_bytes(b"".join(out))


def write_images_binary(images: dict[int, ColmapImage], path: Path) -> None:
    """Write ``images.bin``."""
    out = [struct.pack("<Q", len(images))]
    for im in images.values():
        out.append(struct.pack("<I7dI", im.id, *im.qvec, *im.tvec, im.camera_id))
        out.append(im.name.encode("utf-8", errors="surrogateescape") + b"\x00")
        pts = np.zeros(len(im.point3D_ids), _POINT2D_DTYPE)
        pts["x"], pts["y"], pts["id"] = im.xys[:, 0], im.xys[:, 1], im.point3D_ids
        out.append(struct.pack("<Q", len(pts)) + pts.tobytes())
    Path(path).write_bytes(b"".join(out))


def write_points3D_binary(points: ColmapPoints, path: Path) -> None:
    """Write ``points3D.bin``."""
    out = [struct.pack("<Q", len(points))]
    for i in range(len(points)):
        track = points.tracks[i]
        out.append(struct.pack("<Q3d3BdQ", points.ids[i], *points.xyz[i], *points.rgb[i], points.errors[i], len(track)))
        out.append(np.asarray(track, "<u4").tobytes())
    Path(path).write_bytes(b"".join(out))


def _f(x: float) -> str:
    """Shortest decimal that reads back as the same float64 (round trips are exact)."""
    return repr(float(x))


def write_cameras_text(cameras: dict[int, ColmapCamera], path: Path) -> None:
    """Write ``cameras.txt``."""
    lines = [
        "# Camera list with one line of data per camera:",
        "#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]",
        f"# Number of cameras: {len(cameras)}",
    ]
    for c in cameras.values():
        lines.append(" ".join([str(c.id), c.model, str(c.width), str(c.height), *map(_f, c.params)]))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")


def write_images_text(images: dict[int, ColmapImage], path: Path) -> None:
    """Write ``images.txt``."""
    lines = [
        "# Image list with two lines of data per image:",
        "#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME",
        "#   POINTS2D[] as (X, Y, POINT3D_ID)",
        f"# Number of images: {len(images)}",
    ]
    for im in images.values():
        lines.append(" ".join([str(im.id), *map(_f, im.qvec), *map(_f, im.tvec), str(im.camera_id), im.name]))
        lines.append(" ".join(f"{_f(x)} {_f(y)} {int(p)}" for (x, y), p in zip(im.xys.tolist(), im.point3D_ids.tolist())))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")


def write_points3D_text(points: ColmapPoints, path: Path) -> None:
    """Write ``points3D.txt``."""
    lines = [
        "# 3D point list with one line of data per point:",
        "#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)",
        f"# Number of points: {len(points)}",
    ]
    for i in range(len(points)):
        head = [str(int(points.ids[i])), *map(_f, points.xyz[i]), *map(str, points.rgb[i].tolist()), _f(points.errors[i])]
        lines.append(" ".join(head + [str(v) for v in points.tracks[i].reshape(-1).tolist()]))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# whole models


def model_format(sparse_dir: Path) -> str:
    """".bin" or ".txt": which complete model ``sparse_dir`` holds (binary preferred)."""
    for ext in (".bin", ".txt"):
        if all((Path(sparse_dir) / f"{n}{ext}").is_file() for n in ("cameras", "images", "points3D")):
            return ext
    raise ColmapFormatError(
        f"{sparse_dir}: no complete COLMAP model (need cameras, images and points3D as .bin or .txt)"
    )


def check_model(model: ColmapModel, images_file: Path) -> None:
    """ColmapFormatError when an image references a camera id that ``cameras`` lacks."""
    for im in model.images.values():
        if im.camera_id not in model.cameras:
            raise ColmapFormatError(
                f"{images_file}: image {im.name!r} (id {im.id}) references camera id {im.camera_id}, "
                f"which is not in the cameras file (ids {sorted(model.cameras)[:10]})"
            )
        if len(im.xys) != len(im.point3D_ids):
            raise ColmapFormatError(f"{images_file}: image {im.name!r} has mismatched 2D point arrays")


def read_model(sparse_dir: Path, ext: str | None = None) -> ColmapModel:
    """Read ``cameras``, ``images`` and ``points3D`` (``.bin`` or ``.txt``; detected when ``ext`` is None)."""
    sparse_dir = Path(sparse_dir)
    ext = ext or model_format(sparse_dir)
    if ext == ".bin":
        cameras = read_cameras_binary(sparse_dir / "cameras.bin")
        images = read_images_binary(sparse_dir / "images.bin")
        points = read_points3D_binary(sparse_dir / "points3D.bin")
    elif ext == ".txt":
        cameras = read_cameras_text(sparse_dir / "cameras.txt")
        images = read_images_text(sparse_dir / "images.txt")
        points = read_points3D_text(sparse_dir / "points3D.txt")
    else:
        raise ValueError(f"ext must be '.bin' or '.txt', got {ext!r}")
    model = ColmapModel(cameras, images, points)
    check_model(model, sparse_dir / f"images{ext}")
    return model


def write_model(model: ColmapModel, sparse_dir: Path, ext: str = ".bin") -> None:
    """Write a model as ``.bin`` or ``.txt`` files into ``sparse_dir`` (created if needed)."""
    sparse_dir = Path(sparse_dir)
    sparse_dir.mkdir(parents=True, exist_ok=True)
    if ext == ".bin":
        write_cameras_binary(model.cameras, sparse_dir / "cameras.bin")
        write_images_binary(model.images, sparse_dir / "images.bin")
        write_points3D_binary(model.points, sparse_dir / "points3D.bin")
    elif ext == ".txt":
        write_cameras_text(model.cameras, sparse_dir / "cameras.txt")
        write_images_text(model.images, sparse_dir / "images.txt")
        write_points3D_text(model.points, sparse_dir / "points3D.txt")
    else:
        raise ValueError(f"ext must be '.bin' or '.txt', got {ext!r}")


# --------------------------------------------------------------------------------------------------
# poses and intrinsics


def qvec_to_rotmat(q: Sequence[float]) -> np.ndarray:
    """[3, 3] rotation of quaternion (w, x, y, z) (normalised here)."""
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def rotmat_to_qvec(R: np.ndarray) -> np.ndarray:
    """[4] unit quaternion (w, x, y, z), w >= 0, of a [3, 3] rotation matrix (Shepperd's method)."""
    m = np.asarray(R, dtype=np.float64)
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    if trace > max(m[0, 0], m[1, 1], m[2, 2]):
        s = 2.0 * np.sqrt(1.0 + trace)  # 4 |w|
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    elif m[0, 0] >= m[1, 1] and m[0, 0] >= m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])  # 4 |x|
        q = [(m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s]
    elif m[1, 1] >= m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])  # 4 |y|
        q = [(m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s]
    else:
        s = 2.0 * np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])  # 4 |z|
        q = [(m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s]
    q = np.array(q) / np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def colmap_world_to_cam(image: ColmapImage) -> np.ndarray:
    """[4, 4] float64 world-to-camera (OpenCV axes; COLMAP's own convention, no axis change)."""
    w2c = np.eye(4)
    with np.errstate(invalid="ignore", divide="ignore"):  # a zero qvec gives NaN, refused at load
        w2c[:3, :3] = qvec_to_rotmat(image.qvec)
    w2c[:3, 3] = image.tvec
    return w2c


def split_params(model: str, params: np.ndarray) -> tuple[tuple[float, float, float, float], np.ndarray]:
    """COLMAP params -> ((fx, fy, cx, cy), distortion coeffs [D]) for the supported models."""
    p = [float(v) for v in params]
    if model == "SIMPLE_PINHOLE":
        return (p[0], p[0], p[1], p[2]), np.zeros(0)
    if model == "PINHOLE":
        return (p[0], p[1], p[2], p[3]), np.zeros(0)
    if model in ("SIMPLE_RADIAL", "RADIAL"):
        return (p[0], p[0], p[1], p[2]), np.array(p[3:])
    if model in ("OPENCV", "OPENCV_FISHEYE"):
        return (p[0], p[1], p[2], p[3]), np.array(p[4:])
    raise UnsupportedCameraModelError(f"camera model {model!r} is not supported (have {SUPPORTED_MODELS})")


# --------------------------------------------------------------------------------------------------
# distortion math on normalised coordinates


def _as_opencv_coeffs(model: str, coeffs: Sequence[float]) -> tuple[float, float, float, float, float, float]:
    """(k1, k2, k3, k4, p1, p2) of a radial-tangential model.

    SIMPLE_RADIAL: (k,); RADIAL: (k1, k2); OPENCV: (k1, k2, p1, p2) or (k1, k2, p1, p2, k3, k4), where
    k3, k4 are r^6 and r^8 terms as in nerfstudio's extension (not OpenCV's rational k4..k6).
    """
    c = [float(v) for v in coeffs]
    if model == "SIMPLE_RADIAL":
        return c[0], 0.0, 0.0, 0.0, 0.0, 0.0
    if model == "RADIAL":
        return c[0], c[1], 0.0, 0.0, 0.0, 0.0
    if model == "OPENCV":
        k3, k4 = (c[4], c[5]) if len(c) >= 6 else (0.0, 0.0)
        return c[0], c[1], k3, k4, c[2], c[3]
    raise UnsupportedCameraModelError(f"no radial-tangential distortion for camera model {model!r}")


def _radtan(xy: np.ndarray, k: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Distorted points [N, 2] and Jacobians [N, 2, 2] of the radial-tangential model."""
    k1, k2, k3, k4, p1, p2 = k
    x, y = xy[:, 0], xy[:, 1]
    r2 = x * x + y * y
    radial = 1 + r2 * (k1 + r2 * (k2 + r2 * (k3 + r2 * k4)))
    dradial = k1 + r2 * (2 * k2 + r2 * (3 * k3 + r2 * 4 * k4))  # d radial / d r2
    xd = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
    yd = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
    J = np.empty((len(xy), 2, 2))
    J[:, 0, 0] = radial + 2 * x * x * dradial + 2 * p1 * y + 6 * p2 * x
    J[:, 0, 1] = 2 * x * y * dradial + 2 * p1 * x + 2 * p2 * y
    J[:, 1, 0] = 2 * x * y * dradial + 2 * p1 * x + 2 * p2 * y
    J[:, 1, 1] = radial + 2 * y * y * dradial + 6 * p1 * y + 2 * p2 * x
    return np.stack([xd, yd], axis=-1), J


def _fisheye_theta_d(theta: np.ndarray, k: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """theta_d = theta (1 + k1 t^2 + k2 t^4 + k3 t^6 + k4 t^8) and its derivative."""
    k1, k2, k3, k4 = (float(v) for v in k)
    t2 = theta * theta
    poly = 1 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4)))
    dpoly = 1 + t2 * (3 * k1 + t2 * (5 * k2 + t2 * (7 * k3 + t2 * 9 * k4)))
    return theta * poly, dpoly


def distort_points(model: str, params: Sequence[float], xy: np.ndarray) -> np.ndarray:
    """Apply lens distortion to undistorted normalised points.

    Args:
        model: SIMPLE_PINHOLE, PINHOLE (identity), SIMPLE_RADIAL (k), RADIAL (k1, k2),
            OPENCV (k1, k2, p1, p2[, k3, k4]) or OPENCV_FISHEYE (k1, k2, k3, k4).
        params: distortion coefficients only, in the order above.
        xy: [N, 2] undistorted normalised coordinates (X/Z, Y/Z), OpenCV camera axes.
    Returns:
        [N, 2] float64 distorted normalised coordinates; pixels are ``fx * x + cx``, ``fy * y + cy``.
    """
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    if model in ("SIMPLE_PINHOLE", "PINHOLE"):
        return xy.copy()
    if model == "OPENCV_FISHEYE":
        r = np.linalg.norm(xy, axis=-1)
        theta_d, _ = _fisheye_theta_d(np.arctan(r), params)
        scale = np.where(r > 1e-12, theta_d / np.maximum(r, 1e-12), 1.0)
        return xy * scale[:, None]
    return _radtan(xy, _as_opencv_coeffs(model, params))[0]


def _undistort_radtan(xy_d: np.ndarray, k: tuple, iterations: int) -> np.ndarray:
    """Newton's method on ``distort(x) - x_d = 0`` with the analytic 2x2 Jacobian."""
    x = xy_d.copy()
    for _ in range(iterations):
        f, J = _radtan(x, k)
        step = np.linalg.solve(J, (f - xy_d)[..., None])[..., 0]
        x = x - step
        if np.all(np.abs(step) < 1e-15):
            break
    return x


def _undistort_fisheye(xy_d: np.ndarray, k: Sequence[float], iterations: int) -> np.ndarray:
    """Newton's method on ``theta_d(theta) = |x_d|``, then ``x = x_d tan(theta) / theta_d``."""
    rd = np.linalg.norm(xy_d, axis=-1)
    theta = np.minimum(rd, np.pi / 2 - 1e-6)
    for _ in range(iterations):
        f, df = _fisheye_theta_d(theta, k)
        step = (f - rd) / np.where(np.abs(df) > 1e-12, df, 1e-12)
        theta = np.clip(theta - step, 0.0, np.pi / 2 - 1e-6)
        if np.all(np.abs(step) < 1e-15):
            break
    scale = np.where(rd > 1e-12, np.tan(theta) / np.maximum(rd, 1e-12), 1.0)
    return xy_d * scale[:, None]


def undistort_points(model: str, params: Sequence[float], xy_distorted: np.ndarray, iterations: int = 50) -> np.ndarray:
    """Invert :func:`distort_points` with Newton iterations.

    Args:
        model, params: as in :func:`distort_points`.
        xy_distorted: [N, 2] distorted normalised coordinates ((u - cx) / fx, (v - cy) / fy).
    Returns:
        [N, 2] float64 undistorted normalised coordinates: the pinhole ray (x, y, 1) in camera axes.
    """
    xy_d = np.asarray(xy_distorted, dtype=np.float64).reshape(-1, 2)
    if model in ("SIMPLE_PINHOLE", "PINHOLE"):
        return xy_d.copy()
    if model == "OPENCV_FISHEYE":
        return _undistort_fisheye(xy_d, params, iterations)
    return _undistort_radtan(xy_d, _as_opencv_coeffs(model, params), iterations)


# --------------------------------------------------------------------------------------------------
# image undistortion


def _edge_pixels(width: int, height: int, n: int = 64) -> tuple[np.ndarray, ...]:
    """Pixel coordinates [n, 2] along the left, right, top and bottom image borders (outer pixel edges)."""
    ys = np.linspace(0.0, height, n)
    xs = np.linspace(0.0, width, n)
    left = np.stack([np.zeros(n), ys], -1)
    right = np.stack([np.full(n, float(width)), ys], -1)
    top = np.stack([xs, np.zeros(n)], -1)
    bottom = np.stack([xs, np.full(n, float(height))], -1)
    return left, right, top, bottom


def undistorted_intrinsics(
    model: str, coeffs: Sequence[float], K: np.ndarray, width: int, height: int
) -> np.ndarray:
    """[3, 3] pinhole K for a ``width x height`` undistorted image showing only valid pixels.

    The image borders are undistorted and the largest axis-aligned rectangle inside them (in normalised
    coordinates) is mapped onto [0, W] x [0, H], like OpenCV's ``getOptimalNewCameraMatrix(alpha=0)``.
    """
    Kinv = np.linalg.inv(K)

    def norm_undist(px: np.ndarray) -> np.ndarray:
        xy = (np.c_[px, np.ones(len(px))] @ Kinv.T)[:, :2]
        return undistort_points(model, coeffs, xy)

    left, right, top, bottom = (norm_undist(e) for e in _edge_pixels(width, height))
    x0, x1 = left[:, 0].max(), right[:, 0].min()
    y0, y1 = top[:, 1].max(), bottom[:, 1].min()
    if not (np.isfinite([x0, x1, y0, y1]).all() and x1 > x0 and y1 > y0):
        raise ValueError(f"cannot undistort camera model {model} with coefficients {list(coeffs)}: degenerate borders")
    fx, fy = width / (x1 - x0), height / (y1 - y0)
    return intrinsics_matrix(fx, fy, -x0 * fx, -y0 * fy)


def remap_bilinear(image: np.ndarray, src_px: np.ndarray) -> np.ndarray:
    """Sample ``image`` [H, W, C] at continuous pixel coordinates ``src_px`` [h, w, 2] (centres at +0.5).

    Bilinear; samples outside the image clamp to the border. Returns [h, w, C] float32.
    """
    H, W = image.shape[:2]
    x = np.clip(src_px[..., 0] - 0.5, 0.0, W - 1.0)
    y = np.clip(src_px[..., 1] - 0.5, 0.0, H - 1.0)
    x0 = np.minimum(np.floor(x).astype(np.int64), W - 2) if W > 1 else np.zeros_like(x, np.int64)
    y0 = np.minimum(np.floor(y).astype(np.int64), H - 2) if H > 1 else np.zeros_like(y, np.int64)
    x1, y1 = np.minimum(x0 + 1, W - 1), np.minimum(y0 + 1, H - 1)
    wx, wy = (x - x0)[..., None], (y - y0)[..., None]
    top = image[y0, x0] * (1 - wx) + image[y0, x1] * wx
    bot = image[y1, x0] * (1 - wx) + image[y1, x1] * wx
    return (top * (1 - wy) + bot * wy).astype(np.float32)


def undistort_image(
    image: np.ndarray, model: str, coeffs: Sequence[float], K_src: np.ndarray, K_dst: np.ndarray, width: int, height: int
) -> np.ndarray:
    """Resample a distorted image [H, W, C] into the pinhole camera ``K_dst`` of size ``width x height``.

    Each output pixel centre is back-projected with ``K_dst`` to a pinhole ray, distorted with
    :func:`distort_points`, projected with ``K_src`` and sampled bilinearly.
    """
    rows = max(1, UNDISTORT_CHUNK_PIXELS // max(width, 1))  # bound memory on large images
    out = []
    for y0 in range(0, height, rows):
        u, v = np.meshgrid(np.arange(width) + 0.5, np.arange(y0, min(y0 + rows, height)) + 0.5)
        xy = np.stack([(u - K_dst[0, 2]) / K_dst[0, 0], (v - K_dst[1, 2]) / K_dst[1, 1]], -1).reshape(-1, 2)
        xy_d = distort_points(model, coeffs, xy)
        src = np.stack([K_src[0, 0] * xy_d[:, 0] + K_src[0, 2], K_src[1, 1] * xy_d[:, 1] + K_src[1, 2]], -1)
        out.append(remap_bilinear(image, src.reshape(u.shape[0], width, 2)))
    return np.concatenate(out, axis=0)


def _undistort_file(src: Path, dst: Path, dist: Distortion, K_src: np.ndarray, K_dst: np.ndarray, w: int, h: int, what: str) -> None:
    """Undistort one image or mask file into ``dst`` (PNG, written atomically)."""
    from PIL import Image

    im = _read_pil(src, what)
    if im.size != (w, h):
        raise ColmapFormatError(f"{what} file {src} is {im.size[0]}x{im.size[1]}, its camera says {w}x{h}")
    mode = im.mode if im.mode in ("L", "RGB", "RGBA") else ("RGBA" if "A" in im.getbands() else "RGB")
    arr = np.asarray(im.convert(mode), dtype=np.float32)
    arr = arr[..., None] if arr.ndim == 2 else arr
    out = undistort_image(arr, dist.model, dist.coeffs, K_src, K_dst, w, h)
    out = np.clip(np.rint(out), 0, 255).astype(np.uint8)
    save_image_atomic(Image.fromarray(out[..., 0] if mode == "L" else out, mode), dst)


def undistort_frame(frame: Frame, dist: Distortion, root: Path, cache_root: Path) -> Frame:
    """Frame whose image (and mask) are undistorted into a pinhole camera; files cached under ``undistorted/``.

    A cached file is reused when it exists with the right size (the cache is keyed by file name only).
    """
    cam = frame.camera
    K_src = cam.K.double().numpy()
    K_dst = undistorted_intrinsics(dist.model, dist.coeffs, K_src, cam.width, cam.height)

    def cached(src: Path, what: str) -> Path:
        dst = Path(cache_root) / undistorted_relpath(relative_to_root(src, root))
        if not (dst.is_file() and image_size(dst) == (cam.width, cam.height)):
            _undistort_file(src, dst, dist, K_src, K_dst, cam.width, cam.height, what)
        return dst

    image = cached(frame.image_path, "image")
    mask = cached(frame.mask_path, "mask") if frame.mask_path is not None else None
    camera = make_camera(cam.world_to_cam.double().numpy(), K_dst, cam.width, cam.height)
    return Frame(frame.name, image, camera, mask, frame.time)


# --------------------------------------------------------------------------------------------------
# the loader


def find_sparse_dir(root: Path) -> Path:
    """``root/sparse/0``, ``root/sparse`` or ``root`` itself: the first holding a complete model."""
    root = Path(root)
    for cand in (root / "sparse" / "0", root / "sparse", root):
        try:
            model_format(cand)
            return cand
        except ColmapFormatError:
            continue
    raise ColmapFormatError(f"{root}: no COLMAP model in sparse/0/, sparse/ or the folder itself")


def find_images_dir(root: Path, data_factor: int = 1) -> Path:
    """``root/images``; with ``data_factor`` N and no ``images/``, a pre-downscaled ``images_N/``."""
    root = Path(root)
    if (root / "images").is_dir():
        return root / "images"
    if data_factor > 1 and (root / f"images_{data_factor}").is_dir():
        return root / "images"  # frames point at images/; the downscale step finds images_N/
    raise ColmapFormatError(f"{root}: no images/ folder next to the COLMAP model")


def camera_frame(image: ColmapImage, camera: ColmapCamera, images_dir: Path, cameras_file: Path) -> tuple[Frame, Distortion | None]:
    """(Frame at full resolution, distortion or None) for one COLMAP image."""
    if camera.model not in SUPPORTED_MODELS:
        raise UnsupportedCameraModelError(
            f"{cameras_file}: camera {camera.id} uses camera model {camera.model}, which is not supported "
            f"(supported: {', '.join(SUPPORTED_MODELS)})"
        )
    (fx, fy, cx, cy), coeffs = split_params(camera.model, camera.params)
    K = intrinsics_matrix(fx, fy, cx, cy)
    cam = make_camera(colmap_world_to_cam(image), K, camera.width, camera.height)
    dist = Distortion(camera.model, coeffs) if len(coeffs) and np.any(coeffs != 0) else None
    return Frame(image.name, images_dir / image.name, cam), dist


def load_colmap(
    root: Path,
    data_factor: int = 1,
    cache_dir: Path | None = None,
    test_every: int = 8,
) -> Scene:
    """Load a COLMAP dataset folder (``images/`` + ``sparse/0/`` or ``sparse/``) as a :class:`Scene`.

    Distorted cameras are undistorted to pinhole (cached), ``data_factor`` downscales (cached), every
    ``test_every``-th image sorted by name is a test frame. Points: [P, 3] float32 xyz, [P, 3] uint8 rgb.
    """
    root = Path(root)
    sparse = find_sparse_dir(root)
    ext = model_format(sparse)
    model = read_model(sparse, ext)
    if not model.images:
        raise ColmapFormatError(f"{sparse / ('images' + ext)}: the model has no registered images")
    images_dir = find_images_dir(root, data_factor)
    cameras_file = sparse / f"cameras{ext}"
    raw = [camera_frame(im, model.cameras[im.camera_id], images_dir, cameras_file) for im in model.images.values()]
    frames = finalize_frames(raw, root, sparse / f"images{ext}", data_factor, cache_dir)
    train, test = split_every_nth(frames, test_every)
    return Scene(
        frames_train=train,
        frames_test=test,
        points=model.points.xyz.astype(np.float32),
        point_colors=model.points.rgb.copy(),
        background=BLACK,
        source_format="colmap",
        root=root,
    )
