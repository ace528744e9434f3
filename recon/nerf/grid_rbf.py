"""Grid encoding + Gaussian RBF layer + linear read-out as one operation (Gaussian RBFNet's whole field head):
``grid_rbf(x, table, resolutions, offsets, centres, log_precision, weight, bias)`` -> [N, O].

The composition of :func:`recon.nerf.hash_encoding.hash_encode` (positions x [N, 3] in the unit cube -> features
[N, D], D = L F; dense or hashed levels alike) and :func:`recon.nerf.rbf.rbf_forward` (features -> outputs [N, O]);
parameters as theirs: ``table`` [P, F], ``resolutions`` int64 [L], ``offsets`` int64 [L + 1], ``centres`` and
``log_precision`` [K, D], ``weight`` [O, K], ``bias`` [O].

Implementations, one signature:

- :func:`grid_rbf_reference`: the two references one after the other (the specification; autograd; any device;
  the only one with a gradient to the positions, through the trilinear weights);
- :func:`grid_rbf_unfused`: the encoding's kernels then the layer's matrix products (what the fields ran before the
  fused kernel; a GPU's path);
- :func:`grid_rbf_numba`: the fused CPU kernels (:mod:`recon.nerf.grid_rbf_kernels`): the [N, D] features are
  never stored, forward and hand-written backward (gradients to the table and the four layer parameters; none to
  the positions).

:func:`grid_rbf` picks: "auto" is the fused kernel for CPU tensors whose positions need no gradient, else unfused.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rasterizer.cpu import KERNEL_LOCK
from recon.nerf.blas_threads import one_blas_thread
from rasterizer.cpu.launch import kernel_array
from rasterizer.cpu.schedule import thread_count
from recon.nerf.hash_encoding import hash_encode, hash_encode_reference
from recon.nerf.rbf import rbf_matmul, rbf_reference


def grid_rbf_reference(x: Tensor, table: Tensor, resolutions: Tensor, offsets: Tensor, centres: Tensor,
                       log_precision: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """[N, O]: :func:`rbf_reference` of :func:`hash_encode_reference` (module docstring)."""
    return rbf_reference(hash_encode_reference(x, table, resolutions, offsets), centres, log_precision, weight, bias)


def grid_rbf_unfused(x: Tensor, table: Tensor, resolutions: Tensor, offsets: Tensor, centres: Tensor,
                     log_precision: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """[N, O]: :func:`rbf_matmul` of :func:`hash_encode` ("auto": Numba on the CPU): the features stored between."""
    f = hash_encode(x, table, resolutions, offsets, "auto").to(centres.dtype)
    return rbf_matmul(f, centres, log_precision, weight, bias)


class _GridRbfNumba(torch.autograd.Function):
    """Autograd wrapper of :mod:`recon.nerf.grid_rbf_kernels` (gradients to the table and the layer; everything
    passed in the table's dtype)."""

    @staticmethod
    def forward(ctx, x, table, resolutions, offsets, centres, log_precision, weight, bias, keep):
        from recon.nerf.grid_rbf_kernels import grid_rbf_forward_kernel

        xs = x.detach().to(table.dtype).contiguous()
        res, off = resolutions.long().contiguous(), offsets.long().contiguous()
        dt = table.dtype
        c, w, b = (kernel_array(t.to(dt)) for t in (centres, weight, bias))
        s = kernel_array(torch.exp(log_precision.detach().to(dt)))
        out = torch.empty(xs.shape[0], weight.shape[0], dtype=dt)
        phi = torch.empty(xs.shape[0] if keep else 0, centres.shape[0], dtype=dt)
        with KERNEL_LOCK, one_blas_thread():
            grid_rbf_forward_kernel(xs.numpy(), kernel_array(table), res.numpy(), off.numpy(), c, s, w, b, thread_count(),
                                    phi.numpy(), out.numpy())
        ctx.save_for_backward(xs, table, res, off, centres, log_precision, weight, phi)
        ctx.bias_dtype = bias.dtype
        return out.to(centres.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        from recon.nerf.grid_rbf_kernels import grid_rbf_layer_backward_kernel
        from recon.nerf.hash_encoding import _backward_kernel

        xs, table, res, off, centres, log_precision, weight, phi = ctx.saved_tensors
        dt = table.dtype
        g = grad_out.detach().to(dt).contiguous()
        k, d = centres.shape
        grad_feat = torch.empty(xs.shape[0], d, dtype=dt)
        grad_c, grad_rho = torch.empty(k, d, dtype=dt), torch.empty(k, d, dtype=dt)
        grad_w = torch.empty(weight.shape, dtype=dt)
        grad_table = torch.empty(table.shape, dtype=table.dtype) if ctx.needs_input_grad[1] else None
        threads = thread_count()
        with KERNEL_LOCK, one_blas_thread():
            grid_rbf_layer_backward_kernel(
                xs.numpy(), kernel_array(table), res.numpy(), off.numpy(), kernel_array(centres.to(dt)),
                kernel_array(torch.exp(log_precision.detach().to(dt))), kernel_array(weight.to(dt)), phi.numpy(), g.numpy(),
                threads, grad_feat.numpy(), grad_c.numpy(), grad_rho.numpy(), grad_w.numpy())
            if grad_table is not None:  # zeroed level by level in the kernel
                _backward_kernel(xs.numpy(), grad_feat.numpy(), res.numpy(), off.numpy(), threads,
                                 grad_table.numpy())
        return (None, grad_table, None, None, grad_c.to(centres.dtype), grad_rho.to(log_precision.dtype),
                grad_w.to(weight.dtype), g.sum(0).to(ctx.bias_dtype) if ctx.needs_input_grad[7] else None, None)


def grid_rbf_numba(x: Tensor, table: Tensor, resolutions: Tensor, offsets: Tensor, centres: Tensor,
                   log_precision: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """:func:`grid_rbf_reference` through the fused Numba kernels (CPU tensors, float32 or float64 table; no
    gradient to ``x``: ValueError when x requires one)."""
    params = (table, centres, log_precision, weight, bias)
    if any(t.device.type != "cpu" for t in (x, *params)):
        raise ValueError("grid_rbf_numba: CPU tensors only (use grid_rbf_unfused or grid_rbf_reference elsewhere)")
    if table.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"grid_rbf_numba: float32 or float64 table, got {table.dtype}")
    if x.requires_grad:
        raise ValueError("grid_rbf_numba: no gradient to the positions (use grid_rbf_unfused or the reference)")
    keep = torch.is_grad_enabled() and any(t.requires_grad for t in params)  # phi [N, K] kept for a backward
    return _GridRbfNumba.apply(x, table, resolutions, offsets, centres, log_precision, weight, bias, keep)


BACKENDS = {"numba": grid_rbf_numba, "unfused": grid_rbf_unfused, "reference": grid_rbf_reference}


def grid_rbf(x: Tensor, table: Tensor, resolutions: Tensor, offsets: Tensor, centres: Tensor, log_precision: Tensor,
             weight: Tensor, bias: Tensor, backend: str = "auto") -> Tensor:
    """The field head with ``backend`` "numba" (fused, CPU), "unfused", "reference" or "auto" (module docstring)."""
    if backend == "auto":
        cpu = table.device.type == "cpu" and x.device.type == "cpu"
        backend = "numba" if cpu and not x.requires_grad else "unfused"
    try:
        fn = BACKENDS[backend]
    except KeyError:
        raise ValueError(f"grid_rbf: unknown backend {backend!r} (auto, numba, unfused, reference)") from None
    return fn(x, table, resolutions, offsets, centres, log_precision, weight, bias)


def grid_rbf_layer(x: Tensor, table: Tensor, resolutions: Tensor, offsets: Tensor, layer) -> Tensor:
    """[N, O]: :func:`grid_rbf` ("auto") with the parameters of ``layer`` (a :class:`recon.nerf.rbf.RBFLayer`);
    a layer given an explicit backend (numba, matmul, reference) runs unfused after the encoding instead."""
    if layer.backend != "auto":
        return layer(hash_encode(x, table, resolutions, offsets, "auto").to(layer.centres.dtype))
    return grid_rbf(x, table, resolutions, offsets, layer.centres, layer.log_precision, layer.weight, layer.bias)
