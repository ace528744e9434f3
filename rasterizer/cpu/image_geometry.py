"""The image-Gaussian front end (``rasterizer/image/geometry.py``) in two Numba passes, for renders without
gradients.

The PyTorch front end is about fifteen small ops over N Gaussians; at 25,000 Gaussians and 500x500 they cost
as much as a quarter of the render. These passes do the same steps per Gaussian with the same float operations
in the same order, without FMA contraction or fast-math, and take the square roots from ``torch.sqrt`` on the
same values (PyTorch's CPU sqrt is MKL's, up to 1 ulp from the correctly rounded one, and a 1-ulp window extent
can move a box edge), so the result is bit-identical to the PyTorch front end (tested in
tests/rasterizer/test_image_geometry_cpu.py):

  means_px = (means + 1) * (W / 2, H / 2)                       means_to_pixels
  Sigma    = (l11 l11, l11 l21, l21 l21 + l22 l22)               cholesky_to_covars (or covars as given)
  Sigma_px = Sigma * ((W/2)^2, (W/2)(H/2), (H/2)^2)              covars_to_pixels
  Sigma'   = Sigma_px + (v, 0, v), colour *= sqrt(max(det Sigma_px, 0) / det Sigma')   prefilter (v > 0 only)
  colour  *= opacity                                             (sum mode, when opacities are given)
  conic    = (s_yy, -s_xy, s_xx) / det Sigma'                    conics_of
  extents  = 3 sqrt(max((s_xx, s_yy), 0)) or the fixed window    window_extents
  box      = pixel_box_axis(means_px, extents)                   image_sum.pixel_boxes

Pass 2 also counts the 16x16 tiles of each Gaussian's windows (image_sum.count_box_tiles: the first half of the
tile binning, image_sum.tile_lists).
Frames and units as in geometry.py: normalised coordinates in, output pixels out.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

from .checks import count_non_finite_serial
from .image_sum import TS, chunk_range, count_tiles, pixel_box_axis
from .vecmath import like

# consts (one array in the inputs' float type, rounded from float64 as PyTorch's new_tensor does):
HALF_W, HALF_H, SXX, SXY, SYY, VARIANCE, WINDOW_X, WINDOW_Y = range(8)
SIGMA_WINDOW = 3.0  # geometry.SIGMA_WINDOW: the 3-sigma ellipse


def geometry_consts(width: int, height: int, variance: float, window: float | None, dtype) -> np.ndarray:
    """The constants of the pass, each computed in float64 and rounded to ``dtype`` once, exactly as the
    PyTorch front end's ``new_tensor`` calls do."""
    sx, sy = width / 2.0, height / 2.0
    wx, wy = (0.0, 0.0) if window is None else (window * width / 2.0, window * height / 2.0)
    return np.array([sx, sy, sx * sx, sx * sy, sy * sy, variance, wx, wy], dtype)


@njit(cache=True, inline="always")
def non_negative(x):
    """torch.clamp(x, min=0): 0 below 0; NaN stays NaN."""
    return like(0.0, x) if x < 0 else x


@njit(cache=True, error_model="numpy")
def shapes_pass(means, shape, from_cholesky, consts, prefilter, means_px, covars_px, conics, roots, ratio):
    """Pass 1 over the N Gaussians: means_px [N, 2], covars_px [N, 3] (prefiltered), conics [N, 3]; the values
    whose square roots pass 2 needs: roots [N, 2] = max((s_xx, s_yy), 0) of covars_px (window extents) and,
    when prefiltering, ratio [N] = max(det Sigma_px, 0) / det Sigma' (colour factor)."""
    for g in range(means.shape[0]):
        m0, m1 = means[g, 0], means[g, 1]
        p, q, r = shape[g, 0], shape[g, 1], shape[g, 2]
        mx = (m0 + like(1.0, m0)) * consts[HALF_W]  # typed constants: float32 stays float32
        my = (m1 + like(1.0, m1)) * consts[HALF_H]
        if from_cholesky:  # p, q, r = l11, l21, l22
            sxx, sxy, syy = p * p, p * q, q * q + r * r
        else:
            sxx, sxy, syy = p, q, r
        sxx, sxy, syy = sxx * consts[SXX], sxy * consts[SXY], syy * consts[SYY]
        if prefilter:
            det0 = sxx * syy - sxy * sxy
            sxx, sxy, syy = sxx + consts[VARIANCE], sxy + like(0.0, sxy), syy + consts[VARIANCE]
            ratio[g] = non_negative(det0) / (sxx * syy - sxy * sxy)
        det = sxx * syy - sxy * sxy
        means_px[g, 0], means_px[g, 1] = mx, my
        covars_px[g, 0], covars_px[g, 1], covars_px[g, 2] = sxx, sxy, syy
        conics[g, 0], conics[g, 1], conics[g, 2] = syy / det, -sxy / det, sxx / det
        roots[g, 0], roots[g, 1] = non_negative(sxx), non_negative(syy)


@njit(cache=True, error_model="numpy")
def boxes_pass(means_px, roots, ratio, colors, opacities, consts, prefilter, ellipse, width, height, tiles_x,
               colors_out, extents, boxes, counts):
    """Pass 2, given the square roots of pass 1's roots [N, 2] and ratio [N]: colors_out [N, D] (prefiltered,
    times opacities [N] unless that is empty), extents [N, 2] (3 sqrt(s) or the fixed window), boxes [N, 4]
    (pixel_box_axis) and the tiles of chunk c's Gaussians (image_sum.chunk_range) counted in counts[c]
    (at t + 1)."""
    D = colors.shape[1]
    has_opacity = opacities.shape[0] > 0
    lim = max(width, height)
    for g in range(means_px.shape[0]):  # the colours in a loop of their own: measured 1.8x faster than fused
        for d in range(D):
            col = colors[g, d]
            if prefilter:
                col = col * ratio[g]
            if has_opacity:
                col = col * opacities[g]
            colors_out[g, d] = col
    chunks, N = counts.shape[0], means_px.shape[0]
    for g in range(N):
        if ellipse:
            ex, ey = like(SIGMA_WINDOW, roots[g, 0]) * roots[g, 0], like(SIGMA_WINDOW, roots[g, 1]) * roots[g, 1]
        else:
            ex, ey = consts[WINDOW_X], consts[WINDOW_Y]
        extents[g, 0], extents[g, 1] = ex, ey
        boxes[g, 0], boxes[g, 2] = pixel_box_axis(means_px[g, 0], ex, width, lim)
        boxes[g, 1], boxes[g, 3] = pixel_box_axis(means_px[g, 1], ey, height, lim)
    for c in range(chunks):
        lo, hi = chunk_range(c, N, chunks)
        count_tiles(boxes, lo, hi, tiles_x, counts[c])


def non_finite_inputs(*arrays: np.ndarray) -> int:
    """NaN/Inf values in the arrays (one vectorised pass each)."""
    return sum(int(count_non_finite_serial(a.reshape(-1))) for a in arrays)


def prepare(means: np.ndarray, shape: np.ndarray, from_cholesky: bool, colors: np.ndarray, opacities: np.ndarray,
            consts: np.ndarray, prefilter: bool, ellipse: bool, width: int, height: int, chunks: int = 1):
    """The front end of N Gaussians (module docstring). means [N, 2], shape [N, 3] (cholesky (l11, l21, l22) or
    covariance (sxx, sxy, syy), normalised), colors [N, D], opacities [N] or [0] (none), consts from
    geometry_consts, all C-contiguous in one float type; prefilter: variance > 0 (else no low-pass);
    ellipse: the 3-sigma window (else the fixed one). Returns None if an input holds NaN/Inf, else
    (means_px [N, 2], covars_px [N, 3], conics [N, 3], colors [N, D] (prefiltered, opacity multiplied in),
    extents [N, 2], boxes [N, 4] int64, counts [chunks, T + 1]: the Gaussians of chunk c (image_sum.chunk_range)
    per tile t at [c, t + 1], for image_sum.tile_lists).

    The square roots are PyTorch's (``torch.sqrt`` on the same contiguous arrays as geometry.py's): on the CPU
    it is MKL's, which is not always the correctly rounded root, and the boxes must be the autograd path's."""
    if non_finite_inputs(means, shape, colors, opacities):
        return None
    N, D = colors.shape
    dt = means.dtype
    tiles_x, tiles_y = -(-width // TS), -(-height // TS)
    means_px, covars_px, conics = np.empty((N, 2), dt), np.empty((N, 3), dt), np.empty((N, 3), dt)
    # the values to take roots of live in PyTorch-allocated memory, as in geometry.py (same alignment: a
    # vectorised sqrt may treat unaligned head elements differently)
    tdt = torch.float64 if dt == np.float64 else torch.float32
    roots_t, ratio_t = torch.empty((N, 2), dtype=tdt), torch.empty(N if prefilter else 0, dtype=tdt)
    roots, ratio = roots_t.numpy(), ratio_t.numpy()
    shapes_pass(means, shape, from_cholesky, consts, prefilter, means_px, covars_px, conics, roots, ratio)
    if ellipse:
        roots_t.sqrt_()
    if prefilter:
        ratio_t.sqrt_()
    colors_out, extents, boxes = np.empty((N, D), dt), np.empty((N, 2), dt), np.empty((N, 4), np.int64)
    counts = np.zeros((chunks, tiles_x * tiles_y + 1), np.int64)
    boxes_pass(means_px, roots, ratio, colors, opacities, consts, prefilter, ellipse, width, height, tiles_x,
               colors_out, extents, boxes, counts)
    return means_px, covars_px, conics, colors_out, extents, boxes, counts
