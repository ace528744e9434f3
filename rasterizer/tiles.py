"""Tile intersection shared by all backends (no gradients).

Each visible Gaussian covers the 16x16-pixel tiles its screen bounding box (mean +- radius) touches.
Pairs are keyed by (camera, tile, depth) and sorted, as in gsplat; per-tile offsets index the sorted
list. Tile (tx, ty) of camera c has the flat id c * tiles_y * tiles_x + ty * tiles_x + tx.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

TILE_SIZE = 16


class TileGrid(NamedTuple):
    """Tile grid size: tiles_x = ceil(width / tile_size), tiles_y = ceil(height / tile_size)."""

    tile_size: int
    tiles_x: int
    tiles_y: int

    @staticmethod
    def for_image(width: int, height: int, tile_size: int = TILE_SIZE) -> "TileGrid":
        return TileGrid(tile_size, -(-width // tile_size), -(-height // tile_size))


class TileLists(NamedTuple):
    """Sorted (camera, tile, depth) intersections.

    tiles_per_gauss [C, N] int32; isect_ids [M] int64 keys (camera | tile) << 32 | depth bits;
    flatten_ids [M] int64 flat Gaussian index c * N + n, sorted by key; offsets [C, tiles_y, tiles_x]
    int64 start of each tile's run in the sorted list (a tile's run ends where the next one starts).
    """

    tiles_per_gauss: Tensor
    isect_ids: Tensor
    flatten_ids: Tensor
    offsets: Tensor


def tile_ranges(means2d: Tensor, radii: Tensor, grid: TileGrid) -> tuple[Tensor, Tensor]:
    """Half-open tile rectangles [C, N, 2] (min, max as (x, y)) covered by each Gaussian's box.

    Same arithmetic as gsplat: floor(m / ts - r / ts), ceil(m / ts + r / ts), clamped to the grid.
    Culled Gaussians (a zero radius) get an empty range.
    """
    m = means2d.detach() / grid.tile_size
    r = radii.to(means2d.dtype) / grid.tile_size
    lim = torch.tensor([grid.tiles_x, grid.tiles_y], device=means2d.device)
    tmin = torch.minimum(torch.floor(m - r).to(torch.int64).clamp(min=0), lim)
    tmax = torch.minimum(torch.ceil(m + r).to(torch.int64).clamp(min=0), lim)
    visible = (radii > 0).all(dim=-1, keepdim=True)
    tmax = torch.where(visible, tmax, tmin)
    return tmin, tmax


def depth_keys(depths: Tensor) -> Tensor:
    """Order-preserving int64 keys [..] from float depths (float32 bit pattern, as gsplat)."""
    bits = depths.detach().to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    return bits & 0xFFFFFFFF


@torch.no_grad()
def intersect_tiles(means2d: Tensor, radii: Tensor, depths: Tensor, grid: TileGrid) -> TileLists:
    """Enumerate and sort all (camera, tile, Gaussian) intersections.

    means2d [C, N, 2], radii [C, N, 2] int, depths [C, N]. Vectorised PyTorch; memory O(M).
    """
    C, N = depths.shape
    device = means2d.device
    tmin, tmax = tile_ranges(means2d, radii, grid)
    extent = (tmax - tmin).clamp(min=0)  # [C, N, 2]
    counts = (extent[..., 0] * extent[..., 1]).reshape(-1)  # [C*N]
    M = int(counts.sum())
    flat = torch.repeat_interleave(torch.arange(C * N, device=device), counts)  # [M]
    start = torch.cumsum(counts, 0) - counts
    local = torch.arange(M, device=device) - start[flat]  # index within the Gaussian's rectangle
    width_tiles = extent.reshape(-1, 2)[flat, 0]
    tx = tmin.reshape(-1, 2)[flat, 0] + local % width_tiles.clamp(min=1)
    ty = tmin.reshape(-1, 2)[flat, 1] + local // width_tiles.clamp(min=1)
    cam = flat // N
    tile_id = cam * (grid.tiles_x * grid.tiles_y) + ty * grid.tiles_x + tx
    keys = (tile_id << 32) | depth_keys(depths).reshape(-1)[flat]
    keys, order = torch.sort(keys, stable=True)
    flat = flat[order]
    offsets = tile_offsets(keys, C, grid)
    return TileLists(counts.reshape(C, N).to(torch.int32), keys, flat, offsets)


def tile_offsets(isect_ids: Tensor, n_cameras: int, grid: TileGrid) -> Tensor:
    """Start index [C, tiles_y, tiles_x] of each tile's run in sorted keys."""
    n_tiles = n_cameras * grid.tiles_x * grid.tiles_y
    tile_of = isect_ids >> 32
    counts = torch.bincount(tile_of, minlength=n_tiles)
    offsets = torch.cumsum(counts, 0) - counts
    return offsets.reshape(n_cameras, grid.tiles_y, grid.tiles_x)


def tile_run(offsets: Tensor, n_isects: int, flat_tile: int) -> tuple[int, int]:
    """(start, end) of one flat tile id's run."""
    flat = offsets.reshape(-1)
    start = int(flat[flat_tile])
    end = int(flat[flat_tile + 1]) if flat_tile + 1 < flat.numel() else n_isects
    return start, end
