"""The parallel Numba kernels that call np.dot run with one BLAS thread (recon/nerf/blas_threads.py): two Numba
threads each driving a multi-threaded OpenBLAS on two cores stalled a NeuS frame for minutes."""

from __future__ import annotations

import torch

import recon.nerf.fused_encoding_mlp as FEM
import recon.nerf.grid_rbf as GR
import recon.nerf.rbf as R
from recon.nerf.blas_threads import blas_controller, one_blas_thread


def blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in blas_controller().info() if lib["user_api"] == "blas"]


def test_one_blas_thread_limits_and_restores():
    with blas_controller().limit(limits=2, user_api="blas"):
        assert blas_threads() and all(n == 2 for n in blas_threads())
        with one_blas_thread():
            assert all(n == 1 for n in blas_threads())
        assert all(n == 2 for n in blas_threads())


def recording(monkeypatch, module, name, seen):
    """Replace module.name (a Numba kernel) by a wrapper noting the BLAS thread counts during the call."""
    kernel = getattr(module, name)

    def wrapped(*args):
        seen.append((name, max(blas_threads())))
        return kernel(*args)

    monkeypatch.setattr(module, name, wrapped)


def test_kernels_that_multiply_run_with_one_blas_thread(monkeypatch):
    """The fused encoding + MLP (forward, backward) and the RBF layer (forward, backward) called while BLAS would
    use 2 threads: inside each kernel call it uses 1."""
    from tests.recon.nerf.test_fused_encoding_mlp import grads, problem

    seen = []
    for name in ("_forward_kernel", "_mlp_backward_kernel"):
        recording(monkeypatch, FEM, name, seen)
    import recon.nerf.rbf_kernels as RK
    for name in ("rbf_forward_kernel", "rbf_backward_kernel"):
        recording(monkeypatch, RK, name, seen)
    with blas_controller().limit(limits=2, user_api="blas"):
        u, extra, table, res, offsets, active, net = problem("nerf", torch.float32)
        grads(FEM.encode_mlp_numba, u, extra, table, res, offsets, active, net, torch.ones(u.shape[0], 5))
        g = torch.Generator().manual_seed(0)
        f = torch.randn(300, 4, generator=g, requires_grad=True)
        c, rho = torch.randn(8, 4, generator=g), torch.zeros(8, 4)
        w, b = torch.randn(3, 8, generator=g), torch.zeros(3)
        R.rbf_numba(f, c, rho, w, b).sum().backward()
    assert sorted(n for n, _ in seen) == sorted(["_forward_kernel", "_mlp_backward_kernel", "rbf_forward_kernel",
                                                 "rbf_backward_kernel"])
    assert all(threads == 1 for _, threads in seen), seen


def test_grid_rbf_calls_take_one_blas_thread(monkeypatch):
    """The fused grid + RBF kernels (forward, the layer's backward, and the grid scatter after it) called while BLAS
    would use 2 threads: inside each call it uses 1 (its layer runs rbf_kernels' block products)."""
    import recon.nerf.grid_rbf_kernels as GK
    import recon.nerf.hash_encoding as HE
    from recon.nerf.hash_encoding import HashGridConfig, init_table, level_layout

    seen = []
    for name in ("grid_rbf_forward_kernel", "grid_rbf_layer_backward_kernel"):
        recording(monkeypatch, GK, name, seen)
    recording(monkeypatch, HE, "_backward_kernel", seen)
    g = torch.Generator().manual_seed(0)
    res, off = level_layout(HashGridConfig(2, 2, 12, 4, 8))
    table = init_table(off, 2, g, scale=0.1).requires_grad_()
    c, rho = torch.randn(8, 4, generator=g, requires_grad=True), torch.zeros(8, 4, requires_grad=True)
    w, b = torch.randn(3, 8, generator=g, requires_grad=True), torch.zeros(3, requires_grad=True)
    with blas_controller().limit(limits=2, user_api="blas"):
        GR.grid_rbf_numba(torch.rand(300, 3, generator=g), table, res, off, c, rho, w, b).sum().backward()
    assert sorted(n for n, _ in seen) == sorted(["grid_rbf_forward_kernel", "grid_rbf_layer_backward_kernel",
                                                 "_backward_kernel"])
    assert all(threads == 1 for _, threads in seen), seen
