"""3D covariance from rotation and scale (plain PyTorch).

Sigma3 = R S S^T R^T with R from a (w, x, y, z) quaternion (normalised here, by
:func:`rasterizer.quaternions.quat_to_rotmat`, re-exported here) and S = diag(scales).
"""

from __future__ import annotations

from torch import Tensor

from rasterizer.quaternions import quat_to_rotmat

__all__ = ["covariance_from_quat_scale", "quat_to_rotmat"]


def covariance_from_quat_scale(quats: Tensor, scales: Tensor) -> Tensor:
    """World-space covariances.

    Args:
        quats: [N, 4] (w, x, y, z); scales: [N, 3] activated (positive) standard deviations.
    Returns:
        [N, 3, 3] symmetric covariances R S S^T R^T.
    """
    M = quat_to_rotmat(quats) * scales[..., None, :]  # R S: scale the columns
    return M @ M.transpose(-1, -2)
