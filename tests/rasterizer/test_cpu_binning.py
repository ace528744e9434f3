"""cpu binning helpers against their plain definitions: tile rectangles (rasterizer.tiles.tile_ranges)
and the per-Gaussian sum of per-intersection gradients (a serial scatter-add), bit for bit."""

import numpy as np
import pytest
import torch

from rasterizer.cpu import binning as B
from rasterizer.cpu import compositing as K
from rasterizer.cpu.sort import depth_order
from rasterizer.tiles import TileGrid, tile_ranges


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tile_rectangles_match_tile_ranges(dtype):
    g = torch.Generator().manual_seed(0)
    C, N, W, H = 2, 3000, 203, 117
    grid = TileGrid.for_image(W, H)
    means2d = (torch.rand(C, N, 2, generator=g, dtype=torch.float64) * torch.tensor([W + 80.0, H + 80.0]) - 40.0)
    means2d[0, :8] = torch.tensor([16.0, 32.0], dtype=torch.float64)  # exactly on tile borders
    radii = torch.randint(0, 40, (C, N, 2), generator=g, dtype=torch.int32)
    radii[1, :50, 0] = 0  # culled
    means2d = means2d.to(dtype)
    tmin, tmax = tile_ranges(means2d, radii, grid)
    G = C * N
    conics = torch.tensor([0.5, 0.1, 0.4], dtype=dtype).repeat(G, 1)
    got_min, got_max, _, counts, _ = B.gaussian_extents(
        means2d.reshape(-1, 2).numpy(), radii.reshape(-1, 2).numpy(), conics.numpy(),
        torch.full((G,), 0.5, dtype=dtype).numpy(), None, grid.tile_size, grid.tiles_x, grid.tiles_y, W, H, 2)
    kept = (radii > 0).all(-1).reshape(-1).numpy()
    np.testing.assert_array_equal(got_min[kept], tmin.reshape(-1, 2).numpy()[kept])
    np.testing.assert_array_equal(got_max[kept], tmax.reshape(-1, 2).numpy()[kept])
    assert (got_min[~kept] == got_max[~kept]).all() and (~kept).sum() >= 50  # culled: empty rectangles
    assert (counts[~kept] == 0).all()


def test_sum_per_gaussian_equals_scatter_add():
    g = torch.Generator().manual_seed(1)
    C, N, W, H = 2, 500, 96, 80
    grid = TileGrid.for_image(W, H)
    means2d = torch.rand(C * N, 2, generator=g) * torch.tensor([W, H])
    radii = torch.randint(0, 30, (C * N, 2), generator=g, dtype=torch.int32)
    conics = torch.tensor([0.02, 0.0, 0.02]).repeat(C * N, 1)  # wide: reach most tiles of their box
    opac = torch.full((C * N,), 0.9)
    depths = torch.rand(C, N, generator=g)
    bins = B.bin_gaussians(depth_order(depths.numpy()), means2d.numpy(), radii.numpy(), conics.numpy(),
                           opac.numpy(), N, grid.tiles_x, grid.tiles_y, grid.tile_size, W, H)
    M = bins.ids.shape[0]
    assert M > C * N  # Gaussians spanning several tiles
    widths = (2, 3, 1, 3, 2)  # means2d, conics, opacity, colours, |means2d|
    srcs = [torch.randn(M, w, generator=g).numpy() for w in widths]
    outs = [np.full((C * N, w), np.nan, np.float32) for w in widths]
    K.sum_per_gaussian(srcs[0], srcs[1], srcs[2][:, 0], srcs[3], srcs[4], bins.perm, bins.starts, bins.counts,
                       outs[0], outs[1], outs[2][:, 0], outs[3], outs[4], 3)  # 3 threads' blocks, one empty
    for src, got in zip(srcs, outs):
        want = np.zeros((C * N, src.shape[1]), np.float32)
        for k in range(M):  # the serial definition, in intersection order
            want[bins.ids[k]] += src[k]
        np.testing.assert_array_equal(got, want)
    no_abs = np.empty((0, 2), np.float32)
    K.sum_per_gaussian(srcs[0], srcs[1], srcs[2][:, 0], srcs[3], no_abs, bins.perm, bins.starts, bins.counts,
                       outs[0], outs[1], outs[2][:, 0], outs[3], no_abs, 1)
    np.testing.assert_array_equal(np.bincount(bins.ids, minlength=C * N), bins.counts)


def test_major_rows_invert_perm_and_their_sums_equal_scatter_add():
    """major_rows puts each Gaussian's intersections on consecutive rows; values written there and summed by
    sum_major_rows equal the serial scatter-add over the tile-major intersections, bit for bit."""
    g = torch.Generator().manual_seed(2)
    C, N, W, H = 2, 400, 96, 80
    grid = TileGrid.for_image(W, H)
    means2d = torch.rand(C * N, 2, generator=g) * torch.tensor([W, H])
    radii = torch.randint(0, 30, (C * N, 2), generator=g, dtype=torch.int32)
    conics = torch.tensor([0.02, 0.0, 0.02]).repeat(C * N, 1)
    bins = B.bin_gaussians(depth_order(torch.rand(C, N, generator=g).numpy()), means2d.numpy(), radii.numpy(),
                           conics.numpy(), np.full(C * N, 0.9, np.float32), N, grid.tiles_x, grid.tiles_y,
                           grid.tile_size, W, H)
    M = bins.ids.shape[0]
    assert M > C * N
    row_of = B.major_rows(bins.perm)
    np.testing.assert_array_equal(np.sort(row_of), np.arange(M))  # a permutation
    np.testing.assert_array_equal(row_of[bins.perm], np.arange(M))  # the inverse of perm
    for gid in np.flatnonzero(bins.counts)[:50]:  # Gaussian gid's rows are its own intersections
        rows = np.arange(bins.starts[gid], bins.starts[gid] + bins.counts[gid])
        np.testing.assert_array_equal(bins.ids[bins.perm[rows]], gid)
    src = torch.randn(M, 5, generator=g).numpy()  # values of the tile-major intersection k
    major = np.empty_like(src)
    major[row_of] = src
    for threads in (1, 3):
        out = np.full((C * N, 5), np.nan, np.float32)
        B.sum_major_rows(major, bins.starts, bins.counts, out, threads)
        want = np.zeros((C * N, 5), np.float32)
        for k in range(M):
            want[bins.ids[k]] += src[k]
        np.testing.assert_array_equal(out, want)
