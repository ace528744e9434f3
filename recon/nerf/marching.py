"""Rays of a camera, their entry into the field's space, and ray marching with empty-space skipping.

Rays (:func:`camera_rays`): one per pixel centre, origin the camera centre, unit direction in world
coordinates (OpenCV pixel convention: ``K^-1 (u + 0.5, v + 0.5, 1)``), plus ``z_scale`` = the camera-z
component of the unit direction (distance t along the ray times it is the camera-frame depth).

Marching (:func:`march_rays_reference`, the PyTorch specification, and :func:`march_rays_numba`, a Numba
kernel parallel over rays, same signature, same samples bit for bit in float64): from ``t_near +
jitter dt(t_near)`` to ``t_far`` in steps ``dt(t) = clamp(t cone_angle, dt_min, dt_max)`` (cone_angle 0:
uniform steps); a step ``[t, t + dt]`` is kept when its midpoint, mapped to the unit cube
(:mod:`recon.nerf.space`), falls in an occupied cell of the occupancy grid [G, G, G]. At most
``max_steps`` steps per ray. Output: packed samples sorted by ray then t: ``ray [S]`` int64, ``t0 [S]``,
``t1 [S]`` float64.

Per-ray bounds (an inserted mesh's hit, a secondary ray's segment): :func:`ray_entry` takes ``near`` /
``far`` as numbers or per-ray tensors [R], and both marchers take per-ray ``t_near`` / ``t_far`` [R] (the
same samples from either). A step that starts before ``t_far`` may end beyond it; :func:`clip_steps`
ends each ray's steps at a hard bound (nothing beyond a mesh hit is weighted).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange
from torch import Tensor

from rasterizer.cpu import KERNEL_LOCK
from recon.nerf.space import FieldSpace, to_unit


def camera_rays(camera, pixels: Tensor | None = None, dtype=torch.float32) -> tuple[Tensor, Tensor, Tensor]:
    """(origins [R, 3], unit directions [R, 3], z_scale [R]) in world coordinates for ``pixels`` int64
    [R, 2] (x, y) of ``camera`` (:class:`rasterizer.Camera`, OpenCV axes), default all pixels row-major."""
    device = camera.world_to_cam.device
    if pixels is None:
        ys, xs = torch.meshgrid(torch.arange(camera.height, device=device), torch.arange(camera.width, device=device),
                                indexing="ij")
        pixels = torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=1)
    w2c = camera.world_to_cam.to(torch.float64)
    K = camera.K.to(device=w2c.device, dtype=torch.float64)
    px = pixels.to(w2c.device, torch.float64) + 0.5
    d_cam = torch.stack([(px[:, 0] - K[0, 2]) / K[0, 0], (px[:, 1] - K[1, 2]) / K[1, 1],
                         torch.ones_like(px[:, 0])], dim=1)
    d_cam = d_cam / d_cam.norm(dim=1, keepdim=True)
    R, t = w2c[:3, :3], w2c[:3, 3]
    dirs = d_cam @ R  # R^T d for each row
    origin = -(R.T @ t)
    return origin.expand_as(dirs).to(dtype), dirs.to(dtype), d_cam[:, 2].to(dtype)


def per_ray(bound: float | Tensor, origins: Tensor) -> Tensor:
    """[R] a number or a per-ray tensor [R] as ``origins``' dtype and device."""
    if isinstance(bound, Tensor):
        return bound.to(dtype=origins.dtype, device=origins.device).expand(origins.shape[0])
    return origins.new_full((origins.shape[0],), float(bound))


def ray_entry(origins: Tensor, dirs: Tensor, space: FieldSpace, near: float | Tensor,
              far: float | Tensor) -> tuple[Tensor, Tensor]:
    """(t_near [R], t_far [R]) of each ray: for a box, the slab intersection clipped to [near, far] (a ray
    that misses gets t_near = t_far); contracted space is all of space: [near, far]. ``near`` / ``far``:
    numbers, or per-ray distances [R] (+inf allowed for far); t_far >= t_near always."""
    near_r, far_r = per_ray(near, origins), per_ray(far, origins)
    if space.contracted:
        return near_r, torch.maximum(far_r, near_r)
    lo = torch.tensor(space.lo, dtype=origins.dtype, device=origins.device)
    hi = lo + torch.tensor(space.size, dtype=origins.dtype, device=origins.device)
    safe = torch.where(dirs.abs() < 1e-12, torch.full_like(dirs, 1e-12), dirs)
    a, b = (lo - origins) / safe, (hi - origins) / safe
    t0 = torch.maximum(torch.minimum(a, b).amax(dim=1), near_r)
    t1 = torch.minimum(torch.maximum(a, b).amin(dim=1), far_r)
    return t0, torch.maximum(t1, t0)


def clip_steps(ray: Tensor, t0: Tensor, t1: Tensor, t_end: Tensor) -> Tensor:
    """t1 [S] of packed steps (ray [S], t0 [S], t1 [S]) ended at their ray's bound ``t_end`` [R] (+inf: none):
    min(t1, t_end[ray]). Steps marched up to t_end start before it (t0 < t_end), so none becomes empty."""
    return torch.minimum(t1, t_end.to(t1)[ray])


# ------------------------------------------------------------------------------------------ reference


def march_rays_reference(origins: Tensor, dirs: Tensor, t_near: Tensor, t_far: Tensor, jitter: Tensor,
                         grid: Tensor, space: FieldSpace, dt_min: float, dt_max: float, cone_angle: float,
                         max_steps: int) -> tuple[Tensor, Tensor, Tensor]:
    """Packed samples (ray [S], t0 [S], t1 [S]) of rays ``origins`` / ``dirs`` [R, 3] between ``t_near`` and
    ``t_far`` [R], first step offset ``jitter`` [R] in [0, 1) steps, through occupancy ``grid`` bool
    [G, G, G] (index [x, y, z] of the unit cube). Float64; one vectorised step of all rays per iteration."""
    o, d = origins.double(), dirs.double()
    G = grid.shape[0]

    def step_size(t):
        return (t * cone_angle).clamp(dt_min, dt_max)

    t = t_near.double() + jitter.double() * step_size(t_near.double())
    far = t_far.double()
    keep, t0s, t1s = [], [], []
    for _ in range(max_steps):
        active = t < far
        if not bool(active.any()):
            break
        dt = step_size(t)
        mid = t + 0.5 * dt
        u = to_unit(o + mid[:, None] * d, space)
        cell = torch.floor(u * G)
        inside = ((cell >= 0) & (cell < G)).all(dim=1)
        c = cell.clamp(0, G - 1).long()
        occupied = grid[c[:, 0], c[:, 1], c[:, 2]] & inside
        keep.append(active & occupied)
        t0s.append(t.clone())
        t1s.append(t + dt)
        t = torch.where(active, t + dt, t)
    if not keep:
        empty = torch.zeros(0, dtype=torch.float64, device=o.device)
        return torch.zeros(0, dtype=torch.int64, device=o.device), empty, empty.clone()
    keep_m = torch.stack(keep, dim=1)  # [R, steps]
    ray = torch.arange(o.shape[0], device=o.device)[:, None].expand_as(keep_m)[keep_m]
    return ray, torch.stack(t0s, dim=1)[keep_m], torch.stack(t1s, dim=1)[keep_m]


# ------------------------------------------------------------------------------------------ Numba kernel


@njit(cache=True, inline="always")
def _step_size(t, dt_min, dt_max, cone_angle):
    return min(max(t * cone_angle, dt_min), dt_max)


@njit(cache=True, inline="always")
def _occupied(o, d, ray, mid, grid, contracted, lo, size):
    """Whether the point at distance ``mid`` on ray ``ray`` lies in an occupied cell (to_unit's arithmetic)."""
    G = grid.shape[0]
    y0 = (o[ray, 0] + mid * d[ray, 0] - lo[0]) / size[0]
    y1 = (o[ray, 1] + mid * d[ray, 1] - lo[1]) / size[1]
    y2 = (o[ray, 2] + mid * d[ray, 2] - lo[2]) / size[2]
    if contracted:
        m = max(abs(y0), max(abs(y1), abs(y2)))
        if m > 1.0:
            k = 2.0 - 1.0 / m
            y0, y1, y2 = k * (y0 / m), k * (y1 / m), k * (y2 / m)
        y0, y1, y2 = (y0 + 2.0) / 4.0, (y1 + 2.0) / 4.0, (y2 + 2.0) / 4.0
    c0, c1, c2 = math.floor(y0 * G), math.floor(y1 * G), math.floor(y2 * G)
    if c0 < 0 or c1 < 0 or c2 < 0 or c0 >= G or c1 >= G or c2 >= G:
        return False
    return grid[int(c0), int(c1), int(c2)]


@njit(cache=True, parallel=True)
def _march_kernel(o, d, t_near, t_far, jitter, grid, contracted, lo, size, dt_min, dt_max, cone_angle,
                  max_steps, starts, ray_out, t0_out, t1_out, count_only):
    """Count (count_only: into starts[r + 1]) or write the kept steps of each ray from row starts[r]."""
    R = o.shape[0]
    for r in prange(R):
        t = t_near[r] + jitter[r] * _step_size(t_near[r], dt_min, dt_max, cone_angle)
        n = 0
        for _ in range(max_steps):
            if not t < t_far[r]:
                break
            dt = _step_size(t, dt_min, dt_max, cone_angle)
            if _occupied(o, d, r, t + 0.5 * dt, grid, contracted, lo, size):
                if not count_only:
                    k = starts[r] + n
                    ray_out[k] = r
                    t0_out[k] = t
                    t1_out[k] = t + dt
                n += 1
            t = t + dt
        if count_only:
            starts[r + 1] = n


def march_rays_numba(origins: Tensor, dirs: Tensor, t_near: Tensor, t_far: Tensor, jitter: Tensor,
                     grid: Tensor, space: FieldSpace, dt_min: float, dt_max: float, cone_angle: float,
                     max_steps: int) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`march_rays_reference` in a Numba kernel (two passes: count per ray, then write)."""
    def arr(t):
        return t.detach().cpu().double().contiguous().numpy()

    o, d, tn, tf, jit = arr(origins), arr(dirs), arr(t_near), arr(t_far), arr(jitter)
    g = grid.detach().cpu().bool().contiguous().numpy()
    lo, size = space.arrays()
    R = o.shape[0]
    starts = np.zeros(R + 1, dtype=np.int64)
    dummy_i, dummy_f = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    with KERNEL_LOCK:
        _march_kernel(o, d, tn, tf, jit, g, space.contracted, lo, size, float(dt_min), float(dt_max),
                      float(cone_angle), int(max_steps), starts, dummy_i, dummy_f, dummy_f, True)
    np.cumsum(starts, out=starts)
    S = int(starts[-1])
    ray, t0, t1 = np.empty(S, dtype=np.int64), np.empty(S, dtype=np.float64), np.empty(S, dtype=np.float64)
    with KERNEL_LOCK:
        _march_kernel(o, d, tn, tf, jit, g, space.contracted, lo, size, float(dt_min), float(dt_max),
                      float(cone_angle), int(max_steps), starts, ray, t0, t1, False)
    return torch.from_numpy(ray), torch.from_numpy(t0), torch.from_numpy(t1)


def march_rays(*args, backend: str = "auto", **kwargs) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`march_rays_numba` ("numba", and "auto" on the CPU) or :func:`march_rays_reference` ("torch")."""
    origins = args[0] if args else kwargs["origins"]
    if backend == "auto":
        backend = "numba" if origins.device.type == "cpu" else "torch"
    if backend == "numba":
        return march_rays_numba(*args, **kwargs)
    if backend == "torch":
        return march_rays_reference(*args, **kwargs)
    raise ValueError(f"march_rays: unknown backend {backend!r} (auto, numba, torch)")
