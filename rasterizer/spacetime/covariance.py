"""4D covariances and their conditioning on time (the time-independent half of slicing).

Sigma4 = R S S^T R^T with R = L(q_l) R(q_r) (:mod:`.rotation`) and S = diag(scales4), axes
(x, y, z, t). Conditioning the 4D Gaussian on a time t gives a 3D Gaussian with

    mean3(t) = mu_xyz + v (t - mu_t),   v = Sigma_xyz,t / Sigma_tt   (the velocity, [N, 3])
    Sigma3   = Sigma_xyz,xyz - Sigma_xyz,t Sigma_t,xyz / Sigma_tt       (independent of t)

and a temporal factor exp(-0.5 (t - mu_t)^2 / Sigma_tt) (:mod:`.slicing` applies these at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .rotation import normalize_quats, rotmat4_from_quats, rotmat4_from_unit_quats

# the 10 distinct entries of the symmetric Sigma4 as (row, column) pairs: the 6 of Sigma_xyz,xyz
# (00, 01, 02, 11, 12, 22), then Sigma_xyz,t (03, 13, 23), then Sigma_tt (33)
_ROWS = (0, 0, 0, 1, 1, 2, 0, 1, 2, 3)
_COLS = (0, 1, 2, 1, 2, 2, 3, 3, 3, 3)
# position of entry (i, j) of a symmetric 3x3 among the first 6, row-major over all 9
_SYM3 = (0, 1, 2, 1, 3, 4, 2, 4, 5)


def covariance_4d(quats_left: Tensor, quats_right: Tensor, scales4: Tensor) -> Tensor:
    """Sigma4 = R S S^T R^T [N, 4, 4] from quaternions [N, 4] (any non-zero norm) and activated
    scales [N, 4] (x, y, z, t). The plain definition; slicing uses :func:`condition_on_time`."""
    m = rotmat4_from_quats(quats_left, quats_right) * scales4[:, None, :]
    return m @ m.transpose(-1, -2)


@dataclass(frozen=True)
class TimeConditioned:
    """The time-independent part of slicing N 4D Gaussians: covars [N, 3, 3] (Sigma3, symmetric),
    velocities [N, 3] (Sigma_xyz,t / Sigma_tt: world units per unit time) and time_variances [N]
    (Sigma_tt). Same dtype and device as the inputs; differentiable."""

    covars: Tensor
    velocities: Tensor
    time_variances: Tensor


def condition_on_time(quats_left: Tensor, quats_right: Tensor, scales4: Tensor) -> TimeConditioned:
    """Sigma3, velocity and Sigma_tt of N 4D Gaussians (quaternions [N, 4], any non-zero norm;
    activated scales [N, 4]), without forming Sigma4: M = R S [N, 4, 4], then the 10 needed dot
    products of its rows at once (a batched 4x4 matmul costs several times more in PyTorch)."""
    n = scales4.shape[0]
    m = rotmat4_from_unit_quats(normalize_quats(quats_left), normalize_quats(quats_right)) * scales4[:, None, :]
    rows = torch.tensor(_ROWS, device=m.device)
    cols = torch.tensor(_COLS, device=m.device)
    sigma = (m[:, rows] * m[:, cols]).sum(-1)  # [N, 10]
    cross, time_var = sigma[:, 6:9], sigma[:, 9]
    velocities = cross / time_var[:, None]
    # Sigma3 entry (i, j) = Sigma_ij - Sigma_it v_j for the 6 distinct pairs
    first = torch.tensor(_ROWS[:6], device=m.device)
    second = torch.tensor(_COLS[:6], device=m.device)
    sym6 = sigma[:, :6] - cross[:, first] * velocities[:, second]
    covars = sym6[:, torch.tensor(_SYM3, device=m.device)].reshape(n, 3, 3)
    return TimeConditioned(covars=covars, velocities=velocities, time_variances=time_var)


def temporal_factor(dt: Tensor, time_variances: Tensor) -> Tensor:
    """exp(-0.5 dt^2 / Sigma_tt), elementwise ([N] each): the marginal of the 4D Gaussian at time
    mu_t + dt relative to its peak."""
    return torch.exp(-0.5 * dt * dt / time_variances)
