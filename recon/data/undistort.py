"""Lens distortion: the distortion math on normalised coordinates, undistorted pinhole intrinsics,
image resampling, and undistorting a dataset frame into a pinhole one (cached on disk).

Distortion acts on normalised image coordinates ``xy = (X/Z, Y/Z)``; pixel ``u = fx * x_d + cx``
(pixel centres at +0.5, as COLMAP's). Models and coefficient orders are COLMAP's (SIMPLE_RADIAL,
RADIAL, OPENCV, OPENCV_FISHEYE; see :func:`distort_points`). Used by the COLMAP and nerfstudio loaders
through :func:`recon.data.finalize.finalize_frames`; depends only on :mod:`recon.data.scene` below it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from recon.data.scene import (
    DataFormatError,
    Distortion,
    Frame,
    _read_pil,
    cache_matches,
    is_16bit,
    image_size,
    intrinsics_matrix,
    make_camera,
    relative_to_root,
    save_image_atomic,
    undistorted_relpath,
    write_cache_key,
)

UNDISTORT_CHUNK_PIXELS = 1 << 20  # pixels remapped per block in undistort_image


class UnsupportedCameraModelError(DataFormatError):
    """A camera model we cannot convert to a pinhole camera; the message names the model and the file."""


class UndistortError(DataFormatError):
    """A lens whose distortion folds the image borders (or is not finite): no pinhole camera shows its image.
    The message names the model and coefficients; loaders add the file (:func:`recon.data.finalize.finalize_frames`)."""



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
        raise UndistortError(f"cannot undistort camera model {model} with coefficients "
                             f"{[float(c) for c in coeffs]}: the distortion folds or loses the image borders "
                             f"(degenerate, or not finite); check the calibration")
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
        raise DataFormatError(f"{what} file {src} is {im.size[0]}x{im.size[1]}, its camera says {w}x{h}")
    if is_16bit(im):  # 16-bit greyscale stays 16-bit (convert("L") would clip it)
        arr = np.asarray(im, dtype=np.float32)[..., None]
        out = undistort_image(arr, dist.model, dist.coeffs, K_src, K_dst, w, h)
        out = np.clip(np.rint(out[..., 0]), 0, 65535).astype(np.uint16)
        save_image_atomic(Image.fromarray(out), dst)  # uint16 -> mode "I;16"
        return
    mode = im.mode if im.mode in ("L", "RGB", "RGBA") else ("RGBA" if "A" in im.getbands() else "RGB")
    arr = np.asarray(im.convert(mode), dtype=np.float32)
    arr = arr[..., None] if arr.ndim == 2 else arr
    out = undistort_image(arr, dist.model, dist.coeffs, K_src, K_dst, w, h)
    out = np.clip(np.rint(out), 0, 255).astype(np.uint8)
    save_image_atomic(Image.fromarray(out[..., 0] if mode == "L" else out, mode), dst)


def undistortion_params(dist: Distortion, K_src: np.ndarray, width: int, height: int) -> dict:
    """What an undistorted file depends on besides its source file: the lens (JSON-ready, for the cache key)."""
    return {"model": dist.model, "coeffs": [float(c) for c in np.ravel(dist.coeffs)],
            "K": [float(v) for v in np.ravel(K_src)], "width": int(width), "height": int(height)}


def undistort_frame(frame: Frame, dist: Distortion, root: Path, cache_root: Path) -> Frame:
    """Frame whose image (and mask, segmentation) are undistorted into a pinhole camera; files cached under ``undistorted/``.

    A cached file is reused when its key (:func:`recon.data.scene.cache_matches`, as for downscaled
    files) matches the source file as it is now, the lens (:func:`undistortion_params`) and the cached
    file itself, and it has the camera's size; otherwise it is made again.
    """
    cam = frame.camera
    K_src = cam.K.double().numpy()
    K_dst = undistorted_intrinsics(dist.model, dist.coeffs, K_src, cam.width, cam.height)
    params = undistortion_params(dist, K_src, cam.width, cam.height)

    def cached(src: Path, what: str) -> Path:
        dst = Path(cache_root) / undistorted_relpath(relative_to_root(src, root))
        fresh = Path(src).is_file() and dst.is_file() and cache_matches(dst, src, params) \
            and image_size(dst) == (cam.width, cam.height)
        if not fresh:  # (a missing source is named by _undistort_file)
            _undistort_file(src, dst, dist, K_src, K_dst, cam.width, cam.height, what)
            write_cache_key(dst, src, params)
        return dst

    image = cached(frame.image_path, "image")
    mask = cached(frame.mask_path, "mask") if frame.mask_path is not None else None
    seg = cached(frame.segmentation_path, "segmentation") if frame.segmentation_path is not None else None
    camera = make_camera(cam.world_to_cam.double().numpy(), K_dst, cam.width, cam.height)
    return Frame(frame.name, image, camera, mask, frame.time, seg)
