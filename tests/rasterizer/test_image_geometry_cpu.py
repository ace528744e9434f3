"""The cpu no-grad path of rasterize_image_gaussians (cpu/image_geometry.py's two-pass front end, the chunked tile
binning, the forward kernel) against the PyTorch front end and the autograd path, in float32 and float64, for
Cholesky factors and covariances, both windows, with and without prefilter and opacities: bit-identical."""

import math

import numba
import numpy as np
import pytest
import torch

from rasterizer.cpu import image_sum as CS
from rasterizer.cpu.image_geometry import geometry_consts, prepare
from rasterizer.image import ImageInputError, rasterize_image_gaussians
from rasterizer.image import geometry as G

from .test_image_gaussians import random_gaussians


def torch_front_end(means, chol, colors, opac, width, height, variance, window):
    """geometry.py's steps as api.py runs them (the specification of cpu/image_geometry.py)."""
    means_px = G.means_to_pixels(means, width, height)
    cov_px, colors = G.prefilter(G.covars_to_pixels(G.cholesky_to_covars(chol), width, height), colors, variance)
    if opac is not None:
        colors = colors * opac[:, None]
    return means_px, cov_px, G.conics_of(cov_px), colors, G.window_extents(cov_px, window, width, height)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("variance, window, opacity", [(0.0, None, False), (1 / 12, None, True), (0.7, 0.05, False),
                                                       (0.0, 0.02, True)])
@pytest.mark.parametrize("chunks", [1, 3])
def test_front_end_is_bit_identical(dtype, variance, window, opacity, chunks):
    means, chol, colors = random_gaussians(700, 3, dtype=dtype, seed=21)
    chol[::7, 0] = 0.0  # degenerate: det 0, conic inf/NaN, just as in PyTorch
    opac = torch.rand(700, dtype=dtype) if opacity else None
    W, H = 77, 52
    want = torch_front_end(means, chol, colors, opac, W, H, variance, window)
    arrays = [t.numpy() for t in (means, chol, colors)]
    o = opac.numpy() if opac is not None else np.empty(0, arrays[0].dtype)
    consts = geometry_consts(W, H, variance, window, arrays[0].dtype)
    *got, counts = prepare(arrays[0], arrays[1], True, arrays[2], o, consts, variance > 0, window is None, W, H,
                           chunks)
    for name, a, b in zip(("means_px", "covars_px", "conics", "colors", "extents"), got[:5], want[:5]):
        torch.testing.assert_close(torch.from_numpy(a), b, rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"{name}: {m}")
    boxes = got[5]
    assert np.array_equal(boxes, CS.pixel_boxes(got[0], got[4], W, H))
    assert (boxes[:, 2] >= boxes[:, 0]).sum() > 500  # most boxes hold pixels
    want_counts = np.zeros((chunks, counts.shape[1]), np.int64)
    for c in range(chunks):
        CS.count_tiles(boxes, *CS.chunk_range(c, 700, chunks), -(-W // CS.TS), want_counts[c])
    assert np.array_equal(counts, want_counts)
    want_lists = CS.bin_boxes(boxes, -(-W // CS.TS), -(-H // CS.TS))
    for a, b in zip(CS.tile_lists(boxes, counts, -(-W // CS.TS)), want_lists):
        assert np.array_equal(a, b)
    bad = arrays[2].copy()
    bad[3, 1] = np.nan
    assert prepare(arrays[0], arrays[1], True, bad, o, consts, variance > 0, window is None, W, H) is None

@pytest.mark.parametrize("chunks", [1, 2, 5])
def test_binning_in_chunks_keeps_gaussian_order(chunks):
    """Tile lists of chunked binning equal the one-thread lists: every (tile, Gaussian) pair whose window starts
    (every TS columns from the box's first column rounded down to ALIGN) include one in the tile, ascending ids."""
    rng = np.random.default_rng(3)
    N, W, H = 500, 100, 70
    x0, y0 = rng.integers(-5, W, N), rng.integers(-5, H, N)
    boxes = np.stack([x0, y0, x0 + rng.integers(-2, 40, N), y0 + rng.integers(-2, 30, N)], 1).clip(0)
    boxes[:, 2] = np.minimum(boxes[:, 2], W - 1)
    boxes[:, 3] = np.minimum(boxes[:, 3], H - 1)
    tiles_x, tiles_y = -(-W // CS.TS), -(-H // CS.TS)
    offsets, ids = CS.bin_boxes(boxes.astype(np.int64), tiles_x, tiles_y, chunks)
    for t in range(tiles_x * tiles_y):
        tx, ty = t % tiles_x, t // tiles_x
        hit = [g for g in range(N) if boxes[g, 0] <= boxes[g, 2] and boxes[g, 1] <= boxes[g, 3]
               and tx in {xs // CS.TS for xs in range(boxes[g, 0] - boxes[g, 0] % CS.ALIGN, boxes[g, 2] + 1, CS.TS)}
               and boxes[g, 1] // CS.TS <= ty <= boxes[g, 3] // CS.TS]
        assert ids[offsets[t]:offsets[t + 1]].tolist() == hit


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kw", [dict(), dict(prefilter_variance=1 / 12), dict(window=0.06, prefilter_variance=0.3),
                                dict(covars=True), dict(matrices=True), dict(opacities=True)])
def test_no_grad_render_equals_autograd_render(dtype, kw):
    """The no-grad path and the autograd path (PyTorch front end + SumComposite) give the same bits."""
    means, chol, colors = random_gaussians(600, 3, dtype=dtype, seed=22)
    kw = dict(kw)
    if kw.pop("covars", False) or kw.get("matrices"):
        cov = G.cholesky_to_covars(chol)
        kw["covars"] = (torch.stack([cov[:, 0], cov[:, 1], cov[:, 1], cov[:, 2]], -1).view(-1, 2, 2)
                        if kw.pop("matrices", False) else cov)
        shape = {}
    else:
        shape = dict(cholesky=chol)
    if kw.pop("opacities", False):
        kw["opacities"] = torch.rand(600, dtype=dtype)
    with torch.no_grad():
        fast = rasterize_image_gaussians(means, colors, 61, 45, backend="cpu", **shape, **kw)
    slow = rasterize_image_gaussians(means, colors.clone().requires_grad_(True), 61, 45, backend="cpu", **shape, **kw)
    assert fast.render.abs().max() > 0.5
    assert torch.equal(fast.render, slow.render.detach())
    for f in ("means2d", "covars", "conics", "extents"):
        assert torch.equal(getattr(fast.meta, f), getattr(slow.meta, f).detach()), f


def test_no_grad_render_matches_reference_and_rejects_nan():
    means, chol, colors = random_gaussians(400, 3, seed=23)
    with torch.no_grad():
        fast = rasterize_image_gaussians(means, colors, 45, 38, cholesky=chol, backend="cpu").render
        ref = rasterize_image_gaussians(means, colors, 45, 38, cholesky=chol, backend="reference").render
        torch.testing.assert_close(fast, ref, rtol=1e-9, atol=1e-11)
        for name in ("means", "cholesky", "colors"):
            bad = {"means": means, "cholesky": chol, "colors": colors}
            bad[name] = bad[name].clone()
            bad[name][5, 0] = math.inf if name == "colors" else math.nan
            with pytest.raises(ImageInputError, match=f"`{name}` contains NaN or Inf"):
                rasterize_image_gaussians(bad["means"], bad["colors"], 45, 38, cholesky=bad["cholesky"], backend="cpu")


@pytest.mark.parametrize("channels", [3, 4])
def test_render_does_not_depend_on_the_thread_count(channels):
    """The forward's threads claim rows of tiles in whatever order they come: 1, 2 or 3 threads, the same bits
    (also for wide Gaussians whose windows spill into the next tile, and a size that is not a multiple of 16)."""
    means, chol, colors = random_gaussians(900, channels, dtype=torch.float32, seed=24, size=0.3)
    before = numba.get_num_threads()
    renders = []
    try:
        for threads in range(1, min(3, numba.config.NUMBA_NUM_THREADS) + 1):
            numba.set_num_threads(threads)
            with torch.no_grad():
                renders.append(rasterize_image_gaussians(means, colors, 83, 70, cholesky=chol, backend="cpu").render)
    finally:
        numba.set_num_threads(before)
    assert renders[0].abs().max() > 0.5
    for r in renders[1:]:
        assert torch.equal(r, renders[0])
