"""Input checks for :func:`rasterizer.spacetime.slice_gaussians_4d`: a clear RasterizerInputError naming
the argument, before any arithmetic (the helpers of rasterizer/validate.py)."""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

from .. import validate as V

FUNC = "slice_gaussians_4d"


def _fail(name: str, problem: str) -> None:
    raise V.RasterizerInputError(f"{FUNC}: `{name}` {problem}")


def _tensor(name: str, x, shape: tuple, dtype=None, device=None) -> None:
    V.check_tensor(name, x, shape, dtype, device, func=FUNC, ref="means4")


def check_gaussians_4d(means4, quats_left, quats_right, scales4, opacities) -> int:
    """Check the 4D Gaussians' tensors (shapes, one dtype and device, finite, values); return N."""
    _tensor("means4", means4, (None, 4))
    n, dt, dev = means4.shape[0], means4.dtype, means4.device
    for name, q in (("quats_left", quats_left), ("quats_right", quats_right)):
        _tensor(name, q, (n, 4), dt, dev)
        if n and V.any_zero_rows(q):
            rows = (q.detach().norm(dim=-1) == 0).nonzero()[:5, 0].tolist()
            _fail(name, f"has zero-norm rows {rows}: a 4D rotation needs two non-zero quaternions (w, x, y, z)")
    _tensor("scales4", scales4, (n, 4), dt, dev)
    if n and V.any_outside(scales4, torch.finfo(dt).tiny, math.inf):
        rows = (scales4.detach() <= 0).any(-1).nonzero()[:5, 0].tolist()
        _fail("scales4", f"has values <= 0 (first rows: {rows}): pass activated scales (x, y, z, t), e.g. "
              "exp(log_scales); every scale must be positive so that Sigma_tt > 0")
    _tensor("opacities", opacities, (n,), dt, dev)
    if n and V.any_outside(opacities, 0.0, 1.0):
        _fail("opacities", "has values outside [0, 1]: pass activated opacities, e.g. sigmoid(logits)")
    return n


def check_times(times, dtype: torch.dtype, device: torch.device) -> tuple[list, bool]:
    """``times`` as a list of scalars (floats, or 0-dim tensors of ``dtype`` on ``device``, keeping any
    gradient) and whether one time was given (a float or a 0-dim tensor) rather than a [C] tensor."""
    if isinstance(times, numbers.Real) and not isinstance(times, bool):
        if not math.isfinite(float(times)):
            _fail("times", f"is {times!r}; a time must be finite")
        return [float(times)], True
    if not isinstance(times, Tensor):
        _fail("times", f"must be a float or a 1-D tensor [C] of times, got {type(times).__name__}")
    if times.dim() > 1:
        _fail("times", f"has shape {list(times.shape)}; expected a float, a 0-dim tensor or a 1-D tensor [C]")
    if not times.is_floating_point():
        _fail("times", f"must be a floating-point tensor, got {times.dtype}")
    if times.device != device:
        _fail("times", f"is on {times.device} but `means4` is on {device}; move all inputs to one device")
    if times.dim() == 1 and times.shape[0] == 0:
        _fail("times", "holds zero times; pass at least one")
    if not bool(torch.isfinite(times.detach()).all()):
        _fail("times", "contains NaN or Inf values")
    times = times.to(dtype)
    if times.dim() == 0:
        return [times], True
    return list(times.unbind(0)), False


def check_threshold(cull_threshold) -> float:
    if (not isinstance(cull_threshold, numbers.Real) or isinstance(cull_threshold, bool)
            or not 0.0 <= float(cull_threshold) <= 1.0):
        _fail("cull_threshold", f"is {cull_threshold!r}; expected a number in [0, 1] (0 keeps every Gaussian)")
    return float(cull_threshold)
