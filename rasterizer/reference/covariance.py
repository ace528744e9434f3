"""3D covariance from rotation and scale (plain PyTorch).

Sigma3 = R S S^T R^T with R from a (w, x, y, z) quaternion (normalised here) and S = diag(scales).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def quat_to_rotmat(quats: Tensor) -> Tensor:
    """Rotation matrices from quaternions.

    Args:
        quats: [..., 4] (w, x, y, z), any non-zero norm.
    Returns:
        [..., 3, 3] rotation matrices.
    """
    w, x, y, z = torch.unbind(F.normalize(quats, dim=-1), dim=-1)
    rows = [
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ]
    return torch.stack(rows, dim=-1).reshape(quats.shape[:-1] + (3, 3))


def covariance_from_quat_scale(quats: Tensor, scales: Tensor) -> Tensor:
    """World-space covariances.

    Args:
        quats: [N, 4] (w, x, y, z); scales: [N, 3] activated (positive) standard deviations.
    Returns:
        [N, 3, 3] symmetric covariances R S S^T R^T.
    """
    M = quat_to_rotmat(quats) * scales[..., None, :]  # R S: scale the columns
    return M @ M.transpose(-1, -2)
