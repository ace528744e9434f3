"""Scene model shared by every dataset loader, plus image loading, downscaling and caching.

Conventions (rasterizer/CONVENTIONS.md): cameras use OpenCV axes (x right, y down, z forward),
``world_to_cam`` [4, 4] float32 with ``x_cam = R x_world + t``, intrinsics ``K`` [3, 3] in pixels with
pixel (i, j) centred at (i + 0.5, j + 0.5). Images are sRGB float32 ``[H, W, 3]`` in [0, 1].

Loaders convert their file convention to ours once, build :class:`Frame` objects, and hand them to
:func:`recon.data.finalize.finalize_frames`, which undistorts distorted cameras (:mod:`recon.data.undistort`,
cached on disk) and applies the ``data_factor`` downscale (here, cached on disk) so training always sees
pinhole cameras. This module is the bottom of ``recon.data``: it imports no other loader module.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from rasterizer.camera import Camera
from recon.core.atomic import atomic_open, atomic_write_bytes
from recon.core.errors import SplatforgeError, UsageError
from recon.core.limits import load_json, open_image, read_image_size, with_path

WHITE = (1.0, 1.0, 1.0)
BLACK = (0.0, 0.0, 0.0)
TEST_EVERY = 8  # 3DGS / mip-NeRF 360 "llffhold": every 8th image (sorted by name) is a test image


class DataFormatError(SplatforgeError, ValueError):
    """A dataset file is missing, truncated, inconsistent or unsupported; the message names the file."""


class MissingImageError(DataFormatError):
    """An image (or mask) listed by a dataset file does not exist or cannot be decoded."""


@dataclass
class Distortion:
    """Lens distortion of a raw (not yet undistorted) camera.

    Attributes:
        model: COLMAP model name: SIMPLE_RADIAL, RADIAL, OPENCV or OPENCV_FISHEYE (see
            :func:`recon.data.undistort.distort_points` for the coefficient order of each).
        coeffs: [D] float64 distortion coefficients only (no focal length or principal point).
    """

    model: str
    coeffs: np.ndarray


@dataclass
class Frame:
    """One image with its camera.

    Attributes:
        name: unique name inside the scene (file name relative to the dataset's image folder).
        image_path: image file (RGB or RGBA) whose size is ``camera.width x camera.height``.
        camera: pinhole :class:`Camera`; ``world_to_cam`` [4, 4] float32 (OpenCV axes), ``K`` [3, 3]
            float32 in pixels.
        mask_path: optional single-channel **loss mask** of the same size (non-zero = keep: pixels outside
            it are not supervised), e.g. nerfstudio's ``mask_path``.
        time: normalised time in [0, 1] for dynamic scenes, else None.
        segmentation_path: optional single-channel foreground segmentation of the same size (non-zero =
            foreground), e.g. Dynamic 3D Gaussians' ``seg/``; never a loss mask: the whole image is
            supervised (datasets/README.md, "What masks mean").
        video_frame: for a frame of a video (``image_path`` is the video), its index in the video, else None;
            read through :mod:`recon.data.video_frames` (:class:`recon.data.frame_images.FrameImages` does).
        frames_dir: the on-disk frame cache folder (:mod:`recon.data.frame_cache`) holding a video frame's
            decoded image, or None.
    """

    name: str
    image_path: Path
    camera: Camera
    mask_path: Path | None = None
    time: float | None = None
    segmentation_path: Path | None = None
    video_frame: int | None = None
    frames_dir: Path | None = None

    @property
    def width(self) -> int:
        return self.camera.width

    @property
    def height(self) -> int:
        return self.camera.height


@dataclass
class Scene:
    """A loaded dataset in our conventions.

    Attributes:
        frames_train, frames_test: frames of each split (pinhole cameras, undistorted, downscaled).
        points: [P, 3] float32 initial points in world coordinates, or None.
        point_colors: [P, 3] uint8 colours of ``points``, or None.
        background: RGB in [0, 1] that RGBA images are composited on (white for Blender).
        source_format: "colmap", "nerfstudio", "blender" or "dnerf".
        root: dataset folder.
        point_times: [P] float32 normalised times of ``points`` (dynamic scenes that have them), or None.
        duration: seconds of real time that the frames' normalised times [0, 1] span (captured videos), for
            playback; None when unknown or static.
        avatar: a skinned template and its poses (:class:`recon.avatar.avatar_data.AvatarData`) for avatar
            captures (frames' times name their poses; docs/avatars.md), else None.
        notes: one-line remarks on what the loader decided that a user should read (the trainer logs them),
            e.g. that a file's camera matrices were read as camera-to-world (:mod:`recon.data.rig`).
    """

    frames_train: list[Frame]
    frames_test: list[Frame]
    points: np.ndarray | None = None
    point_colors: np.ndarray | None = None
    background: tuple[float, float, float] = WHITE
    source_format: str = ""
    root: Path | None = None
    point_times: np.ndarray | None = None
    duration: float | None = None
    avatar: object | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def frames(self) -> list[Frame]:
        """All frames, train first."""
        return self.frames_train + self.frames_test

    def nerfpp_norm(self) -> tuple[np.ndarray, float]:
        """(centre [3], radius) of the training cameras, as 3DGS ``getNerfppNorm``; see :func:`nerfpp_norm`."""
        return nerfpp_norm(self.frames_train or self.frames_test)

    @property
    def extent(self) -> float:
        """Scene extent: 1.1 x the largest distance of a training camera centre from their mean."""
        return self.nerfpp_norm()[1]

    def load_image(self, frame: Frame) -> np.ndarray:
        """Frame image as float32 [H, W, 3] in [0, 1], RGBA composited on ``self.background``."""
        return load_image(frame, self.background)


# --------------------------------------------------------------------------------------------------
# small geometry helpers


def camera_centers(frames: Sequence[Frame]) -> np.ndarray:
    """[N, 3] float64 camera centres in world coordinates: ``-R^T t`` of each ``world_to_cam``."""
    w2c = np.stack([f.camera.world_to_cam.detach().cpu().double().numpy() for f in frames])
    R, t = w2c[:, :3, :3], w2c[:, :3, 3]
    return -np.einsum("nji,nj->ni", R, t)


def nerfpp_norm(frames: Sequence[Frame]) -> tuple[np.ndarray, float]:
    """(centre [3], radius): mean camera centre and 1.1 x the largest distance of a centre from it."""
    if not frames:
        raise ValueError("nerfpp_norm: no frames")
    centers = camera_centers(frames)
    center = centers.mean(axis=0)
    radius = float(np.linalg.norm(centers - center, axis=1).max()) * 1.1
    return center, radius


def make_camera(world_to_cam: np.ndarray, K: np.ndarray, width: int, height: int) -> Camera:
    """Pinhole :class:`Camera` from float64 numpy ``world_to_cam`` [4, 4] and ``K`` [3, 3] (stored float32)."""
    return Camera(
        world_to_cam=torch.as_tensor(np.asarray(world_to_cam, dtype=np.float32)),
        K=torch.as_tensor(np.asarray(K, dtype=np.float32)),
        width=int(width),
        height=int(height),
    )


def intrinsics_matrix(fx: float, fy: float, cx: float, cy: float) -> np.ndarray:
    """[3, 3] float64 ``K = [[fx, 0, cx], [0, fy, cy], [0, 0, 1]]``."""
    return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]], dtype=np.float64)


def split_every_nth(frames: Sequence[Frame], n: int = TEST_EVERY) -> tuple[list[Frame], list[Frame]]:
    """(train, test): frames sorted by name; index ``i % n == 0`` goes to test (3DGS ``llffhold``)."""
    ordered = sorted(frames, key=lambda f: f.name)
    if n <= 0:
        return ordered, []
    test = [f for i, f in enumerate(ordered) if i % n == 0]
    train = [f for i, f in enumerate(ordered) if i % n != 0]
    return train, test


# --------------------------------------------------------------------------------------------------
# image loading


def _read_pil(path: Path, what: str = "image"):
    """Open and decode an image with Pillow under the reader rules (recon.core.limits.open_image: a regular
    file, a pixel limit checked before decoding); MissingImageError naming the file on failure
    (``<path>: image file not found`` for a missing one)."""
    return open_image(Path(path), what=what, error=with_path(MissingImageError))


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) of an image file, reading only its header (at most MAX_IMAGE_PIXELS pixels);
    MissingImageError naming the file (``<path>: image file not found`` for a missing one)."""
    return read_image_size(Path(path), error=with_path(MissingImageError))


def check_image_size(path: Path, size: tuple[int, int], width: int, height: int, what: str = "image") -> None:
    """MissingImageError unless an image of ``size`` (w, h) is its camera's ``width x height``.

    Same at every data factor: a source image is never stretched to fit. When only the scale differs
    (same aspect ratio) the message says that scaling the camera would fit.
    """
    if tuple(size) == (width, height):
        return
    w, h = size
    if w > 0 and h > 0 and abs(w * height - h * width) <= max(w, width):  # aspect equal to ~1 px
        hint = (f"same aspect ratio, so resize the image to {width}x{height} or scale the camera's "
                f"intrinsics and size by {w / width:g}")
    else:
        hint = "a different aspect ratio: check that the dataset lists the right image for this camera"
    raise MissingImageError(f"{what} file {path} is {w}x{h}, its camera expects {width}x{height} ({hint})")


SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I")  # Pillow's modes of 16-bit greyscale images


def is_16bit(im) -> bool:
    """Whether a Pillow image is 16-bit greyscale (values 0..65535: ``convert("L")`` would clip them).

    16-bit colour PNGs are decoded by Pillow as 8-bit RGB(A) (the high byte: range kept, 8-bit precision,
    which is what training keeps in memory anyway)."""
    return im.mode in SIXTEEN_BIT_MODES


def to_float_rgba(im) -> np.ndarray:
    """Pillow image -> float32 [H, W, 4] in [0, 1] (alpha 1 where the image has none)."""
    if is_16bit(im):
        arr = np.asarray(im, dtype=np.float32) / 65535.0
        arr = np.repeat(arr[..., None], 3, axis=-1)
        return np.concatenate([arr, np.ones_like(arr[..., :1])], axis=-1)
    if im.mode != "RGBA":
        im = im.convert("RGBA")
    return np.asarray(im, dtype=np.float32) / 255.0


def composite(rgba: np.ndarray, background: Sequence[float]) -> np.ndarray:
    """float32 [H, W, 4] straight-alpha RGBA -> [H, W, 3] RGB composited on ``background`` (RGB in [0, 1])."""
    bg = np.asarray(background, dtype=np.float32).reshape(1, 1, 3)
    alpha = rgba[..., 3:4]
    return (rgba[..., :3] * alpha + bg * (1.0 - alpha)).astype(np.float32)


def load_image(frame: Frame, background: Sequence[float] = WHITE) -> np.ndarray:
    """Image of ``frame`` as float32 [H, W, 3] in [0, 1]; RGBA is composited on ``background``.

    Raises MissingImageError (a ValueError) naming the file when it is missing, unreadable, or not
    ``frame.width x frame.height``.
    """
    if frame.video_frame is not None:
        raise MissingImageError(f"{frame.image_path}: frame {frame.video_frame} of a video: read it with "
                                f"recon.data.frame_images.FrameImages")
    im = _read_pil(frame.image_path)
    check_image_size(frame.image_path, im.size, frame.width, frame.height)
    return composite(to_float_rgba(im), background)


def load_image_tensor(frame: Frame, background: Sequence[float] = WHITE) -> torch.Tensor:
    """:func:`load_image` as a torch float32 tensor [H, W, 3]."""
    return torch.from_numpy(load_image(frame, background))


def _read_single_channel(path: Path, frame: Frame, what: str) -> np.ndarray:
    """float32 [H, W] in [0, 1] of a single-channel image ``path`` (RGBA/LA: its alpha; 16-bit keeps its
    range) that must be ``frame``'s size; MissingImageError naming the file otherwise."""
    im = _read_pil(path, what=what)
    if im.size != (frame.width, frame.height):
        raise MissingImageError(
            f"{what} file {path} is {im.size[0]}x{im.size[1]}, expected {frame.width}x{frame.height}"
        )
    if im.mode in ("RGBA", "LA"):
        im = im.getchannel("A")
    if is_16bit(im):  # 16-bit masks keep their range (convert("L") would clip them to 255)
        return np.clip(np.asarray(im, dtype=np.float32) / 65535.0, 0.0, 1.0)
    return np.asarray(im.convert("L"), dtype=np.float32) / 255.0


def load_mask(frame: Frame) -> np.ndarray | None:
    """Loss mask of ``frame`` as float32 [H, W] in [0, 1] (1 = keep), or None when the frame has none."""
    if frame.mask_path is None:
        return None
    return _read_single_channel(frame.mask_path, frame, "mask")


def load_segmentation(frame: Frame) -> np.ndarray | None:
    """Foreground segmentation of ``frame`` as float32 [H, W] in [0, 1] (1 = foreground), or None when the
    frame has none. Not a loss mask (see :class:`Frame`)."""
    if frame.segmentation_path is None:
        return None
    return _read_single_channel(frame.segmentation_path, frame, "segmentation")


# --------------------------------------------------------------------------------------------------
# cache folders and atomic writes


def read_json_object(path: Path, expected: str) -> dict:
    """A JSON file holding an object; DataFormatError naming the file when it is missing, not JSON, or not
    an object (``expected`` says what it should hold)."""
    path = Path(path)
    # NaN literals are let through: every field is checked where it is read, with a message naming it
    data = load_json(path, "JSON file", with_path(DataFormatError), allow_nan=True)
    if not isinstance(data, dict):
        raise DataFormatError(f"{path}: expected {expected}")
    return data


def default_cache_root(root: Path) -> Path:
    """Where derived images go: ``root`` itself when writable, else ``~/.cache/splatforge/<hash>``. A folder
    whose mode grants no write permission counts as read-only even for root (``os.access`` says yes to root:
    runs and tests as root wrote data-factor caches into the read-only ../shared data folders)."""
    root = Path(root).resolve()
    if os.access(root, os.W_OK) and root.stat().st_mode & 0o222:
        return root
    digest = hashlib.sha1(str(root).encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "splatforge" / f"{root.name}-{digest}"


def relative_to_root(path: Path, root: Path) -> Path:
    """``path`` relative to ``root``; files outside ``root`` map to ``external/<abs path>``."""
    path, root = Path(path).resolve(), Path(root).resolve()
    try:
        return path.relative_to(root)
    except ValueError:
        return Path("external", *path.parts[1:])


def downscaled_relpath(rel: Path, factor: int) -> Path:
    """``images/a.jpg`` -> ``images_N/a.jpg`` (top folder gets ``_N``); a bare file goes to ``downscaled_N/``."""
    if len(rel.parts) > 1:
        return Path(f"{rel.parts[0]}_{factor}", *rel.parts[1:])
    return Path(f"downscaled_{factor}", rel)


def undistorted_relpath(rel: Path) -> Path:
    """``images/a.jpg`` -> ``undistorted/images/a.png`` (lossless PNG)."""
    return Path("undistorted", rel).with_suffix(".png")


def save_image_atomic(im, path: Path) -> None:
    """Save a Pillow image in the format of ``path``'s suffix with :func:`recon.core.atomic.atomic_open`
    (replacing an existing file), so a crash leaves no half-written file. ValueError for a suffix
    Pillow cannot write."""
    from PIL import Image

    path = Path(path)
    suffix = path.suffix.lower()
    fmt = Image.registered_extensions().get(suffix)
    if fmt is None:
        raise ValueError(f"{path}: cannot write images with suffix {path.suffix!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, force=True) as f:
        if suffix in (".jpg", ".jpeg"):
            im.convert("RGB").save(f, format=fmt, quality=95, subsampling=0)
        else:
            im.save(f, format=fmt)


# --------------------------------------------------------------------------------------------------
# downscaling (--data-factor)


def downscaled_size(width: int, height: int, factor: int) -> tuple[int, int]:
    """Size of an image downscaled by ``factor``: (width // factor, height // factor)."""
    return max(1, width // factor), max(1, height // factor)


def scale_intrinsics(K: torch.Tensor, sx: float, sy: float) -> torch.Tensor:
    """[3, 3] K of an image resized by (sx, sy) over its full extent: fx, cx times sx; fy, cy times sy.

    Exact for our pixel convention (the image spans [0, W] x [0, H] before and after).
    """
    S = torch.tensor([[sx, 0.0, 0.0], [0.0, sy, 0.0], [0.0, 0.0, 1.0]], dtype=K.dtype)
    return S @ K


def _size_acceptable(size: tuple[int, int], width: int, height: int, factor: int) -> bool:
    """A pre-existing ``images_N`` file is used when within one pixel of ``(W/N, H/N)``."""
    return abs(size[0] - width / factor) <= 1.0 and abs(size[1] - height / factor) <= 1.0


RESIZABLE_MODES = ("RGB", "RGBA", "L", "LA", "I;16", "I")  # Pillow box-filters these as they are


def _resizable(im):
    """``im`` in a mode Pillow can area-resize without losing range: 16-bit stays 16-bit
    (big/little-endian "I;16B"/"I;16L" become native "I;16"), palettes and the rest become RGB(A)."""
    from PIL import Image

    if im.mode in RESIZABLE_MODES:
        return im
    if im.mode.startswith("I;16"):
        return Image.fromarray(np.asarray(im).astype(np.uint16), "I;16")
    return im.convert("RGBA" if "A" in im.getbands() else "RGB")


def _resize_file(src: Path, dst: Path, size: tuple[int, int], what: str) -> None:
    """Area-downscale ``src`` to ``size`` and save it at ``dst`` (RGBA is resized premultiplied by
    Pillow; 16-bit images keep 16 bits)."""
    from PIL import Image

    im = _resizable(_read_pil(src, what))
    save_image_atomic(im.resize(size, Image.BOX), dst)


def cache_key_path(derived: Path) -> Path:
    """Sidecar ``.<name>.source.json`` beside a derived (downscaled or undistorted) image."""
    derived = Path(derived)
    return derived.with_name(f".{derived.name}.source.json")


def _file_stamp(path: Path) -> dict:
    """What identifies a file's content cheaply: size in bytes and modification time (ns)."""
    st = Path(path).stat()
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _cache_key(derived: Path, src: Path, params: dict | None) -> dict:
    key = {"source": str(Path(src).resolve()), **_file_stamp(src), "derived": _file_stamp(derived)}
    if params is not None:
        key["params"] = params
    return key


def write_cache_key(derived: Path, src: Path, params: dict | None = None) -> None:
    """Record which source (path, size, mtime) ``derived`` was made from, and ``derived``'s own stamp
    (so a derived file rewritten after its key no longer matches), and the JSON-ready ``params`` it was
    made with when the source alone does not decide it (undistortion: the lens). Written atomically."""
    key = _cache_key(derived, src, params)
    atomic_write_bytes(cache_key_path(derived), json.dumps(key).encode(), force=True)


def cache_matches(derived: Path, src: Path, params: dict | None = None) -> bool | None:
    """True when ``derived``'s key matches ``src``, ``derived`` and ``params`` as they are now; False
    when the key is stale (source replaced, derived file changed, other params); None when ``derived``
    has no key (not made by us, e.g. a dataset's own ``images_N/``)."""
    if not os.path.lexists(cache_key_path(derived)):
        return None
    try:
        key = load_json(cache_key_path(derived), "cache key")
    except (OSError, ValueError):  # a damaged key (InputFileError is a ValueError): stale, made again
        return False
    return key == _cache_key(derived, src, params)


def _downscaled_file(
    src: Path, root: Path, cache_root: Path, width: int, height: int, factor: int, what: str
) -> Path:
    """Path of ``src`` downscaled by ``factor``.

    Reuses a dataset's own ``root/images_N`` file (no cache key) or a cached file whose key matches
    the source's size and mtime; otherwise checks that the source is ``width x height`` (as at factor
    1: never stretched) and writes the cache with its key.
    """
    rel = downscaled_relpath(relative_to_root(src, root), factor)
    has_source = Path(src).is_file()
    if has_source:
        check_image_size(src, image_size(src), width, height, what)
    candidates = [(Path(root) / rel, True)]  # a keyless file here may be the dataset's own images_N
    if Path(cache_root) / rel != Path(root) / rel:
        candidates.append((Path(cache_root) / rel, False))
    for candidate, keyless_ok in candidates:
        if not candidate.is_file():
            continue
        match = cache_matches(candidate, src) if has_source else True
        if (match or (match is None and keyless_ok)) and _size_acceptable(
                image_size(candidate), width, height, factor):
            return candidate
    if not has_source:
        raise MissingImageError(f"{what} file not found: {src}")
    dst = Path(cache_root) / rel
    _resize_file(src, dst, downscaled_size(width, height, factor), what)
    write_cache_key(dst, src)
    return dst


def downscale_frame(frame: Frame, factor: int, root: Path, cache_root: Path) -> Frame:
    """Frame with its image (and mask, segmentation) downscaled by ``factor`` and K scaled to the new size.

    K is scaled per axis by the size ratio actually produced; that is exact here because the source
    matches its camera and images_N files are within a pixel of (W/N, H/N), i.e. of the same aspect.
    """
    cam = frame.camera
    image = _downscaled_file(frame.image_path, root, cache_root, cam.width, cam.height, factor, "image")
    mask = None
    if frame.mask_path is not None:
        mask = _downscaled_file(frame.mask_path, root, cache_root, cam.width, cam.height, factor, "mask")
    seg = None
    if frame.segmentation_path is not None:
        seg = _downscaled_file(frame.segmentation_path, root, cache_root, cam.width, cam.height, factor,
                               "segmentation")
    new_w, new_h = image_size(image)
    K = scale_intrinsics(cam.K, new_w / cam.width, new_h / cam.height)
    camera = replace(cam, K=K, width=new_w, height=new_h)
    return replace(frame, image_path=image, mask_path=mask, segmentation_path=seg, camera=camera)


# --------------------------------------------------------------------------------------------------
# camera validation (at load time, so a bad test view fails the load and not the end of a run)

MIN_ROTATION_DET = 1e-12  # |det R| below this: an all-zero or collapsed pose (a rotation has det 1;
# a pose scaled by s has s^3, so this still admits s = 1e-4)


def camera_problem(camera: Camera) -> str | None:
    """What is wrong with a pinhole camera, or None: non-positive size, non-finite or non-positive
    focal lengths, a non-finite or singular ``world_to_cam``."""
    if camera.width <= 0 or camera.height <= 0:
        return f"image size {camera.width}x{camera.height} is empty (width and height must be positive)"
    K = camera.K.detach().cpu().double().numpy()
    if not np.isfinite(K).all():
        return "intrinsics K are not finite (NaN or Inf)"
    for name, value in (("fx", K[0, 0]), ("fy", K[1, 1])):
        if value <= 0:
            return f"focal length {name}={value:g} is not positive"
    w2c = camera.world_to_cam.detach().cpu().double().numpy()
    if not np.isfinite(w2c).all():
        return "camera pose (world_to_cam) is non-finite (NaN or Inf)"
    det = float(np.linalg.det(w2c[:3, :3]))
    if abs(det) < MIN_ROTATION_DET:
        return f"camera pose (world_to_cam) is all zeros or singular (rotation determinant {det:.3g})"
    return None


def check_cameras(frames: Sequence[Frame], listed_in: Path | str) -> None:
    """DataFormatError naming ``listed_in`` and the first frame whose camera is unusable."""
    for frame in frames:
        problem = camera_problem(frame.camera)
        if problem is not None:
            raise DataFormatError(f"{listed_in}: image {frame.name!r}: {problem}; fix or remove this frame")


# --------------------------------------------------------------------------------------------------
# putting it together


def check_files_exist(frames: Sequence[Frame], listed_in: Path | str) -> None:
    """MissingImageError naming the missing image/mask/segmentation files and the file that lists them."""
    missing = [str(f.image_path) for f in frames if not Path(f.image_path).is_file()]
    missing += [str(f.mask_path) for f in frames if f.mask_path is not None and not Path(f.mask_path).is_file()]
    missing += [str(f.segmentation_path) for f in frames
                if f.segmentation_path is not None and not Path(f.segmentation_path).is_file()]
    if missing:
        shown = ", ".join(missing[:5]) + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "")
        raise MissingImageError(f"{len(missing)} file(s) listed in {listed_in} not found: {shown}")


def _map_threads(fn: Callable, items: Sequence, workers: int | None = None) -> list:
    """``[fn(x) for x in items]`` on a small thread pool (Pillow and numpy release the GIL)."""
    workers = workers or min(8, (os.cpu_count() or 1) + 1)
    if len(items) <= 1 or workers <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))
