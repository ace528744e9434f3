"""A glTF animation (a rigged GLB's ``animations``) sampled into an avatar's poses: ``splatforge render --run RUN
--animation clip.glb [--animation-name NAME] --fps F`` (docs/avatars.md).

What is read (glTF 2.0, "Animations"): one animation (by name or index; default the first), its channels on
nodes' ``translation``, ``rotation`` (quaternion xyzw) and ``scale`` with ``STEP`` / ``LINEAR`` /
``CUBICSPLINE`` samplers (:mod:`recon.avatar.gltf_keyframes`); morph-target ``weights`` channels and channels
without a node are skipped. Frames are taken every 1 / fps seconds from the first keyframe to the last one
of the channels that move the avatar (on its joints or their ancestor nodes).

How a frame becomes our pose (:class:`recon.avatar.skinning.Skeleton`: local joint rotations about the rest
joint positions, plus a root translation; rest pose = bind pose, as :mod:`recon.avatar.gltf_skin` reads a
template):

1. the nodes' local matrices ``T R S`` (animated values over the node's own), the global matrices
   ``G`` down the node hierarchy, and glTF's joint matrices ``M_j = G_j IBM_j`` of the file's skin (the
   first skinned node's skin, else ``skins[0]``): they map bind-pose points to posed points;
2. the avatar's joints are matched to the skin's joints **by node name**; the skin must bind them where the
   avatar's skeleton has its rest joints up to a uniform scale and shift (the dataset maker moves a rig into
   the unit sphere), found by least squares: ``rest_j = s D b_j + c`` (D = diag(1, -1, -1): glTF to our axes);
3. joint j's global rotation is ``Q_j = D M_j D`` (3 x 3; it must be a rotation: scale keys are refused),
   its posed position ``p_j = s D M_j b_j + c``; our local rotation is ``Q_parent^T Q_j`` (root: ``Q_0``)
   and the root translation ``p_0 - rest_0``;
4. the bones of our skeleton have fixed lengths, so the joint positions our pose gives must be the ``p_j``
   (translation keys on inner joints that change a bone's length, or roots that move apart, are refused).

A common root added by the template reader (:data:`recon.avatar.gltf_skin.ADDED_ROOT`) has no node: it gets
no rotation and the first real root's displacement. Every problem is one line naming the file
(:class:`AvatarInputError`). Layer 2: the file is read by :mod:`recon.data.skinned_glb`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from recon.avatar.gltf_keyframes import INTERPOLATIONS, sample
from recon.avatar.gltf_skin import (ADDED_ROOT, FLOAT, UNSIGNED_BYTE, UNSIGNED_SHORT, Accessor, check_accessor,
                                    document_entry, find_skinned_node, inverse_bind_matrices, node_parents,
                                    skin_joints)
from recon.avatar.quaternions import from_rotmat, to_rotmat
from recon.avatar.skin_file import AvatarInputError
from recon.avatar.skinning import Skeleton
from recon.core.limits import require_finite, with_path

BYTE, SHORT = 5120, 5122
MAX_CLIP_FRAMES = 100_000  # frames one clip may sample into
MATCH_TOLERANCE = 1e-3  # bind positions / bone lengths agree to this fraction of the skeleton's size
RIGID_TOLERANCE = 1e-3  # |Q^T Q - I| of a joint's rotation part
TIME_SLACK = 1e-6  # of a frame: the last keyframe counts as reached within this
GLTF_D = np.diag([1.0, -1.0, -1.0, 1.0])  # glTF axes <-> ours, homogeneous (its own inverse)
PATH_TYPES = {"translation": "VEC3", "rotation": "VEC4", "scale": "VEC3"}
ROTATION_COMPONENTS = {FLOAT: None, BYTE: True, UNSIGNED_BYTE: True, SHORT: True, UNSIGNED_SHORT: True}

_error = with_path(AvatarInputError)


@dataclass
class Channel:
    """One animated property of one node.

    Attributes:
        node: the node index.
        path: "translation", "rotation" (xyzw) or "scale".
        interpolation: one of :data:`recon.avatar.gltf_keyframes.INTERPOLATIONS`.
        times: [K] keyframe times in seconds, strictly increasing.
        values: [K, C] (STEP, LINEAR) or [K, 3, C] (CUBICSPLINE: in-tangent, value, out-tangent), float64.
    """

    node: int
    path: str
    interpolation: str
    times: np.ndarray
    values: np.ndarray


def choose_animation(path, doc: dict, choice: str | None) -> tuple[str, dict]:
    """(label, animation) of ``doc``'s animation named ``choice``, or at index ``choice``, or the first
    (``choice`` None); AvatarInputError listing the animations when there is none such."""
    animations = doc.get("animations")
    if not isinstance(animations, list) or not animations:
        raise AvatarInputError(f"{path}: the file holds no animations (glTF \"animations\"); export the clip with "
                               f"its rig (Blender: glTF Binary with Animation on)")
    names = [a.get("name", f"#{k}") if isinstance(a, dict) else f"#{k}" for k, a in enumerate(animations)]
    index = 0 if choice is None else names.index(choice) if choice in names else \
        int(choice) if str(choice).isdigit() and int(choice) < len(animations) else None
    if index is None:
        listed = ", ".join(f"{k}: {n!r}" for k, n in enumerate(names[:20]))
        raise AvatarInputError(f"{path}: no animation named or numbered {choice!r}; --animation-name takes one of "
                               f"{listed}")
    if not isinstance(animations[index], dict):
        raise AvatarInputError(f"{path}: animation {index} is not a JSON object")
    return f"animation {names[index]!r}", animations[index]


def read_sampler(path, doc: dict, sampler: dict, target: str, accessor: Accessor, where: str
                 ) -> tuple[str, np.ndarray, np.ndarray]:
    """(interpolation, times [K], values [K, C] or [K, 3, C]) of one sampler animating ``target``;
    AvatarInputError (``where``: the animation and channel) for a bad interpolation, accessor type or count,
    non-finite or unordered times, zero quaternions."""
    interpolation = sampler.get("interpolation", "LINEAR")
    if interpolation not in INTERPOLATIONS:
        raise AvatarInputError(f"{path}: {where}: interpolation {interpolation!r} is not one of {INTERPOLATIONS}")
    acc_in = check_accessor(path, doc, sampler.get("input"), f"{where} input", "SCALAR", {FLOAT: None})
    components = ROTATION_COMPONENTS if target == "rotation" else {FLOAT: None}
    acc_out = check_accessor(path, doc, sampler.get("output"), f"{where} output", PATH_TYPES[target], components)
    per_key = 3 if interpolation == "CUBICSPLINE" else 1
    if acc_out.get("count") != per_key * acc_in.get("count", -1):
        raise AvatarInputError(f"{path}: {where}: {acc_out.get('count')} output values for {acc_in.get('count')} "
                               f"keyframes ({interpolation} needs {per_key} per keyframe)")
    times = accessor(sampler["input"])[:, 0]
    values = accessor(sampler["output"])
    require_finite(times, path, f"{where} keyframe times", _error)
    require_finite(values, path, f"{where} values", _error)
    if (np.diff(times) <= 0).any():
        raise AvatarInputError(f"{path}: {where}: keyframe times are not strictly increasing (glTF requires it)")
    if per_key == 3:
        values = values.reshape(len(times), 3, -1)
    elif target == "rotation":
        norms = np.linalg.norm(values, axis=-1, keepdims=True)
        if (norms < 1e-6).any():
            raise AvatarInputError(f"{path}: {where}: a rotation keyframe is a zero quaternion")
        values = values / norms
    return interpolation, times, values


def read_channels(path, doc: dict, animation: dict, label: str, accessor: Accessor) -> list[Channel]:
    """The node channels of ``animation`` (translation / rotation / scale; ``weights`` and node-less channels
    skipped); AvatarInputError for a channel naming a missing sampler or node, an unknown path, a node
    animated twice on one path, or an animated node that holds a ``matrix``."""
    samplers, channels = animation.get("samplers"), animation.get("channels")
    if not isinstance(samplers, list) or not isinstance(channels, list):
        raise AvatarInputError(f"{path}: {label} needs \"samplers\" and \"channels\" lists")
    nodes = doc.get("nodes") if isinstance(doc.get("nodes"), list) else []
    out, seen = [], set()
    for c, channel in enumerate(channels):
        target = channel.get("target") if isinstance(channel, dict) else None
        if not isinstance(target, dict):
            raise AvatarInputError(f"{path}: {label} channel {c} has no \"target\" object")
        if "node" not in target or target.get("path") == "weights":
            continue  # morph weights / another extension's target: nothing of the skeleton
        node, prop, where = target["node"], target.get("path"), f"{label} channel {c}"
        if prop not in PATH_TYPES:
            raise AvatarInputError(f"{path}: {where}: target path {prop!r} is not translation, rotation, scale "
                                   f"or weights")
        if not isinstance(node, int) or not 0 <= node < len(nodes) or not isinstance(nodes[node], dict):
            raise AvatarInputError(f"{path}: {where} targets node {node!r}, which does not exist")
        if "matrix" in nodes[node]:
            raise AvatarInputError(f"{path}: {where} animates node {node}, which has a \"matrix\" (glTF allows "
                                   f"animating only nodes given by translation / rotation / scale)")
        if (node, prop) in seen:
            raise AvatarInputError(f"{path}: {where}: node {node}'s {prop} is animated twice")
        seen.add((node, prop))
        sampler = channel.get("sampler")
        if not isinstance(sampler, int) or not 0 <= sampler < len(samplers) or not isinstance(samplers[sampler], dict):
            raise AvatarInputError(f"{path}: {where} names sampler {sampler!r}, which does not exist")
        out.append(Channel(node, prop, *read_sampler(path, doc, samplers[sampler], prop, accessor, where)))
    return out


def rest_trs(path, node: dict, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(translation [3], rotation [4] xyzw, scale [3]) of a node's own TRS (glTF defaults when absent)."""
    parts = []
    for key, default in (("translation", [0.0, 0.0, 0.0]), ("rotation", [0.0, 0.0, 0.0, 1.0]),
                         ("scale", [1.0, 1.0, 1.0])):
        try:
            value = np.asarray(node.get(key, default), dtype=np.float64)
        except (TypeError, ValueError):
            value = np.zeros(0)
        if value.shape != (len(default),):
            raise AvatarInputError(f"{path}: node {index}'s {key} is not {len(default)} numbers")
        require_finite(value, path, f"node {index} {key}", _error)
        parts.append(value)
    return parts[0], parts[1], parts[2]


def trs_matrices(translation: np.ndarray, rotation: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """[T, 4, 4] ``T(t) R(q) S(s)`` of translations [T, 3], xyzw quaternions [T, 4] and scales [T, 3]."""
    R = to_rotmat(torch.from_numpy(rotation[:, [3, 0, 1, 2]])).numpy()
    M = np.tile(np.eye(4), (len(translation), 1, 1))
    M[:, :3, :3] = R * scale[:, None, :]
    M[:, :3, 3] = translation
    return M


def node_local(path, doc: dict, index: int, channels: list[Channel], t: np.ndarray) -> np.ndarray:
    """[T, 4, 4] node ``index``'s local matrix at the times ``t`` [T] (its ``matrix``, or its TRS with the
    animated parts of ``channels`` sampled)."""
    node = doc["nodes"][index]
    if not isinstance(node, dict):
        raise AvatarInputError(f"{path}: node {index} is not a JSON object")
    if "matrix" in node:
        try:
            m = np.asarray(node["matrix"], dtype=np.float64).reshape(4, 4).T  # column-major
        except (TypeError, ValueError):
            raise AvatarInputError(f"{path}: node {index}'s matrix is not 16 numbers") from None
        require_finite(m, path, f"node {index} matrix", _error)
        return np.broadcast_to(m, (len(t), 4, 4))
    trs = dict(zip(("translation", "rotation", "scale"), rest_trs(path, node, index)))
    parts = {key: np.broadcast_to(value, (len(t), len(value))) for key, value in trs.items()}
    for ch in channels:
        if ch.node == index:
            parts[ch.path] = sample(ch.interpolation, ch.times, ch.values, t, ch.path == "rotation")
    return trs_matrices(parts["translation"], parts["rotation"], parts["scale"])


def ancestors(path, parents: dict[int, int], node: int) -> list[int]:
    """``node`` and its ancestors, root last; AvatarInputError for a cycle."""
    chain, seen = [node], {node}
    while chain[-1] in parents:
        p = parents[chain[-1]]
        if p in seen:
            raise AvatarInputError(f"{path}: the node hierarchy has a cycle through node {p}")
        chain.append(p)
        seen.add(p)
    return chain


def global_matrices(path, doc: dict, joints: list[int], channels: list[Channel], t: np.ndarray) -> np.ndarray:
    """[T, len(joints), 4, 4] the global matrices of the nodes ``joints`` at the times ``t``."""
    parents = node_parents(path, doc)
    cache: dict[int, np.ndarray] = {}
    out = []
    for node in joints:
        chain = ancestors(path, parents, node)
        G = None
        for k in reversed(chain):
            if k not in cache:
                local = node_local(path, doc, k, channels, t)
                cache[k] = local if G is None else G @ local
            G = cache[k]
        out.append(G)
    return np.stack(out, axis=1)


def animation_skin(path, doc: dict) -> dict:
    """The skin the animation drives: the first skinned node's, else ``skins[0]``; AvatarInputError without."""
    skins = doc.get("skins")
    try:
        index = find_skinned_node(path, doc)["skin"]
    except AvatarInputError:
        if not isinstance(skins, list) or not skins:
            raise AvatarInputError(f"{path}: the file holds no skin, so its joints' bind pose is unknown; export "
                                   f"the animation with its rig (the armature and a skinned mesh)") from None
        index = 0
    return document_entry(path, doc, "skins", index, "skin")


def match_joints(path, doc: dict, joints: list[int], names: list[str]) -> list[int]:
    """The skin-list slot of each of the avatar's joint ``names`` (-1: the added common root, which has no
    node); AvatarInputError naming the joints the skin lacks or holds twice."""
    slots: dict[str, int] = {}
    for k, node in enumerate(joints):
        name = str(doc["nodes"][node].get("name", f"joint_{k}")) if isinstance(doc["nodes"][node], dict) else None
        if name in slots:
            raise AvatarInputError(f"{path}: the skin has two joints named {name!r}; joints are matched to the "
                                   f"avatar's by name")
        slots[name] = k
    missing = [n for n in names if n not in slots and n != ADDED_ROOT]
    if missing:
        shown = ", ".join(repr(n) for n in missing[:6]) + (" ..." if len(missing) > 6 else "")
        raise AvatarInputError(f"{path}: the skin lacks {len(missing)} of the avatar's {len(names)} joints ({shown}; "
                               f"matched by node name): the animation is for another rig")
    return [slots.get(n, -1) for n in names]


def fit_scale_shift(path, bind: np.ndarray, rest: np.ndarray, names: list[str]) -> tuple[float, np.ndarray]:
    """(s, c) with ``rest ~ s bind + c`` (least squares; s = 1 for a single point) of the joints' bind
    positions [n, 3] (our axes) and the avatar's rest positions [n, 3]; AvatarInputError when they differ by
    more than MATCH_TOLERANCE of the skeleton's size."""
    bc, rc = bind - bind.mean(0), rest - rest.mean(0)
    spread = float((bc * bc).sum())
    s = float((bc * rc).sum()) / spread if spread > 1e-18 else 1.0
    c = rest.mean(0) - s * bind.mean(0)
    size = max(float(np.abs(rc).max()) if len(rest) > 1 else 0.0, float(np.abs(rest).max()), 1e-9)
    err = np.linalg.norm(s * bind + c - rest, axis=1)
    if not s > 0 or err.max() > MATCH_TOLERANCE * size:
        j = int(np.argmax(err))
        raise AvatarInputError(f"{path}: the skin binds joint {names[j]!r} {err[j]:.4g} away from where the avatar's "
                               f"skeleton has it (after the best uniform scale {s:.4g} and shift): the animation "
                               f"is for another rig or bind pose")
    return s, c


def chain_positions(parents: list[int], rest: np.ndarray, Q: np.ndarray, root: np.ndarray) -> np.ndarray:
    """[T, J, 3] joint positions of a rigid skeleton (rest positions [J, 3], parents first) under global
    rotations ``Q`` [T, J, 3, 3] with the root at ``root`` [T, 3]."""
    pos = [root]
    for j in range(1, len(parents)):
        p = parents[j]
        pos.append(pos[p] + np.einsum("tab,b->ta", Q[:, p], rest[j] - rest[p]))
    return np.stack(pos, axis=1)


def local_pose(parents: list[int], Q: np.ndarray) -> np.ndarray:
    """[T, J, 4] wxyz local rotations ``Q_parent^T Q_j`` (root: ``Q_0``) of global rotations [T, J, 3, 3]."""
    local = Q.copy()
    for j in range(1, len(parents)):
        local[:, j] = np.swapaxes(Q[:, parents[j]], -1, -2) @ Q[:, j]
    return from_rotmat(torch.from_numpy(local)).numpy()


def frame_times(path, label: str, channels: list[Channel], fps: float) -> np.ndarray:
    """[T] sample times every 1 / ``fps`` s from the channels' first keyframe through their last one."""
    t0 = min(float(ch.times[0]) for ch in channels)
    t1 = max(float(ch.times[-1]) for ch in channels)
    count = int(math.floor((t1 - t0) * fps + TIME_SLACK)) + 1
    if count > MAX_CLIP_FRAMES:
        raise AvatarInputError(f"{path}: {label} lasts {t1 - t0:.4g} s: {count:,} frames at {fps:g} fps, more than "
                               f"the {MAX_CLIP_FRAMES:,} read; lower --fps")
    return t0 + np.arange(count) / fps


def animation_poses(path, doc: dict, accessor: Accessor, skeleton: Skeleton, fps: float,
                    choice: str | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The avatar's poses [(rotations [J, 4] wxyz float32, root translation [3] float32)], one per frame at
    ``fps`` of ``doc``'s animation ``choice`` (name or index; None: the first); see the module docstring."""
    if not (math.isfinite(fps) and fps > 0):
        raise AvatarInputError(f"{path}: fps {fps} must be a positive number")
    label, animation = choose_animation(path, doc, choice)
    skin = animation_skin(path, doc)
    joints = skin_joints(path, doc, skin)
    ibm = inverse_bind_matrices(path, doc, skin, accessor, len(joints))
    names, parents = list(skeleton.names), skeleton.parents.tolist()
    rest = skeleton.rest_positions.double().numpy()
    slots = match_joints(path, doc, joints, names)
    real = [j for j, k in enumerate(slots) if k >= 0]
    bind = np.linalg.inv(ibm[[slots[j] for j in real]])[:, :3, 3] * GLTF_D.diagonal()[:3]  # our axes
    s, c = fit_scale_shift(path, bind, rest[real], [names[j] for j in real])
    nodes = [joints[slots[j]] for j in real]
    moving = {a for n in nodes for a in ancestors(path, node_parents(path, doc), n)}
    channels = [ch for ch in read_channels(path, doc, animation, label, accessor) if ch.node in moving]
    if not channels:
        raise AvatarInputError(f"{path}: {label} has no channel on the avatar's joints or their parent nodes")
    t = frame_times(path, label, channels, fps)
    M = GLTF_D @ global_matrices(path, doc, nodes, channels, t) @ ibm[[slots[j] for j in real]] @ GLTF_D
    Q = np.tile(np.eye(3), (len(t), len(names), 1, 1))
    posed = np.repeat(rest[None], len(t), axis=0)
    Q[:, real] = M[..., :3, :3]
    posed[:, real] = s * (np.einsum("tjab,jb->tja", M[..., :3, :3], bind) + M[..., :3, 3]) + c
    for j in (j for j, k in enumerate(slots) if k < 0):  # the added root: the first real root's displacement
        child = next(i for i in range(len(parents)) if parents[i] == j)
        posed[:, j] = rest[j] + posed[:, child] - rest[child]
    check_rigid(path, label, Q[:, real], [names[j] for j in real], t)
    check_bone_lengths(path, label, parents, rest, Q, posed, names, t)
    rotations = local_pose(parents, Q)
    translations = posed[:, 0] - rest[0]
    return [(torch.tensor(r, dtype=torch.float32), torch.tensor(tr, dtype=torch.float32))
            for r, tr in zip(rotations, translations)]


def check_rigid(path, label: str, Q: np.ndarray, names: list[str], t: np.ndarray) -> None:
    """AvatarInputError when a joint's rotation part [T, n, 3, 3] is not a rotation (scaled or mirrored)."""
    eye = np.eye(3)
    err = np.abs(np.swapaxes(Q, -1, -2) @ Q - eye).max(axis=(-1, -2)) + (np.linalg.det(Q) < 0)
    if err.max() > RIGID_TOLERANCE:
        f, j = np.unravel_index(int(np.argmax(err)), err.shape)
        raise AvatarInputError(f"{path}: {label} scales, shears or mirrors joint {names[j]!r} at t = {t[f]:.4g} s "
                               f"(scale keys or a scaled parent node); the avatar's bones only rotate: bake the "
                               f"scale out")


def check_bone_lengths(path, label: str, parents: list[int], rest: np.ndarray, Q: np.ndarray, posed: np.ndarray,
                       names: list[str], t: np.ndarray) -> None:
    """AvatarInputError when the joints' posed positions [T, J, 3] are not those of the avatar's rigid bones
    under the rotations ``Q`` (translation keys on inner joints, roots moving apart)."""
    rigid = chain_positions(parents, rest, Q, posed[:, 0])
    err = np.linalg.norm(rigid - posed, axis=-1)
    size = max(float(np.abs(rest - rest.mean(0)).max()), 1e-9)
    if err.max() > MATCH_TOLERANCE * size:
        f, j = np.unravel_index(int(np.argmax(err)), err.shape)
        raise AvatarInputError(f"{path}: {label} moves joint {names[j]!r} {err[f, j]:.4g} off its bone at "
                               f"t = {t[f]:.4g} s (translation keys on an inner joint, or roots moving apart); the avatar's bones keep "
                               f"their lengths: only rotations and the root's translation can be played")
