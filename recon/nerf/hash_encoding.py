"""Multiresolution hash encoding (instant-ngp, Mueller et al. 2022): layout, PyTorch reference, Numba kernels.

Positions ``x`` [N, 3] are normalised to [0, 1]^3 (the scene box or the contracted space; values outside
are clamped). Level ``l`` (of L) is a grid of ``r_l`` cells per axis, ``r_l = floor(base_res b^l)`` with
``b = exp((ln max_res - ln base_res) / (L - 1))``, so ``r_l + 1`` vertices per axis. Each level owns a
slice ``table[offsets[l]:offsets[l + 1]]`` [T_l, F] of one flat parameter table [P, F]:

- dense levels, ``(r_l + 1)^3 <= 2^log2_table``: ``T_l = (r_l + 1)^3`` and vertex (i, j, k) is row
  ``i + j (r_l + 1) + k (r_l + 1)^2``;
- hashed levels: ``T_l = 2^log2_table`` and the row is ``(i XOR j 2654435761 XOR k 805459861) mod T_l``
  (instant-ngp's primes; with a power-of-two T the 64-bit products give instant-ngp's 32-bit rows).

The feature of a point at a level is the trilinear interpolation of its cell's 8 vertex rows
(``p = x r_l``, cell ``floor(p)`` clamped to [0, r_l - 1], weights from ``p - floor(p)``). The output
[N, L F] is level-major (``out[:, l F + f]``).

Gradients flow to the table only (sample positions come from rays and carry no parameters): the
backward of the encoding is the scatter of ``grad_out`` through the same rows and weights.

:func:`hash_encode_reference` (plain PyTorch, any device and float dtype) is the specification;
:func:`hash_encode_numba` (float32 / float64 CPU tensors) runs the Numba kernels: the forward with the
points split between the threads, all threads on one level at a time; the hand-written backward with the
levels dealt to the threads in turn (levels own disjoint table rows, so no two threads add into the same
row). Both compute the rows of CHUNK points ahead and prefetch their cache lines before reading them.
:func:`hash_encode` picks one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from numba import njit, prange
from torch import Tensor

from rasterizer.cpu import KERNEL_LOCK
from rasterizer.cpu.launch import kernel_array
from rasterizer.cpu.schedule import thread_count
from rasterizer.cpu.vecmath import prefetch

PRIME_Y = 2654435761
PRIME_Z = 805459861


@dataclass(frozen=True)
class HashGridConfig:
    """The hash grid's size (instant-ngp's defaults, Mueller et al. 2022, Table 1 / nerfacto's)."""

    levels: int = 16
    """L: number of resolution levels"""
    features: int = 2
    """F: features per level"""
    log2_table: int = 19
    """log2 of T, the rows of a hashed level"""
    base_res: int = 16
    """cells per axis of the coarsest level"""
    max_res: int = 2048
    """cells per axis of the finest level (instant-ngp: 2048 x the scene's box size in unit boxes)"""

    def __post_init__(self):
        if self.levels < 1 or self.features < 1 or not 1 <= self.log2_table <= 30:
            raise ValueError(f"HashGridConfig: levels and features must be >= 1 and log2_table in 1..30, got {self}")
        if self.base_res < 1 or self.max_res < self.base_res:
            raise ValueError(f"HashGridConfig: need 1 <= base_res <= max_res, got {self.base_res}, {self.max_res}")

    @property
    def output_dim(self) -> int:
        return self.levels * self.features


def level_layout(cfg: HashGridConfig) -> tuple[Tensor, Tensor]:
    """(resolutions int64 [L], offsets int64 [L + 1]) of the table layout (see the module docstring)."""
    growth = math.exp((math.log(cfg.max_res) - math.log(cfg.base_res)) / max(cfg.levels - 1, 1))
    table = 1 << cfg.log2_table
    res, offsets = [], [0]
    for level in range(cfg.levels):
        r = int(math.floor(cfg.base_res * growth**level + 1e-9))
        res.append(r)
        offsets.append(offsets[-1] + min(table, (r + 1) ** 3))
    return torch.tensor(res, dtype=torch.int64), torch.tensor(offsets, dtype=torch.int64)


def init_table(offsets: Tensor, features: int, generator: torch.Generator | None = None,
               scale: float = 1e-4) -> Tensor:
    """[P, F] float32 table, uniform in [-scale, scale] (instant-ngp's initialisation)."""
    n = int(offsets[-1])
    return (torch.rand(n, features, generator=generator) * 2.0 - 1.0) * scale


# ------------------------------------------------------------------------------------------ reference


def _rows(corner: Tensor, r: int, size: int) -> Tensor:
    """int64 [N] rows within a level of ``size`` rows for vertices ``corner`` int64 [N, 3] at resolution r."""
    if (r + 1) ** 3 <= size:
        return corner[:, 0] + corner[:, 1] * (r + 1) + corner[:, 2] * (r + 1) ** 2
    return (corner[:, 0] ^ (corner[:, 1] * PRIME_Y) ^ (corner[:, 2] * PRIME_Z)) % size


def hash_encode_reference(x: Tensor, table: Tensor, resolutions: Tensor, offsets: Tensor) -> Tensor:
    """[N, L F] hash-grid features of positions ``x`` [N, 3] in [0, 1]^3 (clamped) from ``table`` [P, F]
    laid out by ``resolutions`` int64 [L] and ``offsets`` int64 [L + 1] (:func:`level_layout`).
    Plain PyTorch (autograd gives the table's gradient); the specification of the Numba kernels."""
    x = x.to(table.dtype).clamp(0.0, 1.0)
    outs = []
    for level in range(resolutions.shape[0]):
        r = int(resolutions[level])
        start, size = int(offsets[level]), int(offsets[level + 1] - offsets[level])
        p = x * r
        i0 = torch.floor(p).clamp(0, r - 1)
        w = p - i0
        i0 = i0.long()
        acc = torch.zeros(x.shape[0], table.shape[1], dtype=table.dtype, device=table.device)
        for c in range(8):
            bits = torch.tensor([(c >> 0) & 1, (c >> 1) & 1, (c >> 2) & 1], device=x.device)
            corner = i0 + bits
            weight = torch.where(bits.bool(), w, 1.0 - w).prod(dim=1)
            acc = acc + weight[:, None] * table[start + _rows(corner, r, size)]
        outs.append(acc)
    return torch.cat(outs, dim=1)


# ------------------------------------------------------------------------------------------ Numba kernels


@njit(cache=True, inline="always")
def _cell(v, r):
    """(cell index in [0, r - 1], fraction) of coordinate v in [0, 1] at resolution r."""
    v = min(max(v, 0.0), 1.0)
    p = v * r
    i = min(max(math.floor(p), 0.0), r - 1.0)
    return np.int64(i), p - i


@njit(cache=True, inline="always")
def _axis_terms(i, r, dense, n):
    """The row terms of vertex indices i and i + 1 along each axis: (x0, x1, y0, y1, z0, z1) summed (dense)
    or XORed (hashed) into a row (see :func:`_rows`)."""
    if dense:
        return i[0], i[0] + 1, i[1] * n, (i[1] + 1) * n, i[2] * n * n, (i[2] + 1) * n * n
    return (i[0], i[0] + 1, i[1] * np.int64(PRIME_Y), (i[1] + 1) * np.int64(PRIME_Y),
            i[2] * np.int64(PRIME_Z), (i[2] + 1) * np.int64(PRIME_Z))


@njit(cache=True, inline="always")
def _corner(c, terms, weights, dense, size, mask, pow2):
    """(row within the level, trilinear weight) of corner c (bits x, y, z) of a cell."""
    x0, x1, y0, y1, z0, z1 = terms
    wx, wy, wz = weights
    bx, by, bz = c & 1, (c >> 1) & 1, (c >> 2) & 1
    tx = x1 if bx else x0
    ty = y1 if by else y0
    tz = z1 if bz else z0
    weight = (wx if bx else 1.0 - wx) * (wy if by else 1.0 - wy) * (wz if bz else 1.0 - wz)
    if dense:
        return tx + ty + tz, weight
    h = tx ^ ty ^ tz
    return (h & mask) if pow2 else (h % size), weight


@njit(cache=True, inline="always")
def _level_constants(resolutions, offsets, level):
    """(r, start row, size, dense, mask, pow2, n) of a level."""
    r = resolutions[level]
    start = offsets[level]
    size = offsets[level + 1] - start
    n = r + 1
    return r, start, size, n * n * n <= size, size - 1, (size & (size - 1)) == 0, n


CHUNK = 32  # points whose rows are computed (and their cache lines prefetched) before any of them is read


@njit(cache=True, inline="always")
def _chunk_rows(x, lo, hi, r, start, size, dense, mask, pow2, n, F, table, rows, weights):
    """rows [hi - lo, 8] (table rows, ``start`` added) and trilinear weights [hi - lo, 8] float64 of points
    x[lo:hi] at one level, each row's cache line prefetched as it is computed: the reads that follow
    find them in flight (hashed levels miss the caches; one point's 8 rows are at most 4 lines)."""
    for j in range(hi - lo):
        i = lo + j
        ix, wx = _cell(x[i, 0], r)
        iy, wy = _cell(x[i, 1], r)
        iz, wz = _cell(x[i, 2], r)
        terms = _axis_terms((ix, iy, iz), r, dense, n)
        for c in range(8):
            row, weight = _corner(c, terms, (wx, wy, wz), dense, size, mask, pow2)
            rows[j, c] = start + row
            weights[j, c] = weight
            prefetch(table, (start + row) * F)


@njit(cache=True, parallel=True)
def _forward_kernel(x, table, resolutions, offsets, threads, out):
    """out [N, L F] = the encoding of x [N, 3] (see hash_encode_reference). Thread k takes points
    [k N / threads, (k + 1) N / threads) through every level, level after level (all threads read the
    same level's rows at a time: the caches hold one level, and every thread gets the same mix of cheap
    dense and cache-missing hashed levels), in chunks of CHUNK points (:func:`_chunk_rows`). Per output
    value the sum over the corners in order 0..7, from 0, as the reference's."""
    N = x.shape[0]
    L = resolutions.shape[0]
    for k in prange(threads):
        rows = np.empty((CHUNK, 8), np.int64)
        weights = np.empty((CHUNK, 8), np.float64)
        for level in range(L):
            lo, hi = k * N // threads, (k + 1) * N // threads
            level_features(x, lo, hi, table, resolutions, offsets, level, rows, weights, out[lo:hi],
                           level * table.shape[1])


@njit(cache=True, inline="always")
def level_features(x, lo, hi, table, resolutions, offsets, level, rows, weights, out, col):
    """out[j, col + f] (j < hi - lo, f < F) = level ``level``'s features of points x[lo:hi], CHUNK points at a
    time (:func:`_chunk_rows`); per value the sum over the corners in order 0..7, from 0, in float64, as the
    reference's. The forward kernel's loop, shared with the fused encoding + MLP
    (recon/nerf/fused_encoding_mlp.py)."""
    F = table.shape[1]
    r, start, size, dense, mask, pow2, n = _level_constants(resolutions, offsets, level)
    for c0 in range(lo, hi, CHUNK):
        c1 = min(c0 + CHUNK, hi)
        _chunk_rows(x, c0, c1, r, start, size, dense, mask, pow2, n, F, table, rows, weights)
        for j in range(c1 - c0):
            for f in range(F):
                acc = 0.0
                for c in range(8):
                    acc += weights[j, c] * table[rows[j, c], f]
                out[c0 - lo + j, col + f] = acc


@njit(cache=True, parallel=True)
def _backward_kernel(x, grad_out, resolutions, offsets, threads, grad_table):
    """grad_table [P, F] (any contents: each level's rows are zeroed first by the thread that owns the
    level) = the scatter of grad_out [N, L F] through the encoding's rows and weights. Levels are dealt
    to the threads in turn (level l to thread l % threads: each gets a share of the cheap dense and the
    cache-missing hashed levels); levels own disjoint rows, so the adds never collide. Points in chunks
    of CHUNK (:func:`_chunk_rows`); a row's adds come in point order."""
    N = x.shape[0]
    L = resolutions.shape[0]
    F = grad_table.shape[1]
    for k in prange(threads):
        rows = np.empty((CHUNK, 8), np.int64)
        weights = np.empty((CHUNK, 8), np.float64)
        for level in range(k, L, threads):
            r, start, size, dense, mask, pow2, n = _level_constants(resolutions, offsets, level)
            grad_table[start:start + size] = 0.0
            for lo in range(0, N, CHUNK):
                hi = min(lo + CHUNK, N)
                _chunk_rows(x, lo, hi, r, start, size, dense, mask, pow2, n, F, grad_table, rows, weights)
                for j in range(hi - lo):
                    for c in range(8):
                        for f in range(F):
                            grad_table[rows[j, c], f] += weights[j, c] * grad_out[lo + j, level * F + f]


class _HashEncodeNumba(torch.autograd.Function):
    """Autograd wrapper of the Numba kernels (gradient to ``table`` only)."""

    @staticmethod
    def forward(ctx, x: Tensor, table: Tensor, resolutions: Tensor, offsets: Tensor) -> Tensor:
        xs = x.detach().to(table.dtype).contiguous()
        res, off = kernel_array(resolutions.long()), kernel_array(offsets.long())
        out = torch.empty(xs.shape[0], res.shape[0] * table.shape[1], dtype=table.dtype)
        with KERNEL_LOCK:
            _forward_kernel(xs.numpy(), kernel_array(table), res, off, thread_count(), out.numpy())
        ctx.save_for_backward(xs, resolutions, offsets)
        ctx.table_shape = tuple(table.shape)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        xs, resolutions, offsets = ctx.saved_tensors
        grad_table = None
        if ctx.needs_input_grad[1]:
            grad_table = torch.empty(ctx.table_shape, dtype=xs.dtype)  # zeroed level by level in the kernel
            with KERNEL_LOCK:
                _backward_kernel(xs.numpy(), kernel_array(grad_out.to(xs.dtype)), kernel_array(resolutions.long()),
                                 kernel_array(offsets.long()), thread_count(), grad_table.numpy())
        return None, grad_table, None, None


def hash_encode_numba(x: Tensor, table: Tensor, resolutions: Tensor, offsets: Tensor) -> Tensor:
    """:func:`hash_encode_reference` through the Numba kernels (CPU tensors, float32 or float64)."""
    if table.device.type != "cpu" or x.device.type != "cpu":
        raise ValueError("hash_encode_numba: CPU tensors only (use hash_encode_reference on other devices)")
    if table.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"hash_encode_numba: float32 or float64 table, got {table.dtype}")
    return _HashEncodeNumba.apply(x, table, resolutions, offsets)


def hash_encode(x: Tensor, table: Tensor, resolutions: Tensor, offsets: Tensor, backend: str = "auto") -> Tensor:
    """The encoding with ``backend`` "numba" (CPU), "torch" (the reference) or "auto" (numba on the CPU,
    torch elsewhere)."""
    if backend == "auto":
        backend = "numba" if table.device.type == "cpu" else "torch"
    if backend == "numba":
        return hash_encode_numba(x, table, resolutions, offsets)
    if backend == "torch":
        return hash_encode_reference(x, table, resolutions, offsets)
    raise ValueError(f"hash_encode: unknown backend {backend!r} (auto, numba, torch)")
