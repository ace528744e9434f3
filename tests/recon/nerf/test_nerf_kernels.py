"""NeRF kernels against their PyTorch references (issue 20): the hash encoding (forward and the hand-written
backward, float64 at 1e-9, float32 close), its layout, a hand-computed trilinear case, and the Numba ray
marcher against the reference (identical samples, box and contracted space)."""

from __future__ import annotations

import math

import pytest
import torch

from recon.nerf.hash_encoding import (HashGridConfig, hash_encode, hash_encode_numba, hash_encode_reference,
                                      init_table, level_layout)
from recon.nerf.marching import march_rays_numba, march_rays_reference, ray_entry
from recon.nerf.space import FieldSpace, contract, to_unit

# small grids that have both dense and hashed levels (the last levels exceed 2^log2_table vertices)
GRIDS = [HashGridConfig(levels=4, features=2, log2_table=10, base_res=4, max_res=40),
         HashGridConfig(levels=3, features=3, log2_table=9, base_res=3, max_res=20)]


def _points(n: int, gen: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    x = torch.rand(n, 3, generator=gen, dtype=dtype)
    x[0] = 0.0
    x[1] = 1.0
    x[2] = torch.tensor([1.2, -0.3, 0.5], dtype=dtype)  # outside: clamped
    x[3] = torch.tensor([0.25, 0.5, 0.75], dtype=dtype)  # on vertices of coarse levels
    return x


def test_layout_follows_instant_ngp():
    cfg = HashGridConfig()
    assert (cfg.levels, cfg.features, cfg.log2_table, cfg.base_res, cfg.max_res) == (16, 2, 19, 16, 2048)
    res, offsets = level_layout(cfg)
    assert res[0] == 16 and res[-1] == 2048 and bool((res[1:] > res[:-1]).all())
    sizes = offsets[1:] - offsets[:-1]
    for r, s in zip(res.tolist(), sizes.tolist()):
        assert s == min(2**19, (r + 1) ** 3)


@pytest.mark.parametrize("cfg", GRIDS)
def test_numba_matches_reference_float64(cfg):
    gen = torch.Generator().manual_seed(0)
    res, offsets = level_layout(cfg)
    assert (offsets[1:] - offsets[:-1]).max() == 2**cfg.log2_table  # a hashed level is present
    table = torch.randn(int(offsets[-1]), cfg.features, generator=gen, dtype=torch.float64, requires_grad=True)
    x = _points(700, gen)
    ref = hash_encode_reference(x, table, res, offsets)
    fast = hash_encode_numba(x, table, res, offsets)
    assert ref.shape == (700, cfg.levels * cfg.features)
    torch.testing.assert_close(fast, ref, rtol=0, atol=1e-9)
    grad_out = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    (g_ref,) = torch.autograd.grad(ref, table, grad_out)
    (g_fast,) = torch.autograd.grad(fast, table, grad_out)
    torch.testing.assert_close(g_fast, g_ref, rtol=0, atol=1e-9)
    assert g_ref.abs().sum() > 0


@pytest.mark.parametrize("n", [0, 1, 5, 33, 65])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_numba_any_point_count_and_threads(n, threads):
    """The kernels split points (forward) and deal levels (backward) over the threads, in chunks of 32
    points: counts around the chunk size and more threads than levels' worth still give the reference,
    and the backward's table (allocated uninitialised) is zeroed where no point lands."""
    import numba

    cfg = GRIDS[0]
    gen = torch.Generator().manual_seed(n)
    res, offsets = level_layout(cfg)
    table = torch.randn(int(offsets[-1]), cfg.features, generator=gen, dtype=torch.float64, requires_grad=True)
    x = torch.rand(n, 3, generator=gen, dtype=torch.float64)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for _ in range(2):  # a second run reuses freed memory: stale values would show
            fast = hash_encode_numba(x, table, res, offsets)
            grad_out = torch.randn(fast.shape, generator=gen, dtype=torch.float64)
            (g_fast,) = torch.autograd.grad(fast, table, grad_out)
            ref = hash_encode_reference(x, table, res, offsets)
            (g_ref,) = torch.autograd.grad(ref, table, grad_out)
            torch.testing.assert_close(fast, ref, rtol=0, atol=1e-9)
            torch.testing.assert_close(g_fast, g_ref, rtol=0, atol=1e-9)
    finally:
        numba.set_num_threads(before)


def test_numba_float32_close_to_reference():
    cfg = GRIDS[0]
    gen = torch.Generator().manual_seed(1)
    res, offsets = level_layout(cfg)
    table = init_table(offsets, cfg.features, gen, scale=1.0).requires_grad_()
    x = _points(300, gen, torch.float32)
    ref, fast = hash_encode_reference(x, table, res, offsets), hash_encode(x, table, res, offsets)
    assert fast.dtype == torch.float32
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)
    fast.sum().backward()
    g_fast = table.grad.clone()
    table.grad = None
    ref.sum().backward()
    torch.testing.assert_close(g_fast, table.grad, rtol=1e-5, atol=1e-5)


def test_trilinear_by_hand():
    """One level of one cell: the feature is the trilinear blend of the cube's 8 corner rows."""
    cfg = HashGridConfig(levels=1, features=1, log2_table=4, base_res=1, max_res=1)
    res, offsets = level_layout(cfg)
    corners = torch.arange(8, dtype=torch.float64)[:, None]  # row i + 2 j + 4 k holds i + 2 j + 4 k
    x = torch.tensor([[0.25, 0.5, 1.0]], dtype=torch.float64)
    # trilinear of f(i, j, k) = i + 2 j + 4 k is linear: f(0.25, 0.5, 1.0)
    expected = 0.25 + 2 * 0.5 + 4 * 1.0
    for fn in (hash_encode_reference, hash_encode_numba):
        assert fn(x, corners, res, offsets).item() == pytest.approx(expected, abs=1e-12)


# ------------------------------------------------------------------------------------------ marching


def _rays(n: int, gen: torch.Generator, radius: float = 4.0):
    """Rays from points on a sphere of ``radius`` towards points near the origin."""
    src = torch.randn(n, 3, generator=gen, dtype=torch.float64)
    src = radius * src / src.norm(dim=1, keepdim=True)
    dst = 0.5 * torch.randn(n, 3, generator=gen, dtype=torch.float64)
    d = dst - src
    return src, d / d.norm(dim=1, keepdim=True)


@pytest.mark.parametrize("contracted", [False, True])
def test_march_numba_matches_reference(contracted):
    gen = torch.Generator().manual_seed(2)
    o, d = _rays(64, gen)
    space = FieldSpace.unbounded((0.1, 0.0, -0.1), 1.5) if contracted else FieldSpace.box((-1.5,) * 3, (1.5,) * 3)
    grid = torch.rand(16, 16, 16, generator=gen) < 0.4
    near, far = (0.1, 60.0) if contracted else (0.0, 1e10)
    t_near, t_far = ray_entry(o, d, space, near, far)
    jitter = torch.rand(64, generator=gen, dtype=torch.float64)
    dt = space.diagonal / 128
    args = (o, d, t_near, t_far, jitter, grid, space, dt, 1e10 if contracted else dt,
            1 / 64 if contracted else 0.0, 4000)
    ray_r, t0_r, t1_r = march_rays_reference(*args)
    ray_n, t0_n, t1_n = march_rays_numba(*args)
    assert ray_r.numel() > 100
    assert torch.equal(ray_n, ray_r)
    torch.testing.assert_close(t0_n, t0_r, rtol=0, atol=1e-12)
    torch.testing.assert_close(t1_n, t1_r, rtol=0, atol=1e-12)
    assert bool((t1_r > t0_r).all()) and bool((ray_r[1:] >= ray_r[:-1]).all())
    # every kept step's midpoint lies in an occupied cell
    mid = 0.5 * (t0_r + t1_r)
    u = to_unit(o[ray_r] + mid[:, None] * d[ray_r], space)
    c = torch.floor(u * 16).long()
    assert bool(grid[c[:, 0], c[:, 1], c[:, 2]].all())


def test_march_full_grid_covers_box_uniformly():
    """An all-occupied grid: the steps of a ray tile [t_near + jitter dt, t_far) with step dt."""
    space = FieldSpace.box((-1.0,) * 3, (1.0,) * 3)
    o = torch.tensor([[-3.0, 0.1, 0.2]], dtype=torch.float64)
    d = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    t_near, t_far = ray_entry(o, d, space, 0.0, 1e10)
    assert (t_near.item(), t_far.item()) == pytest.approx((2.0, 4.0))
    dt = 0.1
    ray, t0, t1 = march_rays_numba(o, d, t_near, t_far, torch.tensor([0.25]), torch.ones(8, 8, 8, dtype=torch.bool),
                                   space, dt, dt, 0.0, 1000)
    assert len(ray) == math.ceil((2.0 - 0.025) / dt)
    assert t0[0].item() == pytest.approx(2.025) and torch.allclose(t1 - t0, torch.full_like(t0, dt))
    empty = march_rays_numba(o, d, t_near, t_far, torch.tensor([0.5]), torch.zeros(8, 8, 8, dtype=torch.bool),
                             space, dt, dt, 0.0, 1000)
    assert empty[0].numel() == 0


def test_contraction():
    y = torch.tensor([[0.5, -0.2, 0.1], [2.0, 0.0, 0.0], [-4.0, 2.0, 0.0]], dtype=torch.float64)
    c = contract(y)
    torch.testing.assert_close(c[0], y[0])  # inside the unit cube: unchanged
    torch.testing.assert_close(c[1], torch.tensor([1.5, 0.0, 0.0], dtype=torch.float64))  # 2 - 1/2
    torch.testing.assert_close(c[2], torch.tensor([-1.75, 0.875, 0.0], dtype=torch.float64))  # (2 - 1/4) y / 4
    far = contract(torch.tensor([[1e9, -3e8, 5.0]], dtype=torch.float64))
    assert far.abs().max() <= 2.0
