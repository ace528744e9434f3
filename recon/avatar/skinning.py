"""A skeleton and linear-blend skinning (LBS) of mesh vertices from per-joint rotations.

Frames: the template (rest) mesh and the skeleton's rest joint positions are in world units. A pose is
``rotations`` [J, 4] wxyz, each joint's rotation relative to its parent (about the joint's rest position;
identity = rest pose), plus ``root_translation`` [3] added to the root. The global transform of joint j is
``G_j = G_parent(j) T(rest_j - rest_parent(j)) R_j`` (root: ``T(root_translation + rest_0) R_0``) and the
skinning matrix ``A_j = G_j T(-rest_j)`` maps rest-pose points to posed ones; a vertex moves to
``sum_j w_vj A_j v`` (weights per vertex sum to 1). All functions are differentiable PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from recon.avatar.quaternions import to_rotmat


@dataclass
class Skeleton:
    """A tree of J joints in topological order.

    Attributes:
        parents: [J] int64, parent index of each joint (-1 for the root, joint 0); parents[j] < j.
        rest_positions: [J, 3] float, joint positions in the rest pose (world units).
        names: J joint names.
    """

    parents: Tensor
    rest_positions: Tensor
    names: list[str]

    @property
    def num_joints(self) -> int:
        return int(self.parents.shape[0])


def rigid(R: Tensor, t: Tensor) -> Tensor:
    """[..., 4, 4] homogeneous transforms from rotations [..., 3, 3] and translations [..., 3]."""
    top = torch.cat([R, t[..., None]], dim=-1)
    bottom = torch.zeros(top.shape[:-2] + (1, 4), dtype=R.dtype, device=R.device)
    bottom[..., 0, 3] = 1
    return torch.cat([top, bottom], dim=-2)


def joint_transforms(skeleton: Skeleton, rotations: Tensor, root_translation: Tensor | None = None) -> Tensor:
    """[J, 4, 4] skinning matrices ``A_j`` (rest-pose point -> posed point; see the module docstring) of one
    pose: ``rotations`` [J, 4] wxyz local joint rotations, ``root_translation`` [3] (default zero)."""
    J = skeleton.num_joints
    if rotations.shape != (J, 4):
        raise ValueError(f"joint_transforms: rotations of shape {tuple(rotations.shape)}, expected ({J}, 4)")
    rest = skeleton.rest_positions.to(rotations)
    R = to_rotmat(rotations)
    parents = skeleton.parents.tolist()
    local_t = torch.stack([rest[j] - (rest[parents[j]] if parents[j] >= 0 else 0 * rest[j]) for j in range(J)])
    if root_translation is not None:
        local_t = torch.cat([local_t[:1] + root_translation.to(rotations), local_t[1:]])
    local = rigid(R, local_t)
    globals_: list[Tensor] = []
    for j in range(J):
        globals_.append(local[j] if parents[j] < 0 else globals_[parents[j]] @ local[j])
    G = torch.stack(globals_)
    eye = torch.eye(3, dtype=rotations.dtype, device=rotations.device).expand(J, 3, 3)
    return G @ rigid(eye, -rest)


def skin_vertices(rest_vertices: Tensor, weights: Tensor, transforms: Tensor) -> Tensor:
    """[V, 3] posed vertices: LBS of ``rest_vertices`` [V, 3] with ``weights`` [V, J] (rows sum to 1) and
    the skinning matrices ``transforms`` [J, 4, 4] of :func:`joint_transforms`."""
    blended = torch.einsum("vj,jab->vab", weights.to(transforms), transforms)  # [V, 4, 4]
    return torch.einsum("vab,vb->va", blended[:, :3, :3], rest_vertices.to(transforms)) + blended[:, :3, 3]


def pose_vertices(skeleton: Skeleton, rest_vertices: Tensor, weights: Tensor, rotations: Tensor,
                  root_translation: Tensor | None = None) -> Tensor:
    """[V, 3] the template posed by ``rotations`` [J, 4] and ``root_translation`` [3]."""
    return skin_vertices(rest_vertices, weights, joint_transforms(skeleton, rotations, root_translation))
