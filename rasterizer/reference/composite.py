"""Front-to-back alpha compositing of sorted screen-space Gaussians, tile by tile (plain PyTorch).

For pixel centre p = (x + 0.5, y + 0.5) and Gaussian i (sorted near to far within the tile):
  d = mean2d_i - p,  sigma = 0.5 (a dx^2 + c dy^2) + b dx dy,
  alpha_i = min(0.999, opacity_i exp(-sigma)), skipped (alpha 0) when alpha_i < 1/255 or sigma < 0,
  T_1 = 1, T_{i+1} = T_i (1 - alpha_i); the pixel stops before the first i with T_{i+1} <= 1e-4,
  render = sum_i c_i alpha_i T_i,  alpha_out = sum_i alpha_i T_i = 1 - T_final,
  transmittance = T_final = prod_i (1 - alpha_i) over the blended i.
With a depth limit L [C, H, W], Gaussian i is skipped (alpha 0) at pixel p when float32(depth_i) >=
float32(L_p): depth is the camera-space z of its mean, the sort key (compared as float32, as it is
sorted). The limit gets no gradient.
Differentiated by autograd. Slow (a Python loop over tiles): this is the specification.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..tiles import TileGrid, TileLists, tile_run

ALPHA_THRESHOLD = 1.0 / 255.0
ALPHA_MAX = 0.999
T_MIN = 1e-4


def tile_pixel_centres(tx: int, ty: int, grid: TileGrid, width: int, height: int, like: Tensor):
    """Pixel indices (ys, xs) [P] and centres [P, 2] of one tile, clipped to the image."""
    ts = grid.tile_size
    ys, xs = torch.meshgrid(
        torch.arange(ty * ts, min(ty * ts + ts, height), device=like.device),
        torch.arange(tx * ts, min(tx * ts + ts, width), device=like.device),
        indexing="ij",
    )
    ys, xs = ys.reshape(-1), xs.reshape(-1)
    centres = torch.stack([xs, ys], dim=-1).to(like.dtype) + 0.5
    return ys, xs, centres


def gaussian_alphas(deltas: Tensor, conics: Tensor, opacities: Tensor) -> Tensor:
    """alpha [P, K] from deltas d = mean2d - pixel centre [P, K, 2], conics [K, 3], opacities [K];
    zero where the Gaussian is skipped (alpha < 1/255 or sigma < 0)."""
    a, b, c = conics.unbind(-1)
    dx, dy = deltas[..., 0], deltas[..., 1]
    sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy
    alpha = torch.clamp_max(opacities * torch.exp(-sigma), ALPHA_MAX)
    keep = (sigma >= 0) & (alpha >= ALPHA_THRESHOLD)
    return torch.where(keep, alpha, torch.zeros_like(alpha))


def blend_weights(alpha: Tensor) -> tuple[Tensor, Tensor]:
    """Compositing weights w_i = alpha_i T_i [P, K] with the early stop T_{i+1} <= 1e-4 applied, and
    the final transmittance [P, 1]: the product of (1 - alpha_i) over the blended i."""
    T_incl = torch.cumprod(1.0 - alpha, dim=-1)  # T_{i+1}
    T_excl = torch.cat([torch.ones_like(T_incl[:, :1]), T_incl[:, :-1]], dim=-1)  # T_i
    included = T_incl.detach() > T_MIN  # monotone: once false, false for all later i
    weights = torch.where(included, alpha * T_excl, torch.zeros_like(alpha))
    T_final = torch.where(included, 1.0 - alpha, torch.ones_like(alpha)).prod(dim=-1, keepdim=True)
    return weights, T_final


def limit_by_depth(alpha: Tensor, depths: Tensor, limits: Tensor) -> Tensor:
    """alpha [P, K] with 0 where the Gaussian's depth [K] is not in front of the pixel's limit [P]
    (float32 comparison: the sort's keys)."""
    behind = depths.detach().to(torch.float32)[None, :] >= limits.detach().to(torch.float32)[:, None]
    return torch.where(behind, torch.zeros_like(alpha), alpha)


def _absgrad_hook(acc: Tensor, flat_ids: Tensor):
    """Backward hook on per-pixel copies [P, K, 2] of means2d: adds sum_p |grad| into acc [C*N, 2]."""

    def hook(grad: Tensor) -> None:
        acc.index_add_(0, flat_ids, grad.abs().sum(dim=0))

    return hook


def composite_reference(
    means2d: Tensor,
    conics: Tensor,
    opacities: Tensor,
    colors: Tensor,
    tiles: TileLists,
    grid: TileGrid,
    width: int,
    height: int,
    absgrad_acc: Tensor | None = None,
    depths: Tensor | None = None,
    depth_limit: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Composite all cameras.

    Args:
        means2d [C, N, 2], conics [C, N, 3], opacities [C, N], colors [C, N, D]; tiles from
        ``intersect_tiles``; absgrad_acc: optional [C*N, 2] buffer that receives sum over pixels of
        |d loss / d means2d| during backward (densification's absolute gradient); depths [C, N] and
        depth_limit [C, H, W] (optional, together): per-pixel limit, see the module docstring.
    Returns:
        render [C, H, W, D], alpha [C, H, W, 1], transmittance [C, H, W, 1].
    """
    C, N, D = colors.shape
    flat_means, flat_conics = means2d.reshape(C * N, 2), conics.reshape(C * N, 3)
    flat_opac, flat_colors = opacities.reshape(C * N), colors.reshape(C * N, D)
    flat_depths = depths.reshape(C * N) if depth_limit is not None else None
    flat_limits = depth_limit.reshape(-1) if depth_limit is not None else None
    n_isects = tiles.flatten_ids.numel()
    tiles_per_cam = grid.tiles_x * grid.tiles_y
    index_parts, colour_parts, alpha_parts, T_parts = [], [], [], []
    for flat_tile in range(C * tiles_per_cam):
        start, end = tile_run(tiles.offsets, n_isects, flat_tile)
        if end <= start:
            continue
        cam, t = divmod(flat_tile, tiles_per_cam)
        ty, tx = divmod(t, grid.tiles_x)
        ys, xs, centres = tile_pixel_centres(tx, ty, grid, width, height, means2d)
        pixels = (cam * height + ys) * width + xs
        ids = tiles.flatten_ids[start:end]
        m = flat_means[ids][None].expand(len(centres), -1, -1)  # [P, K, 2]
        if absgrad_acc is not None and m.requires_grad:
            m = m.clone()  # per-pixel copies so the hook sees per-pixel gradients
            m.register_hook(_absgrad_hook(absgrad_acc, ids))
        alpha = gaussian_alphas(m - centres[:, None], flat_conics[ids], flat_opac[ids])
        if flat_limits is not None:
            alpha = limit_by_depth(alpha, flat_depths[ids], flat_limits[pixels])
        w, T_final = blend_weights(alpha)
        index_parts.append(pixels)
        colour_parts.append(w @ flat_colors[ids])
        alpha_parts.append(w.sum(-1, keepdim=True))
        T_parts.append(T_final)
    render = colors.new_zeros(C * height * width, D)
    alpha = colors.new_zeros(C * height * width, 1)
    transmittance = colors.new_ones(C * height * width, 1)
    if not index_parts:  # nothing visible: zeros, still part of the graph (zero gradients)
        touch = 0.0 * (means2d.sum() + conics.sum() + opacities.sum() + colors.sum())
        render, alpha, transmittance = render + touch, alpha + touch, transmittance + touch
    else:
        index = torch.cat(index_parts)
        render = render.index_put((index,), torch.cat(colour_parts))
        alpha = alpha.index_put((index,), torch.cat(alpha_parts))
        transmittance = transmittance.index_put((index,), torch.cat(T_parts))
    shape = (C, height, width)
    return render.reshape(*shape, D), alpha.reshape(*shape, 1), transmittance.reshape(*shape, 1)
