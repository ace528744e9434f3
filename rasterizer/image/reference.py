"""The `reference` sum-mode renderer of image Gaussians: plain PyTorch, autograd, any device. The specification
the cpu kernel is tested against.

render[y, x] = sum_n colour_n exp(-0.5 q_n) over the Gaussians whose window holds the pixel centre, with
q_n = d^T conic_n d, d = (x + 0.5, y + 0.5) - mean_n (pixels). The window is the 3-sigma ellipse (q <= 9)
or, for a fixed window, the box of half extents ``extents`` (GSASR). No sorting, no transmittance.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .geometry import SIGMA_WINDOW, pixel_ranges

PAIRS_PER_CHUNK = 1 << 22  # (Gaussian, pixel) pairs evaluated at once on a CPU: bounds memory, not the result
PAIRS_PER_CHUNK_CUDA = 1 << 26  # on a GPU: fewer, larger launches (about 2.5 GB of temporaries per chunk)


def window_pairs(first: Tensor, last: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """All (Gaussian, pixel) pairs of the inclusive pixel boxes first/last [N, 2]:
    (gaussian index [M], x [M], y [M]) int64, Gaussians in order, rows then columns within a box."""
    span = (last - first + 1).clamp(min=0)  # [N, 2]
    counts = span[:, 0] * span[:, 1]
    gid = torch.repeat_interleave(torch.arange(first.shape[0], device=first.device), counts)
    start = torch.cumsum(counts, 0) - counts
    local = torch.arange(gid.shape[0], device=first.device) - start[gid]
    wx = span[gid, 0].clamp(min=1)
    return gid, first[gid, 0] + local % wx, first[gid, 1] + local // wx


def chunks(counts: Tensor, limit: int) -> list[tuple[int, int]]:
    """Split Gaussians [0, N) with ``counts`` [N] pairs each into consecutive ranges of about ``limit`` pairs
    (a range ends at the first Gaussian that takes its running total past a multiple of ``limit``, so it
    holds at most ``limit`` plus one Gaussian's pairs). Vectorised: one device sync, no per-Gaussian loop."""
    if len(counts) == 0:
        return []
    cum = torch.cumsum(counts, 0)
    total = int(cum[-1])
    if total <= limit:
        return [(0, len(counts))]
    marks = torch.arange(limit, total, limit, device=counts.device, dtype=cum.dtype)
    cuts = (torch.searchsorted(cum, marks, right=False) + 1).clamp(max=len(counts)).unique().tolist()
    edges = [0] + [c for c in cuts if 0 < c < len(counts)] + [len(counts)]
    return list(zip(edges[:-1], edges[1:]))


def sum_composite_reference(means_px: Tensor, conics: Tensor, colors: Tensor, extents: Tensor, width: int,
                            height: int, ellipse: bool) -> Tensor:
    """Unordered sum of N image Gaussians -> render [H, W, D].

    means_px [N, 2] pixels; conics [N, 3] (a, b, c); colors [N, D] (opacity already multiplied in);
    extents [N, 2] window half extents in pixels (no gradient); ellipse: also require q <= 9 (the
    3-sigma window), else the box is the window."""
    D = colors.shape[-1]
    out = colors.new_zeros(height * width, D)
    first, last = pixel_ranges(means_px, extents, width, height)
    counts = ((last - first + 1).clamp(min=0)).prod(dim=-1)
    for lo, hi in chunks(counts, PAIRS_PER_CHUNK_CUDA if means_px.is_cuda else PAIRS_PER_CHUNK):
        gid, px, py = window_pairs(first[lo:hi], last[lo:hi])
        gid = gid + lo
        dx = px.to(means_px.dtype) + 0.5 - means_px[gid, 0]
        dy = py.to(means_px.dtype) + 0.5 - means_px[gid, 1]
        a, b, c = conics[gid].unbind(-1)
        q = a * dx * dx + 2.0 * b * dx * dy + c * dy * dy
        weight = torch.exp(-0.5 * q)
        if ellipse:
            weight = torch.where(q <= SIGMA_WINDOW * SIGMA_WINDOW, weight, torch.zeros_like(weight))
        out = out.index_add(0, py * width + px, colors[gid] * weight[:, None])
    return out.view(height, width, D)
