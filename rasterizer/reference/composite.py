"""Front-to-back alpha compositing of sorted screen-space Gaussians, tile by tile (plain PyTorch).

For pixel centre p = (x + 0.5, y + 0.5) and Gaussian i (sorted near to far within the tile):
  d = mean2d_i - p,  sigma = 0.5 (a dx^2 + c dy^2) + b dx dy,
  alpha_i = min(0.999, opacity_i exp(-sigma)), skipped (alpha 0) when alpha_i < 1/255 or sigma < 0,
  T_1 = 1, T_{i+1} = T_i (1 - alpha_i); the pixel stops before the first i with T_{i+1} <= 1e-4,
  render = sum_i c_i alpha_i T_i,  alpha_out = 1 - T_final.
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


def blend_weights(alpha: Tensor) -> Tensor:
    """Compositing weights w_i = alpha_i T_i [P, K] with the early stop T_{i+1} <= 1e-4 applied."""
    T_incl = torch.cumprod(1.0 - alpha, dim=-1)  # T_{i+1}
    T_excl = torch.cat([torch.ones_like(T_incl[:, :1]), T_incl[:, :-1]], dim=-1)  # T_i
    included = T_incl.detach() > T_MIN  # monotone: once false, false for all later i
    return torch.where(included, alpha * T_excl, torch.zeros_like(alpha))


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
) -> tuple[Tensor, Tensor]:
    """Composite all cameras.

    Args:
        means2d [C, N, 2], conics [C, N, 3], opacities [C, N], colors [C, N, D]; tiles from
        ``intersect_tiles``; absgrad_acc: optional [C*N, 2] buffer that receives sum over pixels of
        |d loss / d means2d| during backward (densification's absolute gradient).
    Returns:
        render [C, H, W, D], alpha [C, H, W, 1].
    """
    C, N, D = colors.shape
    flat_means, flat_conics = means2d.reshape(C * N, 2), conics.reshape(C * N, 3)
    flat_opac, flat_colors = opacities.reshape(C * N), colors.reshape(C * N, D)
    n_isects = tiles.flatten_ids.numel()
    tiles_per_cam = grid.tiles_x * grid.tiles_y
    index_parts, colour_parts, alpha_parts = [], [], []
    for flat_tile in range(C * tiles_per_cam):
        start, end = tile_run(tiles.offsets, n_isects, flat_tile)
        if end <= start:
            continue
        cam, t = divmod(flat_tile, tiles_per_cam)
        ty, tx = divmod(t, grid.tiles_x)
        ys, xs, centres = tile_pixel_centres(tx, ty, grid, width, height, means2d)
        ids = tiles.flatten_ids[start:end]
        m = flat_means[ids][None].expand(len(centres), -1, -1)  # [P, K, 2]
        if absgrad_acc is not None and m.requires_grad:
            m = m.clone()  # per-pixel copies so the hook sees per-pixel gradients
            m.register_hook(_absgrad_hook(absgrad_acc, ids))
        w = blend_weights(gaussian_alphas(m - centres[:, None], flat_conics[ids], flat_opac[ids]))
        index_parts.append((cam * height + ys) * width + xs)
        colour_parts.append(w @ flat_colors[ids])
        alpha_parts.append(w.sum(-1, keepdim=True))
    render = colors.new_zeros(C * height * width, D)
    alpha = colors.new_zeros(C * height * width, 1)
    if not index_parts:  # nothing visible: zeros, still part of the graph (zero gradients)
        touch = 0.0 * (means2d.sum() + conics.sum() + opacities.sum() + colors.sum())
        render, alpha = render + touch, alpha + touch
    else:
        index = torch.cat(index_parts)
        render = render.index_put((index,), torch.cat(colour_parts))
        alpha = alpha.index_put((index,), torch.cat(alpha_parts))
    return render.reshape(C, height, width, D), alpha.reshape(C, height, width, 1)
