"""Accelerated candidate search on the CPU: a uniform grid of primitive bounding boxes walked by 3D DDA
(Numba), with an optional fused forward (shading) for renders that need no gradient.

Why a grid and not open3d's BVH: ``RaycastingScene.list_intersections`` over per-Gaussian bounding
octahedra (8 triangles each) returns *every* crossing of every ray (twice per octahedron, unsorted), so
a ray through a captured scene lists all the Gaussians behind the first opaque surface too; the grid is
walked front to back, cell by cell, so a ray stops as soon as its transmittance is spent (what a
compositor needs), and the exact ray-ellipsoid test runs in the same pass. Measured numbers:
scripts/bench_tracing.py (``--open3d`` times the octahedra alternative on the same scene).

Build (:func:`build_grid`, once per parameter version; callers cache it):

- each primitive with opacity > 1/255 gets the axis-aligned box of its k-sigma ellipsoid (surfels: of
  their k-sigma disc), k^2 = 2 ln(255 opacity), padded by a relative 1e-6;
- *loose* primitives (centre outside the 0.1-99.9 percentile box of the centres widened by half its size (at least 8
  centres beyond each percentile),
  or a box wider than :data:`BIG_SPAN` cells of a first grid over that box) are kept in one list every ray
  tests;
  the others are binned into the grid over the union of their boxes, about :data:`CELLS_PER_PRIMITIVE`
  cells per primitive (each dimension <= :data:`MAX_DIM`).

Walk (:func:`trace_kernel`, parallel over blocks of rays): the ray is clipped to [t_min, t_max] and to
the grid's box; each cell visited contributes the primitives whose t* falls inside the ray's interval in
that cell (the first cell from -inf, the last to +inf: every primitive with t_min < t* < t_max is found
exactly once, since the point at t* lies in its box), sorted by t*, merged with the loose primitives' hits
in t* order, and passed to the compositing rule of :mod:`rasterizer.tracing.reference` (candidates) or of
the compositor (shading). Arithmetic in float64, as the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from ..cpu.launch import KERNEL_LOCK
from ..reference.composite import ALPHA_MAX, ALPHA_THRESHOLD, T_MIN
from ..cpu.sh import sh_basis_at
from ..reference.sh import SH_C0
from .reference import T_STOP

CELLS_PER_PRIMITIVE = 1.0
CELL_OF_BOX = 0.5  # cell size >= this x the median box width (ray tests per unit length are least near 0.5)
MAX_DIM = 512
BIG_SPAN = 16  # primitives whose box spans more cells than this along an axis are loose
PAD = 1e-6
RAY_BLOCK = 32
GAUSSIAN_KIND = 0



@dataclass
class Grid:
    """The acceleration structure of one set of primitives (float64 geometry copied out of torch).

    The visible primitives (opacity > 1/255) are stored in *slots*, in Morton order of their centres (cell
    lists then read nearby memory): ``perm`` [V] int64 slot -> primitive index; mu [V, 3], A [V, 3, 3],
    opacity [V], kk [V] (k^2 widened by 1e-9 relative: the exact alpha test follows), sphere [V, 4] (centre,
    squared radius of a sphere holding the k-sigma ellipsoid / disc; float32, the radius widened to cover
    the rounding), kind (0 Gaussians, 1 surfels); lo [3],
    cell [3] (cell size per axis), dims [3]; cell_start [cells + 1] int64 and cell_items [M] int32 (slots
    per cell, increasing); loose [L] int32 slots. (Tried: the entries' spheres copied into list order as
    float32, [M, 4], streamed by the prefilter: slower, 62 MB against the slots' 6.4 MB that stay in cache.)"""

    perm: np.ndarray
    mu: np.ndarray
    A: np.ndarray
    opacity: np.ndarray
    kk: np.ndarray
    sphere: np.ndarray
    kind: int
    lo: np.ndarray
    cell: np.ndarray
    dims: np.ndarray
    cell_start: np.ndarray
    cell_items: np.ndarray
    loose: np.ndarray

    @property
    def n_cells(self) -> int:
        return int(np.prod(self.dims))


def morton_order(points: np.ndarray, bits: int = 10) -> np.ndarray:
    """Indices sorting points [P, 3] along a Morton (z-order) curve over their bounding box."""
    if len(points) == 0:
        return np.zeros(0, np.int64)
    lo, hi = points.min(0), points.max(0)
    q = ((points - lo) / np.maximum(hi - lo, 1e-12) * (2**bits - 1)).astype(np.int64)
    code = np.zeros(len(points), np.int64)
    for bit in range(bits):
        for axis in range(3):
            code |= ((q[:, axis] >> bit) & 1) << (3 * bit + axis)
    return np.argsort(code, kind="stable")


def bounding_radius(A: np.ndarray, kind: int) -> np.ndarray:
    """[V] radius of the unit (one-sigma) ellipsoid / disc of frames A [V, 3, 3]: 1 / sqrt(smallest eigenvalue
    of A^T A) for Gaussians, the largest of the two tangent scales 1 / |A_0|, 1 / |A_1| for surfels."""
    if kind == GAUSSIAN_KIND:
        lam = np.linalg.eigvalsh(np.einsum("nki,nkj->nij", A, A))[:, 0]
        return 1.0 / np.sqrt(np.maximum(lam, 1e-300))
    return 1.0 / np.minimum(np.linalg.norm(A[:, 0], axis=1), np.linalg.norm(A[:, 1], axis=1))


@njit(cache=True)
def _cells_of(n, slot, blo, bhi, mu, A, kind, k, inv_smin, grid_lo, cell, dims, counts, cursor, items):
    """Visit the cells of primitive n (slot ``slot``) whose box overlaps its bounding box and which can
    meet it: the Mahalanobis distance of the cell centre is within k + rho / sigma_min (rho the cell's
    half diagonal; for surfels, the plane distance is within rho and the in-plane distance within
    k + rho / sigma_min). counts: count them (cursor None); else write slot into items at cursor."""
    i0 = max(0, min(dims[0] - 1, int(math.floor((blo[n, 0] - grid_lo[0]) / cell[0]))))
    i1 = max(0, min(dims[0] - 1, int(math.floor((bhi[n, 0] - grid_lo[0]) / cell[0]))))
    j0 = max(0, min(dims[1] - 1, int(math.floor((blo[n, 1] - grid_lo[1]) / cell[1]))))
    j1 = max(0, min(dims[1] - 1, int(math.floor((bhi[n, 1] - grid_lo[1]) / cell[1]))))
    k0 = max(0, min(dims[2] - 1, int(math.floor((blo[n, 2] - grid_lo[2]) / cell[2]))))
    k1 = max(0, min(dims[2] - 1, int(math.floor((bhi[n, 2] - grid_lo[2]) / cell[2]))))
    rho = 0.5 * math.sqrt(cell[0] * cell[0] + cell[1] * cell[1] + cell[2] * cell[2]) * (1 + 1e-6)
    reach = k[slot] + rho * inv_smin[slot]
    a = A[slot]
    for kz in range(k0, k1 + 1):
        for jy in range(j0, j1 + 1):
            for ix in range(i0, i1 + 1):
                if i1 > i0 or j1 > j0 or k1 > k0:
                    cx = grid_lo[0] + (ix + 0.5) * cell[0] - mu[slot, 0]
                    cy = grid_lo[1] + (jy + 0.5) * cell[1] - mu[slot, 1]
                    cz = grid_lo[2] + (kz + 0.5) * cell[2] - mu[slot, 2]
                    v0 = a[0, 0] * cx + a[0, 1] * cy + a[0, 2] * cz
                    v1 = a[1, 0] * cx + a[1, 1] * cy + a[1, 2] * cz
                    v2 = a[2, 0] * cx + a[2, 1] * cy + a[2, 2] * cz
                    if kind == 0:
                        if v0 * v0 + v1 * v1 + v2 * v2 > reach * reach:
                            continue
                    else:
                        if abs(v2) > rho or v0 * v0 + v1 * v1 > reach * reach:
                            continue
                c = (kz * dims[1] + jy) * dims[0] + ix
                if cursor is None:
                    counts[c + 1] += 1
                else:
                    items[cursor[c]] = slot
                    cursor[c] += 1


@njit(cache=True)
def _count_cells(ids, blo, bhi, mu, A, kind, k, inv_smin, grid_lo, cell, dims, counts):
    for n in range(blo.shape[0]):
        _cells_of(n, ids[n], blo, bhi, mu, A, kind, k, inv_smin, grid_lo, cell, dims, counts, None, counts)


@njit(cache=True)
def _fill_cells(ids, blo, bhi, mu, A, kind, k, inv_smin, grid_lo, cell, dims, cursor, items):
    for n in range(blo.shape[0]):
        _cells_of(n, ids[n], blo, bhi, mu, A, kind, k, inv_smin, grid_lo, cell, dims, cursor, cursor, items)


def _cell_size(extent: np.ndarray, n: int, half: np.ndarray) -> float:
    """Cell size over a box of ``extent`` [3] holding n primitives of box half-widths ``half`` [n, 3]."""
    h_density = float((np.prod(np.maximum(extent, 1e-9)) / max(n * CELLS_PER_PRIMITIVE, 1.0)) ** (1.0 / 3.0))
    return max(h_density, CELL_OF_BOX * float(np.median(2 * half.max(axis=1))))


def build_grid(mu: np.ndarray, A: np.ndarray, opacity: np.ndarray, axis_sigma: np.ndarray, kind: int) -> Grid:
    """The grid of primitives (mu [N, 3], A [N, 3, 3], opacity [N], axis_sigma [N, 3]: standard deviation
    (surfels: one-sigma disc half-extent) along each world axis; float64 numpy)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        kk = 2.0 * np.log(np.maximum(opacity, 1e-300) / ALPHA_THRESHOLD)
    visible = np.nonzero(kk > 0)[0]
    visible = visible[morton_order(mu[visible])]
    k = np.sqrt(kk[visible])
    half = k[:, None] * axis_sigma[visible] * (1 + PAD) + 1e-12
    centres = np.ascontiguousarray(mu[visible])
    A_s = np.ascontiguousarray(A[visible])
    radius = k * bounding_radius(A_s, kind) * (1 + PAD) + 1e-12
    # float32 (half the memory the prefilter reads); the radius covers the rounding of the centre
    r32 = radius * (1 + 1e-5) + 1e-6 * (np.abs(centres).max(axis=1) + radius)
    sphere = np.ascontiguousarray(np.concatenate([centres, (r32 * r32)[:, None]], axis=1).astype(np.float32))
    slots = dict(perm=visible.astype(np.int64), mu=centres, A=A_s, opacity=np.ascontiguousarray(opacity[visible]),
                 kk=kk[visible] * (1 + 1e-9) + 1e-12, sphere=sphere, kind=kind)
    V = len(visible)
    if V == 0:
        return Grid(**slots, lo=np.zeros(3), cell=np.ones(3), dims=np.ones(3, np.int64),
                    cell_start=np.zeros(2, np.int64), cell_items=np.zeros(0, np.int32), loose=np.zeros(0, np.int32))
    blo, bhi = centres - half, centres + half
    pct = min(25.0, max(0.1, 800.0 / V))  # 0.1 and 99.9 percentiles, at least 8 centres beyond each
    q_lo, q_hi = np.percentile(centres, pct, axis=0), np.percentile(centres, 100 - pct, axis=0)
    span = q_hi - q_lo
    robust_lo, robust_hi = q_lo - 0.5 * span, q_hi + 0.5 * span
    h0 = _cell_size(robust_hi - robust_lo, V, half)
    loose_mask = (np.any(centres < robust_lo, axis=1) | np.any(centres > robust_hi, axis=1)
                  | (2 * half.max(axis=1) > BIG_SPAN * h0))
    if loose_mask.all():
        loose_mask[:] = False
    inner = ~loose_mask
    blo_i, bhi_i = blo[inner], bhi[inner]
    grid_lo, grid_hi = blo_i.min(axis=0), bhi_i.max(axis=0)
    ext = np.maximum(grid_hi - grid_lo, 1e-9)
    h = _cell_size(ext, int(inner.sum()), half[inner])
    dims = np.clip(np.ceil(ext / h), 1, MAX_DIM).astype(np.int64)
    cell = ext / dims
    counts = np.zeros(int(np.prod(dims)) + 1, np.int64)
    ids = np.nonzero(inner)[0].astype(np.int32)
    # ||A||_2: 1 / the smallest standard deviation (Gaussians), of the tangent rows (surfels)
    if kind != GAUSSIAN_KIND:
        inv_smin = np.maximum(np.linalg.norm(A_s[:, 0], axis=1), np.linalg.norm(A_s[:, 1], axis=1))
    else:
        inv_smin = np.sqrt(np.linalg.eigvalsh(np.einsum("nki,nkj->nij", A_s, A_s))[:, 2])
    _count_cells(ids, blo_i, bhi_i, centres, A_s, kind, k, inv_smin, grid_lo, cell, dims, counts)
    cell_start = np.cumsum(counts)
    items = np.empty(int(cell_start[-1]), np.int32)
    _fill_cells(ids, blo_i, bhi_i, centres, A_s, kind, k, inv_smin, grid_lo, cell, dims, cell_start[:-1].copy(),
                items)
    return Grid(**slots, lo=grid_lo, cell=cell, dims=dims, cell_start=cell_start, cell_items=items,
                loose=np.nonzero(loose_mask)[0].astype(np.int32))


# ------------------------------------------------------------------------------------------ the walk


@njit(cache=True, inline="always")
def _response(mu, A, opacity, kk, kind, g, ox, oy, oz, dx, dy, dz):
    """(t*, alpha) of primitive g along the ray (alpha 0: skipped); the arithmetic of geometry.ray_response.
    exp is evaluated only where m* is within the primitive's bound kk (k^2, slightly widened)."""
    rx, ry, rz = ox - mu[g, 0], oy - mu[g, 1], oz - mu[g, 2]
    a = A[g]
    o0 = a[0, 0] * rx + a[0, 1] * ry + a[0, 2] * rz
    o1 = a[1, 0] * rx + a[1, 1] * ry + a[1, 2] * rz
    o2 = a[2, 0] * rx + a[2, 1] * ry + a[2, 2] * rz
    d0 = a[0, 0] * dx + a[0, 1] * dy + a[0, 2] * dz
    d1 = a[1, 0] * dx + a[1, 1] * dy + a[1, 2] * dz
    d2 = a[2, 0] * dx + a[2, 1] * dy + a[2, 2] * dz
    if kind == 0:
        dd = d0 * d0 + d1 * d1 + d2 * d2
        t = -(o0 * d0 + o1 * d1 + o2 * d2) / dd
        e0, e1, e2 = o0 + t * d0, o1 + t * d1, o2 + t * d2
        m = e0 * e0 + e1 * e1 + e2 * e2
    else:
        if d2 == 0.0:
            return 0.0, 0.0
        t = -o2 / d2
        e0, e1 = o0 + t * d0, o1 + t * d1
        m = e0 * e0 + e1 * e1
    if not m <= kk[g]:
        return t, 0.0
    alpha = min(opacity[g] * math.exp(-0.5 * m), ALPHA_MAX)
    if not alpha >= ALPHA_THRESHOLD:
        alpha = 0.0
    return t, alpha


@njit(cache=True)
def _sort_by_t(ts, alphas, gs, n):
    """Insertion sort of the first n entries by t (stable)."""
    for i in range(1, n):
        t, a, g = ts[i], alphas[i], gs[i]
        j = i - 1
        while j >= 0 and ts[j] > t:
            ts[j + 1], alphas[j + 1], gs[j + 1] = ts[j], alphas[j], gs[j]
            j -= 1
        ts[j + 1], alphas[j + 1], gs[j + 1] = t, a, g


@njit(cache=True, inline="always")
def _emit(r, g, t, alpha, state, shade, sh0, shN, K, basis, out_ids, out_count, out_rgb):
    """Hand one hit (in t* order) to the candidate list or the compositor; returns False once the ray is done.
    state: [T, acc, dist] of this ray."""
    T = state[0]
    if shade:
        T_next = T * (1.0 - alpha)
        if T_next <= T_MIN:
            return False
        w = alpha * T
        if K < 0:  # plain colours
            for c in range(3):
                out_rgb[r, c] += w * sh0[g, 0, c]
        else:
            for c in range(3):
                v = basis[0] * sh0[g, 0, c]
                for k in range(1, K):
                    v += basis[k] * shN[g, k - 1, c]
                v += 0.5
                if v > 0.0:
                    out_rgb[r, c] += w * v
        state[1] += w
        state[2] += w * t
        state[0] = T_next
        return True
    if T <= T_STOP:
        return False
    n = out_count[r]
    if n < out_ids.shape[1]:
        out_ids[r, n] = g
    out_count[r] = n + 1
    state[0] = T * (1.0 - alpha)
    return True


@njit(cache=True, parallel=True)
def trace_kernel(perm, mu, A, opacity, kk, sphere, kind, lo, cell, dims, cell_start, cell_items, loose,
                 origins, dirs, t_min, t_max, rows, shade, sh0, shN, K,
                 out_ids, out_count, out_rgb, out_T, out_dist, scratch):
    """Walk rays ``rows`` (indices into origins / dirs / t_min / t_max); see the module docstring.
    Candidates: out_ids [R, cap] (the first cap of each list), out_count [R] (the full count). Shading:
    out_rgb [R, 3], out_T [R], out_dist [R] (sum w t / sum w, 0 where none). scratch: cap of per-thread
    buffers (largest cell list + loose count)."""
    R = rows.shape[0]
    n_blocks = (R + RAY_BLOCK - 1) // RAY_BLOCK
    L = loose.shape[0]
    for blk in prange(n_blocks):
        ts = np.empty(scratch)
        als = np.empty(scratch)
        gs = np.empty(scratch, np.int32)
        lts = np.empty(L + 1)
        las = np.empty(L + 1)
        lgs = np.empty(L + 1, np.int32)
        basis = np.zeros(16)
        state = np.zeros(3)
        for rr in range(blk * RAY_BLOCK, min(R, (blk + 1) * RAY_BLOCK)):
            r = rows[rr]
            ox, oy, oz = origins[r, 0], origins[r, 1], origins[r, 2]
            dx, dy, dz = dirs[r, 0], dirs[r, 1], dirs[r, 2]
            tlo, thi = t_min[r], t_max[r]
            state[0], state[1], state[2] = 1.0, 0.0, 0.0
            inv_len2 = 1.0 / (dx * dx + dy * dy + dz * dz)
            if shade and K > 1:
                nrm = math.sqrt(dx * dx + dy * dy + dz * dz)
                nrm = max(nrm, 1e-12)
                sh_basis_at(dx / nrm, dy / nrm, dz / nrm, K, basis)
            else:
                basis[0] = SH_C0
            # loose primitives: all hits, sorted
            nl = 0
            for q in range(L):
                g = loose[q]
                t, a = _response(mu, A, opacity, kk, kind, g, ox, oy, oz, dx, dy, dz)
                if a > 0.0 and t > tlo and t < thi:
                    lts[nl], las[nl], lgs[nl] = t, a, perm[g]
                    nl += 1
            _sort_by_t(lts, las, lgs, nl)
            ql = 0
            live = True
            # clip to the grid box
            t0, t1 = tlo, thi
            dvec = (dx, dy, dz)
            ovec = (ox, oy, oz)
            for ax in range(3):
                dv = dvec[ax]
                lo_ax = lo[ax]
                hi_ax = lo[ax] + cell[ax] * dims[ax]
                if dv != 0.0:
                    ta = (lo_ax - ovec[ax]) / dv
                    tb = (hi_ax - ovec[ax]) / dv
                    t0 = max(t0, min(ta, tb))
                    t1 = min(t1, max(ta, tb))
                elif ovec[ax] < lo_ax or ovec[ax] > hi_ax:
                    t1 = -math.inf
            if cell_items.shape[0] > 0 and t0 < t1:
                px, py, pz = ox + t0 * dx, oy + t0 * dy, oz + t0 * dz
                ix = max(0, min(dims[0] - 1, int(math.floor((px - lo[0]) / cell[0]))))
                iy = max(0, min(dims[1] - 1, int(math.floor((py - lo[1]) / cell[1]))))
                iz = max(0, min(dims[2] - 1, int(math.floor((pz - lo[2]) / cell[2]))))
                sx = 1 if dx > 0 else -1
                sy = 1 if dy > 0 else -1
                sz = 1 if dz > 0 else -1
                nx = (lo[0] + (ix + (1 if dx > 0 else 0)) * cell[0] - ox) / dx if dx != 0.0 else math.inf
                ny = (lo[1] + (iy + (1 if dy > 0 else 0)) * cell[1] - oy) / dy if dy != 0.0 else math.inf
                nz = (lo[2] + (iz + (1 if dz > 0 else 0)) * cell[2] - oz) / dz if dz != 0.0 else math.inf
                ddx = cell[0] / abs(dx) if dx != 0.0 else math.inf
                ddy = cell[1] / abs(dy) if dy != 0.0 else math.inf
                ddz = cell[2] / abs(dz) if dz != 0.0 else math.inf
                t_enter = -math.inf
                while live:
                    # the next step: the axis whose boundary comes first
                    if nx <= ny and nx <= nz:
                        t_next, axis = nx, 0
                    elif ny <= nz:
                        t_next, axis = ny, 1
                    else:
                        t_next, axis = nz, 2
                    last = t_next >= t1
                    if axis == 0:
                        last = last or ix + sx < 0 or ix + sx >= dims[0]
                    elif axis == 1:
                        last = last or iy + sy < 0 or iy + sy >= dims[1]
                    else:
                        last = last or iz + sz < 0 or iz + sz >= dims[2]
                    t_exit = math.inf if last else t_next
                    c = (iz * dims[1] + iy) * dims[0] + ix
                    n = 0
                    for q in range(cell_start[c], cell_start[c + 1]):
                        g = cell_items[q]
                        # sphere prefilter: the ray passes within the bounding sphere inside this cell
                        wx = np.float64(sphere[g, 0]) - ox
                        wy = np.float64(sphere[g, 1]) - oy
                        wz = np.float64(sphere[g, 2]) - oz
                        wd = wx * dx + wy * dy + wz * dz
                        w2 = wx * wx + wy * wy + wz * wz
                        r2 = np.float64(sphere[g, 3])
                        if w2 - wd * wd * inv_len2 > r2:
                            continue
                        tc = wd * inv_len2
                        tr = math.sqrt(r2 * inv_len2)
                        if tc + tr < t_enter or tc - tr >= t_exit:
                            continue
                        t, a = _response(mu, A, opacity, kk, kind, g, ox, oy, oz, dx, dy, dz)
                        if a > 0.0 and t >= t_enter and t < t_exit and t > tlo and t < thi:
                            ts[n], als[n], gs[n] = t, a, perm[g]
                            n += 1
                    _sort_by_t(ts, als, gs, n)
                    for e in range(n):
                        while live and ql < nl and lts[ql] <= ts[e]:
                            live = _emit(r, lgs[ql], lts[ql], las[ql], state, shade, sh0, shN, K, basis,
                                         out_ids, out_count, out_rgb)
                            ql += 1
                        if not live:
                            break
                        live = _emit(r, gs[e], ts[e], als[e], state, shade, sh0, shN, K, basis,
                                     out_ids, out_count, out_rgb)
                        if not live:
                            break
                    if last:
                        break
                    t_enter = t_next
                    if axis == 0:
                        ix += sx
                        nx += ddx
                    elif axis == 1:
                        iy += sy
                        ny += ddy
                    else:
                        iz += sz
                        nz += ddz
            while live and ql < nl:
                live = _emit(r, lgs[ql], lts[ql], las[ql], state, shade, sh0, shN, K, basis,
                             out_ids, out_count, out_rgb)
                ql += 1
            if shade:
                out_T[r] = state[0]
                out_dist[r] = state[2] / state[1] if state[1] > 0.0 else 0.0


def max_cell_count(grid: Grid) -> int:
    if grid.cell_start.shape[0] < 2:
        return 1
    return int(max(1, np.diff(grid.cell_start).max()))


def run_kernel(grid: Grid, origins: np.ndarray, dirs: np.ndarray, t_min: np.ndarray, t_max: np.ndarray,
               rows: np.ndarray, shade: bool, sh0: np.ndarray, shN: np.ndarray, K: int, cap: int,
               out_ids: np.ndarray, out_count: np.ndarray, out_rgb: np.ndarray, out_T: np.ndarray,
               out_dist: np.ndarray) -> None:
    """One launch of :func:`trace_kernel` under the rasterizer's kernel lock."""
    with KERNEL_LOCK:
        trace_kernel(grid.perm, grid.mu, grid.A, grid.opacity, grid.kk, grid.sphere, grid.kind, grid.lo, grid.cell,
                     grid.dims, grid.cell_start, grid.cell_items, grid.loose, origins, dirs, t_min, t_max,
                     rows, shade, sh0, shN, K, out_ids, out_count, out_rgb, out_T, out_dist, max_cell_count(grid))
