"""Volume rendering of packed ray samples: the standard quadrature (Max 1995; NeRF, Mildenhall et al. 2020).

Samples are packed: ``ray`` int64 [S] (non-decreasing: sorted by ray, then by distance), intervals
``[t0, t1]`` [S] along unit directions, densities ``sigma`` [S] (1 / world unit) and colours ``rgb`` [S, 3].
With ``tau_i = sigma_i (t1_i - t0_i)``:

    alpha_i = 1 - exp(-tau_i),   T_i = exp(-sum_{j < i, same ray} tau_j),   w_i = T_i alpha_i
    colour = sum_i w_i rgb_i + (1 - A) background,   A = sum_i w_i,   depth = sum_i w_i (t0_i + t1_i) / 2 / A

(depth is the expected distance along the ray where A > 0, else 0; :func:`median_depth` gives the distance
where the cumulative weight reaches 0.5). The weights and transmittance come from
:mod:`recon.nerf.transmittance`'s Numba kernels on the CPU (a float64 running sum per ray, forward and
backward); :func:`transmittance_weights_reference`, their specification, runs the exclusive prefix sums over all
samples at once in float64 and subtracts each ray's first value, so long batches keep their precision. Autograd
differentiates the rest (gradients to ``sigma`` and ``rgb``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from recon.nerf.transmittance import transmittance_weights_numba


def ray_starts(ray: Tensor, n_rays: int) -> Tensor:
    """int64 [n_rays]: index of each ray's first sample in the packed arrays (its sample count is
    ``bincount``; a ray without samples gets the next ray's start)."""
    counts = torch.bincount(ray, minlength=n_rays)
    return torch.cumsum(counts, 0) - counts


def transmittance_weights(sigma: Tensor, t0: Tensor, t1: Tensor, ray: Tensor, n_rays: int) -> tuple[Tensor, Tensor]:
    """(weights w [S], transmittance T [S]) of packed samples (see the module docstring), in sigma's dtype: on
    the CPU for float32/float64 densities the Numba kernels (:func:`recon.nerf.transmittance.
    transmittance_weights_numba`, one pass per ray each way), elsewhere :func:`transmittance_weights_reference`."""
    if sigma.device.type == "cpu" and sigma.dtype in (torch.float32, torch.float64):
        return transmittance_weights_numba(sigma, t0, t1, ray, n_rays)
    return transmittance_weights_reference(sigma, t0, t1, ray, n_rays)


def transmittance_weights_reference(sigma: Tensor, t0: Tensor, t1: Tensor, ray: Tensor, n_rays: int
                                    ) -> tuple[Tensor, Tensor]:
    """:func:`transmittance_weights` in PyTorch: the specification the kernels are tested against."""
    tau = sigma.double() * (t1 - t0).double()
    inclusive = torch.cumsum(tau, 0)
    exclusive = inclusive - tau
    starts = ray_starts(ray, n_rays)
    trans = torch.exp(-(exclusive - exclusive[starts[ray]]))
    alpha = -torch.expm1(-tau)
    return (trans * alpha).to(sigma.dtype), trans.to(sigma.dtype)


def accumulate(values: Tensor, ray: Tensor, n_rays: int) -> Tensor:
    """[n_rays, ...] per-ray sums of packed ``values`` [S, ...]."""
    out = values.new_zeros((n_rays, *values.shape[1:]))
    return out.index_add(0, ray, values)


def composite(weights: Tensor, rgb: Tensor, t0: Tensor, t1: Tensor, ray: Tensor, n_rays: int,
              background: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(colour [R, 3], accumulated opacity A [R], expected depth [R]) from the sample ``weights`` [S],
    ``rgb`` [S, 3] and ``background`` [3] or [R, 3] (the Gaussian methods' background: seen through 1 - A)."""
    acc = accumulate(weights, ray, n_rays)
    colour = accumulate(weights[:, None] * rgb, ray, n_rays) + (1.0 - acc)[:, None] * background.to(rgb)
    mid = (0.5 * (t0 + t1)).to(weights.dtype)
    depth_sum = accumulate(weights * mid, ray, n_rays)
    depth = torch.where(acc > 1e-10, depth_sum / acc.clamp(min=1e-10), torch.zeros_like(acc))
    return colour, acc, depth


def median_depth(weights: Tensor, t0: Tensor, t1: Tensor, ray: Tensor, n_rays: int) -> Tensor:
    """[n_rays] median distance: the midpoint of each ray's first sample at which its cumulative weight
    reaches 0.5; 0 for rays whose weights never do (nerfstudio's median depth)."""
    w = weights.detach().double()
    inclusive = torch.cumsum(w, 0)
    exclusive = inclusive - w
    within = inclusive - exclusive[ray_starts(ray, n_rays)[ray]]
    hit = within >= 0.5
    S = w.shape[0]
    first = torch.full((n_rays,), S, dtype=torch.int64, device=w.device)
    first = first.scatter_reduce(0, ray[hit], torch.arange(S, device=w.device)[hit], reduce="amin")
    mid = (0.5 * (t0 + t1)).to(weights.dtype)
    found = first < S
    out = torch.zeros(n_rays, dtype=weights.dtype, device=w.device)
    out[found] = mid[first[found]]
    return out


def volume_render(sigma: Tensor, rgb: Tensor, t0: Tensor, t1: Tensor, ray: Tensor, n_rays: int,
                  background: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(colour [R, 3], opacity [R], depth [R]) of packed samples: :func:`transmittance_weights` then
    :func:`composite`."""
    weights, _ = transmittance_weights(sigma, t0, t1, ray, n_rays)
    return composite(weights, rgb, t0, t1, ray, n_rays, background)


def alpha_weights(alpha: Tensor, ray: Tensor, n_rays: int) -> tuple[Tensor, Tensor]:
    """(weights w [S], transmittance T [S]) of packed samples given their opacities ``alpha`` [S] in [0, 1]
    directly (NeuS: :mod:`recon.nerf.neus`): ``T_i = prod_{j < i, same ray} (1 - alpha_j)`` as the exponential of
    a float64 exclusive prefix sum of ``log(1 - alpha)`` (alpha clamped below 1 - 1e-7), ``w_i = T_i alpha_i``."""
    log_keep = torch.log1p(-alpha.double().clamp(max=1.0 - 1e-7))
    inclusive = torch.cumsum(log_keep, 0)
    exclusive = inclusive - log_keep
    starts = ray_starts(ray, n_rays)
    trans = torch.exp(exclusive - exclusive[starts[ray]])
    return (trans * alpha.double()).to(alpha.dtype), trans.to(alpha.dtype)
