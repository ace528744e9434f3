"""Differentiable evaluation of candidate lists: the primitives each ray meets, composited front to back
(plain PyTorch; the gradient path of :func:`rasterizer.tracing.trace_gaussians`).

Given per ray the candidate primitives ``ids`` [R, K] (int64, -1 = padding) in order of t*, this computes
for every (ray, candidate) t* and m* (:func:`geometry.ray_response`), alpha (:func:`geometry.response_alpha`,
zero outside t_min < t* < t_max), the rasterizer's front-to-back weights with its early stop
(:func:`rasterizer.reference.composite.blend_weights`: w_i = alpha_i T_i, stop before T_{i+1} <= 1e-4) and
the colour of the primitive along the ray: SH evaluated at the ray direction d (the rasterizer's convention
is the unit direction from the viewer to the Gaussian, here the ray's own direction), ``max(SH + 0.5, 0)``,
or the given RGB as is when ``sh_degree`` is None. Outputs per ray: rgb = sum w_i c_i (premultiplied),
transmittance = prod (1 - alpha_i) over the blended i, distance = sum w_i t*_i / sum w_i (0 where nothing
is blended).

Rays are processed in buckets of similar candidate count (sorted by count), each padded to its own
longest list, so one long ray does not pad all the others.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..reference.composite import blend_weights
from ..reference.sh import is_split_sh, num_sh_bases, sh_basis
from .geometry import ray_response, response_alpha

BUCKET_PAIRS = 1 << 18  # (ray, candidate) pairs per bucket


def gather_colors(colors, sh_degree: int | None, ids: Tensor, dirs: Tensor) -> Tensor:
    """Colours [R, K, 3] of primitives ``ids`` [R, K] (valid indices) seen along ``dirs`` [R, 3]."""
    if sh_degree is None:
        return colors[ids]
    kb = num_sh_bases(sh_degree)
    if is_split_sh(colors):
        sh0, shN = colors
        coeffs = sh0[ids] if kb == 1 else torch.cat([sh0[ids], shN[:, :kb - 1][ids]], dim=-2)
    else:
        coeffs = colors[:, :kb][ids]  # [R, K, kb, 3]
    basis = sh_basis(sh_degree, torch.nn.functional.normalize(dirs, dim=-1))  # [R, kb]
    raw = (basis[:, None, :, None] * coeffs).sum(-2)
    return torch.clamp_min(raw + 0.5, 0.0)


def composite_bucket(mu: Tensor, A: Tensor, opacities: Tensor, colors, sh_degree: int | None, kind: int,
                     origins: Tensor, dirs: Tensor, t_min: Tensor, t_max: Tensor, ids: Tensor
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """(rgb [R, 3], transmittance [R, 1], distance [R, 1]) of R rays with candidates ``ids`` [R, K]."""
    valid = ids >= 0
    g = ids.clamp(min=0)
    t, m = ray_response(mu[g], A[g], origins[:, None], dirs[:, None], kind)
    alpha = response_alpha(opacities[g], m)
    inside = valid & (t > t_min[:, None]) & (t < t_max[:, None])
    alpha = torch.where(inside, alpha, torch.zeros_like(alpha))
    w, T = blend_weights(alpha)
    c = gather_colors(colors, sh_degree, g, dirs)
    rgb = (w[..., None] * c).sum(1)
    acc = w.sum(1, keepdim=True)
    t_safe = torch.where(inside, t, torch.zeros_like(t))
    dist = (w * t_safe).sum(1, keepdim=True)
    dist = torch.where(acc > 0, dist / torch.where(acc > 0, acc, torch.ones_like(acc)), torch.zeros_like(acc))
    return rgb, T, dist


def composite_candidates(mu: Tensor, A: Tensor, opacities: Tensor, colors, sh_degree: int | None, kind: int,
                         origins: Tensor, dirs: Tensor, t_min: Tensor, t_max: Tensor, ids: Tensor,
                         counts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """All rays, in buckets of similar ``counts`` [R] (the number of valid leading entries of ``ids``)."""
    R = origins.shape[0]
    dt, dev = mu.dtype, mu.device
    touch = 0.0 * (mu.sum() + A.sum() + opacities.sum())  # keeps the outputs in the graph when nothing is met
    if is_split_sh(colors):
        touch = touch + 0.0 * sum(c.sum() for c in colors)
    else:
        touch = touch + 0.0 * colors.sum()
    rgb = torch.zeros(R, 3, dtype=dt, device=dev) + touch
    T = torch.ones(R, 1, dtype=dt, device=dev) + touch
    dist = torch.zeros(R, 1, dtype=dt, device=dev) + touch
    live = (counts > 0).nonzero()[:, 0]
    if live.numel() == 0:
        return rgb, T, dist
    order = live[torch.argsort(counts[live], stable=True)]
    sorted_counts = counts[order].tolist()
    parts, idx_parts = [], []
    start = 0
    while start < len(order):
        k = sorted_counts[start]
        end = start + 1
        # grow the bucket while its padded size stays within BUCKET_PAIRS (at least one ray)
        lo, hi = start + 1, len(order)
        while lo < hi:  # largest end with (end - start) * counts[end - 1] <= BUCKET_PAIRS
            mid = (lo + hi + 1) // 2
            if (mid - start) * sorted_counts[mid - 1] <= BUCKET_PAIRS:
                lo = mid
            else:
                hi = mid - 1
        end = max(lo, start + 1)
        k = sorted_counts[end - 1]
        rows = order[start:end]
        parts.append(composite_bucket(mu, A, opacities, colors, sh_degree, kind, origins[rows], dirs[rows],
                                      t_min[rows], t_max[rows], ids[rows, :k]))
        idx_parts.append(rows)
        start = end
    rows = torch.cat(idx_parts)
    rgb = rgb.index_put((rows,), torch.cat([p[0] for p in parts]))
    T = T.index_put((rows,), torch.cat([p[1] for p in parts]))
    dist = dist.index_put((rows,), torch.cat([p[2] for p in parts]))
    return rgb, T, dist
