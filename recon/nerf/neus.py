"""NeuS volume rendering of a signed distance field (Wang et al. 2021; NeuS2, Wang et al. 2023): pure math.

Frame: the SDF lives in the field's *normalised* coordinates ``x`` (:class:`recon.nerf.neus_field.NeusField`:
the scene box mapped to [-1, 1]^3, a contracted capture's [-2, 2]^3), negative inside. Along a ray, a sample
is the section [t0, t1]; ``dist`` [S] is its length and ``cos`` [S] the cosine between the ray and the SDF
gradient, both in normalised coordinates.

Unbiased discrete opacity (NeuS eq. 13 with the section-end estimate of the reference code): with the
logistic CDF ``Phi_s(f) = sigmoid(s f)`` and the sharpness ``s = exp(10 variance)`` (a learned scalar),

    c = -relu(-cos)                                   (a section never "leaves" a surface it faces away from)
    f_prev = f - c dist / 2,   f_next = f + c dist / 2  (SDF at the section's ends from its midpoint value f)
    alpha = clamp((Phi_s(f_prev) - Phi_s(f_next)) / Phi_s(f_prev), 0, 1)
          = clamp(1 - exp(log Phi_s(f_next) - log Phi_s(f_prev)), 0, 1)

evaluated in the second form (log-sigmoids: exact deep inside, where both CDFs underflow, and exactly 0 in
empty space; the reference code's +1e-5 in numerator and denominator instead gives every section an opacity
of ~1e-5, a haze of ~1 % over the thousand steps of a ray through the box here).

(NeuS's cos-annealing is not used: c is the true, clamped cosine from the first step.) The weights are the
usual ``w_i = alpha_i prod_{j<i} (1 - alpha_j)`` (:func:`recon.nerf.rendering.alpha_weights`). For a plane
and s -> infinity the weight peaks exactly at the zero crossing (NeuS's unbiasedness).

Gradient of the SDF (normals, the eikonal term, ``cos`` above): central differences of step ``h``
(:func:`central_differences`), NeuS2's/instant-nsr-pl's finite-difference alternative to the analytic
second-order derivative through the hash grid: ``grad_i = (f(x + h e_i) - f(x - h e_i)) / (2 h)``. Each
difference is an ordinary (first-order) function of the parameters, so the eikonal loss
``mean((|grad| - 1)^2)`` (:func:`eikonal_loss`) back-propagates through the hash encoding's own backward,
with no Hessian; for a twice-differentiable field the result tends to autograd's double backward as h -> 0
(tests/recon/nerf/test_neus.py checks both the gradient and the eikonal term's parameter gradients against
autograd). With a trilinear hash grid, ``h`` of half a cell of the finest active level averages the
piecewise-linear field across cells (a smoothing NeuS2 also relies on).

Tetrahedral differences (``--neus.gradient tetrahedral``, opt-in; central is the default: :func:`tetrahedral_differences`;
Instant-NSR, Zhao et al. 2022): four points ``x + h v_i`` at alternate corners of the cube [-1, 1]^3,
``v`` in {(1,-1,-1), (-1,-1,1), (-1,1,-1), (1,1,1)}, with ``sum_i v_i = 0`` and ``sum_i v_i v_i^T = 4 I``. The
Taylor expansion ``f(x + h v) = f + h g.v + h^2/2 v^T H v + O(h^3)`` summed with weights ``v_i / (4 h)`` gives

    sum_i v_i f(x + h v_i) / (4 h) = g + h/8 sum_i v_i (v_i^T H v_i) + O(h^2) = g + h (H_yz, H_xz, H_xy) + O(h^2)

(the constant term drops since sum v_i = 0; the linear one is g since sum v_i v_i^T = 4 I; of the quadratic one
only the mixed terms survive, because v_x v_y v_z = 1 at every corner, so sum_i v_i v_ix v_iy = (0, 0, 4) and its
permutations). The value and the features at ``x`` are the mean of the four: ``f + h^2/2 trace(H) + O(h^3)``
(sum v^T H v = 4 trace H). So 4 field evaluations per sample instead of central differences' 7, a first-order
gradient instead of a second-order one (for a trilinear hash grid both are smoothings over about a cell of the
finest level anyway), with the eikonal term back-propagating the same way.

Fast rendering without gradients (:func:`ray_neighbours`, :func:`slope_cos`, :func:`neus_alpha_from_slope`):
the cosine is replaced by the along-ray slope of the midpoint SDFs of the neighbouring sections on the same ray
(the estimate of NeuS's own up-sampling), so alpha costs one field evaluation per section; a section with no
neighbour within its own length takes cos = -1.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

VARIANCE_SCALE = 10.0  # s = exp(10 variance) (NeuS's SingleVarianceNetwork)
S_MIN, S_MAX = 1e-6, 1e6


def sharpness(variance: Tensor) -> Tensor:
    """[] or [...] the logistic sharpness ``s = exp(10 variance)``, clamped to [1e-6, 1e6]."""
    return torch.exp(variance * VARIANCE_SCALE).clamp(S_MIN, S_MAX)


def logistic_cdf(f: Tensor, s: Tensor) -> Tensor:
    """[...] Phi_s(f) = sigmoid(s f) of SDF values ``f`` [...] with sharpness ``s`` (broadcast)."""
    return torch.sigmoid(f * s)


def section_ends(sdf: Tensor, cos: Tensor, dist: Tensor) -> tuple[Tensor, Tensor]:
    """(f_prev [S], f_next [S]): the SDF at the start and end of each section from its midpoint value ``sdf``
    [S], the ray-gradient cosine ``cos`` [S] (clamped to <= 0) and the section length ``dist`` [S]."""
    c = -torch.relu(-cos)
    half = 0.5 * c * dist
    return sdf - half, sdf + half


def alpha_from_ends(f_prev: Tensor, f_next: Tensor, s: Tensor) -> Tensor:
    """[S] NeuS's discrete opacity of sections whose ends have SDF ``f_prev`` / ``f_next`` [S]."""
    log_ratio = torch.nn.functional.logsigmoid(f_next * s) - torch.nn.functional.logsigmoid(f_prev * s)
    return (-torch.expm1(log_ratio)).clamp(0.0, 1.0)


def neus_alpha(sdf: Tensor, grad: Tensor, dirs: Tensor, dist: Tensor, s: Tensor) -> Tensor:
    """[S] opacity of sections with midpoint SDF ``sdf`` [S], SDF gradient ``grad`` [S, 3], unit ray
    directions ``dirs`` [S, 3] and lengths ``dist`` [S] (normalised coordinates), sharpness ``s``:
    :func:`section_ends` then :func:`alpha_from_ends`."""
    cos = (dirs * grad).sum(-1)
    return alpha_from_ends(*section_ends(sdf, cos, dist), s)


SINGLE_SAMPLE_COS = -1.0  # slope of a section with no usable neighbour: head-on (the largest opacity)


def ray_neighbours(ray: Tensor, t0: Tensor, t1: Tensor) -> tuple[Tensor, Tensor]:
    """(prev [S], next [S]) indices of the neighbouring sections on the same ray of packed sections ``ray``
    [S] (sorted by ray, then by ``t0``), ``t0`` / ``t1`` [S], or -1 where there is none or it lies across a gap
    longer than the section itself (occupancy skipping: the chord would average over unsampled space)."""
    n = ray.shape[0]
    idx = torch.arange(n, device=ray.device)
    length = t1 - t0
    prev, nxt = torch.full_like(idx, -1), torch.full_like(idx, -1)
    if n > 1:
        same = ray[1:] == ray[:-1]
        close = (t0[1:] - t1[:-1]) <= torch.maximum(length[1:], length[:-1])
        ok = same & close
        prev[1:] = torch.where(ok, idx[:-1], prev[1:])
        nxt[:-1] = torch.where(ok, idx[1:], nxt[:-1])
    return prev, nxt


def slope_cos(sdf: Tensor, x: Tensor, prev: Tensor, nxt: Tensor) -> Tensor:
    """[S] the along-ray SDF slope at each section's midpoint, the stand-in for grad . dir: the difference of
    the neighbours' midpoint SDFs ``sdf`` [S] over the chord between their midpoints ``x`` [S, 3] (normalised
    coordinates); central where both neighbours ``prev`` / ``nxt`` [S] (:func:`ray_neighbours`) exist, one-sided
    where one does, :data:`SINGLE_SAMPLE_COS` where none does (a ray's lone sample)."""
    has_p, has_n = prev >= 0, nxt >= 0
    a = torch.where(has_p, prev, torch.arange(sdf.shape[0], device=sdf.device))
    b = torch.where(has_n, nxt, torch.arange(sdf.shape[0], device=sdf.device))
    chord = (x[b] - x[a]).norm(dim=-1).to(sdf.dtype)
    cos = (sdf[b] - sdf[a]) / chord.clamp(min=1e-12)
    return torch.where(has_p | has_n, cos, torch.full_like(cos, SINGLE_SAMPLE_COS))


def neus_alpha_from_slope(sdf: Tensor, cos: Tensor, dist: Tensor, s: Tensor) -> Tensor:
    """[S] :func:`neus_alpha` with the cosine ``cos`` [S] given (:func:`slope_cos`: one field evaluation per
    section instead of seven) for midpoint SDFs ``sdf`` [S] and lengths ``dist`` [S]."""
    return alpha_from_ends(*section_ends(sdf, cos, dist), s)


def step_alpha(sdf: Tensor, step: float, s: Tensor) -> Tensor:
    """[N] opacity of a section of length ``step`` crossing the level set head-on at points with SDF ``sdf``
    [N] (cos = -1): the occupancy grid's estimate (instant-nsr-pl's ``occ_eval_fn``)."""
    return alpha_from_ends(sdf + 0.5 * step, sdf - 0.5 * step, s)


def central_differences(fn: Callable[[Tensor], tuple[Tensor, Tensor]], x: Tensor, h: float
                        ) -> tuple[Tensor, Tensor, Tensor]:
    """(sdf [N], features [N, F], gradient [N, 3]) of ``fn`` (points [M, 3] -> (sdf [M], features [M, F])) at
    ``x`` [N, 3]: the value and features at ``x`` and the central-difference gradient of step ``h``, from one
    call of ``fn`` on the 7 N points [x, x + h e_0, x - h e_0, ..., x - h e_2]. Differentiable in ``fn``'s
    parameters (first order only)."""
    n = x.shape[0]
    eye = torch.eye(3, dtype=x.dtype, device=x.device) * h
    offsets = torch.stack([eye, -eye], 1).reshape(6, 3)  # +e0, -e0, +e1, -e1, +e2, -e2
    pts = torch.cat([x[None], x[None] + offsets[:, None, :]]).reshape(7 * n, 3)
    sdf, feats = fn(pts)
    sdf = sdf.reshape(7, n)
    grad = torch.stack([(sdf[1 + 2 * i] - sdf[2 + 2 * i]) / (2.0 * h) for i in range(3)], dim=1)
    return sdf[0], feats[:n], grad


TETRAHEDRON = ((1.0, -1.0, -1.0), (-1.0, -1.0, 1.0), (-1.0, 1.0, -1.0), (1.0, 1.0, 1.0))  # v_i: sum v_i = 0,
# sum v_i v_i^T = 4 I (alternate corners of the cube [-1, 1]^3)


def tetrahedral_differences(fn: Callable[[Tensor], tuple[Tensor, Tensor]], x: Tensor, h: float
                            ) -> tuple[Tensor, Tensor, Tensor]:
    """(sdf [N], features [N, F], gradient [N, 3]) of ``fn`` (points [M, 3] -> (sdf [M], features [M, F])) at
    ``x`` [N, 3] from one call of ``fn`` on the 4 N points ``x + h v_i`` (:data:`TETRAHEDRON`; Instant-NSR's
    tetrahedral finite difference; module docstring "Tetrahedral differences"):

        grad = sum_i v_i f(x + h v_i) / (4 h),   sdf = mean_i f(x + h v_i),   features = mean_i feats(x + h v_i)

    Exact for an affine field; for a smooth one the gradient's error is h (f_yz, f_xz, f_xy) (the mixed second
    derivatives; central differences: O(h^2)) and the value's h^2 / 2 trace(Hessian). Differentiable in ``fn``'s
    parameters (first order only)."""
    n = x.shape[0]
    v = torch.tensor(TETRAHEDRON, dtype=x.dtype, device=x.device)  # [4, 3]
    pts = (x[None] + h * v[:, None, :]).reshape(4 * n, 3)
    sdf, feats = fn(pts)
    sdf = sdf.reshape(4, n)
    grad = (v.to(sdf.dtype)[:, None, :] * sdf[:, :, None]).sum(0) / (4.0 * h)
    return sdf.mean(0), feats.reshape(4, n, -1).mean(0), grad


GRADIENTS = {"central": central_differences, "tetrahedral": tetrahedral_differences}  # --neus.gradient
FIELD_POINTS = {"central": 7, "tetrahedral": 4}  # field evaluations per sample of each scheme


def eikonal_loss(grad: Tensor) -> Tensor:
    """[] mean over points of (|grad| - 1)^2 for SDF gradients ``grad`` [N, 3] (0 for N = 0)."""
    if grad.shape[0] == 0:
        return grad.sum() * 0.0
    return ((grad.norm(dim=-1) - 1.0) ** 2).mean()


def eikonal_stats(grad: Tensor, tolerance: float = 0.05) -> dict[str, float]:
    """{"grad_norm_mean", "grad_norm_median", "within_tolerance"} of gradients [N, 3]: |grad| and the fraction
    of points where it is within ``tolerance`` of 1 (the issue's "within 5 % of 1" report)."""
    norm = grad.detach().norm(dim=-1).double()
    if norm.numel() == 0:
        return {"grad_norm_mean": float("nan"), "grad_norm_median": float("nan"), "within_tolerance": float("nan")}
    return {"grad_norm_mean": float(norm.mean()), "grad_norm_median": float(norm.median()),
            "within_tolerance": float(((norm - 1.0).abs() <= tolerance).double().mean())}
