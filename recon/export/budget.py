"""Splat and SH budgets for export: keep the most important splats, truncate SH, device presets.

Importance of a splat (higher = keep):

* with cameras (a run whose dataset is available): ``opacity x footprint``, the footprint being the
  sum over (up to :data:`MAX_IMPORTANCE_VIEWS`, evenly spaced) training views of the area in pixels
  of the projected 3-sigma ellipse (EWA projection, 0.3 px low-pass as in 3DGS), counted only where
  the centre is in front of the camera and projects inside the image (with a 10 % margin), and
  capped at the image area;
* otherwise: ``opacity x volume`` = ``sigmoid(logit_opacity) * exp(sum(log_scales))``.

Device presets (``--target``), from the field's device guidance (Spark viewer: Quest 3 <= 1M splats,
Android 1-2M, iPhone 1-3M, desktop 1-5M; web about 1-2M; Vision Pro like iPhone). The SH degree
budget trades view-dependent colour for memory, bandwidth and per-splat shading cost: SH degree 3 is
45 of the 59 floats of a PLY splat and 45 of the 64 bytes of an SPZ splat, and stereo headsets shade
every splat twice per frame.

=========  ==========  =========  =========================================================
target     max splats  SH degree  reasoning
=========  ==========  =========  =========================================================
desktop     5,000,000  3          discrete GPUs: top of the 1-5M range, full SH
web         1,500,000  1          middle of ~1-2M; download size dominates (SPZ ~25 B/splat
                                  at SH 1 vs ~64 B/splat at SH 3), unknown client GPU
android     1,500,000  1          middle of 1-2M; mobile GPUs vary widely, memory-bound
iphone      2,000,000  1          middle of 1-3M; unified memory, but still a phone
phone       1,500,000  1          any phone (Android or iPhone): the lower of the two
visionpro   2,000,000  1          "similar to iPhone"; stereo, so SH kept low
quest3      1,000,000  0          hard ceiling 1M; stereo at 72-120 Hz on a mobile GPU
=========  ==========  =========  =========================================================

Explicit ``--max-splats`` / ``--sh-degree`` override the preset's values. SH is never raised: a
budget above the model's degree keeps the model's degree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rasterizer.camera import Camera
from rasterizer.quaternions import quat_to_rotmat_np
from recon.core.splat_data import SplatData, normalized_quats, sigmoid
from recon.core.errors import UsageError

MAX_IMPORTANCE_VIEWS = 64
LOW_PASS_PX = 0.3
NEAR = 0.01


@dataclass(frozen=True)
class DeviceBudget:
    """A device preset: the most splats and the highest SH degree to ship."""

    max_splats: int
    sh_degree: int
    note: str


DEVICE_BUDGETS: dict[str, DeviceBudget] = {
    "desktop": DeviceBudget(5_000_000, 3, "discrete GPU: 1-5M splats, full SH"),
    "web": DeviceBudget(1_500_000, 1, "browser: ~1-2M splats, download size dominates"),
    "android": DeviceBudget(1_500_000, 1, "Android: 1-2M splats"),
    "iphone": DeviceBudget(2_000_000, 1, "iPhone: 1-3M splats"),
    "phone": DeviceBudget(1_500_000, 1, "phone (Android or iPhone): 1-2M splats"),
    "visionpro": DeviceBudget(2_000_000, 1, "Vision Pro: like iPhone, stereo"),
    "quest3": DeviceBudget(1_000_000, 0, "Quest 3: <= 1M splats, stereo on a mobile GPU"),
}
TARGETS = tuple(DEVICE_BUDGETS)


@dataclass(frozen=True)
class BudgetResult:
    """What :func:`apply_budget` did."""

    input_splats: int
    kept_splats: int
    input_sh_degree: int
    sh_degree: int
    importance: str  # "footprint" | "volume" | "none" (nothing dropped)
    max_splats: int | None
    target: str | None

    @property
    def dropped(self) -> int:
        return self.input_splats - self.kept_splats


def volume_importance(data: SplatData) -> np.ndarray:
    """float64 [N]: sigmoid(logit_opacity) * exp(sum of log_scales)."""
    log_vol = data.log_scales.astype(np.float64).sum(axis=1)
    return sigmoid(data.logit_opacities) * np.exp(np.minimum(log_vol, 700.0))


def footprint_pixels(data: SplatData, cameras: Sequence[Camera],
                     max_views: int = MAX_IMPORTANCE_VIEWS, chunk: int = 262_144) -> np.ndarray:
    """float64 [N]: summed projected 3-sigma ellipse area (pixels) over the views (see module doc)."""
    n = len(data)
    total = np.zeros(n, dtype=np.float64)
    for start in range(0, n, chunk):
        sl = slice(start, min(n, start + chunk))
        R = quat_to_rotmat_np(normalized_quats(data.quats[sl]))  # zero/NaN quats: identity
        s2 = np.exp(2.0 * data.log_scales[sl].astype(np.float64))
        cov = np.einsum("nij,nj,nkj->nik", R, s2, R)  # R diag(s^2) R^T
        total[sl] = covariance_footprint(data.means[sl].astype(np.float64), cov, cameras, max_views)
    return total


def covariance_footprint(means: np.ndarray, cov: np.ndarray, cameras: Sequence[Camera],
                         max_views: int = MAX_IMPORTANCE_VIEWS) -> np.ndarray:
    """float64 [N]: summed projected 3-sigma ellipse area (pixels) over the views of Gaussians with world
    ``means`` [N, 3] and covariances ``cov`` [N, 3, 3] (see the module docstring)."""
    cams = list(cameras)
    if len(cams) > max_views:
        cams = [cams[i] for i in np.linspace(0, len(cams) - 1, max_views).round().astype(int)]
    total = np.zeros(len(means), dtype=np.float64)
    for cam in cams:
        W = cam.world_to_cam_numpy()
        K = cam.K_numpy()
        p = means @ W[:3, :3].T + W[:3, 3]
        z = p[:, 2]
        front = z > NEAR
        zs = np.where(front, z, 1.0)
        fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
        u, v = fx * p[:, 0] / zs + cx, fy * p[:, 1] / zs + cy
        mx, my = 0.1 * cam.width, 0.1 * cam.height
        inside = front & (u > -mx) & (u < cam.width + mx) & (v > -my) & (v < cam.height + my)
        if not inside.any():
            continue
        J = np.zeros((len(z), 2, 3))
        J[:, 0, 0] = fx / zs
        J[:, 0, 2] = -fx * p[:, 0] / zs**2
        J[:, 1, 1] = fy / zs
        J[:, 1, 2] = -fy * p[:, 1] / zs**2
        JW = J @ W[:3, :3]
        c2 = np.einsum("nij,njk,nlk->nil", JW, cov, JW)
        a = c2[:, 0, 0] + LOW_PASS_PX
        c = c2[:, 1, 1] + LOW_PASS_PX
        b = c2[:, 0, 1]
        det = np.maximum(a * c - b * b, 0.0)
        area = np.minimum(9.0 * np.pi * np.sqrt(det), float(cam.width * cam.height))
        total += np.where(inside, area, 0.0)
    return total


def footprint_importance(data: SplatData, cameras: Sequence[Camera]) -> np.ndarray:
    """float64 [N]: opacity x footprint over the training views."""
    return sigmoid(data.logit_opacities) * footprint_pixels(data, cameras)


def importance(data: SplatData, cameras: Sequence[Camera] | None = None) -> tuple[np.ndarray, str]:
    """(scores [N], "footprint" or "volume"): footprint with cameras, else volume."""
    if cameras:
        return footprint_importance(data, cameras), "footprint"
    return volume_importance(data), "volume"


def top_k_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, returned in increasing index order (file order kept).
    Ties are broken towards lower indices, so the result is deterministic."""
    n = len(scores)
    if k >= n:
        return np.arange(n)
    order = np.lexsort((np.arange(n), -np.asarray(scores, np.float64)))  # by score desc, index asc
    return np.sort(order[:k])


def resolve_budget(target: str | None, max_splats: int | None,
                   sh_degree: int | None) -> tuple[int | None, int | None]:
    """(max splats, SH degree) from a preset and explicit overrides (explicit values win)."""
    if target is not None:
        if target not in DEVICE_BUDGETS:
            raise UsageError(f"unknown target {target!r} (known: {', '.join(TARGETS)})")
        preset = DEVICE_BUDGETS[target]
        max_splats = preset.max_splats if max_splats is None else max_splats
        sh_degree = preset.sh_degree if sh_degree is None else sh_degree
    if max_splats is not None and max_splats < 1:
        raise UsageError(f"--max-splats must be >= 1, got {max_splats}")
    if sh_degree is not None and not 0 <= sh_degree <= 3:
        raise UsageError(f"--sh-degree must be 0..3, got {sh_degree}")
    return max_splats, sh_degree


def apply_budget(data: SplatData, max_splats: int | None = None, sh_degree: int | None = None,
                 cameras: Sequence[Camera] | None = None,
                 target: str | None = None, rank=None) -> tuple[SplatData, BudgetResult]:
    """Keep the ``max_splats`` most important splats and truncate SH to ``sh_degree``.

    ``target`` fills in whichever of the two is None from :data:`DEVICE_BUDGETS`. The model should
    be free of NaN/Inf (``drop_nonfinite`` first) so that scores are meaningful. ``rank(data, cameras)
    -> (scores [N], name)`` scores the splats (default :func:`importance`; 4D models pass
    :func:`recon.export.budget4d.importance4` with a :class:`SpaceTimeData`, which has the same
    ``subset`` / ``with_sh_degree``).
    """
    max_splats, sh_degree = resolve_budget(target, max_splats, sh_degree)
    out, how = data, "none"
    if max_splats is not None and len(data) > max_splats:
        scores, how = (rank or importance)(data, cameras)
        scores = np.where(np.isfinite(scores), scores, -np.inf)
        out = data.subset(top_k_indices(scores, max_splats))
    if sh_degree is not None and sh_degree < out.sh_degree:
        out = out.with_sh_degree(sh_degree)
    return out, BudgetResult(len(data), len(out), data.sh_degree, out.sh_degree, how,
                             max_splats, target)
