"""Colour of 4D Gaussians: Yang et al.'s 4D "spherindrical" harmonics (reference PyTorch).

colour(d, t) = max(sum_n cos(2 pi n (t - mu_t) / T) SH_n(d) + 0.5, 0), n = 0..time_degree (0..2), where
SH_n(d) is the degree-``sh_degree`` real SH (rasterizer/reference/sh.py, the 3D convention) of
coefficient block n at the unit direction d from the camera centre to the Gaussian, and T the time
period (Yang et al. use the length of the time span: 1 for normalised times). Time degree 0 is the 3D
colour.

Static SH (4D-Rotor's colour model) needs nothing new: pass the sliced Gaussians' SH,
``sliced.gather(sh)``, to ``rasterize_gaussians(..., sh_degree=...)`` as for 3D.

Coefficient layout: ``coeffs [N, time_degree + 1 (or more), K, 3]``, block n multiplied by the n-th
cosine, K >= (sh_degree + 1)^2. Yang et al.'s flat features [N, (D + 1)^2 (D_t + 1), 3] (time-block
major, D = their maximum SH degree) are ``feats.reshape(N, D_t + 1, (D + 1) ** 2, 3)``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..reference.sh import eval_sh, num_sh_bases
from ..validate import RasterizerInputError

MAX_TIME_DEGREE = 2
FUNC = "spherindrical_to_color"


def _fail(name: str, problem: str) -> None:
    raise RasterizerInputError(f"{FUNC}: `{name}` {problem}")


def _check(sh_degree, time_degree, means, mean_times, coeffs, viewmats, times, period) -> Tensor:
    if not isinstance(sh_degree, int) or isinstance(sh_degree, bool) or not 0 <= sh_degree <= 3:
        _fail("sh_degree", f"must be an int in 0..3, got {sh_degree!r}")
    if (not isinstance(time_degree, int) or isinstance(time_degree, bool)
            or not 0 <= time_degree <= MAX_TIME_DEGREE):
        _fail("time_degree", f"must be an int in 0..{MAX_TIME_DEGREE}, got {time_degree!r}")
    if not (isinstance(period, (int, float)) and not isinstance(period, bool) and period > 0
            and math.isfinite(period)):
        _fail("period", f"must be a positive number (the time span, 1 for normalised times), got {period!r}")
    for name, x, dim in (("means", means, 2), ("mean_times", mean_times, 1), ("coeffs", coeffs, 4),
                         ("viewmats", viewmats, 3)):
        if not isinstance(x, Tensor) or x.dim() != dim or not x.is_floating_point():
            _fail(name, f"must be a {dim}-D floating-point tensor, got "
                  f"{type(x).__name__ if not isinstance(x, Tensor) else f'{x.dtype} {list(x.shape)}'}")
    n = means.shape[0]
    if means.shape != (n, 3) or mean_times.shape != (n,):
        _fail("means", f"and `mean_times` must be [N, 3] and [N], got {list(means.shape)} and "
              f"{list(mean_times.shape)}")
    need = (time_degree + 1, num_sh_bases(sh_degree))
    if coeffs.shape[0] != n or coeffs.shape[3] != 3 or coeffs.shape[1] < need[0] or coeffs.shape[2] < need[1]:
        _fail("coeffs", f"has shape {list(coeffs.shape)}; expected [N={n}, >= {need[0]} time blocks, "
              f">= {need[1]} SH coefficients, 3] for sh_degree={sh_degree}, time_degree={time_degree}")
    if viewmats.shape[1:] != (4, 4) or viewmats.shape[0] == 0:
        _fail("viewmats", f"has shape {list(viewmats.shape)}, expected [C, 4, 4] with C >= 1")
    c = viewmats.shape[0]
    if isinstance(times, Tensor):
        if times.dim() > 1 or (times.dim() == 1 and times.shape[0] != c):
            _fail("times", f"has shape {list(times.shape)}; expected a float, a 0-dim tensor or [C={c}]")
        return times.to(means.dtype).reshape(-1).expand(c)
    if not isinstance(times, (int, float)) or isinstance(times, bool) or not math.isfinite(times):
        _fail("times", f"must be a finite float or a tensor [C], got {times!r}")
    return means.new_full((c,), float(times))


def spherindrical_to_color(sh_degree: int, time_degree: int, means: Tensor, mean_times: Tensor, coeffs: Tensor,
                           viewmats: Tensor, times: float | Tensor, *, period: float = 1.0) -> Tensor:
    """Per-camera colours [C, N, 3] of N Gaussians with 4D spherindrical harmonics.

    Args:
        sh_degree: spatial SH degree 0..3; time_degree: 0..2 (cosines of 0 .. time_degree periods).
        means [N, 3]: positions whose direction from each camera centre is used (Yang et al. use the
        4D mean's xyz; a slice's means work as well); mean_times [N]: the Gaussians' mu_t;
        coeffs [N, B, K, 3] (B >= time_degree + 1 blocks; see the module docstring);
        viewmats [C, 4, 4] world_to_cam; times: one time for all cameras or [C], one per camera.
        period: T in cos(2 pi n (t - mu_t) / T).
    Returns:
        [C, N, 3] colours max(value + 0.5, 0): pass as ``colors`` (with ``sh_degree=None``) to
        ``rasterize_gaussians``, after gathering the slice's rows (``colors[:, sliced.indices]``).
    """
    times = _check(sh_degree, time_degree, means, mean_times, coeffs, viewmats, times, period)
    rot = viewmats[:, :3, :3]
    centres = -(rot.transpose(-1, -2) @ viewmats[:, :3, 3:])[..., 0]  # [C, 3]
    dirs = means[None] - centres[:, None]  # [C, N, 3]
    dt = times[:, None] - mean_times[None]  # [C, N]
    value = 0.0
    for n in range(time_degree + 1):
        block = eval_sh(sh_degree, dirs, coeffs[None, :, n].expand(len(viewmats), -1, -1, -1))  # [C, N, 3]
        value = value + (block if n == 0 else torch.cos((2 * math.pi * n / period) * dt)[..., None] * block)
    return torch.clamp_min(value + 0.5, 0.0)
