"""Slicing 4D Gaussians at a time: what ``rasterize_gaussians(..., covars=...)`` renders.

At time t a 4D Gaussian (mean mu = (mu_xyz, mu_t), Sigma4 = R S S^T R^T, opacity o) is the 3D Gaussian

    mean3(t)   = mu_xyz + Sigma_xyz,t / Sigma_tt (t - mu_t)
    Sigma3     = Sigma_xyz,xyz - Sigma_xyz,t Sigma_t,xyz / Sigma_tt          (independent of t)
    opacity(t) = o exp(-0.5 (t - mu_t)^2 / Sigma_tt)

(the 4D density is the temporal factor times the sliced 3D density). Gaussians whose temporal factor is
below ``cull_threshold`` are left out. The default, 1/255, changes nothing rendered: with o <= 1 such
a Gaussian has alpha < 1/255 at every pixel, which every backend skips (and gives no gradient).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..reference.sh import is_split_sh
from .checks import check_gaussians_4d, check_threshold, check_times
from .covariance import TimeConditioned, condition_on_time, temporal_factor, time_variances

CULL_THRESHOLD = 1.0 / 255.0


@dataclass(frozen=True)
class SlicedGaussians:
    """N' 3D Gaussians: N 4D Gaussians sliced at one time.

    means [N', 3] world; covars [N', 3, 3] (symmetric); opacities [N'] (the 4D opacity times the
    temporal factor); indices [N'] int64, increasing: row k is 4D Gaussian ``indices[k]`` (gather
    colours or SH with :meth:`gather`); time: the time sliced at (a float, or a 0-dim tensor when
    the times came as a tensor). Differentiable with respect to the 4D parameters (and the time).
    Render with ``rasterize_gaussians(s.means, None, None, s.opacities, s.gather(colors), viewmats, Ks,
    W, H, covars=s.covars)``.
    """

    means: Tensor
    covars: Tensor
    opacities: Tensor
    indices: Tensor
    time: float | Tensor

    def __len__(self) -> int:
        return self.indices.shape[0]

    def gather(self, values):
        """Rows ``indices`` of per-Gaussian values [N, ...] (colours, SH [N, K, 3]), or of each part of a
        split SH pair (sh0, shN); differentiable."""
        if is_split_sh(values):
            return tuple(v.index_select(0, self.indices) for v in values)
        return values.index_select(0, self.indices)


def slice_gaussians_4d(
    means4: Tensor,
    quats_left: Tensor,
    quats_right: Tensor,
    scales4: Tensor,
    opacities: Tensor,
    times: float | Tensor,
    *,
    cull_threshold: float = CULL_THRESHOLD,
) -> SlicedGaussians | list[SlicedGaussians]:
    """Slice N 4D Gaussians at one time or at C times, differentiably (plain PyTorch).

    Args:
        means4 [N, 4] (x, y, z, t), world and normalised time; quats_left, quats_right [N, 4] (w, x, y, z),
        any non-zero norm (normalised inside), the rotation R = L(q_l) R(q_r) of
        rasterizer/spacetime/rotation.py; scales4 [N, 4] activated, all > 0; opacities [N] activated,
        in [0, 1]. All one dtype and device.
        times: a float or 0-dim tensor (one time), or a 1-D tensor [C] (one time per camera); any
        finite value (times outside the trained span simply cull more).
        cull_threshold: Gaussians whose temporal factor exp(-0.5 (t - mu_t)^2 / Sigma_tt) is below it
        are left out; kept are those with factor >= cull_threshold (every returned opacity honours it;
        a factor within rounding of the threshold may go either way, as the culling pass computes it
        apart). Default 1/255 (lossless for rendering, see the module docstring); 0 keeps all.
    Returns:
        one :class:`SlicedGaussians` for one time; for a [C] tensor a list of C of them, in the order
        of ``times`` (each time keeps its own subset, so they are not stacked).
    Raises:
        RasterizerInputError: a malformed argument, named.
    """
    check_gaussians_4d(means4, quats_left, quats_right, scales4, opacities)
    time_list, single = check_times(times, means4.dtype, means4.device)
    threshold = check_threshold(cull_threshold)
    rows = _rows_kept_at_some_time(means4, quats_left, quats_right, scales4, time_list, threshold)
    if rows is not None:  # condition only the Gaussians some time keeps
        means4, quats_left, quats_right, scales4, opacities = (
            x.index_select(0, rows) for x in (means4, quats_left, quats_right, scales4, opacities))
    conditioned = condition_on_time(quats_left, quats_right, scales4)
    sliced = [slice_at(means4, opacities, conditioned, t, threshold, rows) for t in time_list]
    return sliced[0] if single else sliced


def _rows_kept_at_some_time(means4, quats_left, quats_right, scales4, time_list, threshold) -> Tensor | None:
    """Indices [N''] of the Gaussians whose temporal factor reaches ``threshold`` at one of the times
    (a cheap pass without gradients: Sigma_tt alone, and exp(-0.5 dt^2 / Sigma_tt) >= threshold tested
    as dt^2 <= -2 ln(threshold) Sigma_tt: exp is slow where it underflows), or None when that is all
    of them."""
    if threshold == 0.0:
        return None
    with torch.no_grad():
        bound = time_variances(quats_left, quats_right, scales4) * (-2.0 * math.log(threshold))
        mu_t = means4[:, 3]
        kept = None
        for t in time_list:
            dt = t - mu_t
            k = dt * dt <= bound
            kept = k if kept is None else kept | k
        if bool(kept.all()):
            return None
        return kept.nonzero()[:, 0]


def slice_at(means4: Tensor, opacities: Tensor, conditioned: TimeConditioned, time: float | Tensor,
             cull_threshold: float, rows: Tensor | None = None) -> SlicedGaussians:
    """One time's slice of Gaussians from their time-independent :class:`TimeConditioned` (no input
    checks: :func:`slice_gaussians_4d` is the public entry). ``rows`` [N] maps them to the caller's
    indices (None: the identity). Keeps those whose temporal factor, as computed here, is >=
    ``cull_threshold``."""
    dt = time - means4[:, 3]
    factor = temporal_factor(dt, conditioned.time_variances)
    n = means4.shape[0]
    keep = (factor >= cull_threshold).nonzero()[:, 0]
    indices = keep if rows is None else rows.index_select(0, keep)
    if keep.shape[0] == n:  # nothing culled: no gathers
        means = means4[:, :3] + conditioned.velocities * dt[:, None]
        return SlicedGaussians(means, conditioned.covars, opacities * factor, indices, time)
    dt = dt.index_select(0, keep)
    means = means4.index_select(0, keep)[:, :3] + conditioned.velocities.index_select(0, keep) * dt[:, None]
    covars = conditioned.covars.index_select(0, keep)
    opac = opacities.index_select(0, keep) * factor.index_select(0, keep)
    return SlicedGaussians(means, covars, opac, indices, time)
