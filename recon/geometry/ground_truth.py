"""Ground-truth depth and normal images of a test view, decoded into our conventions.

Two sources (datasets/README.md "Ground-truth depth and normals" documents both encodings):

- ``mesh``: datasets written by scripts/make_mesh_dataset.py: ``r_K_depth.png`` (16-bit, camera z =
  value / ``depth_scale`` from transforms_test.json, 0 = no hit) and ``r_K_normal.png`` (8-bit RGB,
  world-frame n = value / 255 x 2 - 1; alpha of ``r_K.png`` says where the mesh is).
- ``nerf_synthetic``: NeRF-synthetic's test ``r_K_depth_0001.png`` / ``r_K_normal_0001.png`` (lego_400):
  distance from the camera centre along the pixel's ray = :data:`LEGO_DEPTH_A` x value / 255 +
  :data:`LEGO_DEPTH_B` (fitted from multi-view consistency by scripts/lego_gt_encoding.py: 8 (1 - v / 255)),
  converted here to camera z; normals world frame with negative components clipped to
  0 (value / 255 = max(n, 0)), so only pixels whose decoded vector has unit length (no clipped component)
  carry a usable normal.

:func:`load_gt` returns full-resolution maps; :func:`downscale_gt` brings them to a run's data factor by
f x f blocks (a block is valid only when all its pixels are: no mixing across silhouettes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recon.core.limits import load_json, read_image_size, with_path
from recon.core.errors import UsageError

# NeRF-synthetic test depth PNG: ray distance = A * v / 255 + B (datasets/README.md says how it was found)
LEGO_DEPTH_A = -8.0
LEGO_DEPTH_B = 8.0
UNIT_NORM_TOL = 0.03  # |value / 255| within this of 1: no component was clipped


class GroundTruthError(UsageError):
    """A test view's ground-truth depth or normal image is missing or unreadable."""


@dataclass
class GroundTruth:
    """depth [H, W] float64 camera z (0 = none), depth_valid [H, W] bool, normals [H, W, 3] float64 world
    frame (unit where normal_valid), normal_valid [H, W] bool."""

    depth: np.ndarray
    depth_valid: np.ndarray
    normals: np.ndarray
    normal_valid: np.ndarray


def detect_source(root: Path) -> str | None:
    """"mesh" (transforms_test.json has depth_scale), "nerf_synthetic" (test images have _depth_0001.png
    siblings), or None (no ground truth)."""
    meta_path = Path(root) / "transforms_test.json"
    if not meta_path.is_file():
        return None
    meta = load_json(meta_path, "JSON file", with_path(GroundTruthError), allow_nan=True)
    if not isinstance(meta, dict):
        raise GroundTruthError(f"{meta_path}: expected a JSON object")
    if "depth_scale" in meta:
        return "mesh"
    frames = meta.get("frames", [])
    if frames and (Path(root) / (frames[0]["file_path"].removeprefix("./") + "_depth_0001.png")).is_file():
        return "nerf_synthetic"
    return None


def _read(path: Path) -> np.ndarray:
    import imageio.v3 as iio

    if not path.is_file():
        raise GroundTruthError(f"{path}: ground-truth image missing")
    read_image_size(path, "ground-truth image",  # pixel limit, before decoding
                    lambda p, problem: GroundTruthError(f"{p}: not a readable image ({problem})"))
    try:
        return np.asarray(iio.imread(path))
    except (OSError, ValueError) as err:  # PIL's UnidentifiedImageError is an OSError
        raise GroundTruthError(f"{path}: not a readable image ({err})") from err


def load_gt(root: Path, name: str, source: str) -> GroundTruth:
    """Ground truth of test frame ``name`` (its file_path without "./", e.g. "test/r_0") in dataset ``root``."""
    root = Path(root)
    if source == "mesh":
        scale = float(load_json(root / "transforms_test.json", "JSON file", with_path(GroundTruthError),
                                allow_nan=True)["depth_scale"])
        depth = _read(root / f"{name}_depth.png").astype(np.float64) / scale
        normal_v = _read(root / f"{name}_normal.png")[..., :3].astype(np.float64) / 255.0
        alpha = _read(root / f"{name}.png")[..., 3]
        valid = (alpha == 255) & (depth > 0)
        n = normal_v * 2 - 1
        n /= np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-12)
        return GroundTruth(np.where(valid, depth, 0.0), valid, np.where(valid[..., None], n, 0.0), valid)
    if source == "nerf_synthetic":
        return _load_nerf_synthetic(root, name)
    raise UsageError(f"unknown ground-truth source {source!r}")


def _load_nerf_synthetic(root: Path, name: str) -> GroundTruth:
    from scipy.ndimage import binary_erosion

    dep = _read(root / f"{name}_depth_0001.png")[..., 0].astype(np.float64) / 255.0
    nv = _read(root / f"{name}_normal_0001.png")[..., :3].astype(np.float64) / 255.0
    alpha = _read(root / f"{name}.png")[..., 3]
    # interior object pixels: the 2x box downscale of lego_400 mixed silhouette pixels with the background
    valid = binary_erosion(alpha == 255, iterations=1) & (dep > 0)
    meta = load_json(root / "transforms_test.json", "JSON file", with_path(GroundTruthError), allow_nan=True)
    h, w = dep.shape
    f = 0.5 * w / np.tan(0.5 * float(meta["camera_angle_x"]))
    ys, xs = np.mgrid[0:h, 0:w] + 0.5
    ray_len = np.sqrt(1 + ((xs - w / 2) / f) ** 2 + ((ys - h / 2) / f) ** 2)  # per unit of camera z
    depth = np.where(valid, (LEGO_DEPTH_A * dep + LEGO_DEPTH_B) / ray_len, 0.0)
    depth_valid = valid
    norm = np.linalg.norm(nv, axis=-1)
    nvalid = valid & (np.abs(norm - 1) < UNIT_NORM_TOL)
    n = np.where(nvalid[..., None], nv / np.maximum(norm, 1e-12)[..., None], 0.0)
    return GroundTruth(depth, depth_valid, n, nvalid)


def downscale_gt(gt: GroundTruth, factor: int) -> GroundTruth:
    """``gt`` averaged over ``factor`` x ``factor`` blocks (image sizes divisible by it, as data factors
    require); a block is valid only where all its pixels are (normals renormalised)."""
    if factor == 1:
        return gt
    h, w = gt.depth.shape
    if h % factor or w % factor:
        raise UsageError(f"ground truth {w}x{h} is not divisible by the data factor {factor}")

    def blocks(a):
        return a.reshape(h // factor, factor, w // factor, factor, *a.shape[2:])

    dv = blocks(gt.depth_valid).all(axis=(1, 3))
    nv = blocks(gt.normal_valid).all(axis=(1, 3))
    depth = np.where(dv, blocks(gt.depth).mean(axis=(1, 3)), 0.0)
    n = blocks(gt.normals).mean(axis=(1, 3))
    n = n / np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-12)
    return GroundTruth(depth, dv, np.where(nv[..., None], n, 0.0), nv)
