"""Input checks for ``rasterize_gaussians`` and ``rasterize_surfels``: a clear error naming the argument,
before any kernel runs. Messages start with the public function being called (:func:`calling`)."""

from __future__ import annotations

import contextlib
import contextvars
import math

import torch
from torch import Tensor

from .reference.sh import is_split_sh

RENDER_MODES = ("RGB", "D", "ED", "RGB+D", "RGB+ED")
RASTERIZE_MODES = ("classic", "antialiased")
BACKENDS = ("auto", "reference", "cpu", "cuda")


class RasterizerInputError(ValueError):
    """An argument of rasterize_gaussians / rasterize_surfels is malformed (shape, dtype, device, value)."""


_CALLER = contextvars.ContextVar("rasterizer_caller", default="rasterize_gaussians")


@contextlib.contextmanager
def calling(function_name: str):
    """Within the block, error messages name ``function_name`` (default ``rasterize_gaussians``)."""
    token = _CALLER.set(function_name)
    try:
        yield
    finally:
        _CALLER.reset(token)


def _fail(name: str, problem: str, func: str | None = None) -> None:
    raise RasterizerInputError(f"{func or _CALLER.get()}: `{name}` {problem}")


_CHECKS = None


def _cpu_checks():
    """The module ``rasterizer.cpu.checks`` (imported on first use: it loads Numba)."""
    global _CHECKS
    if _CHECKS is None:
        from .cpu import checks

        _CHECKS = checks
    return _CHECKS


def all_finite(x: Tensor) -> bool:
    """No NaN/Inf in ``x``: a Numba kernel for CPU float32/64 tensors (one pass; PyTorch's isfinite + all
    makes four), ``torch.isfinite`` elsewhere."""
    if _cpu_float(x):
        return _cpu_checks().count_non_finite(x.detach().reshape(-1).numpy()) == 0
    return bool(torch.isfinite(x).all())


def check_tensor(name: str, x: Tensor | None, shape: tuple, dtype: torch.dtype | None = None,
                 device: torch.device | None = None, *, func: str | None = None, ref: str = "means",
                 finite: bool = True) -> None:
    """Check type, shape (None = any size), dtype, device and finiteness of one argument. ``func`` names
    the function in the message (default: the one set by :func:`calling`, else rasterize_gaussians), ``ref``
    the argument whose dtype and device the others must share; ``finite=False`` leaves finiteness to the
    caller (a kernel that checks it in its own pass)."""
    if not isinstance(x, Tensor):
        _fail(name, f"must be a torch.Tensor, got {type(x).__name__}", func)
    if x.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, x.shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        _fail(name, f"has shape {list(x.shape)}, expected {want}", func)
    if not x.is_floating_point():
        _fail(name, f"must be a floating-point tensor, got {x.dtype}", func)
    if dtype is not None and x.dtype != dtype:
        _fail(name, f"has dtype {x.dtype} but `{ref}` has {dtype}; cast all inputs to one dtype", func)
    if device is not None and x.device != device:
        _fail(name, f"is on {x.device} but `{ref}` is on {device}; move all inputs to one device", func)
    if finite and x.numel() and not all_finite(x):
        bad = (~torch.isfinite(x.detach())).reshape(x.shape[0], -1).any(-1).nonzero()[:5, 0].tolist() if x.dim() else []
        _fail(name, f"contains NaN or Inf values (first bad rows: {bad}); fix or drop them before rendering", func)


def check_choice(name: str, value: str, choices: tuple) -> None:
    if value not in choices:
        _fail(name, f"is {value!r}; expected one of {choices}")


def _cpu_arrays(tensors: tuple, shapes: tuple) -> tuple | None:
    """The tensors as NumPy arrays (C-contiguous; shared memory unless a copy was needed) when they are all CPU
    tensors of one dtype, float32 or float64, of the given shapes (tuples of ints); else None."""
    dt = tensors[0].dtype if isinstance(tensors[0], Tensor) else None
    if dt not in (torch.float32, torch.float64):
        return None
    for x, shape in zip(tensors, shapes):
        if not isinstance(x, Tensor) or x.dtype != dt or x.device.type != "cpu" or x.shape != shape:
            return None
    return tuple(x.detach().contiguous().numpy() for x in tensors)


def check_gaussians(means, quats, scales, opacities, covars) -> int:
    """Check the geometry arguments; return N. CPU tensors of the right shapes take one fused pass
    (cpu.checks.gaussian_value_problems); anything else, or a problem found there, goes through the checks
    one by one (:func:`check_gaussians_one_by_one`), which name the first problem."""
    if covars is None and isinstance(means, Tensor) and means.dim() == 2:
        N = means.shape[0]
        arrays = _cpu_arrays((means, quats, scales, opacities), ((N, 3), (N, 4), (N, 3), (N,)))
        if arrays is not None and _cpu_checks().gaussian_value_problems(*arrays) == 0:
            return N
    return check_gaussians_one_by_one(means, quats, scales, opacities, covars)


def check_gaussians_one_by_one(means, quats, scales, opacities, covars) -> int:
    """check_gaussians, each argument and condition in turn; return N."""
    check_tensor("means", means, (None, 3))
    N, dt, dev = means.shape[0], means.dtype, means.device
    if covars is not None:
        check_tensor("covars", covars, (N, 3, 3), dt, dev)
    else:
        check_tensor("quats", quats, (N, 4), dt, dev)
        check_tensor("scales", scales, (N, 3), dt, dev)
        if N and any_zero_rows(quats):
            rows = (quats.detach().norm(dim=-1) == 0).nonzero()[:5, 0].tolist()
            _fail("quats", f"has zero-norm rows {rows}: a rotation needs a non-zero quaternion (w, x, y, z)")
        if N and any_outside(scales, 0.0, math.inf):
            _fail("scales", "has negative values: pass activated scales, e.g. exp(log_scales)")
    check_tensor("opacities", opacities, (N,), dt, dev)
    if N and any_outside(opacities, 0.0, 1.0):
        _fail("opacities", "has values outside [0, 1]: pass activated opacities, e.g. sigmoid(logits)")
    return N


def _cpu_float(x: Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)


def any_zero_rows(x: Tensor) -> bool:
    """Whether a row of ``x`` [N, D] is all zeros (one Numba pass on the CPU; PyTorch elsewhere)."""
    if _cpu_float(x):
        from .cpu.checks import count_zero_rows

        return count_zero_rows(x.detach().contiguous().numpy()) > 0
    return bool((x.detach() == 0).all(dim=-1).any())


def any_outside(x: Tensor, lo: float, hi: float) -> bool:
    """Whether an entry of ``x`` is below ``lo`` or above ``hi`` (one Numba pass on the CPU)."""
    if _cpu_float(x):
        from .cpu.checks import count_outside

        return count_outside(x.detach().contiguous().reshape(-1).numpy(), lo, hi) > 0
    x = x.detach()
    return bool(((x < lo) | (x > hi)).any())


def check_colors(colors: Tensor, N: int, C: int, sh_degree: int | None, dt, dev) -> int:
    """Check colours or SH coefficients; return the number of colour channels D."""
    if sh_degree is None:
        if is_split_sh(colors):
            _fail("colors", "is a pair (split SH coefficients sh0, shN): pass sh_degree as well")
        if colors is None or colors.dim() not in (2, 3):
            _fail("colors", f"must be [N, D] or [C, N, D] when sh_degree is None, got "
                  f"{None if colors is None else list(colors.shape)}")
        shape = (N, None) if colors.dim() == 2 else (C, N, None)
        check_tensor("colors", colors, shape, dt, dev)
        if colors.shape[-1] < 1:
            _fail("colors", "has zero channels")
        return colors.shape[-1]
    if not isinstance(sh_degree, int) or not 0 <= sh_degree <= 3:
        _fail("sh_degree", f"must be an int in 0..3, got {sh_degree!r}")
    if is_split_sh(colors):
        if len(colors) != 2:
            _fail("colors", f"as split SH coefficients must be a pair (sh0 [N, 1, 3], shN [N, K-1, 3]), "
                  f"got {len(colors)} items")
        check_tensor("colors[0] (sh0)", colors[0], (N, 1, 3), dt, dev)
        check_tensor("colors[1] (shN)", colors[1], (N, None, 3), dt, dev)
        K = 1 + colors[1].shape[1]
    else:
        check_tensor("colors", colors, (N, None, 3), dt, dev)
        K = colors.shape[1]
    if K < (sh_degree + 1) ** 2:
        _fail("colors", f"has {K} SH coefficients per channel, sh_degree={sh_degree} needs {(sh_degree + 1) ** 2}")
    return 3


def check_cameras(viewmats, Ks, width, height, dt, dev) -> int:
    """Check camera arguments; return C. CPU tensors of the right shapes take one fused pass
    (cpu.checks.camera_value_problems); anything else, or a problem found there, goes through the checks one
    by one (:func:`check_cameras_one_by_one`), which name the first problem."""
    if _positive_int(width) and _positive_int(height) and isinstance(viewmats, Tensor) and viewmats.dim() == 3:
        C = viewmats.shape[0]
        arrays = _cpu_arrays((viewmats, Ks), ((C, 4, 4), (C, 3, 3)))
        if (C > 0 and arrays is not None and viewmats.dtype == dt and viewmats.device == dev
                and _cpu_checks().camera_value_problems(*arrays) == 0):
            return C
    return check_cameras_one_by_one(viewmats, Ks, width, height, dt, dev)


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def check_cameras_one_by_one(viewmats, Ks, width, height, dt, dev) -> int:
    """check_cameras, each argument and condition in turn; return C."""
    check_tensor("viewmats", viewmats, (None, 4, 4), dt, dev)
    C = viewmats.shape[0]
    check_tensor("Ks", Ks, (C, 3, 3), dt, dev)
    if C == 0:
        _fail("viewmats", "holds zero cameras")
    for name, v in (("width", width), ("height", height)):
        if not _positive_int(v):
            _fail(name, f"must be a positive int, got {v!r}")
    if non_positive_focal(Ks):
        _fail("Ks", "has a non-positive focal length (K[0,0] and K[1,1] must be > 0, in pixels)")
    return C


def non_positive_focal(Ks: Tensor) -> bool:
    """Whether a camera of Ks [C, 3, 3] has K[0,0] <= 0 or K[1,1] <= 0 (the one-by-one path: CPU float cameras
    are checked in the fused pass of :func:`check_cameras` first, so no NumPy shortcut is needed here)."""
    return bool((Ks[:, 0, 0] <= 0).any()) or bool((Ks[:, 1, 1] <= 0).any())


def check_backgrounds(backgrounds, C: int, D: int, dt, dev) -> None:
    if backgrounds is not None:
        check_tensor("backgrounds", backgrounds, (C, D), dt, dev)


def check_depth_limit(depth_limit, C: int, width: int, height: int, dev) -> None:
    """depth_limit: None or a floating [C, H, W] tensor on the Gaussians' device, without NaN (+inf is
    allowed: no limit)."""
    if depth_limit is None:
        return
    if not isinstance(depth_limit, Tensor):
        _fail("depth_limit", f"must be a torch.Tensor or None, got {type(depth_limit).__name__}")
    if tuple(depth_limit.shape) != (C, height, width):
        _fail("depth_limit", f"has shape {list(depth_limit.shape)}, expected [{C}, {height}, {width}] "
              "(cameras, height, width)")
    if not depth_limit.is_floating_point():
        _fail("depth_limit", f"must be a floating-point tensor, got {depth_limit.dtype}")
    if depth_limit.device != dev:
        _fail("depth_limit", f"is on {depth_limit.device} but `means` is on {dev}; move all inputs to one device")
    if bool(torch.isnan(depth_limit.detach()).any()):
        _fail("depth_limit", "contains NaN; use +inf for pixels without a limit")
