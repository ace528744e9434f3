"""Hash encoding + one-hidden-layer MLP in one Numba kernel (issue 53): forward, backward, PyTorch reference.

The density decoder of ``--method nerf`` and the geometry decoder of ``--method neus`` are the same shape of
computation (:mod:`recon.nerf.field`, :mod:`recon.nerf.neus_field`): for positions ``u`` [N, 3] in the unit
cube and optional raw inputs ``extra`` [N, E] (NeuS: the normalised position, E = 3; NeRF: E = 0),

    feats = hash features of u [N, L F], levels >= ``active`` set to 0 (NeuS's progressive levels)
    z     = [extra, feats] W1^T + b1        [N, H]
    h     = act(z) W2^T + b2                [N, O]

with ``act`` ReLU (NeRF, no biases) or Softplus(beta) with PyTorch's threshold 20 (NeuS, with biases).
:func:`encode_mlp_reference` is that composition in plain PyTorch (hash_encode_reference and the torch layers);
:func:`encode_mlp_numba` computes the same, with the same signature, in one Numba kernel each way:

- forward (:func:`_forward_kernel`): each thread takes a fixed range of samples, gathers their features level
  after level (the encoding's own loop, :func:`recon.nerf.hash_encoding.level_features`), then takes them
  ``MLP_ROWS`` rows at a time through both layers (np.dot: BLAS) and the activation; the hidden layer
  [N, H] never leaves L2 and no PyTorch pass runs between the encoding and the MLP. The features go to one
  [N, E + L F] buffer, kept for the backward: on the CPU a level's table rows are reused across samples only
  while that level is in cache, and gathering every level for blocks of 256-8,192 samples at a time (features
  in L2) was 1.5-1.8x slower than level after level over all 65,536 (docs/performance.md).
- backward (:func:`_mlp_backward_kernel`): ``MLP_ROWS`` rows at a time, the hidden layer recomputed from the
  kept features, the layers' backward by BLAS; the weight and bias gradients summed per block in the
  weights' dtype and per thread in float64, added in thread order at the end (the result depends on the
  thread count, never on the scheduling). The features' cotangents [N, active F] go to the hash encoding's
  own scatter (levels dealt to threads: no two threads add into one row); rows of levels >= ``active`` get 0.

Positions carry no gradient (NeRF's and NeuS's samples come from rays; NeuS's SDF gradient is a central
difference of values); :func:`fused_support` says why a call cannot take the kernels (positions that need a
gradient, non-CPU tensors, an MLP of another shape), and :func:`use_fused` is the fields' choice
(``--nerf.encoding-mlp auto | fused | unfused``): the unfused path is the field's own hash_encode + MLP.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange
from torch import Tensor, nn

from rasterizer.cpu import KERNEL_LOCK
from recon.nerf.blas_threads import one_blas_thread
from rasterizer.cpu.launch import kernel_array
from rasterizer.cpu.schedule import thread_count
from recon.nerf import hash_encoding as HE
from rasterizer.cpu.vecmath import U
from recon.nerf.hash_encoding import CHUNK, level_features

RELU, SOFTPLUS = 0, 1
SOFTPLUS_THRESHOLD = 20.0  # torch.nn.Softplus's default: linear where beta z > 20
MLP_ROWS = 256  # samples decoded at a time (their features and hidden values stay in L2)


# ------------------------------------------------------------------------------------------ the MLP's shape


def mlp_layers(mlp: nn.Module) -> tuple[nn.Linear, nn.Linear, int, float] | str:
    """(first linear, second linear, activation code, softplus beta) of ``mlp`` if it is
    ``nn.Sequential(Linear, ReLU | Softplus(threshold 20), Linear)``, else a line saying what it is instead."""
    mods = list(mlp.children()) if isinstance(mlp, nn.Sequential) else []
    if len(mods) != 3 or not isinstance(mods[0], nn.Linear) or not isinstance(mods[2], nn.Linear):
        return f"the MLP is not Linear, activation, Linear ({type(mlp).__name__} of {len(mods)} parts)"
    act = mods[1]
    if isinstance(act, nn.ReLU):
        return mods[0], mods[2], RELU, 1.0
    if isinstance(act, nn.Softplus) and act.threshold == SOFTPLUS_THRESHOLD:
        return mods[0], mods[2], SOFTPLUS, float(act.beta)
    return f"the MLP's activation {act} is not ReLU or Softplus(threshold={SOFTPLUS_THRESHOLD:g})"


def fused_support(u: Tensor, extra: Tensor | None, table: Tensor, mlp: nn.Module) -> str | None:
    """None if :func:`encode_mlp_numba` can evaluate this call, else the reason it cannot (one line)."""
    layers = mlp_layers(mlp)
    if isinstance(layers, str):
        return layers
    first, second = layers[0], layers[1]
    tensors = [u, table, first.weight, second.weight] + ([] if extra is None else [extra])
    if any(t.device.type != "cpu" for t in tensors):
        return "CPU tensors only"
    if table.dtype not in (torch.float32, torch.float64) or first.weight.dtype != second.weight.dtype:
        return f"float32 / float64 table and one weight dtype (table {table.dtype}, weights {first.weight.dtype})"
    if torch.is_grad_enabled() and (u.requires_grad or (extra is not None and extra.requires_grad)):
        return "positions that need a gradient (the kernels give none)"
    return None


# ------------------------------------------------------------------------------------------ reference


def encode_mlp_reference(u: Tensor, extra: Tensor | None, table: Tensor, resolutions: Tensor, offsets: Tensor,
                         active: int, mlp: nn.Module) -> Tensor:
    """[N, O] = ``mlp``([extra, hash features of u with levels >= active zeroed]) (module docstring): plain
    PyTorch (hash_encode_reference and the module itself); the specification of :func:`encode_mlp_numba`."""
    feats = HE.hash_encode_reference(u, table, resolutions, offsets)
    F = table.shape[1]
    mask = (torch.arange(feats.shape[1], device=feats.device) < active * F).to(feats.dtype)
    inputs = feats * mask if extra is None else torch.cat([extra.to(feats.dtype), feats * mask], dim=1)
    return mlp(inputs.to(mlp_layers_dtype(mlp)))


def mlp_layers_dtype(mlp: nn.Module) -> torch.dtype:
    return next(mlp.parameters()).dtype


# ------------------------------------------------------------------------------------------ Numba kernels


@njit(cache=True, inline="always")
def _gather_features(u, extra, table, resolutions, offsets, active, lo, hi, rows, weights, feats):
    """feats[lo:hi] [., E + L F] = [extra, hash features] of samples lo..hi (levels >= active: 0), level after
    level over the whole range (hash_encoding.level_features: the forward kernel's own loop and values)."""
    E = extra.shape[1]
    F = table.shape[1]
    for j in range(lo, hi):
        for e in range(E):
            feats[j, e] = extra[j, e]
    for level in range(resolutions.shape[0]):
        if level < active:
            level_features(u, lo, hi, table, resolutions, offsets, level, rows, weights, feats[lo:hi], E + level * F)
        else:
            feats[lo:hi, E + level * F:E + (level + 1) * F] = 0.0


@njit(cache=True, inline="always")
def _activate(z, act, beta, slope):
    """z [n, H] := act(z) in place, slope [n, H] := act'(z) (ReLU; or Softplus(beta) as torch's: z itself and
    slope 1 where beta z > 20, else log1p(exp(beta z)) / beta and slope exp(beta z) / (exp(beta z) + 1))."""
    for j in range(z.shape[0]):
        for h in range(U(0), U(z.shape[1])):
            v = z[j, h]
            if act == RELU:
                z[j, h] = v if v > 0.0 else 0.0
                slope[j, h] = 1.0 if v > 0.0 else 0.0
            elif v * beta > SOFTPLUS_THRESHOLD:
                slope[j, h] = 1.0
            else:
                ez = math.exp(v * beta)
                z[j, h] = math.log1p(ez) / beta
                slope[j, h] = ez / (ez + 1.0)


@njit(cache=True, inline="always")
def _hidden(feats, w1t, b1, act, beta, slope):
    """a [n, H] = act(feats [n, D] w1t + b1) (BLAS), its slope into slope[:n]."""
    a = np.dot(feats, w1t)
    for j in range(a.shape[0]):
        for h in range(U(0), U(a.shape[1])):
            a[j, h] += b1[h]
    _activate(a, act, beta, slope[:a.shape[0]])
    return a


@njit(cache=True, parallel=True)
def _forward_kernel(u, extra, table, resolutions, offsets, active, w1t, b1, w2t, b2, act, beta, threads, feats, out):
    """out [N, O] = act(feats w1t + b1) w2t + b2 with feats [N, E + L F] = [extra, hash features] (module
    docstring); w1t [D, H], w2t [H, O] (the transposed torch weights). Thread k takes samples
    [k N / threads, (k + 1) N / threads): their features level after level (:func:`_gather_features`), then
    MLP_ROWS rows at a time through both layers (BLAS; the rows' features and hidden values in L2)."""
    N = u.shape[0]
    H = w1t.shape[1]
    for k in prange(threads):
        rows = np.empty((CHUNK, 8), np.int64)
        weights = np.empty((CHUNK, 8), np.float64)
        slope = np.empty((MLP_ROWS, H), w1t.dtype)
        lo, hi = k * N // threads, (k + 1) * N // threads
        _gather_features(u, extra, table, resolutions, offsets, active, lo, hi, rows, weights, feats)
        for r0 in range(lo, hi, MLP_ROWS):
            r1 = min(r0 + MLP_ROWS, hi)
            y = np.dot(_hidden(feats[r0:r1], w1t, b1, act, beta, slope), w2t)
            for j in range(r1 - r0):
                for o in range(U(0), U(y.shape[1])):
                    out[r0 + j, o] = y[j, o] + b2[o]


@njit(cache=True, parallel=True)
def _mlp_backward_kernel(feats, w1t, b1, w2, w1f, act, beta, grad_h, threads, grad_feats, gw1, gb1, gw2, gb2):
    """The backward of :func:`_forward_kernel` up to the features: grad_feats [N, active F] (the cotangents of
    the active features), gw1 [H, D], gb1 [H], gw2 [O, H], gb2 [O] (float64, overwritten) from grad_h [N, O]
    and the forward's features [N, D]; w2 [O, H] (torch's layout), w1f [H, active F] (the first layer's
    columns of the active features). MLP_ROWS samples at a time: the hidden layer recomputed, then the
    layers' backward (BLAS); the weight sums per block in the weights' dtype, per thread in float64, then
    over threads in order (the result depends on the thread count, not on the scheduling)."""
    N = grad_h.shape[0]
    D, H = w1t.shape
    O = w2.shape[0]
    part_w1 = np.zeros((threads, H, D))
    part_b1 = np.zeros((threads, H))
    part_w2 = np.zeros((threads, O, H))
    part_b2 = np.zeros((threads, O))
    for k in prange(threads):
        slope = np.empty((MLP_ROWS, H), w1t.dtype)
        for r0 in range(k * N // threads, (k + 1) * N // threads, MLP_ROWS):
            r1 = min(r0 + MLP_ROWS, (k + 1) * N // threads)
            f, dh = feats[r0:r1], grad_h[r0:r1]
            a = _hidden(f, w1t, b1, act, beta, slope)
            bw2 = np.dot(dh.T, a)
            dz = np.dot(dh, w2)
            for j in range(r1 - r0):
                for o in range(O):
                    part_b2[k, o] += dh[j, o]
                for h in range(U(0), U(H)):
                    dz[j, h] *= slope[j, h]
                for h in range(H):
                    part_b1[k, h] += dz[j, h]
            bw1 = np.dot(dz.T, f)
            grad_feats[r0:r1] = np.dot(dz, w1f)
            for h in range(H):
                for i in range(U(0), U(D)):
                    part_w1[k, h, i] += bw1[h, i]
            for o in range(O):
                for h in range(U(0), U(H)):
                    part_w2[k, o, h] += bw2[o, h]
    gw1[:] = 0.0
    gb1[:] = 0.0
    gw2[:] = 0.0
    gb2[:] = 0.0
    for k in range(threads):
        gw1 += part_w1[k]
        gb1 += part_b1[k]
        gw2 += part_w2[k]
        gb2 += part_b2[k]


def rows_with_cotangents(us: Tensor, feats: Tensor, grad_h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(positions [M, 3], features [M, D], cotangents [M, O]) of the M rows of ``grad_h`` [N, O] that are not all
    zero (the inputs themselves when none is): a zero row adds exactly 0 to every gradient, and a caller that
    keeps a subset of the outputs (NeuS's early stop: :meth:`recon.models.neus.NeusModel.render_rays`) leaves
    many such rows; the backward kernels then skip them."""
    live = grad_h.ne(0).any(dim=1)
    if bool(live.all()):
        return us, feats, grad_h
    return us[live], feats[live], grad_h[live]


def _bias(layer: nn.Linear) -> Tensor:
    return layer.bias if layer.bias is not None else torch.zeros(layer.out_features, dtype=layer.weight.dtype)


class _EncodeMLPNumba(torch.autograd.Function):
    """Autograd wrapper of the kernels: gradients to the table, both weights and both biases."""

    @staticmethod
    def forward(ctx, u, extra, table, w1, b1, w2, b2, resolutions, offsets, active, act, beta):
        us = u.detach().to(table.dtype).contiguous()
        ex = extra.detach().to(w1.dtype).contiguous()
        res, off = kernel_array(resolutions.long()), kernel_array(offsets.long())
        feats = torch.empty(us.shape[0], w1.shape[1], dtype=w1.dtype)
        out = torch.empty(us.shape[0], w2.shape[0], dtype=w1.dtype)
        with KERNEL_LOCK, one_blas_thread():
            _forward_kernel(us.numpy(), ex.numpy(), kernel_array(table), res, off, active, kernel_array(w1.t()), kernel_array(b1),
                            kernel_array(w2.t()), kernel_array(b2), act, beta, thread_count(), feats.numpy(), out.numpy())
        ctx.save_for_backward(us, feats, w1, b1, w2, resolutions, offsets)
        ctx.active, ctx.act, ctx.beta, ctx.table_shape = active, act, beta, tuple(table.shape)
        return out

    @staticmethod
    def backward(ctx, grad_h):
        us, feats, w1, b1, w2, resolutions, offsets = ctx.saved_tensors
        us, feats, grad_h = rows_with_cotangents(us, feats, grad_h)
        active, F = ctx.active, ctx.table_shape[1]
        res, off = kernel_array(resolutions.long()), kernel_array(offsets.long())
        D, H, O = w1.shape[1], w1.shape[0], w2.shape[0]
        E = D - resolutions.shape[0] * F
        grad_feats = torch.empty(us.shape[0], active * F, dtype=w1.dtype)
        gw1, gb1 = np.empty((H, D)), np.empty(H)
        gw2, gb2 = np.empty((O, H)), np.empty(O)
        grad_table = torch.empty(ctx.table_shape, dtype=us.dtype)
        threads = thread_count()
        with KERNEL_LOCK, one_blas_thread():
            _mlp_backward_kernel(feats.numpy(), kernel_array(w1.t()), kernel_array(b1), kernel_array(w2), kernel_array(w1[:, E:E + active * F]),
                                 ctx.act, ctx.beta, kernel_array(grad_h.to(w1.dtype)), threads, grad_feats.numpy(), gw1,
                                 gb1, gw2, gb2)
            # the hash encoding's own scatter over the active levels (their rows: table[:offsets[active]])
            HE._backward_kernel(us.numpy(), kernel_array(grad_feats.to(us.dtype)), res[:active], off[:active + 1],
                                threads, grad_table.numpy())
        grad_table[int(off[active]):] = 0.0

        def cast(g, like):
            return torch.from_numpy(g).to(like.dtype)

        return (None, None, grad_table, cast(gw1, w1), cast(gb1, b1), cast(gw2, w2), cast(gb2, w2),
                None, None, None, None, None)


def encode_mlp_numba(u: Tensor, extra: Tensor | None, table: Tensor, resolutions: Tensor, offsets: Tensor,
                     active: int, mlp: nn.Module) -> Tensor:
    """:func:`encode_mlp_reference` through the fused Numba kernels (ValueError naming the reason where
    :func:`fused_support` refuses the call)."""
    reason = fused_support(u, extra, table, mlp)
    if reason is not None:
        raise ValueError(f"encode_mlp_numba: {reason}; use encode_mlp_reference")
    first, second, act, beta = mlp_layers(mlp)
    if extra is None:
        extra = torch.empty(u.shape[0], 0, dtype=first.weight.dtype)
    active = int(min(max(active, 0), resolutions.shape[0]))
    return _EncodeMLPNumba.apply(u, extra, table, first.weight, _bias(first), second.weight, _bias(second),
                                 resolutions, offsets, active, act, beta)


CHOICES = ("auto", "fused", "unfused")


def use_fused(choice: str, backend: str, u: Tensor, extra: Tensor | None, table: Tensor, mlp: nn.Module) -> bool:
    """Whether a field takes :func:`encode_mlp_numba` (else its own unfused hash_encode + MLP) for ``choice``
    (``--nerf.encoding-mlp``) and the encoding's ``backend`` (``--nerf.backend``): "unfused" never, "auto" where
    :func:`fused_support` allows (the CPU) unless the backend is "torch" (the reference asked for), "fused"
    always (ValueError naming the reason where the kernels cannot serve)."""
    if choice not in CHOICES:
        raise ValueError(f"encoding + MLP: unknown choice {choice!r} ({', '.join(CHOICES)})")
    if choice == "unfused" or (choice == "auto" and backend == "torch"):
        return False
    reason = fused_support(u, extra, table, mlp)
    if reason is not None and choice == "fused":
        raise ValueError(f"--nerf.encoding-mlp fused: {reason}; use auto or unfused")
    return reason is None
