"""A pose-dependent corrective deformation for synthetic captures (``scripts/make_avatar_dataset.py
--corrective A``; docs/avatars.md).

Linear blend skinning moves a vertex by a weighted mean of its joints' rigid motions, so a bent elbow only
folds: the muscle bulge and flesh pile-up a real body shows at a bent joint are missing (what pose correctives,
e.g. SMPL's pose blend shapes, add). A capture rendered with plain LBS therefore holds nothing a pose-dependent
model could learn. This adds a smooth bulge along the posed surface normal near every bent joint, growing with
its bend angle::

    v' = LBS(v) + A * sum_{j >= 1} theta_j * exp(-|v - r_j|^2 / (2 sigma^2)) * n(v)

- ``v`` a rest-pose vertex, ``r_j`` joint j's rest position (both in the same world units);
- ``theta_j`` = 2 acos |w_j| in [0, pi], the bend angle (radians) of non-root joint j's local rotation
  (the root's rotation turns the whole body and deforms nothing);
- ``sigma`` the falloff radius (world units), ``A`` the bulge height per radian (world units; the dataset
  maker works in the unit sphere, so A is a fraction of the mesh's bounding radius);
- ``n(v)`` the unit normal of the LBS-posed mesh at the vertex.

It is zero in the rest pose, smooth (C-infinity in the vertex position; continuous in the pose), the same
function for training and unseen poses. Plain PyTorch (layer 2).
"""

from __future__ import annotations

import torch
from torch import Tensor

CORRECTIVE_SIGMA = 0.25  # falloff radius in the dataset maker's unit sphere (its joints are ~0.4 apart on spot)


def bend_angles(rotations: Tensor) -> Tensor:
    """[J] bend angles in radians of ``rotations`` [J, 4] wxyz local joint rotations: 2 acos |w| (0 for the
    identity), the root's (joint 0) set to 0."""
    w = rotations[:, 0].abs().clamp(max=1.0) / rotations.norm(dim=-1).clamp(min=1e-12)
    angles = 2 * torch.acos(w.clamp(max=1.0))
    return torch.cat([angles.new_zeros(1), angles[1:]])


def joint_falloff(rest_vertices: Tensor, rest_joints: Tensor, sigma: float) -> Tensor:
    """[V, J] the Gaussian falloff ``exp(-|v - r_j|^2 / (2 sigma^2))`` of rest vertices [V, 3] around the
    joints' rest positions [J, 3]."""
    d2 = torch.cdist(rest_vertices, rest_joints.to(rest_vertices)) ** 2
    return torch.exp(-d2 / (2 * sigma * sigma))


def bulge_heights(rest_vertices: Tensor, rest_joints: Tensor, rotations: Tensor, amplitude: float,
                  sigma: float = CORRECTIVE_SIGMA) -> Tensor:
    """[V] the bulge height of every vertex (world units): ``A sum_j theta_j falloff_vj`` (module docstring)."""
    return amplitude * joint_falloff(rest_vertices, rest_joints, sigma) @ bend_angles(rotations).to(rest_vertices)


def apply_corrective(posed_vertices: Tensor, posed_normals: Tensor, heights: Tensor) -> Tensor:
    """[V, 3] ``posed_vertices`` [V, 3] moved by ``heights`` [V] along the unit ``posed_normals`` [V, 3]."""
    return posed_vertices + heights[:, None] * posed_normals.to(posed_vertices)
