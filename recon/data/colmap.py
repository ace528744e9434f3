"""COLMAP sparse models: read and write (binary and text), and the loader.

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

Distorted cameras are undistorted once at load time into a pinhole camera (:mod:`recon.data.undistort`,
through :func:`recon.data.finalize.finalize_frames`); the remapped images are cached under ``undistorted/``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rasterizer.quaternions import quat_to_rotmat_np
from recon.data.finalize import finalize_frames
from recon.data.scene import (
    BLACK,
    DataFormatError,
    Distortion,
    Frame,
    Scene,
    camera_problem,
    intrinsics_matrix,
    make_camera,
    split_every_nth,
)
from recon.data.undistort import UndistortError, UnsupportedCameraModelError, undistorted_intrinsics


class ColmapFormatError(DataFormatError):
    """A COLMAP file is truncated, malformed or inconsistent; the message names the file."""


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
INT64_MAX = 2**63 - 1
MODEL_IDS: dict[str, int] = {name: i for i, (name, _) in CAMERA_MODELS.items()}
NUM_PARAMS: dict[str, int] = {name: n for name, n in CAMERA_MODELS.values()}
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
        if rec[0] > INT64_MAX:
            raise ColmapFormatError(f"{path}: point record {i} has id {rec[0]}, beyond the int64 ids COLMAP writes; "
                                    f"the file is damaged")
        ids[i], xyz[i], rgb[i], errors[i] = rec[0], rec[1:4], rec[4:7], rec[7]
        track = r.array("<u4", 2 * rec[8], f"track of point {rec[0]}")
        tracks.append(track.astype(np.int64).reshape(-1, 2))
    r.finish()
    check_points_finite(path, ids, xyz)
    return ColmapPoints(ids, xyz, rgb, errors, tracks)


def check_points_finite(path: Path, ids: np.ndarray, xyz: np.ndarray) -> None:
    """ColmapFormatError naming the file and the first point whose X, Y, Z is NaN or infinite."""
    with np.errstate(invalid="ignore"):  # the scene keeps points as float32: 1e300 would become infinity
        bad = ~(np.isfinite(xyz) & (np.abs(xyz) <= np.finfo(np.float32).max)).all(axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ColmapFormatError(f"{path}: point {int(ids[first])}: X Y Z {xyz[first].tolist()} is not finite "
                                f"({int(bad.sum()):,} such points); the model is damaged: export it again")


# --------------------------------------------------------------------------------------------------
# text reading


_DECLARED = re.compile(r"^#\s*Number of (cameras|images|points):\s*(\d+)", re.MULTILINE)


def _text_lines(path: Path, empty_ok: bool = False) -> list[tuple[int, str]]:
    """(line number, text) of every non-comment line (blank lines kept: images.txt needs them). An empty file
    is refused (COLMAP writes its comment header even for an empty model) unless ``empty_ok``: COLMAP's own
    "reconstruct from known poses" recipe has users create an empty points3D.txt."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as e:
        raise ColmapFormatError(f"cannot read COLMAP file {path}: {e}") from e
    if not text and empty_ok:
        return []
    if not text:
        raise ColmapFormatError(f"{path}: the file is empty (0 bytes); COLMAP writes a header even for an empty "
                                f"model: export the model again")
    return [(i + 1, ln.rstrip("\r\n")) for i, ln in enumerate(text.split("\n")) if not ln.lstrip().startswith("#")]


def check_declared_count(path: Path, what: str, found: int) -> None:
    """ColmapFormatError when the header comment COLMAP (and splatforge) writes, ``# Number of <what>: N``,
    disagrees with the ``found`` records: a text model cut after a whole record would otherwise load as a
    smaller model (a file cut at a line boundary looks like a complete one). Files without that comment are not
    checked; a model edited by hand (records deleted) must update or delete the comment: the message says so."""
    with open(path, "rb") as f:
        head = f.read(4096).decode("utf-8", "replace")
    m = _DECLARED.search(head)
    if m and m.group(1) == what and int(m.group(2)) != found:
        raise ColmapFormatError(f"{path}: its header says {m.group(2)} {what} but it holds {found}; the file is cut "
                                f"short or damaged: export the model again (records removed by hand: correct or "
                                f"delete the '# Number of {what}' line)")


def _parse(path: Path, lineno: int, what: str, fn, token):
    try:
        return fn(token)
    except (ValueError, OverflowError):
        raise ColmapFormatError(f"{path}, line {lineno}: cannot parse {what} from {token!r}") from None


def _parse_int(path: Path, lineno: int, what: str, token, lo: int = -INT64_MAX - 1, hi: int = INT64_MAX) -> int:
    """An integer token within [lo, hi] (default: int64, what the arrays hold); ColmapFormatError naming the
    file and line otherwise."""
    value = _parse(path, lineno, what, int, token)
    if not lo <= value <= hi:
        raise ColmapFormatError(f"{path}, line {lineno}: {what} {token[:40]} is outside {lo}..{hi}")
    return value


def read_cameras_text(path: Path) -> dict[int, ColmapCamera]:
    """Read ``cameras.txt`` -> {camera_id: ColmapCamera}."""
    cameras: dict[int, ColmapCamera] = {}
    for lineno, line in _text_lines(path):
        tok = line.split()
        if not tok:
            continue
        if len(tok) < 4:
            raise ColmapFormatError(f"{path}, line {lineno}: expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS[]")
        cam_id = _parse_int(path, lineno, "camera id", tok[0])
        model = tok[1]
        if model not in NUM_PARAMS:
            raise ColmapFormatError(f"{path}, line {lineno}: unknown camera model {model!r}")
        if len(tok) - 4 != NUM_PARAMS[model]:
            raise ColmapFormatError(
                f"{path}, line {lineno}: camera model {model} takes {NUM_PARAMS[model]} params, got {len(tok) - 4}"
            )
        width = _parse_int(path, lineno, "width", tok[2])
        height = _parse_int(path, lineno, "height", tok[3])
        params = np.array([_parse(path, lineno, "params", float, t) for t in tok[4:]], dtype=np.float64)
        cameras[cam_id] = ColmapCamera(cam_id, model, width, height, params)
    check_declared_count(path, "cameras", len(cameras))
    return cameras


def _parse_points2d(path: Path, lineno: int, line: str) -> tuple[np.ndarray, np.ndarray]:
    tok = line.split()
    if len(tok) % 3:
        raise ColmapFormatError(f"{path}, line {lineno}: 2D points must be triples X Y POINT3D_ID, got {len(tok)} values")
    try:
        xys = np.array([float(t) for t in tok[0::3]] + [float(t) for t in tok[1::3]], dtype=np.float64)
        ids = np.array([int(t) for t in tok[2::3]], dtype=np.int64)
    except (ValueError, OverflowError) as e:
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
        image_id = _parse_int(path, lineno, "image id", tok[0])
        q = np.array([_parse(path, lineno, "qvec", float, t) for t in tok[1:5]])
        t = np.array([_parse(path, lineno, "tvec", float, t) for t in tok[5:8]])
        cam_id = _parse_int(path, lineno, "camera id", tok[8])
        xys, ids = np.zeros((0, 2)), np.zeros((0,), np.int64)
        if i < len(lines):
            xys, ids = _parse_points2d(path, lines[i][0], lines[i][1])
            i += 1
        images[image_id] = ColmapImage(image_id, q, t, cam_id, tok[9], xys, ids)
    check_declared_count(path, "images", len(images))
    return images


def read_points3D_text(path: Path) -> ColmapPoints:
    """Read ``points3D.txt`` -> ColmapPoints."""
    ids, xyz, rgb, errors, tracks = [], [], [], [], []
    for lineno, line in _text_lines(path, empty_ok=True):
        tok = line.split()
        if not tok:
            continue
        if len(tok) < 8 or (len(tok) - 8) % 2:
            raise ColmapFormatError(
                f"{path}, line {lineno}: expected POINT3D_ID X Y Z R G B ERROR then (IMAGE_ID, POINT2D_IDX) pairs"
            )
        ids.append(_parse_int(path, lineno, "point id", tok[0]))
        xyz.append([_parse(path, lineno, "xyz", float, t) for t in tok[1:4]])
        rgb.append([_parse_int(path, lineno, "rgb", t, 0, 255) for t in tok[4:7]])
        errors.append(_parse(path, lineno, "error", float, tok[7]))
        tracks.append(np.array([_parse_int(path, lineno, "track", t) for t in tok[8:]], np.int64).reshape(-1, 2))
    check_declared_count(path, "points", len(ids))
    if not ids:
        return ColmapPoints.empty()
    check_points_finite(path, np.array(ids, np.int64), np.array(xyz, np.float64))
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


def colmap_world_to_cam(image: ColmapImage) -> np.ndarray:
    """[4, 4] float64 world-to-camera (OpenCV axes; COLMAP's own convention, no axis change)."""
    w2c = np.eye(4)
    q = np.asarray(image.qvec, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):  # a zero qvec gives NaN, refused at load
        w2c[:3, :3] = quat_to_rotmat_np(q / np.linalg.norm(q))
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
    if dist is not None and camera_problem(cam) is None:  # (check_cameras names the other problems)
        try:
            undistorted_intrinsics(camera.model, coeffs, K, camera.width, camera.height)
        except UndistortError as e:
            raise ColmapFormatError(f"{cameras_file}: camera {camera.id}: {e}") from None
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
