"""The fused hash encoding + MLP kernels (recon/nerf/fused_encoding_mlp.py) against the unfused reference:
forward and every gradient (table, weights, biases), NeRF's shape (ReLU, no biases) and NeuS's (raw position
inputs, Softplus(100) with biases, progressive levels), and the choice's refusals."""

from __future__ import annotations

import numba
import pytest
import torch
from torch import nn

from recon.nerf.field import mlp
from recon.nerf.fused_encoding_mlp import (encode_mlp_numba, encode_mlp_reference, fused_support, mlp_layers,
                                           use_fused)
from recon.nerf.hash_encoding import HashGridConfig, init_table, level_layout

GRID = HashGridConfig(levels=4, features=2, log2_table=8, base_res=3, max_res=40)  # 2 dense, 2 hashed levels


def problem(kind: str, dtype: torch.dtype, n: int = 203, seed: int = 0):
    """(u, extra, table, resolutions, offsets, active, mlp) of a NeRF-shaped or NeuS-shaped call."""
    g = torch.Generator().manual_seed(seed)
    res, offsets = level_layout(GRID)
    table = init_table(offsets, GRID.features, g, scale=1.0).to(dtype)
    u = torch.rand(n, 3, generator=g, dtype=torch.float64).to(dtype)
    u[0] = torch.tensor([0.0, 1.0, 0.5])  # the cube's faces (clamped cells)
    u[1] = torch.tensor([-0.1, 1.2, 1.0])  # outside: clamped
    if kind == "nerf":
        net, extra, active = mlp(GRID.output_dim, 16, 5, 1), None, GRID.levels
    else:
        net = nn.Sequential(nn.Linear(3 + GRID.output_dim, 16), nn.Softplus(beta=100.0), nn.Linear(16, 5))
        extra, active = u * 2.0 - 1.0, 2
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)  # biases too: some z beyond the softplus threshold
    return u, extra, table.requires_grad_(), res, offsets, active, net.to(dtype)


def grads(fn, u, extra, table, res, offsets, active, net, upstream):
    for p in [table, *net.parameters()]:
        p.grad = None
    out = fn(u, extra, table, res, offsets, active, net)
    (out * upstream).sum().backward()
    return out.detach(), [table.grad.clone()] + [p.grad.clone() for p in net.parameters()]


@pytest.mark.parametrize("kind", ["nerf", "neus"])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-4)])
def test_fused_matches_reference_forward_and_every_gradient(kind, dtype, tol):
    u, extra, table, res, offsets, active, net = problem(kind, dtype)
    upstream = torch.randn(u.shape[0], 5, generator=torch.Generator().manual_seed(1), dtype=dtype)
    ref, ref_g = grads(encode_mlp_reference, u, extra, table, res, offsets, active, net, upstream)
    out, out_g = grads(encode_mlp_numba, u, extra, table, res, offsets, active, net, upstream)
    scale = ref.abs().max()
    assert (out - ref).abs().max() <= tol * scale
    names = ["table"] + [n for n, _ in net.named_parameters()]
    assert len(out_g) == (3 if kind == "nerf" else 5)
    for name, a, b in zip(names, out_g, ref_g):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert (a - b).abs().max() <= tol * b.abs().max().clamp(min=1e-12), name
    if kind == "neus":  # levels >= active get no gradient; active ones do
        start = int(offsets[active])
        assert out_g[0][start:].abs().max() == 0.0 and out_g[0][:start].abs().max() > 0.0
    if kind == "neus" and dtype == torch.float64:  # the softplus's linear branch is exercised
        z = net[0](torch.cat([extra, torch.zeros(len(u), GRID.output_dim, dtype=dtype)], 1))
        assert (z * 100.0 > 20.0).any() and (z * 100.0 < 20.0).any()


@pytest.mark.parametrize("kind", ["nerf", "neus"])
def test_rows_without_cotangents_are_skipped_exactly(kind):
    """A cotangent with most rows zero (NeuS's early stop cuts its outputs after the forward): the backward
    skips those rows and every gradient still matches the reference's; all rows zero: zero gradients."""
    u, extra, table, res, offsets, active, net = problem(kind, torch.float64, n=301)
    upstream = torch.randn(u.shape[0], 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    upstream[torch.rand(u.shape[0], generator=torch.Generator().manual_seed(4)) < 0.7] = 0.0
    upstream[5, 1:] = 0.0  # a row with one nonzero entry is kept
    _, ref_g = grads(encode_mlp_reference, u, extra, table, res, offsets, active, net, upstream)
    _, out_g = grads(encode_mlp_numba, u, extra, table, res, offsets, active, net, upstream)
    for a, b in zip(out_g, ref_g):
        assert (a - b).abs().max() <= 1e-10 * b.abs().max().clamp(min=1e-12)
    _, zero_g = grads(encode_mlp_numba, u, extra, table, res, offsets, active, net, torch.zeros_like(upstream))
    assert all(g.abs().max() == 0.0 for g in zero_g)


def test_thread_counts_agree():
    """Each thread takes its own samples; the weight sums are reduced in thread order."""
    u, extra, table, res, offsets, active, net = problem("neus", torch.float64, n=517)
    upstream = torch.randn(u.shape[0], 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    before = numba.get_num_threads()
    try:
        runs = []
        for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(threads)
            runs.append(grads(encode_mlp_numba, u, extra, table, res, offsets, active, net, upstream))
    finally:
        numba.set_num_threads(before)
    (out_a, g_a), (out_b, g_b) = runs[0], runs[-1]
    assert torch.equal(out_a, out_b)
    for a, b in zip(g_a, g_b):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)


def test_unsupported_shapes_and_inputs_are_refused_with_a_reason():
    u, extra, table, res, offsets, active, net = problem("nerf", torch.float32)
    assert fused_support(u, None, table, net) is None
    deep = mlp(GRID.output_dim, 16, 5, 2)
    assert "not Linear, activation, Linear" in mlp_layers(deep)
    assert "not Linear" in fused_support(u, None, table, deep)
    assert "Tanh" in fused_support(u, None, table, nn.Sequential(nn.Linear(8, 4), nn.Tanh(), nn.Linear(4, 5)))
    assert "gradient" in fused_support(u.clone().requires_grad_(), None, table, net)
    assert use_fused("auto", "auto", u, None, table, deep) is False
    assert use_fused("unfused", "auto", u, None, table, net) is False
    assert use_fused("auto", "auto", u, None, table, net) is True
    assert use_fused("auto", "torch", u, None, table, net) is False  # the reference encoding asked for
    with pytest.raises(ValueError, match="fused: the MLP is not"):
        use_fused("fused", "auto", u, None, table, deep)
    with pytest.raises(ValueError, match="unknown choice"):
        use_fused("fast", "auto", u, None, table, net)
    with pytest.raises(ValueError, match="gradient"):
        encode_mlp_numba(u.clone().requires_grad_(), None, table, res, offsets, active, net)


def test_fused_is_refused_before_training_where_it_cannot_serve_and_loads_as_auto():
    """``--nerf.encoding-mlp fused`` with the RBF decoder or on CUDA fails at the config check (not at the first
    step); a checkpoint saved with "fused" loads as "auto" (a CUDA viewer takes the unfused path)."""
    import dataclasses

    from recon.core.errors import ConfigValueError
    from recon.models.nerf import loaded_nerf_config
    from recon.nerf.config import FieldConfig, NerfConfig
    from recon.training.trainer import TrainConfig, check_train_config

    base = TrainConfig(method="nerf", strategy="occupancy", device="cpu")
    fused = dataclasses.replace(base, nerf=dataclasses.replace(base.nerf, encoding_mlp="fused"))
    check_train_config(fused)  # the MLP decoder on the CPU: served
    with pytest.raises(ConfigValueError, match="--nerf.encoding-mlp fused: the fused kernel serves the MLP"):
        check_train_config(dataclasses.replace(fused, field=FieldConfig(decoder="rbf")))
    assert loaded_nerf_config({**dataclasses.asdict(NerfConfig()), "encoding_mlp": "fused"}).encoding_mlp == "auto"
    assert loaded_nerf_config(dataclasses.asdict(NerfConfig())).encoding_mlp == "auto"
    if torch.cuda.is_available():  # without a GPU, resolve_device("cuda") refuses with its own clear line
        with pytest.raises(ConfigValueError, match="CPU"):
            check_train_config(dataclasses.replace(fused, device="cuda"))
