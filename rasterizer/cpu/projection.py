"""Fused EWA projection on the CPU: a torch.autograd.Function around two Numba kernels.

Drop-in replacement for ``rasterizer.reference.project`` (same signature, same outputs, same numerics;
see ``projection_kernels.py``). The forward is one parallel kernel over (camera, Gaussian); the backward
is a hand-written kernel that reproduces the reference's autograd gradients w.r.t. ``means`` and
``quats`` + ``scales`` (or ``covars`` when given) from the cotangents of means2d, conics, depths and, in
antialiased mode, compensations.

Differences from the reference, by design:
- ``viewmats`` and ``Ks`` get no gradient (None), even if they require grad; camera optimisation needs
  the reference backend.
- ``opacities`` only feed the (non-differentiable) radius, as in the reference (which detaches them).
- No double backward (the backward is not itself differentiable).
- CPU tensors only.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..reference.projection import Projection
from . import projection_kernels as PK
from . import forward_only
from .launch import KERNEL_LOCK
from .launch import kernel_array
from .schedule import thread_count


def _np64(x: Tensor) -> np.ndarray:
    return np.ascontiguousarray(x.detach().numpy(), dtype=np.float64)


class ProjectFunction(torch.autograd.Function):
    """(means2d, conics, depths, radii, compensations) from means [N,3] and quats [N,4] + scales [N,3]
    or covars [N,3,3] (pass None for the unused ones); see the module docstring."""

    @staticmethod
    def forward(ctx, means, quats, scales, covars, viewmats, Ks, opacities, width, height, eps2d, near_plane,
                far_plane, antialiased):
        dtype = means.dtype
        N = means.shape[0]
        C = viewmats.shape[0]
        has_covars = covars is not None
        np_dtype = means.detach().numpy().dtype
        empty = lambda *s: np.zeros(s, np_dtype)  # noqa: E731  (placeholders of the unused inputs)
        m = kernel_array(means)
        q = empty(0, 4) if has_covars else kernel_array(quats)
        s = empty(0, 3) if has_covars else kernel_array(scales)
        cv = kernel_array(covars) if has_covars else empty(0, 3, 3)
        vm, K = _np64(viewmats), _np64(Ks)
        has_opac = opacities is not None
        op = _np64(opacities) if has_opac else np.zeros(0)
        means2d = np.empty((C, N, 2), np_dtype)
        conics = np.empty((C, N, 3), np_dtype)
        depths = np.empty((C, N), np_dtype)
        radii = np.empty((C, N, 2), np.int32)
        comps = np.empty((C, N), np_dtype)
        with KERNEL_LOCK:
            PK.project_forward_kernel(m, q, s, cv, has_covars, vm, K, op, has_opac, float(width), float(height),
                                      float(eps2d), float(near_plane), float(far_plane), bool(antialiased),
                                      means2d, conics, depths, radii, comps, thread_count())
        out = [torch.from_numpy(a) for a in (means2d, conics, depths, radii, comps)]
        assert out[0].dtype == dtype
        ctx.mark_non_differentiable(out[3])
        if not antialiased:
            ctx.mark_non_differentiable(out[4])
        # keep the (possibly converted) arrays; save_for_backward adds PyTorch's in-place modification check
        ctx.save_for_backward(means, quats, scales, covars, out[3])  # radii: which pairs get gradients
        ctx.arrays = (m, q, s, cv, has_covars, vm, K, float(width), float(height), float(eps2d), bool(antialiased))
        return tuple(out)

    @staticmethod
    @once_differentiable
    def backward(ctx, v_means2d, v_conics, v_depths, v_radii, v_comps):
        radii = ctx.saved_tensors[4].numpy()  # (raises if an input or radii was modified in place since)
        m, q, s, cv, has_covars, vm, K, width, height, eps2d, antialiased = ctx.arrays
        N, C = m.shape[0], vm.shape[0]
        dtype = m.dtype
        g_means = np.empty((N, 3), dtype)
        g_quats = np.empty(q.shape, q.dtype)
        g_scales = np.empty(s.shape, s.dtype)
        g_covars = np.empty(cv.shape, cv.dtype)

        def cot(v, shape):
            return np.zeros(shape, dtype) if v is None else np.ascontiguousarray(v.detach().numpy(), dtype)

        v_comps_np = cot(v_comps, (C, N)) if antialiased else np.zeros((0, 0), dtype)
        with KERNEL_LOCK:
            PK.project_backward_kernel(m, q, s, cv, has_covars, vm, K, width, height, eps2d, antialiased, radii,
                                       cot(v_means2d, (C, N, 2)), cot(v_conics, (C, N, 3)), cot(v_depths, (C, N)),
                                       v_comps_np, g_means, g_quats, g_scales, g_covars, thread_count())
        need = ctx.needs_input_grad
        grad = lambda a, i: torch.from_numpy(a) if need[i] else None  # noqa: E731
        if has_covars:
            return (grad(g_means, 0), None, None, grad(g_covars, 3)) + (None,) * 9
        return (grad(g_means, 0), grad(g_quats, 1), grad(g_scales, 2), None) + (None,) * 9


def project(means, quats, scales, covars, viewmats, Ks, width, height, *, eps2d, near_plane, far_plane,
            opacities, antialiased) -> Projection:
    """Projection step of the cpu backend; same contract as ``rasterizer.reference.project``
    (covariances built from quats/scales unless ``covars`` is given). Gradients flow to means and
    quats/scales (or covars); viewmats and Ks get none."""
    if covars is not None:
        quats = scales = None
    out = forward_only.apply(ProjectFunction, means, quats, scales, covars, viewmats, Ks, opacities, width, height,
                             eps2d, near_plane, far_plane, antialiased)
    return Projection(*out)
