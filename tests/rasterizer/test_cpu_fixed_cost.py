"""The cpu backend's cheaper fixed cost per render (issue 48): serial twins of the binning and compositing
kernels at one thread, fused input checks, forwards without autograd when nothing is differentiated, camera
centres in NumPy, empty tiles not visited. Each gives the same bits (or errors) as what it replaces."""

from __future__ import annotations

import importlib
import math

import numba
import numpy as np
import pytest
import torch

from rasterizer import rasterize_gaussians
from rasterizer import validate as V
from rasterizer.cpu import binning as B
from rasterizer.cpu import compositing as K
from rasterizer.cpu import launch
from rasterizer.cpu.forward_only import needs_graph
from rasterizer.cpu.sh import camera_centers

from .scenes import random_scene

LAUNCHING = ("rasterizer.cpu.binning", "rasterizer.cpu.composite")
FORWARD_KERNELS = (B.gaussian_extents, B.touched_tiles, K.forward_kernel)  # launched through for_threads


def render_outputs(p, viewmats, Ks, width=64, height=48, **kw):
    """Every output of a no-gradient cpu render (tensors)."""
    args = [p[k].detach() for k in ("means", "quats", "scales", "opacities", "colors")]
    out = rasterize_gaussians(*args, viewmats, Ks, width, height, backend="cpu", **kw)
    m = out.meta
    return out.render, out.alpha, m.transmittance, m.radii, m.means2d, m.conics, m.depths, m.opacities


@pytest.mark.parametrize("dtype,mode", [(torch.float32, "classic"), (torch.float64, "antialiased")])
def test_serial_twins_render_the_same_bits_as_the_parallel_kernels(monkeypatch, dtype, mode):
    p, viewmats, Ks = random_scene(n=400, n_cams=2, sh_degree=2, dtype=dtype, seed=5)
    kw = dict(sh_degree=2, rasterize_mode=mode, backgrounds=torch.rand(2, 3, dtype=dtype))
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        twins = render_outputs(p, viewmats, Ks, **kw)
        assert all(k in launch._SERIAL for k in FORWARD_KERNELS)  # the twins did run
        for name in LAUNCHING:  # now the parallel kernels, at one thread too
            monkeypatch.setattr(importlib.import_module(name), "for_threads", lambda kernel, n: kernel)
        parallel = render_outputs(p, viewmats, Ks, **kw)
    finally:
        numba.set_num_threads(threads)
    for a, b in zip(twins, parallel):
        assert a.dtype == b.dtype and torch.equal(a, b)


def test_for_threads_keeps_the_parallel_kernel_above_one_thread_and_wrapped_kernels():
    assert launch.for_threads(K.forward_kernel, 2) is K.forward_kernel
    assert launch.for_threads(K.forward_kernel, 1) is launch.serial_twin(K.forward_kernel)
    assert launch.for_threads(K.forward_tile, 1) is K.forward_tile  # not parallel: as it is
    wrapped = lambda *a: K.forward_kernel(*a)  # noqa: E731  (as scripts/roofline.py times them)
    assert launch.for_threads(wrapped, 1) is wrapped


def test_forward_without_autograd_only_when_nothing_is_differentiated():
    p, viewmats, Ks = random_scene(n=50, dtype=torch.float32, seed=2)
    args = [p[k] for k in ("means", "quats", "scales", "opacities", "colors")]
    assert needs_graph(*args) and not needs_graph(*(a.detach() for a in args))
    with torch.no_grad():
        assert not needs_graph(*args)
    out = rasterize_gaussians(*args, viewmats, Ks, 64, 48, backend="cpu")
    assert out.render.requires_grad and out.meta.means2d.requires_grad
    out.render.sum().backward()
    assert p["means"].grad is not None and p["colors"].grad.abs().sum() > 0
    with torch.no_grad():
        free = rasterize_gaussians(*args, viewmats, Ks, 64, 48, backend="cpu")
    assert free.render.grad_fn is None and torch.equal(free.render, out.render.detach())


def test_camera_centres_equal_pytorchs_matmul_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        vm = torch.eye(4, dtype=torch.float64).repeat(64, 1, 1)
        vm[:, :3, :3] = torch.linalg.qr(torch.randn(64, 3, 3, generator=g, dtype=torch.float64))[0]
        vm[:, :3, 3] = torch.randn(64, 3, generator=g, dtype=torch.float64) * 10
        vm = vm.to(dtype)
        v = vm.to(torch.float64)
        want = (-(v[:, :3, :3].transpose(-1, -2) @ v[:, :3, 3:])[..., 0]).numpy()
        got = camera_centers(vm)
        assert got.dtype == np.float64 and got.shape == (64, 3) and np.array_equal(got, want)


def test_tiles_without_gaussians_hold_the_background_and_the_rest_matches_the_reference():
    """A few Gaussians: most tiles have none (not visited) or one; the render equals the reference's."""
    p, viewmats, Ks = random_scene(n=5, width=96, height=80, dtype=torch.float64, seed=11, spread=0.6)
    bg = torch.tensor([[0.2, 0.5, 0.7]], dtype=torch.float64)
    args = [p[k].detach() for k in ("means", "quats", "scales", "opacities", "colors")]
    cpu = rasterize_gaussians(*args, viewmats, Ks, 96, 80, backend="cpu", backgrounds=bg)
    ref = rasterize_gaussians(*args, viewmats, Ks, 96, 80, backend="reference", backgrounds=bg)
    empty = cpu.alpha[0, :, :, 0] == 0
    assert empty.float().mean() > 0.3 and (~empty).any()
    assert torch.equal(cpu.render[0][empty], bg.expand(int(empty.sum()), 3))
    assert torch.equal(cpu.meta.transmittance[0][empty], torch.ones(int(empty.sum()), 1, dtype=torch.float64))
    assert torch.allclose(cpu.render, ref.render, atol=1e-9) and torch.allclose(cpu.alpha, ref.alpha, atol=1e-9)


def gaussian_args(n=40, dtype=torch.float32):
    p, viewmats, Ks = random_scene(n=n, dtype=dtype, seed=4)
    return [p[k].detach().clone() for k in ("means", "quats", "scales", "opacities")], viewmats, Ks


def raised(check, *args):
    try:
        check(*args)
    except V.RasterizerInputError as e:
        return str(e)
    return None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_gaussian_checks_refuse_what_the_one_by_one_checks_refuse(dtype):
    """Every bad value, in any row, is refused with the message of the checks one by one."""
    (means, quats, scales, opac), _, _ = gaussian_args(dtype=dtype)
    assert V.check_gaussians(means, quats, scales, opac, None) == 40
    spoils = [(0, (3, 1), math.nan), (0, (7, 2), math.inf), (1, (5, 0), -math.inf), (2, (9, 2), math.nan),
              (2, (11, 0), -1e-3), (3, (13,), math.nan), (3, (17,), 1.0 + 1e-3), (3, (19,), -1e-6)]
    for which, index, value in spoils:
        args = [t.clone() for t in (means, quats, scales, opac)]
        args[which][index] = value
        want = raised(V.check_gaussians_one_by_one, *args, None)
        assert want is not None and raised(V.check_gaussians, *args, None) == want
    args = [t.clone() for t in (means, quats, scales, opac)]
    args[1][21] = 0.0  # a quaternion of zeros
    want = raised(V.check_gaussians_one_by_one, *args, None)
    assert "zero-norm rows [21]" in want and raised(V.check_gaussians, *args, None) == want


def test_fused_camera_checks_refuse_what_the_one_by_one_checks_refuse():
    (means, *_), viewmats, Ks = gaussian_args()
    assert V.check_cameras(viewmats, Ks, 64, 48, means.dtype, means.device) == 1
    for which, index, value in [(0, (0, 1, 3), math.nan), (1, (0, 0, 2), math.inf), (1, (0, 0, 0), 0.0),
                                (1, (0, 1, 1), -5.0)]:
        args = [viewmats.clone(), Ks.clone()]
        args[which][index] = value
        want = raised(V.check_cameras_one_by_one, *args, 64, 48, means.dtype, means.device)
        assert want is not None and raised(V.check_cameras, *args, 64, 48, means.dtype, means.device) == want
    assert "width" in raised(V.check_cameras, viewmats, Ks, 0, 48, means.dtype, means.device)


def test_focal_check_takes_any_float_dtype():
    """The focal check's NumPy path serves float32/64 CPU tensors; bfloat16 (which NumPy lacks) and half take the
    torch expression instead of a raw TypeError."""
    from rasterizer.validate import non_positive_focal

    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        Ks = torch.eye(3, dtype=dtype)[None].repeat(2, 1, 1)
        assert not non_positive_focal(Ks)
        Ks[1, 1, 1] = 0
        assert non_positive_focal(Ks)
