"""The cpu backend's vectorisable scalar helpers (rasterizer/cpu/vecmath.py)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from rasterizer.cpu.vecmath import (FASTMATH, WIDE_VECTORS, exp_kernel, U, like, prefetch, prefetch_span, radd,
                                    select, wide_vectors)


@njit(fastmath=FASTMATH)
def _exp_all(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = exp_kernel(x[i])
    return out


@njit(fastmath=FASTMATH)
def _radd_sum(x):
    s = like(0.0, x[0])
    for i in range(x.shape[0]):
        s = radd(s, x[i])
    return s


@njit
def _select_all(c, a, b):
    out = np.empty_like(a)
    for i in range(a.shape[0]):
        out[i] = select(c[i], a[i], b[i])
    return out


def test_exp_f32_about_one_ulp():
    """float32 exp (Cody-Waite reduction, degree-5 polynomial): within 2 ulp of exp over the range the
    kernels use (exp(-sigma), sigma >= 0) and beyond, clamped to [-87, 88] outside."""
    x = np.concatenate([np.linspace(-87.0, 88.0, 200_001), -np.geomspace(1e-8, 87.0, 10_001)]).astype(np.float32)
    got = _exp_all(x)
    assert got.dtype == np.float32
    want = np.exp(x.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    assert float(np.max(np.abs(got - want) / ulp)) <= 2.0
    clamped = _exp_all(np.array([-200.0, -np.inf, 100.0], np.float32))
    assert clamped[0] == clamped[1] == _exp_all(np.array([-87.0], np.float32))[0] > 0.0
    assert clamped[2] == _exp_all(np.array([88.0], np.float32))[0]


def test_exp_kernel_float64_is_math_exp():
    x = np.linspace(-700.0, 700.0, 1001)
    np.testing.assert_array_equal(_exp_all(x), [math.exp(v) for v in x])


def test_radd_reduction():
    """radd is an addition (with reassociation allowed), so a loop of it is a sum: exact for integers,
    within rounding otherwise, in float32 (summed in float32: within 1e-5 of the float64 sum) and float64."""
    ints = np.arange(1, 4097, dtype=np.float32)
    assert _radd_sum(ints) == np.float32(4096 * 4097 / 2)
    g = np.random.default_rng(0)
    for dtype, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
        x = g.standard_normal(10_000).astype(dtype)
        s = _radd_sum(x)
        assert abs(float(s) - float(np.sum(x.astype(np.float64)))) <= tol * float(np.sum(np.abs(x)))


def test_select_is_elementwise_where():
    g = np.random.default_rng(1)
    a, b = g.standard_normal(100).astype(np.float32), g.standard_normal(100).astype(np.float32)
    c = a > b
    np.testing.assert_array_equal(_select_all(c, a, b), np.where(c, a, b))


@njit
def _sum_with_prefetch(x, ahead):
    """Sum of x [N, K] row by row, prefetching ``ahead`` rows on (past the end too: a hint never faults)."""
    s = 0.0
    K = x.shape[1]
    for i in range(x.shape[0]):
        prefetch_span(x, (i + ahead) * K, K)
        prefetch(x, -1000 - i)
        for k in range(K):
            s += x[i, k]
    return s


def test_prefetch_is_only_a_hint():
    """prefetch compiles for every element type in one function and changes no result, even for
    addresses outside the array."""
    for dtype in (np.float32, np.float64, np.int64, np.uint64, np.int32):
        x = (np.arange(3 * 45) % 7).astype(dtype).reshape(3, 45)
        assert _sum_with_prefetch(x, 8) == float(x.sum())


@njit(fastmath=FASTMATH, error_model="numpy")
def _exp_rows(x, out):
    wide_vectors()
    for r in range(x.shape[0] // 16):
        for i in range(16):
            out[U(16 * r + i)] = exp_kernel(x[U(16 * r + i)])


def test_wide_vectors_marks_the_calling_function():
    """wide_vectors puts LLVM's "prefer-vector-width"="512" on the function that calls it (and changes no
    value); with AVX-512 the loop is then vectorised in 512-bit registers."""
    import llvmlite.binding as ll

    x = np.linspace(-5.0, 0.0, 64).astype(np.float32)
    out = np.empty_like(x)
    _exp_rows(x, out)
    np.testing.assert_array_equal(out, _exp_all(x))
    sig = _exp_rows.signatures[0]
    ir_text = _exp_rows.inspect_llvm(sig)
    assert WIDE_VECTORS in ir_text
    if "+avx512f" in ll.get_host_cpu_features().flatten():
        assert "zmm" in _exp_rows.inspect_asm(sig)
