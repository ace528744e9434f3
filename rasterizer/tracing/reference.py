"""Brute-force candidate search (plain PyTorch, any device): the specification of what each ray meets.

For every ray and primitive: t* and m* (:func:`geometry.ray_response`), alpha
(:func:`geometry.response_alpha`). Candidates are the primitives with alpha > 0 (>= 1/255) and
t_min < t* < t_max, in increasing t* (ties: lower index first), cut where the light is spent: an entry is
listed while the transmittance in front of it, prod (1 - alpha) over the listed entries before it in
float64, is above :data:`T_STOP` (half the compositor's 1e-4, so that the compositor's own early stop, in
any dtype, always falls inside the list). Costs R x N work: tests and small scenes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..reference.composite import T_MIN
from .geometry import ray_response, response_alpha

T_STOP = 0.5 * T_MIN
CHUNK_PAIRS = 1 << 22  # (ray, primitive) pairs evaluated at once


@torch.no_grad()
def candidates_reference(mu: Tensor, A: Tensor, opacities: Tensor, kind: int, origins: Tensor, dirs: Tensor,
                         t_min: Tensor, t_max: Tensor) -> tuple[Tensor, Tensor]:
    """(ids [R, K] int64 sorted by t*, -1 padded; counts [R] int64) of every ray (see the module docstring).
    Arithmetic in float64."""
    f = torch.float64
    mu, A, opacities = mu.detach().to(f), A.detach().to(f), opacities.detach().to(f)
    origins, dirs, t_min, t_max = (x.detach().to(f) for x in (origins, dirs, t_min, t_max))
    R, N = origins.shape[0], mu.shape[0]
    dev = mu.device
    lists: list[Tensor] = []
    step = max(1, CHUNK_PAIRS // max(N, 1))
    for s in range(0, R, step):
        o, d = origins[s:s + step], dirs[s:s + step]
        t, m = ray_response(mu[None], A[None], o[:, None], d[:, None], kind)  # [r, N]
        alpha = response_alpha(opacities[None], m)
        keep = (alpha > 0) & (t > t_min[s:s + step, None]) & (t < t_max[s:s + step, None])
        key = torch.where(keep, t, torch.full_like(t, float("inf")))
        key, order = torch.sort(key, dim=1, stable=True)
        alpha = torch.gather(torch.where(keep, alpha, torch.zeros_like(alpha)), 1, order)
        T_in = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1.0 - alpha[:, :-1]], dim=1), dim=1)
        listed = torch.isfinite(key) & (T_in > T_STOP)
        for r in range(o.shape[0]):
            lists.append(order[r][listed[r]])
    counts = torch.tensor([len(x) for x in lists], dtype=torch.int64, device=dev)
    K = int(counts.max()) if R else 0
    ids = torch.full((R, K), -1, dtype=torch.int64, device=dev)
    for r, x in enumerate(lists):
        ids[r, :len(x)] = x
    return ids, counts
