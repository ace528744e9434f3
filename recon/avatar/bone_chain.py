"""A procedural bone chain and smooth skinning weights for an unrigged mesh (e.g. spot), and random poses.

The chain runs along the mesh's principal axis a (the eigenvector of the largest vertex variance) through
the vertices' mean c: the root joint 0 sits at c, ``per_side`` joints follow towards each end (joints 1..n
towards +a, n+1..2n towards -a, each the child of the previous, the first of each side the child of the
root), evenly spaced up to 70 % of the half-length. Along s = (v - c) . a the mesh is cut at the non-root
joints into 2n + 1 slabs: the root owns the middle one, each other joint the slab beyond it. A vertex's
weights are the slab memberships softened by logistic ramps of width ``blend`` x the joint spacing:
``w_r = sigma((s - b_r) / tau) - sigma((s - b_{r+1}) / tau)`` over the sorted cuts b (sum exactly 1), then
the 4 largest are kept and renormalised (what glTF's JOINTS_0 / WEIGHTS_0 hold).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from recon.avatar.quaternions import axis_angle
from recon.avatar.skinning import Skeleton

MAX_INFLUENCES = 4
CHAIN_REACH = 0.7  # joints up to this fraction of the half-length along the axis


def principal_axes(vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean [3], axes [3, 3] rows by decreasing variance) of ``vertices`` [V, 3]."""
    c = vertices.mean(axis=0)
    _, vecs = np.linalg.eigh(np.cov((vertices - c).T))
    return c, vecs[:, ::-1].T.copy()


def bone_chain(vertices: np.ndarray, per_side: int = 2, blend: float = 0.15) -> tuple[Skeleton, np.ndarray]:
    """(skeleton of 2 ``per_side`` + 1 joints, weights [V, J] float32, at most 4 non-zero per row, rows sum
    to 1) for ``vertices`` [V, 3] (see the module docstring)."""
    if per_side < 1:
        raise ValueError(f"bone_chain: per_side must be >= 1, got {per_side}")
    vertices = np.asarray(vertices, dtype=np.float64)
    c, axes = principal_axes(vertices)
    a = axes[0]
    s = (vertices - c) @ a
    head, tail = s.max() * CHAIN_REACH, s.min() * CHAIN_REACH
    steps = np.arange(1, per_side + 1) / per_side
    along = np.concatenate([[0.0], head * steps, tail * steps])  # joint positions along a
    rest = c + along[:, None] * a
    parents = [-1] + [0 if k == 0 else k for k in range(per_side)] + [0 if k == 0 else per_side + k
                                                                       for k in range(per_side)]
    order = np.argsort(along)  # slabs left to right; joint order[r] owns slab r
    cuts = np.sort(along[1:])  # non-root joints cut the axis
    tau = blend * min(abs(head), abs(tail)) / per_side
    sig = 1.0 / (1.0 + np.exp(-(s[:, None] - cuts[None, :]) / tau))  # [V, 2n]
    upper = np.concatenate([np.ones((len(s), 1)), sig], axis=1)
    lower = np.concatenate([sig, np.zeros((len(s), 1))], axis=1)
    slab = upper - lower  # [V, 2n + 1] memberships of the slabs left to right
    # slab r (left to right) belongs to the joint at its inner end, which is the r-th joint along the axis
    # (the root at 0 owns the middle slab, a joint left of it the slab on its left, right of it the one on its right)
    owners = [int(j) for j in order]
    weights = np.zeros((len(s), len(along)))
    for r, j in enumerate(owners):
        weights[:, j] += slab[:, r]
    weights = keep_largest(weights, MAX_INFLUENCES)
    names = ["root"] + [f"front_{k + 1}" for k in range(per_side)] + [f"back_{k + 1}" for k in range(per_side)]
    skeleton = Skeleton(torch.tensor(parents, dtype=torch.int64), torch.tensor(rest, dtype=torch.float32), names)
    return skeleton, weights.astype(np.float32)


def keep_largest(weights: np.ndarray, count: int) -> np.ndarray:
    """``weights`` [V, J] with all but the ``count`` largest of each row zeroed, rows renormalised to 1."""
    if weights.shape[1] > count:
        drop = np.argsort(weights, axis=1)[:, : weights.shape[1] - count]
        weights = weights.copy()
        np.put_along_axis(weights, drop, 0.0, axis=1)
    return weights / np.maximum(weights.sum(axis=1, keepdims=True), 1e-12)


def random_poses(skeleton: Skeleton, count: int, max_angle_deg: float, bend_axes: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
    """[count, J, 4] wxyz joint rotations: the root at rest, every other joint bent by an angle uniform in
    [-max, max] degrees about a random unit axis in the span of ``bend_axes`` [2, 3] (directions across the
    chain)."""
    J = skeleton.num_joints
    out = np.zeros((count, J, 4))
    out[..., 0] = 1.0
    for p in range(count):
        for j in range(1, J):
            phi = rng.uniform(0, 2 * math.pi)
            axis = math.cos(phi) * bend_axes[0] + math.sin(phi) * bend_axes[1]
            angle = math.radians(rng.uniform(-max_angle_deg, max_angle_deg))
            out[p, j] = axis_angle(torch.tensor(axis), torch.tensor(angle)).numpy()
    return out
