"""Dtype-generic scalar helpers for the cpu kernels that LLVM can vectorise.

Numba's llvmlite here has no SVML, so ``math.exp`` is a libm call that stops a loop from being
vectorised. ``exp_kernel`` is ``math.exp`` for float64 (the float64 tests compare to the reference at
1e-9) and, for float32, a branch-free Cephes-style ``expf`` (Cody-Waite range reduction, degree-5
polynomial, 2^n assembled in the exponent bits): about 1 ulp, vectorised 8-wide under AVX2 (16-wide under
AVX-512 in a function that calls ``wide_vectors``).

``like(value, x)`` casts a Python constant to x's float type, so float32 code stays in float32 (a
Python float literal is float64 in Numba and would promote the whole expression).

``select(cond, a, b)`` is a branch-free ``a if cond else b`` (an LLVM select; Numba lowers the
conditional expression to branches, which stop vectorisation), and ``U(i)`` makes an index unsigned (no
negative-index wraparound inside the loops).

Callers compile with ``FASTMATH`` (no ``reassoc``: it would undo the range reduction's rounding trick).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic, overload

FASTMATH = {"nnan", "ninf", "nsz", "arcp", "contract", "afn"}

_LOG2E = np.float32(1.4426950408889634)
_ROUND = np.float32(12582912.0)  # 1.5 * 2^23: (t + _ROUND) - _ROUND rounds t to the nearest integer
_LN2_HI = np.float32(0.693359375)  # few mantissa bits: n * _LN2_HI is exact
_LN2_LO = np.float32(-2.12194440e-4)
_P0 = np.float32(1.9875691500e-4)
_P1 = np.float32(1.3981999507e-3)
_P2 = np.float32(8.3334519073e-3)
_P3 = np.float32(4.1665795894e-2)
_P4 = np.float32(1.6666665459e-1)
_P5 = np.float32(5.0000001201e-1)
_ONE = np.float32(1.0)
_LO = np.float32(-87.0)  # exp(-87) ~ 1.6e-38 is still a normal float32
_HI = np.float32(88.0)


@intrinsic
def pow2_f32(typingctx, n):
    """2^n as float32 for an integral float32 n in [-126, 127] (written into the exponent bits)."""
    if n != types.float32:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        ni = builder.fptosi(args[0], i32)
        bits = builder.shl(builder.add(ni, ir.Constant(i32, 127)), ir.Constant(i32, 23))
        return builder.bitcast(bits, ir.FloatType())

    return types.float32(types.float32), codegen


@intrinsic
def select(typingctx, cond, a, b):
    """a if cond else b, as one LLVM select (both evaluated; no branch)."""
    ty = typingctx.unify_types(a, b)
    if ty is None or not isinstance(cond, types.Boolean):
        return None
    ty = types.unliteral(ty)

    def codegen(context, builder, signature, args):
        return builder.select(args[0], args[1], args[2])

    return ty(types.boolean, ty, ty), codegen


@intrinsic
def radd(typingctx, a, b):
    """a + b with reassociation allowed on this one addition (plus FASTMATH's flags): a running sum
    ``s = radd(s, x)`` in a loop compiled without ``reassoc`` still vectorises as a reduction (LLVM
    needs reassoc on the reduction's additions only; Numba adds function-wide flags only to
    instructions that have none)."""
    ty = typingctx.unify_types(a, b)
    if ty is None or not isinstance(ty, types.Float):
        return None

    def codegen(context, builder, signature, args):
        x, y = (context.cast(builder, v, t, signature.return_type) for v, t in zip(args, signature.args))
        instr = builder.fadd(x, y)
        instr.flags = sorted(FASTMATH | {"reassoc"})
        return instr

    return ty(ty, ty), codegen


WIDE_VECTORS = '"prefer-vector-width"="512"'  # LLVM's per-function override of the CPU's preferred width


@intrinsic
def wide_vectors(typingctx):
    """Let LLVM vectorise the calling function with 512-bit registers where the CPU has AVX-512 (a no-op
    elsewhere): it marks the function ``"prefer-vector-width"="512"``, the per-function form of clang's
    ``-mprefer-vector-width=512``. LLVM's tuning for Intel's AVX-512 CPUs prefers 256 bits (clock throttling
    on old parts); a 16-lane float32 row is then two vectors instead of one. Call it once at the top of a
    kernel whose inner loop is a fixed 16 float32 lanes."""

    def codegen(context, builder, signature, args):
        # llvmlite's FunctionAttributes admits only its list of keyword attributes; a string attribute is
        # written into the IR as it is
        set.add(builder.function.attributes, WIDE_VECTORS)
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def prefetch(typingctx, arr, idx):
    """Hint the CPU to load the cache line holding element ``idx`` of the C-contiguous array ``arr``
    (flat index, not checked: a prefetch never faults) into all cache levels (llvm.prefetch). For
    loops whose loads miss memory one after another (rows read in an order the hardware prefetcher
    does not follow)."""
    if not isinstance(arr, types.Array) or arr.layout != "C" or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [context.cast(builder, args[1], signature.args[1], types.intp)])
        ptr = builder.bitcast(ptr, ir.IntType(8).as_pointer())  # one declaration for every element type
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])  # read, keep, data
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@njit(cache=True, inline="always")
def prefetch_span(arr, start, length):
    """prefetch the cache lines of elements [start, start + length) of the C-contiguous ``arr``."""
    step = max(1, 64 // arr.itemsize)
    for i in range(start, start + length, step):
        prefetch(arr, i)
    prefetch(arr, start + length - 1)


@njit(cache=True, inline="always")
def U(i):
    """Index i (>= 0) as uint64: Numba wraps negative signed indices around (a compare and select per
    access, which blocks vectorisation); unsigned indices skip that."""
    return np.uint64(i)


@njit(cache=True, inline="always", fastmath=FASTMATH)
def exp_f32(x):
    """exp(x) for float32 x, x clamped to [-87, 88]; relative error about 1 ulp. Branch-free."""
    x = select(x < _LO, _LO, x)
    x = select(x > _HI, _HI, x)
    n = (x * _LOG2E + _ROUND) - _ROUND
    r = x - n * _LN2_HI
    r = r - n * _LN2_LO
    p = _P0 * r + _P1
    p = p * r + _P2
    p = p * r + _P3
    p = p * r + _P4
    p = p * r + _P5
    y = (p * r) * r + r + _ONE
    return y * pow2_f32(n)


def exp_kernel(x):
    """exp(x) in x's float type: math.exp for float64, exp_f32 (vectorisable) for float32."""
    return math.exp(x)


@overload(exp_kernel, inline="always")
def _exp_kernel_impl(x):
    if x == types.float32:
        return lambda x: exp_f32(x)
    return lambda x: math.exp(x)


def like(value, x):
    """value cast to the float type of x (float32 or float64)."""
    return type(x)(value)


@overload(like, inline="always")
def _like_impl(value, x):
    if x == types.float32:
        return lambda value, x: np.float32(value)
    return lambda value, x: np.float64(value)
