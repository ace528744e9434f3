"""The values marching cubes needs of a distance field, evaluated only near its zero level (a narrow band).

:func:`recon.geometry.sdf_fit.field_grid` evaluates a field at all (R + 1)^3 vertices of a grid over the unit cube;
marching cubes then emits triangles only in the cells whose eight values change sign, and a vertex only on the
edges of those cells, from the edge's two values. :func:`narrow_band_grid` returns the same array where it matters:

1. the field on the coarse grid of every ``stride``-th vertex (:func:`coarse_indices`; the last coarse cell is
   shorter when ``stride`` does not divide R);
2. a coarse cell is *kept* when its corners' signs differ or one of them lies within ``slope`` x half the cell's
   diagonal of 0 (:func:`kept_cells`). ``slope`` bounds |grad field| in field units per unit of the cube: every
   point of a cell lies within half its diagonal of a corner, so a cell that is not kept has no zero inside
   (or on its faces) when the bound holds;
3. the fine vertices of the kept cells are evaluated (:func:`band_vertices`); every other vertex takes the value
   of its nearest coarse vertex (:func:`nearest_coarse`), which is a corner of a cell that is not kept: the sign
   of the field there, and at least the band's width away from 0.

So the fine cells inside kept coarse cells hold the field's own values and every other fine cell holds one sign:
marching cubes on the result gives exactly the triangles and vertices it gives on the full grid, as long as the
field's slope stays under ``slope`` away from the band (a true SDF: 1). What it may miss is a piece of surface
inside a coarse cell whose eight corners all lie farther than the band from 0 on one side (a steeper field
than ``slope``: a floater smaller than a coarse cell). The bound is checked where the field was evaluated
(:func:`measured_slope`: the largest difference per unit of the cube along the coarse grid's edges and the
evaluated fine edges); where that exceeds ``slope`` every other vertex is evaluated too, so the result is the
full grid's. A steep component that lies wholly inside coarse cells kept out of the band is not seen by that
check (``splatforge mesh --sdf-full-grid`` evaluates every vertex). Cost: the (R / stride + 1)^3 coarse values plus about
``stride`` x 3-4 values per fine surface cell, instead of (R + 1)^3.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from torch import Tensor

NARROW_BAND_STRIDE = 4  # fine cells per coarse cell edge (the cheapest for 128-512 cells per axis)
SLOPE_ROUNDING = 1e-3  # relative: float32 values of a field at its bound measure a little over it


def coarse_indices(resolution: int, stride: int) -> np.ndarray:
    """[C + 1] the fine vertex indices of the coarse grid: 0, stride, 2 stride, ... and ``resolution``."""
    return np.unique(np.r_[np.arange(0, resolution, stride), resolution])


def evaluate_points(field: Callable[[Tensor], Tensor], ax: Tensor, idx: tuple[np.ndarray, np.ndarray, np.ndarray],
                    chunk: int) -> np.ndarray:
    """[N] float32 values of ``field`` (unit-cube points [M, 3] -> [M]) at the grid points (ax[i], ax[j], ax[k])
    of the index arrays ``idx`` [N] each, ``chunk`` points per call, without autograd."""
    i, j, k = (torch.from_numpy(np.ascontiguousarray(a)) for a in idx)
    out = np.empty(len(i), dtype=np.float32)
    with torch.no_grad():
        for s in range(0, len(i), chunk):
            u = torch.stack([ax[i[s:s + chunk]], ax[j[s:s + chunk]], ax[k[s:s + chunk]]], -1)
            out[s:s + chunk] = field(u).float().cpu().numpy()
    return out


def kept_cells(coarse: np.ndarray, band: float) -> np.ndarray:
    """[C, C, C] bool: the cells of the coarse values ``coarse`` [C + 1]^3 whose corners change sign or come
    within ``band`` of 0 (module docstring, step 2)."""
    corners = [coarse[a:a + coarse.shape[0] - 1, b:b + coarse.shape[1] - 1, c:c + coarse.shape[2] - 1]
               for a in (0, 1) for b in (0, 1) for c in (0, 1)]
    lo, hi = np.minimum.reduce(corners), np.maximum.reduce(corners)
    near = np.minimum.reduce([np.abs(v) for v in corners]) <= band
    return near | ((lo < 0) & (hi > 0))


def band_vertices(kept: np.ndarray, cidx: np.ndarray) -> np.ndarray:
    """[R + 1]^3 bool: the fine vertices of the kept coarse cells ``kept`` [C, C, C] (coarse cell c spans the
    fine vertices cidx[c] .. cidx[c + 1])."""
    counts = np.diff(cidx)
    fine = kept
    for axis in range(3):  # [R, R, R]: the fine cells of the kept coarse cells
        fine = np.repeat(fine, counts, axis=axis)
    n = fine.shape[0] + 1
    mask = np.zeros((n, n, n), dtype=bool)
    for a in (0, 1):  # a vertex belongs to the (up to 8) fine cells it is a corner of
        for b in (0, 1):
            for c in (0, 1):
                mask[a:a + n - 1, b:b + n - 1, c:c + n - 1] |= fine
    return mask


def nearest_coarse(resolution: int, cidx: np.ndarray) -> np.ndarray:
    """[R + 1] the index into ``cidx`` of the coarse vertex nearest each fine vertex index (the lower on a tie)."""
    i = np.arange(resolution + 1)
    upper = np.searchsorted(cidx, i).clip(1, len(cidx) - 1)
    return np.where(i - cidx[upper - 1] <= cidx[upper] - i, upper - 1, upper)


def edge_slope(values: np.ndarray, valid: np.ndarray | None, spacing: np.ndarray) -> float:
    """The largest |difference| / length along the grid edges of ``values`` [A, B, C] (both ends ``valid``
    where given), ``spacing`` [A - 1] (the same along every axis) the edges' lengths in cube units; 0 for none.
    One slab of edges at a time along the first index (float32 like the values: memory of a few slabs): the
    edges within slab i (its axes 0 and 1 are the grid's 1 and 2), then those from slab i to slab i + 1."""
    largest = 0.0
    for i in range(values.shape[0]):
        ok = None if valid is None else valid[i]
        steps = [largest_step(values[i], ok, spacing, axis) for axis in (0, 1)]
        if i + 1 < values.shape[0]:
            steps.append(largest_step(values[i:i + 2], None if valid is None else valid[i:i + 2], spacing[i:i + 1], 0))
        largest = max(largest, *steps)
    return largest


def largest_step(values: np.ndarray, valid: np.ndarray | None, spacing: np.ndarray, axis: int) -> float:
    """The largest |difference| / length between neighbours of ``values`` along ``axis`` (both ``valid`` where
    given, a bool array shaped like ``values``); ``spacing`` [values.shape[axis] - 1] the lengths; 0 for none."""
    shape = [-1 if k == axis else 1 for k in range(values.ndim)]
    diff = np.abs(np.diff(values, axis=axis)) / spacing.reshape(shape)
    if valid is not None:
        lo, hi = ([slice(None)] * values.ndim for _ in range(2))
        lo[axis], hi[axis] = slice(None, -1), slice(1, None)
        diff = diff[valid[tuple(lo)] & valid[tuple(hi)]]
    return float(diff.max()) if diff.size else 0.0


def measured_slope(coarse: np.ndarray, cidx: np.ndarray, values: np.ndarray, mask: np.ndarray,
                   resolution: int) -> float:
    """The largest slope (per unit of the cube) seen along the coarse grid's edges ``coarse`` [C + 1]^3 at the
    fine indices ``cidx`` and along the fine edges whose two vertices were evaluated (``mask`` [R + 1]^3)."""
    coarse_len = (np.diff(cidx) / resolution).astype(np.float32)
    fine_len = np.full(resolution, 1.0 / resolution, dtype=np.float32)
    return max(edge_slope(coarse, None, coarse_len), edge_slope(values, mask, fine_len))


def narrow_band_grid(field: Callable[[Tensor], Tensor], resolution: int, slope: float,
                     stride: int = NARROW_BAND_STRIDE, chunk: int = 1 << 18) -> np.ndarray:
    """[R + 1]^3 float32 values for marching cubes of ``field`` (unit-cube points [N, 3] -> [N], x, y, z order as
    :func:`recon.geometry.sdf_fit.field_grid`) on a ``resolution``^3 grid, the field evaluated only in the cells
    near its zero level; ``slope`` > 0: the bound on |grad field| per unit of the cube (module docstring)."""
    if not slope > 0 or stride < 1:
        raise ValueError(f"narrow_band_grid: slope {slope} must be > 0 and stride {stride} >= 1")
    ax = torch.linspace(0, 1, resolution + 1)  # the points field_grid evaluates, bit for bit
    cidx = coarse_indices(resolution, stride)
    coarse = evaluate_points(field, ax, tuple(a.ravel() for a in np.meshgrid(cidx, cidx, cidx, indexing="ij")),
                             chunk).reshape((len(cidx),) * 3)
    band = slope * 0.5 * math.sqrt(3.0) * stride / resolution  # half the diagonal of the largest coarse cell
    mask = band_vertices(kept_cells(coarse, band), cidx)
    near = nearest_coarse(resolution, cidx)
    values = coarse[np.ix_(near, near, near)]
    where = np.nonzero(mask)
    values[where] = evaluate_points(field, ax, where, chunk)
    if measured_slope(coarse, cidx, values, mask, resolution) > slope * (1.0 + SLOPE_ROUNDING):  # the bound fails: the full grid's values
        rest = np.nonzero(~mask)
        values[rest] = evaluate_points(field, ax, rest, chunk)
    return values
