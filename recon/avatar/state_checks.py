"""Checks of a checkpoint's avatar record (``AvatarData.state()``, the ``avatar`` entry of a meshgs checkpoint)
before anything indexes by it.

A checkpoint is read with ``weights_only=True`` and its zip CRCs are checked, but a file re-saved with edited
tensors passes both: a face index past the vertices reaches the Numba binding kernel (a segmentation fault), a
joint whose parent comes after it or a weight matrix of the wrong shape an IndexError or einsum error deep in
the skinning code. Each check here is one line naming the field and what is wrong (AvatarInputError, exit 2).

Shapes (V vertices, F faces, J joints, P captured poses): rest_vertices [V, 3] float, faces [F, 3] integer in
[0, V), weights [V, J] float >= 0 with no all-zero row, parents [J] integer (the root first with -1, every other
joint after its parent: the order :func:`recon.avatar.skinning.joint_transforms` walks), rest_positions [J, 3],
joint_names J strings, rotations [P >= 1, J, 4] wxyz non-zero, translations [P, 3], names P strings, unseen [P];
every float finite.
"""

from __future__ import annotations

import numpy as np
import torch

from recon.avatar.skin_file import AvatarInputError


def _array(state: dict, key: str, where: str, kind: str, shape: tuple) -> np.ndarray:
    """``state[key]`` as a numpy array of dtype kind in ``kind`` ("f" float, "iu" integer, "b" bool) and
    ``shape`` (None: any length), finite when float; AvatarInputError otherwise."""
    value = state[key]
    if not isinstance(value, torch.Tensor):
        raise AvatarInputError(f"{where}: the avatar entry's {key} is a {type(value).__name__}, not a tensor")
    arr = value.detach().cpu().numpy()
    if arr.dtype.kind not in kind or arr.ndim != len(shape) or any(
            want is not None and have != want for have, want in zip(arr.shape, shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise AvatarInputError(f"{where}: the avatar entry's {key} is {arr.dtype} {list(arr.shape)}, expected "
                               f"{ {'f': 'float', 'iu': 'integer', 'b': 'bool'}[kind]} {want}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise AvatarInputError(f"{where}: the avatar entry's {key} holds {int((~np.isfinite(arr)).sum())} NaN or "
                               f"infinite values")
    return arr


def _names(state: dict, key: str, where: str, count: int) -> None:
    names = state[key]
    if not isinstance(names, (list, tuple)) or len(names) != count or not all(isinstance(n, str) for n in names):
        raise AvatarInputError(f"{where}: the avatar entry's {key} must be {count} names")


def _check_skeleton(state: dict, where: str) -> int:
    """J, after the parents, rest positions and joint names are checked."""
    parents = _array(state, "parents", where, "iu", (None,))
    J = len(parents)
    order_ok = J >= 1 and parents[0] == -1 and all(0 <= parents[j] < j for j in range(1, J))
    if not order_ok:
        raise AvatarInputError(f"{where}: the avatar entry's parents {parents.tolist()[:12]} are not a skeleton "
                               f"(the root first with parent -1, every other joint after its parent)")
    _array(state, "rest_positions", where, "f", (J, 3))
    _names(state, "joint_names", where, J)
    return J


def _check_mesh_and_weights(state: dict, where: str, J: int) -> None:
    V = len(_array(state, "rest_vertices", where, "f", (None, 3)))
    faces = _array(state, "faces", where, "iu", (None, 3))
    if faces.size and (faces.min() < 0 or faces.max() >= V):
        raise AvatarInputError(f"{where}: the avatar entry's faces index vertices outside 0..{V - 1} (the first: "
                               f"{int(faces[(faces < 0) | (faces >= V)][0])})")
    weights = _array(state, "weights", where, "f", (V, J))
    if (weights < 0).any() or (weights.sum(axis=1) <= 0).any():
        raise AvatarInputError(f"{where}: the avatar entry's weights hold negative values or a vertex with no "
                               f"influence")


def _check_poses(state: dict, where: str, J: int) -> None:
    rotations = _array(state, "rotations", where, "f", (None, J, 4))
    P = len(rotations)
    if P == 0 or (np.linalg.norm(rotations, axis=2) == 0).any():
        raise AvatarInputError(f"{where}: the avatar entry's rotations hold no pose or a zero quaternion")
    _array(state, "translations", where, "f", (P, 3))
    _names(state, "names", where, P)
    _array(state, "unseen", where, "b", (P,))


def check_avatar_state(state, where: str = "checkpoint") -> None:
    """AvatarInputError (``where``: what holds the record) unless ``state`` is a well-formed avatar record
    (module docstring)."""
    if not isinstance(state, dict):
        raise AvatarInputError(f"{where}: the avatar entry is a {type(state).__name__}, not a record")
    try:
        J = _check_skeleton(state, where)
        _check_mesh_and_weights(state, where, J)
        _check_poses(state, where, J)
    except KeyError as err:
        raise AvatarInputError(f"{where}: the avatar entry lacks {err}") from None


def check_bindings(face_ids, params: dict, num_faces: int, where: str = "checkpoint") -> None:
    """AvatarInputError unless ``face_ids`` [N] are integers in [0, ``num_faces``) and every tensor of ``params``
    has N rows (one per Gaussian bound to a triangle)."""
    ids = _array({"face_ids": face_ids}, "face_ids", where, "iu", (None,))
    if ids.size and (ids.min() < 0 or ids.max() >= num_faces):
        raise AvatarInputError(f"{where}: face_ids bind Gaussians to triangles outside 0..{num_faces - 1}")
    bad = [k for k, v in params.items() if not isinstance(v, torch.Tensor) or v.ndim == 0 or len(v) != len(ids)]
    if bad:
        raise AvatarInputError(f"{where}: parameters {', '.join(bad[:3])} do not have one row per Gaussian "
                               f"({len(ids)} face_ids)")
