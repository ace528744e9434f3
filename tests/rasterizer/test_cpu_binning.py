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


def pixel_reached_tiles(mean, conic, opacity, W, H, ts):
    """Tiles where the Gaussian's alpha = opacity exp(-sigma) reaches 1/255 at some pixel centre
    (float64 brute force over every pixel): the set the binning must cover."""
    ys, xs = np.mgrid[0:H, 0:W] + 0.5
    dx, dy = xs - float(mean[0]), ys - float(mean[1])
    a, b, c = (float(v) for v in conic)
    alpha = float(opacity) * np.exp(-(0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy))
    rows, cols = np.nonzero(alpha >= 1.0 / 255.0)
    return {(int(x) // ts, int(y) // ts) for y, x in zip(rows, cols)}


@pytest.mark.parametrize("order", [("f64", "f32"), ("f32", "f64")], ids=["f64-first", "f32-first"])
def test_reach_test_keeps_exactly_the_reached_tiles(order):
    """Regression (stop 58): with count_or_fill_tiles inlined by Numba (inline="always") into the parallel
    loops, the compiled reach test depended on what had been compiled before in the process: after the
    float64 pipeline, the float32 kernel dropped tiles that pixels reach (a wrong render), and otherwise it
    kept every tile of the box (the test did nothing). Each dtype, in either compile order, must keep every
    pixel-reached tile and at most a few more (the test is on the rectangle of pixel centres)."""
    from rasterizer import rasterize_gaussians

    from .scenes import random_scene

    W, H = 50, 40
    for name in order:
        dtype = torch.float32 if name == "f32" else torch.float64
        p, viewmats, Ks = random_scene(n=250, width=W, height=H, n_cams=2, dtype=dtype, seed=3)
        _, _, meta = rasterize_gaussians(p["means"], p["quats"], p["scales"], p["opacities"], p["colors"],
                                         viewmats, Ks, W, H, backend="cpu")
        grid = TileGrid.for_image(W, H)
        means2d = meta.means2d.detach().reshape(-1, 2).numpy()
        conics = meta.conics.detach().reshape(-1, 3).numpy()
        opac = meta.opacities.detach().reshape(-1).numpy()
        radii = meta.radii.reshape(-1, 2).numpy()
        tmin, tmax, _, counts, masks = B.gaussian_extents(means2d, radii, conics, opac, None, grid.tile_size,
                                                          grid.tiles_x, grid.tiles_y, W, H, 2)
        needed = extra = 0
        for g in range(means2d.shape[0]):
            if radii[g, 0] <= 0 or radii[g, 1] <= 0:
                assert counts[g] == 0
                continue
            want = pixel_reached_tiles(means2d[g], conics[g], opac[g], W, H, grid.tile_size)
            assert counts[g] >= len(want), f"{name}: Gaussian {g} binned to {counts[g]} tiles, pixels reach {len(want)}"
            needed += len(want)
            extra += counts[g] - len(want)
        assert extra <= 0.02 * needed + 2, f"{name}: {extra} tiles beyond the {needed} reached (reach test ineffective)"
        # the fill pass writes exactly the counted pairs, each a tile of its Gaussian's box
        order_cams = depth_order(meta.depths.detach().to(torch.float32).numpy(), meta.radii.numpy())
        N = meta.depths.shape[1]
        pair_tile, pair_gauss, starts = B.touched_tiles(order_cams, counts, masks, tmin, tmax, means2d, conics, opac, None,
                                                        N, grid.tiles_x, grid.tiles_y, grid.tile_size, W, H, 2)
        assert pair_tile.shape[0] == counts.sum()
        for g in np.nonzero(counts)[0]:
            s = slice(starts[g], starts[g] + counts[g])
            assert (pair_gauss[s] == g).all()
            tiles = pair_tile[s] - (g // N) * grid.tiles_x * grid.tiles_y
            tx, ty = tiles % grid.tiles_x, tiles // grid.tiles_x
            assert ((tx >= tmin[g, 0]) & (tx < tmax[g, 0]) & (ty >= tmin[g, 1]) & (ty < tmax[g, 1])).all()
