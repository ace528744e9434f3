"""The skin file (skeleton + per-vertex weights, JSON) and pose records, with their reader checks.

Skin file (``skin.json``, docs/avatars.md)::

    {"format": "splatforge-skin", "version": 1, "vertex_count": V,
     "joints": [{"name": "root", "parent": -1, "rest_position": [x, y, z]}, ...],   # parents before children
     "influences": {"joints": [[j0, j1, j2, j3], ...], "weights": [[w0, w1, w2, w3], ...]}}   # V rows each

(glTF's JOINTS_0 / WEIGHTS_0 layout: up to 4 influences per vertex; weights >= 0, each row renormalised
to 1 on reading; a row of zeros is refused). A pose is ``{"joint_rotations": [[w, x, y, z] x J],
"root_translation": [x, y, z]}`` (wxyz, each joint relative to its parent, identity = rest pose).
Every problem is one line naming the file (:class:`AvatarInputError`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from recon.core.atomic import atomic_write_bytes
from recon.core.errors import SplatforgeError
from recon.core.limits import load_json, require_finite, with_path
from recon.avatar.skinning import Skeleton

SKIN_FORMAT = "splatforge-skin"
MAX_INFLUENCES = 8
UNIT_TOLERANCE = 1e-3  # joint rotations must be unit quaternions to this (|norm - 1|)


class AvatarInputError(SplatforgeError, ValueError):
    """A skinned mesh, skin file, pose or animation cannot be used; the message names the file."""


_error = with_path(AvatarInputError)


@dataclass
class Skin:
    """A skeleton and dense skinning weights [V, J] float32 (rows sum to 1)."""

    skeleton: Skeleton
    weights: torch.Tensor

    @property
    def num_joints(self) -> int:
        return self.skeleton.num_joints


def largest_influences(weights: torch.Tensor, count: int = 4, pad: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(joints [V, K] int64, weights [V, K] float64, rows renormalised to 1) of the K = min(``count``, J) largest
    influences per vertex of ``weights`` [V, J] (glTF's JOINTS_0 / WEIGHTS_0); ``pad``: K = ``count``, extra
    columns joint 0 with weight 0."""
    w = weights.detach().cpu().numpy().astype(np.float64)
    k = min(count, w.shape[1])
    idx = np.argsort(-w, axis=1, kind="stable")[:, :k]
    vals = np.take_along_axis(w, idx, axis=1)
    if pad and k < count:
        idx, vals = np.pad(idx, ((0, 0), (0, count - k))), np.pad(vals, ((0, 0), (0, count - k)))
    return idx.astype(np.int64), vals / vals.sum(1, keepdims=True)


def skin_document(skin: Skin) -> dict:
    """The JSON document of ``skin`` (the 4 largest influences per vertex kept, glTF style)."""
    idx, vals = largest_influences(skin.weights)
    sk = skin.skeleton
    joints = [{"name": n, "parent": int(p), "rest_position": [float(x) for x in r]}
              for n, p, r in zip(sk.names, sk.parents.tolist(), sk.rest_positions.tolist())]
    return {"format": SKIN_FORMAT, "version": 1, "vertex_count": int(idx.shape[0]), "joints": joints,
            "influences": {"joints": idx.tolist(), "weights": np.round(vals, 7).tolist()}}


def write_skin(path: Path, skin: Skin) -> None:
    """Write ``skin`` to ``path`` atomically (:func:`skin_document`)."""
    atomic_write_bytes(Path(path), json.dumps(skin_document(skin)).encode(), force=True)


def read_skin(path: Path, vertex_count: int | None = None) -> Skin:
    """The skin in ``path``; AvatarInputError naming the file for anything wrong, including a vertex count
    other than ``vertex_count`` (the template mesh's)."""
    doc = load_json(path, "skin file", _error)
    if not isinstance(doc, dict) or doc.get("format") != SKIN_FORMAT:
        raise AvatarInputError(f"{path}: not a splatforge skin file (no \"format\": \"{SKIN_FORMAT}\"); a mesh "
                               f"without a skin cannot be animated: write one with scripts/make_avatar_dataset.py")
    joints = doc.get("joints")
    if not isinstance(joints, list) or not joints:
        raise AvatarInputError(f"{path}: the skin has no joints")
    parents, rest, names = [], [], []
    for j, joint in enumerate(joints):
        try:
            parent, position = int(joint["parent"]), [float(x) for x in joint["rest_position"]]
        except (KeyError, TypeError, ValueError):
            raise AvatarInputError(f"{path}: joint {j} needs an integer \"parent\" and a \"rest_position\" of 3 "
                                   f"numbers") from None
        if not (parent == -1 if j == 0 else 0 <= parent < j) or len(position) != 3:
            raise AvatarInputError(f"{path}: joint {j}: parent {parent} (the root comes first with parent -1, "
                                   f"every other joint after its parent) or a rest_position of {len(position)} "
                                   f"numbers")
        parents.append(parent)
        rest.append(position)
        names.append(str(joint.get("name", f"joint_{j}")))
    rest_arr = np.asarray(rest, dtype=np.float64)
    require_finite(rest_arr, path, "joints.rest_position", _error)
    weights = _read_influences(path, doc.get("influences"), len(joints))
    if vertex_count is not None and weights.shape[0] != vertex_count:
        raise AvatarInputError(f"{path}: weights for {weights.shape[0]} vertices, but the template mesh has "
                               f"{vertex_count}; the skin belongs to another mesh")
    skeleton = Skeleton(torch.tensor(parents, dtype=torch.int64), torch.tensor(rest_arr, dtype=torch.float32), names)
    return Skin(skeleton, torch.tensor(weights, dtype=torch.float32))


def _read_influences(path, influences, num_joints: int) -> np.ndarray:
    """Dense [V, J] weights from the ``influences`` entry (see the module docstring)."""
    try:
        idx = np.asarray(influences["joints"], dtype=np.int64)
        val = np.asarray(influences["weights"], dtype=np.float64)
    except (KeyError, TypeError, ValueError):
        raise AvatarInputError(f"{path}: \"influences\" needs \"joints\" and \"weights\", equal-length lists of "
                               f"rows of numbers") from None
    return dense_weights(path, idx, val, num_joints)


def dense_weights(path, idx: np.ndarray, val: np.ndarray, num_joints: int, field: str = "influences") -> np.ndarray:
    """Dense [V, J] float64 weights, rows renormalised to 1, of V rows of joint indices ``idx`` [V, K] int64
    and weights ``val`` [V, K] (K in 1..MAX_INFLUENCES: glTF's JOINTS_n / WEIGHTS_n); AvatarInputError naming
    ``path`` and ``field`` for other shapes, non-finite or negative weights, an index outside the
    ``num_joints`` joints on a non-zero weight, or a row without weight."""
    if idx.ndim != 2 or idx.shape != val.shape or not 1 <= idx.shape[1] <= MAX_INFLUENCES or not len(idx):
        raise AvatarInputError(f"{path}: {field} of shapes {idx.shape} / {val.shape}: need V rows of the same "
                               f"1..{MAX_INFLUENCES} entries each")
    require_finite(val, path, f"{field} weights", _error)
    used = val != 0  # glTF: an unused influence has weight 0 (its index is then free)
    if used.any() and (idx[used].min() < 0 or idx[used].max() >= num_joints):
        bad = idx[used][(idx[used] < 0) | (idx[used] >= num_joints)][0]
        raise AvatarInputError(f"{path}: {field}: an influence names joint {int(bad)}, outside 0..{num_joints - 1}")
    if (val < 0).any():
        raise AvatarInputError(f"{path}: {field}: negative skinning weights")
    sums = val.sum(axis=1)
    if (sums <= 0).any():
        raise AvatarInputError(f"{path}: {field}: vertex {int(np.argmax(sums <= 0))} has no weight on any joint")
    dense = np.zeros((len(idx), num_joints))
    rows = np.repeat(np.arange(len(idx)), idx.shape[1])
    np.add.at(dense, (rows[used.ravel()], idx.ravel()[used.ravel()]), val.ravel()[used.ravel()])
    return dense / dense.sum(axis=1, keepdims=True)


def check_pose(rotations, translation, num_joints: int, where: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(rotations [J, 4] float32, root_translation [3] float32) of a pose record's values; AvatarInputError
    (``where``: the file and the pose's name) for a wrong joint count, non-finite or non-unit quaternions."""
    try:
        rot = np.asarray(rotations, dtype=np.float64)
        trans = np.zeros(3) if translation is None else np.asarray(translation, dtype=np.float64)
    except (TypeError, ValueError):
        raise AvatarInputError(f"{where}: joint_rotations must be a list of [w, x, y, z] and root_translation "
                               f"3 numbers") from None
    if rot.ndim != 2 or rot.shape[1] != 4:
        raise AvatarInputError(f"{where}: joint_rotations of shape {rot.shape}, expected ({num_joints}, 4) wxyz")
    if rot.shape[0] != num_joints:
        raise AvatarInputError(f"{where}: the pose has {rot.shape[0]} joint rotations but the skeleton has "
                               f"{num_joints} joints; the pose belongs to another skeleton")
    if trans.shape != (3,):
        raise AvatarInputError(f"{where}: root_translation of shape {trans.shape}, expected 3 numbers")
    if not (np.isfinite(rot).all() and np.isfinite(trans).all()):
        raise AvatarInputError(f"{where}: the pose holds NaN or infinite numbers")
    norms = np.linalg.norm(rot, axis=1)
    if (np.abs(norms - 1) > UNIT_TOLERANCE).any():
        raise AvatarInputError(f"{where}: joint rotation {int(np.argmax(np.abs(norms - 1)))} is not a unit "
                               f"quaternion (norm {norms[np.argmax(np.abs(norms - 1))]:.4g}); give wxyz unit "
                               f"quaternions")
    return torch.tensor(rot / norms[:, None], dtype=torch.float32), torch.tensor(trans, dtype=torch.float32)


def pose_record(rotations, translation) -> dict:
    """The JSON record of a pose: rotations [J, 4] wxyz, root translation [3]."""
    return {"joint_rotations": np.round(np.asarray(rotations, dtype=np.float64), 8).tolist(),
            "root_translation": [float(x) for x in np.asarray(translation, dtype=np.float64)]}


def read_animation(path: Path, num_joints: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], float]:
    """(poses [(rotations [J, 4], root_translation [3])], fps) of an animation clip file::

        {"fps": 24, "poses": [{"joint_rotations": [...], "root_translation": [...]}, ...]}

    AvatarInputError naming the file for anything wrong (no poses, wrong joint count, ...)."""
    doc = load_json(path, "animation clip", _error)
    poses = doc.get("poses") if isinstance(doc, dict) else None
    if not isinstance(poses, list) or not poses:
        raise AvatarInputError(f"{path}: an animation clip needs a non-empty \"poses\" list")
    fps = doc.get("fps", 24)
    if not isinstance(fps, (int, float)) or not math.isfinite(fps) or not 0 < fps <= 1000:
        raise AvatarInputError(f"{path}: fps {fps!r} must be a number in (0, 1000]")
    out = []
    for k, pose in enumerate(poses):
        if not isinstance(pose, dict):
            raise AvatarInputError(f"{path}: pose {k} is not an object")
        out.append(check_pose(pose.get("joint_rotations"), pose.get("root_translation"), num_joints,
                              f"{path}: pose {k}"))
    return out, float(fps)
