"""One BLAS thread inside the parallel Numba kernels that call ``np.dot`` (the fused encoding + MLP, the RBF layer).

Those kernels split their samples over Numba's threads themselves, and each thread multiplies small blocks with
``np.dot``, which Numba hands to the OpenBLAS that SciPy ships (``scipy.linalg.cython_blas``). OpenBLAS starts its
own threads for a large enough product, one per core unless ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` says
otherwise. Called at once from two Numba threads, the two BLAS pools fight over the same two cores: on the 2-vCPU
VM a NeuS later frame (`scripts/bench_neus_sequence.py --frames 2 --frame-steps 40`, default threads) did not
finish its 40 steps in 9 minutes, all of it inside ``_mlp_backward_kernel``; with one BLAS thread frame 2 took
34.4 s wall (frame 1, its kernels recompiled, 73.6 s; 7 Dec 2026; docs/performance.md). :func:`one_blas_thread` limits every loaded BLAS library to one thread around a kernel call
and restores it afterwards (``threadpoolctl``), so NumPy's own products elsewhere in the process keep theirs.
"""

from __future__ import annotations

import importlib
from contextlib import contextmanager

_CONTROLLER = None


def blas_controller():
    """The process's ``threadpoolctl.ThreadpoolController``, made once after SciPy's BLAS (the one Numba's
    ``np.dot`` calls) is loaded, so that it is among the libraries it controls."""
    global _CONTROLLER
    if _CONTROLLER is None:
        importlib.import_module("scipy.linalg.cython_blas")  # loads the library Numba's np.dot links to
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


@contextmanager
def one_blas_thread():
    """Every BLAS library of the process at one thread inside the block (restored on exit)."""
    with blas_controller().limit(limits=1, user_api="blas"):
        yield
