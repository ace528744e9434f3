"""The merge rule of the LOD hierarchy: one Gaussian standing for a group of Gaussians.

For children i = 1..k with means mu_i [3], covariances S_i [3, 3] (world), opacities a_i in (0, 1) and SH
coefficients c_i [K, 3] (any degree, linear in colour), the merged Gaussian is:

* area proxy ``A(S) = sqrt(I2(S))``, I2 the second invariant of S (the sum of its principal 2 x 2 minors
  = s1^2 s2^2 + s1^2 s3^2 + s2^2 s3^2 for standard deviations s): a direction-free stand-in for the area a
  Gaussian covers on screen (``s1 s2`` for a flat disc);
* weights ``w_i = a_i A(S_i)``: what each child contributes to the picture seen from afar;
* mean ``mu = sum w_i mu_i / W`` and covariance ``S = S_in + S_out`` (W = sum w_i), ``S_in = sum w_i S_i / W``
  the children's own spread and ``S_out = sum w_i (mu_i - mu)(mu_i - mu)^T / W`` the spread of their means:
  the first two moments of the weighted mixture, matched exactly. That is what the hierarchy merges further
  up (the moments of a node's leaves, whatever the level); the Gaussian *drawn* for the node, with a spread
  factor t < 1 (``spread``), is ``S_t = S_in + t S_out``: narrower where the children lie apart, its opacity
  raised by the opacity rule below so the coverage ``a A`` stays that of the children. Children lying apart
  are several flat-topped blobs, and a Gaussian with their second moments reaches far past them with a faint
  tail (the alpha >= 1/255 ellipse of a moment-matched merge is where the cut's pixel work goes, docs/lod.md);
  t trims that tail. Identical children (S_out = 0) and a group of one are unaffected;
* SH ``c = sum w_i c_i / W``: colours are linear in the coefficients, so the merged colour in every view
  direction is the weighted mean of the children's;
* opacity ``a = min(1, sum w_i / max(A(S_t), sum A(S_i)))``: the children's coverage ``sum a_i A_i`` spread
  over the larger of the merged footprint and the children's footprints together. Children far apart (the
  merged footprint covers the gaps) keep their total coverage; children lying on top of each other keep
  their area-weighted mean opacity (they are not stacked), so merging a Gaussian with itself, or with an
  identical copy, gives back the same Gaussian, and a group of one is its own merge. The alternative rule
  ``"mass"`` divides by the merged footprint alone, ``a = min(1, sum w_i / A(S_t))``: the children's coverage
  is kept whenever it fits under opacity 1, but a Gaussian merged with a copy of itself comes back with
  twice the opacity (clamped at 1). Which one the hierarchy uses is its ``opacity_rule``; docs/lod.md gives
  the measured difference.

Groups are contiguous segments of the inputs (``starts`` as for ``np.add.reduceat``); everything is
vectorised over groups and computed in float64 (the covariance in two passes: mean first, then the spread
about it, so large coordinates do not cancel). ``tests/recon/lod/test_merge.py`` checks the rule: the
identity cases, and the moments against a weighted sample of the children.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from rasterizer.quaternions import quat_to_rotmat_np
from recon.core.splat_data import SplatData, normalized_quats, sigmoid

MIN_OPACITY = 1e-6  # merged opacities are kept inside (MIN_OPACITY, 1 - MIN_OPACITY) so their logit is finite
MIN_VARIANCE = 1e-24  # eigenvalues below this (degenerate merges) are raised to it before the log-scale
SYM6 = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))  # packed symmetric 3 x 3: xx, xy, xz, yy, yz, zz


@dataclass
class Moments:
    """Gaussians as the merge rule sees them: means [N, 3], covariances packed [N, 6] (xx, xy, xz, yy, yz,
    zz), opacities [N] (activated), all float64; SH [N, K, 3] float32 (summed in float64)."""

    means: np.ndarray
    covs: np.ndarray
    opacities: np.ndarray
    sh: np.ndarray

    def __len__(self) -> int:
        return int(self.means.shape[0])

    def take(self, idx) -> "Moments":
        """The rows ``idx`` (indices or mask)."""
        return Moments(self.means[idx], self.covs[idx], self.opacities[idx], self.sh[idx])


def pack_sym(mats: np.ndarray) -> np.ndarray:
    """[N, 3, 3] symmetric -> [N, 6] (xx, xy, xz, yy, yz, zz)."""
    return np.stack([mats[:, i, j] for i, j in SYM6], axis=1)


def unpack_sym(packed: np.ndarray) -> np.ndarray:
    """[N, 6] -> [N, 3, 3] symmetric."""
    out = np.empty((packed.shape[0], 3, 3), dtype=packed.dtype)
    for col, (i, j) in enumerate(SYM6):
        out[:, i, j] = packed[:, col]
        out[:, j, i] = packed[:, col]
    return out


def covariances(data: SplatData, chunk: int = 1 << 18) -> np.ndarray:
    """Packed world covariances [N, 6] float64 of a model: R diag(exp(2 log_scales)) R^T, R from the
    normalised (w, x, y, z) quaternions."""
    out = np.empty((len(data), 6), dtype=np.float64)
    for start in range(0, len(data), chunk):
        sl = slice(start, min(len(data), start + chunk))
        R = quat_to_rotmat_np(normalized_quats(data.quats[sl]))
        var = np.exp(2.0 * data.log_scales[sl].astype(np.float64))
        out[sl] = pack_sym(np.einsum("nij,nj,nkj->nik", R, var, R))
    return out


def moments_of(data: SplatData) -> Moments:
    """The :class:`Moments` of a model's Gaussians."""
    return Moments(data.means.astype(np.float64), covariances(data), sigmoid(data.logit_opacities), data.sh)


def area_proxy(covs: np.ndarray) -> np.ndarray:
    """[N] sqrt of the second invariant of packed covariances [N, 6] (sum of principal 2 x 2 minors)."""
    xx, xy, xz, yy, yz, zz = covs.T
    i2 = xx * yy - xy * xy + xx * zz - xz * xz + yy * zz - yz * yz
    return np.sqrt(np.maximum(i2, 0.0))


def group_ids(starts: np.ndarray, n: int) -> np.ndarray:
    """[n] index of the group of each row, for contiguous groups beginning at ``starts`` (increasing, from 0)."""
    counts = np.diff(np.append(starts, n))
    return np.repeat(np.arange(len(starts)), counts)


OPACITY_RULES = ("coverage", "mass")
DEFAULT_SPREAD = 0.3  # t of the drawn covariance S_in + t S_out (module docstring; 1: the moments matched): the
# hierarchy's and the LOD export's default; the budgeted cuts render faster for a little PSNR (docs/lod.md, Targets)
DEFAULT_OPACITY_RULE = "mass"  # the hierarchy's and the LOD export's default: far test views at a 10 % budget lose
# less with it (docs/lod.md, Targets); "coverage" keeps a Gaussian merged with its own copy unchanged


class Merged(NamedTuple):
    """What :func:`merge_groups` returns: one row per group, the same means and SH in both."""

    matched: Moments  # the moments matched (covariance S = S_in + S_out, the rule's opacity for S): what a coarser
    # merge reads
    drawn: Moments  # the Gaussian drawn for the group: covariance S_in + t S_out, the rule's opacity for it (the
    # matched rows themselves for t = 1)


def merge_groups(m: Moments, starts: np.ndarray, opacity_rule: str = "coverage", spread: float = 1.0) -> Merged:
    """Merge each contiguous group of ``m`` (beginning at ``starts``) into one Gaussian by the rule of the
    module docstring (``opacity_rule`` "mass": the footprint is the merged one alone), drawn with spread t =
    ``spread`` (0 < t <= 1). Returns :class:`Merged` (matched, drawn), one row per group each."""
    if opacity_rule not in OPACITY_RULES:
        raise ValueError(f"opacity rule {opacity_rule!r}: choose one of {', '.join(OPACITY_RULES)}")
    if not 0.0 < spread <= 1.0:
        raise ValueError(f"merge spread {spread!r}: must lie in (0, 1]")
    n = len(m)
    gid = group_ids(starts, n)
    areas = area_proxy(m.covs)
    w = m.opacities * areas
    W = np.add.reduceat(w, starts)
    flat = W <= 0.0  # all children transparent or degenerate: plain averages
    if flat.any():
        w = np.where(flat[gid], 1.0, w)
        W = np.add.reduceat(w, starts)
    wn = w / W[gid]
    mean = np.add.reduceat(wn[:, None] * m.means, starts)
    d = m.means - mean[gid]
    within = np.add.reduceat(wn[:, None] * m.covs, starts)
    between = np.add.reduceat(wn[:, None] * np.stack([d[:, i] * d[:, j] for i, j in SYM6], axis=1), starts)
    sh = np.empty((len(starts),) + m.sh.shape[1:], dtype=np.float32)
    for k in range(m.sh.shape[1]):  # one coefficient at a time: no float64 copy of all SH
        sh[:, k] = np.add.reduceat(wn[:, None] * m.sh[:, k], starts)
    coverage = np.add.reduceat(m.opacities * areas, starts)
    mean_opacity = np.add.reduceat(m.opacities, starts) / np.diff(np.append(starts, n))
    child_area = np.add.reduceat(areas, starts) if opacity_rule == "coverage" else None
    cov = within + between
    matched = Moments(mean, cov, rule_opacity(coverage, cov, child_area, mean_opacity), sh)
    if spread == 1.0:
        return Merged(matched, matched)  # one object twice: callers read the rows, never write into them
    cov_t = within + spread * between
    return Merged(matched, Moments(mean, cov_t, rule_opacity(coverage, cov_t, child_area, mean_opacity), sh))


def rule_opacity(coverage: np.ndarray, cov: np.ndarray, child_area: np.ndarray | None,
                 mean_opacity: np.ndarray) -> np.ndarray:
    """[G] opacity of merged Gaussians of covariances ``cov`` [G, 6] carrying the children's ``coverage``
    sum a_i A_i [G]: coverage / footprint, the footprint A(cov) (rule "mass", ``child_area`` None) or
    max(A(cov), sum A_i) (rule "coverage", ``child_area`` = sum A_i); ``mean_opacity`` where the footprint is
    0. Kept inside (MIN_OPACITY, 1 - MIN_OPACITY)."""
    footprint = area_proxy(cov)
    if child_area is not None:
        footprint = np.maximum(footprint, child_area)
    opacity = np.divide(coverage, footprint, out=np.zeros_like(coverage), where=footprint > 0)
    opacity = np.where(footprint > 0, opacity, mean_opacity)
    return np.clip(opacity, MIN_OPACITY, 1.0 - MIN_OPACITY)


def rotmats_to_quats(R: np.ndarray) -> np.ndarray:
    """Rotation matrices [N, 3, 3] -> unit quaternions [N, 4] (w, x, y, z), w >= 0 (vectorised Shepperd:
    the largest of 4w^2, 4x^2, 4y^2, 4z^2 picks the stable formula per row)."""
    m00, m11, m22 = R[:, 0, 0], R[:, 1, 1], R[:, 2, 2]
    cand = np.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], axis=1)
    pick = np.argmax(cand, axis=1)
    s = 2.0 * np.sqrt(np.maximum(cand[np.arange(len(R)), pick], 1e-300))
    a, b = R[:, 2, 1] - R[:, 1, 2], R[:, 0, 2] - R[:, 2, 0]
    c = R[:, 1, 0] - R[:, 0, 1]
    p01, p02, p12 = R[:, 0, 1] + R[:, 1, 0], R[:, 0, 2] + R[:, 2, 0], R[:, 1, 2] + R[:, 2, 1]
    rows = [
        np.stack([0.25 * s, a / s, b / s, c / s], axis=1),
        np.stack([a / s, 0.25 * s, p01 / s, p02 / s], axis=1),
        np.stack([b / s, p01 / s, 0.25 * s, p12 / s], axis=1),
        np.stack([c / s, p02 / s, p12 / s, 0.25 * s], axis=1),
    ]
    q = np.choose(pick[:, None], rows)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return np.where(q[:, :1] < 0, -q, q)


def quats_scales_of(covs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Packed covariances [N, 6] -> (quaternions [N, 4] wxyz, log-scales [N, 3]): the eigenvectors as a proper
    rotation (det +1) and half the log of the eigenvalues (floored at :data:`MIN_VARIANCE`)."""
    vals, vecs = np.linalg.eigh(unpack_sym(covs))
    vecs[:, :, 2] *= np.sign(np.linalg.det(vecs))[:, None]
    return rotmats_to_quats(vecs), 0.5 * np.log(np.maximum(vals, MIN_VARIANCE))


def to_splats(m: Moments, antialiased: bool = False) -> SplatData:
    """:class:`Moments` -> :class:`SplatData` (raw parameters: logit opacities, log-scales, wxyz quats)."""
    quats, log_scales = quats_scales_of(m.covs)
    a = np.clip(m.opacities, MIN_OPACITY, 1.0 - MIN_OPACITY)
    return SplatData(m.means, quats, log_scales, np.log(a) - np.log1p(-a), m.sh, antialiased)


def merge_splats(data: SplatData, opacity_rule: str = "coverage") -> SplatData:
    """All of ``data``'s Gaussians merged into one (a one-row model)."""
    return to_splats(merge_groups(moments_of(data), np.array([0]), opacity_rule).drawn, data.antialiased)
