"""The optional pose-dependent correction of bound Gaussians (``--meshgs.pose-mlp-width N``; off by default).

A small MLP maps the pose and a Gaussian's place on the template to a correction of its triangle-local
parameters, so wrinkles and bulges that skinning alone cannot produce can follow the pose:

- **pose features** ``p`` [9 (J - 1)]: ``R_j - I`` of every non-root joint's rotation matrix, flattened
  (continuous, free of the quaternion sign, exactly 0 in the rest pose; the root's rotation turns the whole
  avatar and says nothing about its shape);
- **Gaussian features** ``e`` [N, 3 + 6 L]: the Gaussian's foot point on the rest-pose template (barycentric
  corners, no gradient), scaled into [-1, 1] by the template's bounding box, with L sine / cosine
  frequencies (``x, sin(2^l pi x), cos(2^l pi x)``);
- **network**: a pose code ``c(p) = g(p) - g(0)`` (g: two layers of ``width``), Gaussian features
  ``phi(e)`` (two layers of ``width``, ReLU) and a head without bias ``o = W (phi(e) * c(p))`` [N, 6]. So the
  correction is exactly zero in the rest pose (splats.ply and the export's rest pose are untouched) and,
  with the head initialised to zero, at the start of training;
- **corrections** (:func:`apply_correction`): the barycentric coordinates move by
  ``(-d1 - d2, d1, d2)``, ``d = BARY_SHIFT tanh(o[:2])`` (the foot point slides in the triangle's plane);
  ``o[2]`` is added to the raw normal offset *inside* the model's ``max_offset tanh`` (the binding bound
  holds in every pose); the log-scales move by ``SCALE_SHIFT tanh(o[3:6])``.

The trainer adds ``pose_mlp_reg * mean(o^2)`` (:meth:`recon.models.meshgs.MeshGaussians.loss_terms`).
Plain PyTorch, differentiable (layer 2).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from recon.avatar.quaternions import to_rotmat

BARY_SHIFT = 0.1  # largest barycentric shift of a corrected foot point (per coordinate pair)
SCALE_SHIFT = 0.3  # largest change of a log-scale
OUTPUTS = 6  # d_bary (2), d_raw_offset (1), d_log_scales (3)


def pose_features(rotations: Tensor) -> Tensor:
    """[max(9 (J - 1), 1)] ``R_j - I`` of the non-root joints of ``rotations`` [J, 4] wxyz, flattened (zeros of
    one entry for a single-joint skeleton)."""
    if rotations.shape[0] < 2:
        return rotations.new_zeros(1)
    R = to_rotmat(rotations[1:])
    return (R - torch.eye(3, dtype=R.dtype, device=R.device)).reshape(-1)


def gaussian_features(points: Tensor, lo: Tensor, hi: Tensor, frequencies: int) -> Tensor:
    """[N, 3 + 6 L] features of ``points`` [N, 3] in the box [lo, hi] [3]: x in [-1, 1] and its sines and
    cosines at 2^l pi, l < ``frequencies``."""
    x = 2 * (points - lo) / (hi - lo).clamp(min=1e-12) - 1
    scaled = torch.cat([x * (math.pi * 2 ** l) for l in range(frequencies)], dim=-1)
    return torch.cat([x, torch.sin(scaled), torch.cos(scaled)], dim=-1)


class PoseOffsetMLP(torch.nn.Module):
    """The correction network (module docstring): ``forward(pose [P], features [N, E]) -> [N, 6]``."""

    def __init__(self, num_joints: int, width: int, frequencies: int = 4):
        super().__init__()
        if width < 1:
            raise ValueError(f"PoseOffsetMLP: width must be >= 1, got {width}")
        self.frequencies = int(frequencies)
        pose_dim = max(9 * (num_joints - 1), 1)
        feat_dim = 3 + 6 * self.frequencies
        self.pose = torch.nn.Sequential(torch.nn.Linear(pose_dim, width), torch.nn.Tanh(),
                                        torch.nn.Linear(width, width))
        self.gauss = torch.nn.Sequential(torch.nn.Linear(feat_dim, width), torch.nn.ReLU(),
                                         torch.nn.Linear(width, width), torch.nn.ReLU())
        self.head = torch.nn.Linear(width, OUTPUTS, bias=False)
        torch.nn.init.zeros_(self.head.weight)  # no correction at the start

    def pose_code(self, pose: Tensor) -> Tensor:
        """[width] ``g(p) - g(0)``: zero in the rest pose."""
        return self.pose(pose) - self.pose(torch.zeros_like(pose))

    def forward(self, pose: Tensor, features: Tensor) -> Tensor:
        return self.head(self.gauss(features) * self.pose_code(pose))


def apply_correction(out: Tensor, bary: Tensor, raw_offsets: Tensor, log_scales: Tensor
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """(bary [N, 3], raw offsets [N], log-scales [N, 3]) corrected by the network's output ``out`` [N, 6]
    (module docstring; the barycentric coordinates still sum to 1)."""
    d = BARY_SHIFT * torch.tanh(out[:, :2])
    shift = torch.cat([-d.sum(-1, keepdim=True), d], dim=-1)
    return bary + shift, raw_offsets + out[:, 2], log_scales + SCALE_SHIFT * torch.tanh(out[:, 3:6])
