"""Front-to-back compositing of surfels, tile by tile (plain PyTorch, the specification).

For pixel centre q = (x + 0.5, y + 0.5) and surfel i (sorted near to far by centre depth in its tile,
as the 3D path: ``rasterizer.tiles.intersect_tiles``), with the rows M_u, M_v, M_w of its K W H:
  h_u = x M_w - M_u,  h_v = y M_w - M_v,  c = h_u x h_v,  (u, v) = (c_x, c_y) / c_z  (exact ray-splat
  intersection in the splat's (u, v) frame; the surfel is skipped where c_z = 0),
  sigma = 0.5 min(u^2 + v^2, 2 |q - mean2d|^2)  (the low-pass fallback keeps sub-pixel surfels visible),
  alpha_i = min(0.999, opacity_i exp(-sigma)), skipped when alpha_i < 1/255 or sigma < 0; then weights
  w_i = alpha_i T_i with the early stop T_{i+1} <= 1e-4 exactly as the 3D reference (blend_weights).
Outputs per pixel: colour sum w_i c_i, alpha sum w_i, transmittance prod (1 - alpha_i), depth
sum w_i z_i / max(alpha, 1e-10), median depth z of the last blended i with T_i > 0.5 (0 if none),
camera-frame normal sum w_i n_i, distortion 2 sum_i w_i (z_i sum_{j<i} w_j - sum_{j<i} w_j z_j).
z_i is the surfel's centre depth (``surfel_depth="centre"``, gsplat's choice) or the depth of the
ray-splat intersection, M_w . (u, v, 1) (``"intersection"``, the 2DGS paper's rasterizer), where the
exact term gave sigma; where the low-pass fallback did, the surfel is a screen-space blob and z_i is
its centre depth (the line's intersection with the plane of a sub-pixel or edge-on surfel can lie
far away or behind the camera).
With a depth limit L [C, H, W] (camera z, +inf: none; an inserted mesh's first hit), surfel i is skipped
at pixel q (alpha 0: no colour, no gradient, T unchanged) when its limit depth zl_i >= L_q, zl_i being
the ray-splat intersection depth M_w . (u, v, 1) where the exact term gave sigma and the centre depth
where the low-pass fallback did (the intersection-mode z_i, whatever ``surfel_depth``), compared in
float64. Intersection depths are not monotone in the tile's centre-depth order, so a limit skips
surfels (later ones in front of it still blend) rather than stopping the pixel. The limit gets no
gradient.
Differentiated by autograd. Slow (a Python loop over tiles): this is the specification.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..reference.composite import ALPHA_MAX, ALPHA_THRESHOLD, blend_weights, tile_pixel_centres
from ..tiles import TileGrid, TileLists, tile_run
from .records import SurfelComposited, SurfelSplats

LOW_PASS_SCALE = 2.0  # sigma's screen-space term is 0.5 * 2 |q - mean2d|^2 (gsplat's FILTER_INV_SQUARE_2DGS)
MEDIAN_T = 0.5
DEPTH_ALPHA_MIN = 1e-10
SURFEL_DEPTHS = ("centre", "intersection")


def ray_splat_uv(centres: Tensor, KWH: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(u [P, K], v [P, K], hit [P, K]) at pixel centres [P, 2] for surfels with K W H [K, 3, 3]; hit is
    False where the two pixel planes meet parallel to the splat (c_z = 0; u, v are then 0)."""
    Mu, Mv, Mw = KWH[None, :, 0, :], KWH[None, :, 1, :], KWH[None, :, 2, :]
    h_u = centres[:, None, 0:1] * Mw - Mu  # [P, K, 3]
    h_v = centres[:, None, 1:2] * Mw - Mv
    c = torch.linalg.cross(h_u, h_v, dim=-1)
    hit = c[..., 2] != 0
    cz = torch.where(hit, c[..., 2], torch.ones_like(c[..., 2]))
    u = torch.where(hit, c[..., 0] / cz, 0.0)
    v = torch.where(hit, c[..., 1] / cz, 0.0)
    return u, v, hit


def surfel_alphas(centres: Tensor, KWH: Tensor, means2d: Tensor, opacities: Tensor
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(alpha [P, K], u, v [P, K], exact [P, K]) at pixel centres [P, 2] for surfels with K W H [K, 3, 3],
    means2d [K, 2], opacities [K]; alpha is 0 where the surfel is skipped (no hit, alpha < 1/255,
    sigma < 0); exact is True where the ray-splat term (not the low-pass fallback) gave sigma."""
    u, v, hit = ray_splat_uv(centres, KWH)
    exact = u * u + v * v
    d = means2d[None] - centres[:, None]  # [P, K, 2]
    low_pass = LOW_PASS_SCALE * (d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1])
    use_exact = exact <= low_pass
    sigma = 0.5 * torch.where(use_exact, exact, low_pass)
    alpha = torch.clamp_max(opacities[None] * torch.exp(-sigma), ALPHA_MAX)
    keep = hit & (sigma >= 0) & (alpha >= ALPHA_THRESHOLD)
    return torch.where(keep, alpha, torch.zeros_like(alpha)), u, v, use_exact


def limit_depths(u: Tensor, v: Tensor, use_exact: Tensor, KWH: Tensor, centre_depths: Tensor) -> Tensor:
    """[P, K] the depth a depth limit is compared with: the ray-splat intersection depth
    M_w . (u, v, 1) where ``use_exact``, else the centre depth [K] (detached: the limit is a test)."""
    Mw = KWH.detach()[None, :, 2, :]
    hit_z = u.detach() * Mw[..., 0] + v.detach() * Mw[..., 1] + Mw[..., 2]
    return torch.where(use_exact, hit_z, centre_depths.detach()[None].expand_as(hit_z))


def limit_by_depth(alpha: Tensor, zl: Tensor, limits: Tensor) -> Tensor:
    """alpha [P, K] with 0 where the limit depth zl [P, K] is not in front of the pixel's limit [P]
    (float64 comparison)."""
    behind = zl.to(torch.float64) >= limits.detach().to(torch.float64)[:, None]
    return torch.where(behind, torch.zeros_like(alpha), alpha)


def exclusive_cumsum(x: Tensor) -> Tensor:
    """sum_{j<i} x_j along the last axis."""
    return torch.cumsum(x, dim=-1) - x


def median_depths(alpha: Tensor, weights: Tensor, z: Tensor) -> Tensor:
    """[P, 1]: z of the last blended surfel (weight > 0) whose incoming transmittance T_i exceeds 0.5;
    0 where there is none."""
    T_in = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1.0 - alpha[:, :-1]], dim=-1), dim=-1).detach()
    chosen = (weights.detach() > 0) & (T_in > MEDIAN_T)
    order = torch.arange(1, alpha.shape[1] + 1, device=alpha.device)
    last = (chosen * order).argmax(dim=-1, keepdim=True)  # index of the last chosen (0 if none)
    picked = torch.gather(z, 1, last)
    return torch.where(chosen.any(dim=-1, keepdim=True), picked, torch.zeros_like(picked))


def distortion(weights: Tensor, z: Tensor) -> Tensor:
    """[P, 1]: 2 sum_i w_i (z_i sum_{j<i} w_j - sum_{j<i} w_j z_j)."""
    return 2.0 * (weights * (z * exclusive_cumsum(weights) - exclusive_cumsum(weights * z))).sum(-1, keepdim=True)


def composite_surfels_reference(splats: SurfelSplats, tiles: TileLists, grid: TileGrid, width: int, height: int,
                                surfel_depth: str = "centre", depth_limit: Tensor | None = None) -> SurfelComposited:
    """Composite all cameras (see the module docstring); tiles from ``intersect_tiles``; depth_limit
    [C, H, W] camera z or None (see the module docstring)."""
    s = splats
    C, N, D = s.colors.shape
    flat_M = s.ray_transforms.reshape(C * N, 3, 3)
    flat_means, flat_opac = s.means2d.reshape(C * N, 2), s.opacities.reshape(C * N)
    flat_colors, flat_depths = s.colors.reshape(C * N, D), s.depths.reshape(C * N)
    flat_normals = s.normals.reshape(C * N, 3)
    flat_limits = depth_limit.reshape(-1) if depth_limit is not None else None
    n_isects = tiles.flatten_ids.numel()
    tiles_per_cam = grid.tiles_x * grid.tiles_y
    parts: dict[str, list[Tensor]] = {k: [] for k in ("index", "render", "alpha", "T", "wz", "median", "normal",
                                                       "distortion")}
    for flat_tile in range(C * tiles_per_cam):
        start, end = tile_run(tiles.offsets, n_isects, flat_tile)
        if end <= start:
            continue
        cam, t = divmod(flat_tile, tiles_per_cam)
        ty, tx = divmod(t, grid.tiles_x)
        ys, xs, centres = tile_pixel_centres(tx, ty, grid, width, height, s.means2d)
        ids = tiles.flatten_ids[start:end]
        alpha, u, v, use_exact = surfel_alphas(centres, flat_M[ids], flat_means[ids], flat_opac[ids])
        pixels = (cam * height + ys) * width + xs
        if flat_limits is not None:
            zl = limit_depths(u, v, use_exact, flat_M[ids], flat_depths[ids])
            alpha = limit_by_depth(alpha, zl, flat_limits[pixels])
        w, T_final = blend_weights(alpha)
        z = flat_depths[ids][None].expand(len(centres), -1)
        if surfel_depth == "intersection":
            Mw = flat_M[ids][None, :, 2, :]  # [1, K, 3]
            z = torch.where((alpha > 0) & use_exact, u * Mw[..., 0] + v * Mw[..., 1] + Mw[..., 2], z)
        parts["index"].append(pixels)
        parts["render"].append(w @ flat_colors[ids])
        parts["alpha"].append(w.sum(-1, keepdim=True))
        parts["T"].append(T_final)
        parts["wz"].append((w * z).sum(-1, keepdim=True))
        parts["median"].append(median_depths(alpha, w, z))
        parts["normal"].append(w @ flat_normals[ids])
        parts["distortion"].append(distortion(w, z))
    return _scatter(parts, s, C, width, height)


def _scatter(parts: dict[str, list[Tensor]], s: SurfelSplats, C: int, width: int, height: int) -> SurfelComposited:
    """Per-pixel parts into [C, H, W, .] images (pixels no surfel reaches: zeros, transmittance 1)."""
    P = C * height * width
    D = s.colors.shape[-1]
    widths = {"render": D, "alpha": 1, "T": 1, "wz": 1, "median": 1, "normal": 3, "distortion": 1}
    out = {}
    for key, ch in widths.items():
        base = s.colors.new_ones(P, ch) if key == "T" else s.colors.new_zeros(P, ch)
        if parts["index"]:
            base = base.index_put((torch.cat(parts["index"]),), torch.cat(parts[key]))
        else:  # nothing visible: still part of the graph (zero gradients)
            base = base + 0.0 * (s.means2d.sum() + s.ray_transforms.sum() + s.opacities.sum() + s.colors.sum()
                                 + s.depths.sum() + s.normals.sum())
        out[key] = base.reshape(C, height, width, ch)
    depth = out["wz"] / out["alpha"].clamp(min=DEPTH_ALPHA_MIN)
    return SurfelComposited(out["render"], out["alpha"], out["T"], depth, out["median"], out["normal"],
                            out["distortion"])
