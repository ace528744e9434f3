"""``trace_gaussians`` / ``trace_surfels``: primitives along arbitrary rays (secondary rays of a hybrid
renderer: reflections and refractions off inserted meshes).

Two steps (rasterizer/DESIGN.md, "Ray tracing"):

1. candidate search, without gradient: which primitives each ray meets (alpha >= 1/255 at t*, t_min < t* <
   t_max), in t* order, until the light is spent: ``reference`` (:mod:`.reference`, brute force in PyTorch,
   any device) or ``cpu`` (:mod:`.grid`, a Numba uniform-grid walk; identical lists);
2. evaluation (:mod:`.evaluate`, plain PyTorch, differentiable with respect to every primitive input):
   alpha, colour along the ray and front-to-back compositing of the candidate lists.

On the ``cpu`` backend the forward is always the grid walk's own compositing (the same rules, float64, one
pass); with gradients, the backward walks again for the candidate lists and differentiates step 2 on them
(:class:`_TraceCPU`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ..reference.sh import is_split_sh, num_sh_bases
from ..validate import RasterizerInputError, calling, check_gaussians, check_tensor
from . import grid as grid_mod
from .evaluate import composite_candidates
from .geometry import (GAUSSIAN, SURFEL, gaussian_axis_sigmas, gaussian_frames, surfel_axis_sigmas,
                       surfel_frames)
from .reference import candidates_reference

BACKENDS = ("auto", "reference", "cpu")
CAP = 128  # first candidate capacity per ray of the cpu search (rays with more are searched again)


def _fail(name: str, problem: str, func: str) -> None:
    raise RasterizerInputError(f"{func}: `{name}` {problem}")


def _check_rays(origins, dirs, t_min, t_max, dt, dev, func: str) -> int:
    check_tensor("origins", origins, (None, 3), dt, dev, func=func)
    R = origins.shape[0]
    check_tensor("dirs", dirs, (R, 3), dt, dev, func=func)
    check_tensor("t_min", t_min, (R,), dt, dev, func=func, finite=False)
    check_tensor("t_max", t_max, (R,), dt, dev, func=func, finite=False)
    if torch.isnan(t_min).any() or torch.isnan(t_max).any():
        _fail("t_min/t_max", "contains NaN (use +inf for an unbounded ray)", func)
    if R and (dirs.detach().norm(dim=-1) - 1).abs().max() > 1e-3:
        _fail("dirs", "must be unit vectors (normalise them)", func)
    return R


def _check_colors(colors, N: int, sh_degree, dt, dev, func: str) -> None:
    if sh_degree is None:
        if is_split_sh(colors):
            _fail("colors", "is a (sh0, shN) pair: pass sh_degree as well", func)
        check_tensor("colors", colors, (N, 3), dt, dev, func=func)
        return
    if not 0 <= int(sh_degree) <= 3:
        _fail("sh_degree", f"is {sh_degree}; expected 0..3", func)
    kb = num_sh_bases(int(sh_degree))
    if is_split_sh(colors):
        sh0, shN = colors
        check_tensor("colors[0] (sh0)", sh0, (N, 1, 3), dt, dev, func=func)
        check_tensor("colors[1] (shN)", shN, (N, None, 3), dt, dev, func=func)
        have = 1 + shN.shape[1]
    else:
        check_tensor("colors", colors, (N, None, 3), dt, dev, func=func)
        have = colors.shape[1]
    if have < kb:
        _fail("colors", f"holds {have} SH coefficients per channel; sh_degree {sh_degree} needs {kb}", func)


def _resolve(backend: str, device: torch.device, func: str) -> str:
    if backend not in BACKENDS:
        _fail("backend", f"is {backend!r}; expected one of {BACKENDS}", func)
    if backend == "auto":
        return "cpu" if device.type == "cpu" else "reference"
    if backend == "cpu" and device.type != "cpu":
        _fail("backend", "'cpu' needs CPU tensors (use 'reference' on other devices)", func)
    return backend


def _np(x: Tensor) -> np.ndarray:
    return np.ascontiguousarray(x.detach().to(torch.float64).cpu().numpy())


def build_accel(mu: Tensor, A: Tensor, opacities: Tensor, axis_sigma: Tensor, kind: int) -> "grid_mod.Grid":
    """The cpu backend's grid of the primitives (see :mod:`.grid`); pass it back as ``accel=`` while the
    primitives do not change (the models cache it per parameter version)."""
    return grid_mod.build_grid(_np(mu), np.ascontiguousarray(_np(A).reshape(-1, 3, 3)), _np(opacities),
                               _np(axis_sigma), kind)


def _sh_arrays(colors, sh_degree, dt) -> tuple[np.ndarray, np.ndarray, int]:
    """(sh0 [N, 1, 3], shN [N, K-1, 3], K) float numpy views for the shading kernel; K = -1: plain RGB."""
    if sh_degree is None:
        c = colors.detach().contiguous().numpy()
        return c[:, None, :], np.zeros((c.shape[0], 0, 3), c.dtype), -1
    kb = num_sh_bases(int(sh_degree))
    if is_split_sh(colors):
        sh0, shN = (c.detach().contiguous().numpy() for c in colors)
    else:
        full = colors.detach().contiguous().numpy()
        sh0, shN = full[:, :1], full[:, 1:]
    if sh0.dtype != shN.dtype:
        shN = shN.astype(sh0.dtype)
    return sh0, shN, kb


def candidates_cpu(accel: "grid_mod.Grid", origins: Tensor, dirs: Tensor, t_min: Tensor, t_max: Tensor
                   ) -> tuple[Tensor, Tensor]:
    """(ids [R, K] int64 -1 padded, counts [R]) from the grid walk; the same lists as
    :func:`candidates_reference`."""
    o, d, lo, hi = (_np(x) for x in (origins, dirs, t_min, t_max))
    R = o.shape[0]
    ids = np.full((R, CAP), -1, np.int32)
    counts = np.zeros(R, np.int64)
    dummy3 = np.zeros((0, 3))
    dummy1 = np.zeros(0)
    sh_dummy = np.zeros((1, 1, 3))
    rows = np.arange(R, dtype=np.int64)
    grid_mod.run_kernel(accel, o, d, lo, hi, rows, False, sh_dummy, sh_dummy[:, :0], -1, CAP,
                        ids, counts, dummy3, dummy1, dummy1)
    over = np.nonzero(counts > CAP)[0]
    if len(over):
        cap2 = int(counts[over].max())
        ids2 = np.full((R, cap2), -1, np.int32)
        counts2 = np.zeros(R, np.int64)
        grid_mod.run_kernel(accel, o, d, lo, hi, over.astype(np.int64), False, sh_dummy, sh_dummy[:, :0], -1,
                            cap2, ids2, counts2, dummy3, dummy1, dummy1)
        wide = np.full((R, cap2), -1, np.int32)
        wide[:, :CAP] = ids
        wide[over] = ids2[over]
        ids = wide
    K = int(counts.max()) if R else 0
    return torch.from_numpy(ids[:, :K].astype(np.int64)), torch.from_numpy(counts)


def shade_cpu(accel: "grid_mod.Grid", colors, sh_degree, origins: Tensor, dirs: Tensor, t_min: Tensor,
              t_max: Tensor, dt: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """The fused forward of the grid walk (no gradient): (rgb [R, 3], transmittance [R, 1], distance [R, 1])."""
    o, d, lo, hi = (_np(x) for x in (origins, dirs, t_min, t_max))
    R = o.shape[0]
    sh0, shN, K = _sh_arrays(colors, sh_degree, dt)
    rgb = np.zeros((R, 3))
    T = np.ones(R)
    dist = np.zeros(R)
    grid_mod.run_kernel(accel, o, d, lo, hi, np.arange(R, dtype=np.int64), True, sh0, shN, K, 0,
                        np.zeros((R, 0), np.int32), np.zeros(R, np.int64), rgb, T, dist)
    f = lambda x: torch.from_numpy(x).to(dt)  # noqa: E731
    return f(rgb), f(T)[:, None], f(dist)[:, None]


def _frames_need_grad(frames) -> bool:
    """Whether the frame inputs (quats, scales or covars, held by the ``frames`` closure) require a gradient."""
    return any(t is not None and t.requires_grad for t in getattr(frames, "inputs", ()))


class _Frames:
    """A deferred frame computation: ``fn(*inputs)`` when called."""

    def __init__(self, fn, *inputs):
        self.fn, self.inputs = fn, inputs

    def __call__(self):
        return self.fn(*self.inputs)


class _TraceCPU(torch.autograd.Function):
    """The cpu backend with gradients: the forward is the grid walk's fused compositing (one pass); the
    backward walks again for the candidate lists and differentiates the PyTorch evaluation
    (:func:`composite_candidates`) of them, which computes the same outputs. The rays get no gradient."""

    @staticmethod
    def forward(ctx, mu, A, opacities, c0, c1, accel, kind, sh_degree, split, origins, dirs, t_min, t_max):
        colors = (c0, c1) if split else c0
        ctx.save_for_backward(mu, A, opacities, c0, c1, origins, dirs, t_min, t_max)
        ctx.meta = (accel, kind, sh_degree, split)
        return shade_cpu(accel, colors, sh_degree, origins, dirs, t_min, t_max, mu.dtype)

    @staticmethod
    def backward(ctx, v_rgb, v_T, v_dist):
        mu, A, opacities, c0, c1, origins, dirs, t_min, t_max = ctx.saved_tensors
        accel, kind, sh_degree, split = ctx.meta
        ids, counts = candidates_cpu(accel, origins, dirs, t_min, t_max)
        needs = ctx.needs_input_grad
        with torch.enable_grad():
            leaves = [x.detach().requires_grad_(bool(needs[i])) for i, x in enumerate((mu, A, opacities, c0, c1))]
            colors = (leaves[3], leaves[4]) if split else leaves[3]
            outs = composite_candidates(leaves[0], leaves[1], leaves[2], colors, sh_degree, kind, origins, dirs,
                                        t_min, t_max, ids, counts)
            wanted = [x for i, x in enumerate(leaves) if needs[i]]
            grads = iter(torch.autograd.grad(outs, wanted, (v_rgb, v_T, v_dist), allow_unused=True) if wanted else ())
        out = [next(grads) if needs[i] else None for i in range(5)]
        out = [torch.zeros_like(x) if (g is None and needs[i]) else g
               for i, (x, g) in enumerate(zip((mu, A, opacities, c0, c1), out))]
        return (*out, None, None, None, None, None, None, None, None)


def _trace(kind: int, func: str, mu, frames, axis_sigmas, opacities, colors, origins, dirs, t_min, t_max, sh_degree,
           backend, accel):
    """frames() -> A [N, 3, 3] and axis_sigmas() -> [N, 3] are called only when needed (the fused forward
    with a prebuilt ``accel`` needs neither: 10-40 ms saved at 200k)."""
    dev = mu.device
    backend = _resolve(backend, dev, func)
    split = is_split_sh(colors)
    c0, c1 = colors if split else (colors, colors.new_zeros(0))
    grad = torch.is_grad_enabled() and (any(t.requires_grad for t in (mu, opacities, c0, c1))
                                        or _frames_need_grad(frames))
    if backend == "cpu" and accel is not None and not grad:
        return shade_cpu(accel, colors, sh_degree, origins, dirs, t_min, t_max, mu.dtype)
    A = frames()
    if backend == "reference":
        ids, counts = candidates_reference(mu, A, opacities, kind, origins, dirs, t_min, t_max)
        return composite_candidates(mu, A, opacities, colors, sh_degree, kind, origins, dirs, t_min, t_max,
                                    ids, counts)
    if accel is None:
        accel = build_accel(mu, A, opacities, axis_sigmas(), kind)
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in (mu, A, opacities, c0, c1))):
        return shade_cpu(accel, colors, sh_degree, origins, dirs, t_min, t_max, mu.dtype)
    return _TraceCPU.apply(mu, A, opacities, c0, c1, accel, kind, sh_degree, split, origins.detach(),
                           dirs.detach(), t_min.detach(), t_max.detach())


def trace_gaussians(means: Tensor, quats: Tensor | None, scales: Tensor | None, opacities: Tensor, colors,
                    origins: Tensor, dirs: Tensor, t_min: Tensor, t_max: Tensor, *, sh_degree: int | None = None,
                    backend: str = "auto", covars: Tensor | None = None, accel=None
                    ) -> tuple[Tensor, Tensor, Tensor]:
    """3D Gaussians along R rays, each evaluated where its response along the ray peaks.

    Args:
        means [N, 3], quats [N, 4] (w, x, y, z), scales [N, 3] activated, opacities [N] in [0, 1] (or
        ``covars`` [N, 3, 3] instead of quats and scales); colors: RGB [N, 3] with ``sh_degree`` None, else SH
        coefficients [N, K, 3] or a split (sh0 [N, 1, 3], shN [N, K-1, 3]) pair, evaluated at the ray
        direction (``max(SH + 0.5, 0)``); origins, dirs [R, 3] unit (world); t_min, t_max [R] (+inf allowed).
        backend: "auto" (cpu for CPU tensors, else reference), "reference" or "cpu"; accel: a prebuilt
        :func:`build_accel` of these Gaussians (cpu backend).
    Returns:
        (rgb [R, 3] premultiplied, transmittance [R, 1], distance [R, 1] the expected t* of what was
        composited, 0 where nothing was), differentiable with respect to the Gaussians (the ray
        arguments get no gradient on the fused forward).
    Per ray and Gaussian: t* = ((mu - o)^T S^-1 d) / (d^T S^-1 d), m* its Mahalanobis distance squared,
    alpha = min(0.999, opacity exp(-m* / 2)), skipped below 1/255 or unless t_min < t* < t_max;
    composited front to back in t* order, stopping before T would reach 1e-4 (the rasterizer's rules).
    """
    func = "trace_gaussians"
    with calling(func):
        N = check_gaussians(means, quats, scales, opacities, covars)
    dt, dev = means.dtype, means.device
    _check_rays(origins, dirs, t_min, t_max, dt, dev, func)
    _check_colors(colors, N, sh_degree, dt, dev, func)
    return _trace(GAUSSIAN, func, means, _Frames(gaussian_frames, quats, scales, covars),
                  _Frames(gaussian_axis_sigmas, quats, scales, covars), opacities, colors, origins, dirs, t_min, t_max,
                  sh_degree, backend, accel)


def trace_surfels(means: Tensor, quats: Tensor, scales: Tensor, opacities: Tensor, colors, origins: Tensor,
                  dirs: Tensor, t_min: Tensor, t_max: Tensor, *, sh_degree: int | None = None,
                  backend: str = "auto", accel=None) -> tuple[Tensor, Tensor, Tensor]:
    """2D Gaussian surfels (2DGS) along R rays: each surfel is evaluated at the ray's exact intersection
    with its plane, alpha = min(0.999, opacity exp(-(u^2 + v^2) / 2)) with (u, v) the hit in the surfel's
    tangent frame in standard deviations (no screen-space low-pass term: rays have no pixel footprint);
    t* is the intersection distance. Arguments and returns as :func:`trace_gaussians`, scales [N, 2]."""
    func = "trace_surfels"
    check_tensor("means", means, (None, 3), func=func)
    N, dt, dev = means.shape[0], means.dtype, means.device
    check_tensor("quats", quats, (N, 4), dt, dev, func=func)
    check_tensor("scales", scales, (N, 2), dt, dev, func=func)
    check_tensor("opacities", opacities, (N,), dt, dev, func=func)
    if N and bool((scales.detach() <= 0).any()):
        _fail("scales", "must be positive: pass activated scales, e.g. exp(log_scales)", func)
    _check_rays(origins, dirs, t_min, t_max, dt, dev, func)
    _check_colors(colors, N, sh_degree, dt, dev, func)
    return _trace(SURFEL, func, means, _Frames(surfel_frames, quats, scales),
                  _Frames(surfel_axis_sigmas, quats, scales), opacities, colors, origins, dirs, t_min, t_max,
                  sh_degree, backend, accel)


def build_gaussian_accel(means: Tensor, quats: Tensor | None, scales: Tensor | None, opacities: Tensor,
                         covars: Tensor | None = None):
    """:func:`build_accel` of 3D Gaussians (the ``accel=`` argument of :func:`trace_gaussians`)."""
    with torch.no_grad():
        return build_accel(means, gaussian_frames(quats, scales, covars), opacities,
                           gaussian_axis_sigmas(quats, scales, covars), GAUSSIAN)


def build_surfel_accel(means: Tensor, quats: Tensor, scales: Tensor, opacities: Tensor):
    """:func:`build_accel` of 2D surfels (the ``accel=`` argument of :func:`trace_surfels`)."""
    with torch.no_grad():
        return build_accel(means, surfel_frames(quats, scales), opacities, surfel_axis_sigmas(quats, scales),
                           SURFEL)
