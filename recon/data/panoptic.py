"""CMU Panoptic as preprocessed by Dynamic 3D Gaussians (Luiten et al., 3DV 2024): a synchronised camera rig.

Layout (``DIR``):

- ``train_meta.json`` and ``test_meta.json``, each with ``w``, ``h`` (image size), and per time step k (T of
  them) per camera c: ``k`` [T][C][3][3] intrinsics in pixels, ``w2c`` [T][C][4][4] world-to-camera (OpenCV
  axes, as ours; files that store camera-to-world there, as HFU's classroom capture does, are recognised by
  the rig's geometry and inverted, with a note: :func:`recon.data.rig.rig_pose_direction`), ``fn`` [T][C] image file names relative to ``ims/`` (``<cam>/<k:06d>.jpg``) and ``cam_id``
  [T][C];
- ``ims/<cam>/<k:06d>.jpg`` the images; optional ``seg/<cam>/<k:06d>.png`` foreground segmentations of
  the people (non-zero = person). They are ``Frame.segmentation_path``, **not** loss masks: Dynamic 3D
  Gaussians supervises the whole image (dome and floor too), so ``mask_path`` stays None;
- optional ``init_pt_cld.npz`` with ``data`` [P, >= 6]: x, y, z, r, g, b (colours in [0, 1] or 0-255),
  further columns ignored. Without it the scene has no points, so training starts from random Gaussians in
  the region the cameras look at (datasets/README.md).

Times: step k of T is t = k / (T - 1) (both metas must have the same T); ``Scene.duration`` is (T - 1) / 30 s
(the HD cameras' rate, consecutive frames). Background black (the captures
have no alpha). ``source_format`` "panoptic".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from recon.core.limits import ZIP_ERRORS, check_npz, memory_guard, with_path
from recon.data.finalize import finalize_frames
from recon.data.rig import rig_pose_direction
from recon.data.scene import BLACK, DataFormatError, Frame, Scene, make_camera, read_json_object

META_FILES = {"train": "train_meta.json", "test": "test_meta.json"}
FPS = 30.0  # Panoptic's HD cameras; Dynamic 3D Gaussians keeps consecutive frames


def is_panoptic(path: Path) -> bool:
    """True when ``path`` holds Dynamic 3D Gaussians' ``train_meta.json``."""
    return (Path(path) / META_FILES["train"]).is_file()


def read_meta(path: Path) -> dict:
    """A meta JSON object; DataFormatError naming the file when missing or malformed."""
    return read_json_object(path, "a JSON object with w, h, k, w2c, fn")


def _per_step(meta: dict, key: str, path: Path) -> list:
    value = meta.get(key)
    if not isinstance(value, list) or not value:
        raise DataFormatError(f"{path}: '{key}' must be a non-empty list (one entry per time step), "
                              f"got {type(value).__name__}")
    return value


def meta_arrays(meta: dict, path: Path) -> tuple[np.ndarray, np.ndarray, list[list[str]], int, int]:
    """(K [T, C, 3, 3], w2c [T, C, 4, 4], fn [T][C], width, height) of one meta file, checked: every per-step
    array has T entries of C cameras; DataFormatError naming the file and the array that disagrees."""
    try:
        width, height = int(meta["w"]), int(meta["h"])
    except (KeyError, TypeError, ValueError):
        raise DataFormatError(f"{path}: needs integer 'w' and 'h' (the image size)") from None
    fn = _per_step(meta, "fn", path)
    T, C = len(fn), len(fn[0])
    shapes = {"k": (T, C, 3, 3), "w2c": (T, C, 4, 4)}
    arrays = {}
    for key, shape in shapes.items():
        value = _per_step(meta, key, path)
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise DataFormatError(f"{path}: '{key}' is ragged or not numeric (expected {shape[1]} cameras of "
                                  f"{shape[2]}x{shape[3]} per time step)") from None
        if arr.shape != shape:
            raise DataFormatError(f"{path}: '{key}' has shape {arr.shape}, but 'fn' lists {T} time steps of {C} "
                                  f"cameras, so it must be {shape}; the meta file's arrays disagree")
        arrays[key] = arr
    if any(not isinstance(row, list) or len(row) != C for row in fn):
        raise DataFormatError(f"{path}: 'fn' must list the same {C} cameras at every time step")
    if "cam_id" in meta and np.shape(meta["cam_id"])[:2] != (T, C):
        raise DataFormatError(f"{path}: 'cam_id' has shape {np.shape(meta['cam_id'])}, expected ({T}, {C}, ...)")
    return arrays["k"], arrays["w2c"], fn, width, height


def pose_direction(w2c: np.ndarray) -> str:
    """How to read a meta file's ``w2c`` [T, C, 4, 4]: :func:`recon.data.rig.rig_pose_direction` of its cameras
    at the first time step ("cam_to_world" for files that store camera-to-world under that key)."""
    return rig_pose_direction(w2c[0])


def load_split(root: Path, split: str, data_factor: int, cache_dir: Path | None,
               fallback: str = "world_to_cam") -> tuple[list[Frame], int, str]:
    """(frames, T, direction) of one split; frames ordered time-major, named ``ims/<fn>``. ``direction``: how
    its ``w2c`` matrices are read ("world_to_cam" or "cam_to_world"): :func:`pose_direction` of the split's own
    cameras when it has at least two, else ``fallback`` (the train split's, for a test split of one camera)."""
    path = root / META_FILES[split]
    K, w2c, fn, width, height = meta_arrays(read_meta(path), path)
    direction = pose_direction(w2c) if w2c.shape[1] >= 2 else fallback
    if direction == "cam_to_world":
        w2c = np.linalg.inv(w2c)
    T = K.shape[0]
    raw = []
    for k in range(T):
        t = k / (T - 1) if T > 1 else 0.0
        for c, name in enumerate(fn[k]):
            name = str(name)
            seg = root / "seg" / Path(name).with_suffix(".png")
            seg = seg if seg.exists() or seg.is_symlink() else None  # a folder or FIFO there: refused when read
            frame = Frame(f"ims/{name}", root / "ims" / name, make_camera(w2c[k, c], K[k, c], width, height),
                          mask_path=None, time=t, segmentation_path=seg)
            raw.append((frame, None))
    return finalize_frames(raw, root, path, data_factor, cache_dir), T, direction


MAX_POINT_CLOUD_BYTES = 1 << 28
"""init_pt_cld.npz's ceiling (256 MB: 4.8M points of 7 float64; Dynamic 3D Gaussians' captures hold about 300k):
a 3 MB archive can declare gigabytes of deflated zeros that the deflate ratio alone allows."""


def load_points(root: Path) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(points [P, 3] float32, colours [P, 3] uint8) from ``init_pt_cld.npz``, or (None, None) without it."""
    path = root / "init_pt_cld.npz"
    if not path.exists() and not path.is_symlink():  # a folder, FIFO or device under the name: refused below
        return None, None
    check_npz(path, "initial point cloud", with_path(DataFormatError), MAX_POINT_CLOUD_BYTES)  # before allocating
    try:
        with memory_guard(str(path), DataFormatError), np.load(path) as npz:
            data: Any = np.asarray(npz["data"], dtype=np.float64)
    except (OSError, ValueError, KeyError, *ZIP_ERRORS) as e:
        raise DataFormatError(f"{path}: cannot read the initial point cloud ('data' [P, >= 6]): {e}") from None
    if data.ndim != 2 or data.shape[1] < 6 or not np.isfinite(data[:, :6]).all():
        raise DataFormatError(f"{path}: 'data' must be [P, >= 6] finite (x, y, z, r, g, b, ...), got {data.shape}")
    rgb = data[:, 3:6]
    rgb = rgb * 255.0 if rgb.max(initial=0.0) <= 1.0 else rgb
    return data[:, :3].astype(np.float32), np.clip(np.round(rgb), 0, 255).astype(np.uint8)


def load_panoptic(root: Path, data_factor: int = 1, cache_dir: Path | None = None,
                  background: tuple[float, float, float] | None = None) -> Scene:
    """Load a Dynamic-3DGS Panoptic folder (module docstring) as a dynamic :class:`Scene`."""
    root = Path(root)
    train, t_train, direction = load_split(root, "train", data_factor, cache_dir)
    if (root / META_FILES["test"]).is_file():
        test, t_test, test_direction = load_split(root, "test", data_factor, cache_dir, direction)
        if t_test != t_train:
            raise DataFormatError(f"{root}: train_meta.json has {t_train} time steps but test_meta.json {t_test}; "
                                  f"both must cover the same clip")
    else:
        test, test_direction = [], "world_to_cam"
    points, colors = load_points(root)
    notes = [f"{root / META_FILES[split]}: its 'w2c' matrices are camera-to-world (read as world-to-camera, the "
             f"cameras' optical axes meet behind them; inverted, in front of them): read as camera-to-world"
             for split, d in (("train", direction), ("test", test_direction)) if d == "cam_to_world"]
    return Scene(train, test, points, colors, background or BLACK, "panoptic", root, duration=(t_train - 1) / FPS,
                 notes=notes)
