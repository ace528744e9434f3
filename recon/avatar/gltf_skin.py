"""A skinned glTF mesh (a rigged GLB's document and accessors) as a template: vertices, faces and a :class:`Skin`.

What is read (glTF 2.0, "Skins"): the first node holding both ``mesh`` and ``skin``; every primitive of that
mesh (triangles, mode 4; ``indices`` optional), concatenated in order: ``POSITION`` (float VEC3), ``JOINTS_0``
(VEC4 unsigned byte or short) and ``WEIGHTS_0`` (VEC4 float, or normalized unsigned byte / short), and
``JOINTS_1`` / ``WEIGHTS_1`` when present (up to 8 influences); the skin's ``joints`` (node indices) and
``inverseBindMatrices`` (MAT4 column-major; absent: identities). JOINTS_n values index the skin's joint list.

How it maps onto :class:`recon.avatar.skinning.Skeleton` (which has no rest rotations: a joint's rest frame is
its rest position with world axes):

- **rest pose = bind pose**: the template is POSITION as stored (with every joint at its bind matrix
  ``B_j = IBM_j^-1`` glTF skinning leaves it unchanged); joint j's rest position is the translation of ``B_j``.
  A bind rotation or scale is absorbed: our pose rotations are relative to the bind pose (identity = the
  template), so a glTF pose with joint globals ``G_j`` is, for rigid bones, our global rotation
  ``G_j B_j^-1`` (its rotation part).
- **parents**: a joint's parent is its nearest ancestor node (``children`` lists) that is a skin joint. Joints
  are reordered parents first (breadth-first from the roots; :attr:`GltfSkin.order` maps our joint k to its
  index in the skin's list). Several root joints get a common root added in front, at the origin, with no
  weight (named :data:`ADDED_ROOT`).
- **axes**: glTF is +Y up; positions are turned into splatforge's world by D = diag(1, -1, -1), as the avatar
  exporter writes them (:mod:`recon.export.avatar_glb`), so our exported avatar reads back as it was.

Layer 2 (no file access): the GLB container and its accessors are read by :mod:`recon.data.skinned_glb`, which
hands the document and an accessor reader here. Every problem is one line naming the file
(:class:`AvatarInputError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from recon.avatar.skin_file import MAX_INFLUENCES, AvatarInputError, Skin, dense_weights
from recon.avatar.skinning import Skeleton
from recon.core.limits import require_finite, require_indices, with_path

GLTF_TO_WORLD = np.array([1.0, -1.0, -1.0])  # D = diag(1, -1, -1), its own inverse
ADDED_ROOT = "__splatforge_root__"
FLOAT, UNSIGNED_BYTE, UNSIGNED_SHORT, UNSIGNED_INT = 5126, 5121, 5123, 5125
MODE_TRIANGLES = 4
MAX_JOINTS = 1024  # a skin with more joints is refused (dense weights are [V, J])
MAX_WEIGHT_ENTRIES = 1 << 27  # V x J of the dense weights (1 GiB as float64): a larger rig is refused
AFFINE_TOLERANCE = 1e-4  # an inverse bind matrix's last row must be (0, 0, 0, 1) to this

_error = with_path(AvatarInputError)
Accessor = Callable[[int], np.ndarray]  # accessor index -> float64 [count, components]


@dataclass
class GltfSkin:
    """A skinned glTF mesh read as a template.

    Attributes:
        vertices: [V, 3] float32 rest-pose (bind-pose) vertices in splatforge's world axes.
        faces: [F, 3] int64 triangles (glTF winding: counter-clockwise seen from outside).
        skin: skeleton (parents first) and weights [V, J].
        order: J ints, the skin's joint-list index of each of our joints (-1: the added common root).
    """

    vertices: torch.Tensor
    faces: torch.Tensor
    skin: Skin
    order: list[int]


def joint_name(path, node, k: int) -> str:
    """The joint node's name (``joint_<k>`` without one); AvatarInputError when the node is not an object."""
    if not isinstance(node, dict):
        raise AvatarInputError(f"{path}: joint {k}'s node is not a JSON object")
    return str(node.get("name", f"joint_{k}"))


def _accessor_info(path, doc: dict, index) -> dict:
    accessors = doc.get("accessors")
    if not isinstance(index, int) or not isinstance(accessors, list) or not 0 <= index < len(accessors) \
            or not isinstance(accessors[index], dict):
        raise AvatarInputError(f"{path}: accessor {index!r} does not exist")
    return accessors[index]


def check_accessor(path, doc: dict, index, name: str, type_: str, components: dict[int, bool | None]) -> dict:
    """The accessor ``index`` of attribute ``name`` when its type is ``type_`` and its componentType one of
    ``components`` (componentType -> required ``normalized`` value, None: either)."""
    acc = _accessor_info(path, doc, index)
    ct, normalized = acc.get("componentType"), bool(acc.get("normalized", False))
    wrong_norm = ct in components and components[ct] is not None and components[ct] != normalized
    if acc.get("type") != type_ or ct not in components or wrong_norm:
        allowed = ", ".join(f"{c}{'' if n is None else ' normalized' if n else ' not normalized'}"
                            for c, n in components.items())
        raise AvatarInputError(f"{path}: {name} is a {acc.get('type')} of componentType {ct}"
                               f"{' normalized' if normalized else ''}; glTF allows {type_} of {allowed}")
    return acc


def find_skinned_node(path, doc: dict) -> dict:
    """The first node with both ``mesh`` and ``skin``; AvatarInputError when there is none."""
    nodes = doc.get("nodes")
    for node in nodes if isinstance(nodes, list) else []:
        if isinstance(node, dict) and "mesh" in node and "skin" in node:
            return node
    raise AvatarInputError(f"{path}: no skinned mesh (no node holds both a \"mesh\" and a \"skin\"); a mesh without "
                           f"a skin cannot be animated: rig it (e.g. in Blender) or give an OBJ with a skin.json")


def document_entry(path, doc: dict, key: str, index, what: str) -> dict:
    items = doc.get(key)
    if not isinstance(index, int) or not isinstance(items, list) or not 0 <= index < len(items) \
            or not isinstance(items[index], dict):
        raise AvatarInputError(f"{path}: {what} {index!r} does not exist")
    return items[index]


def node_parents(path, doc: dict) -> dict[int, int]:
    """{node: its parent node} from the nodes' ``children`` lists; AvatarInputError for a child that does
    not exist or has two parents."""
    nodes = doc.get("nodes") or []
    parent_node: dict[int, int] = {}
    for i, node in enumerate(nodes):
        for c in node.get("children", []) if isinstance(node, dict) else []:
            if not isinstance(c, int) or not 0 <= c < len(nodes) or c in parent_node:
                raise AvatarInputError(f"{path}: node {i} lists child {c!r}, which does not exist or has another "
                                       f"parent")
            parent_node[c] = i
    return parent_node


def joint_parents(path, doc: dict, joints: list[int]) -> list[int]:
    """[J] the skin-list index of each joint's nearest ancestor joint (-1: none) from the nodes' ``children``;
    AvatarInputError for a node with two parents or a cycle."""
    parent_node = node_parents(path, doc)
    slot = {node: k for k, node in enumerate(joints)}
    parents = []
    for node in joints:
        seen, p = {node}, parent_node.get(node)
        while p is not None and p not in slot:
            if p in seen:
                raise AvatarInputError(f"{path}: the node hierarchy has a cycle through node {p}")
            seen.add(p)
            p = parent_node.get(p)
        if p is not None and p in seen:
            raise AvatarInputError(f"{path}: the node hierarchy has a cycle through node {p}")
        parents.append(-1 if p is None else slot[p])
    return parents


def parents_first(parents: list[int]) -> list[int]:
    """Skin-list indices in breadth-first order from the roots (parents before children)."""
    children: dict[int, list[int]] = {}
    for k, p in enumerate(parents):
        children.setdefault(p, []).append(k)
    order, frontier = [], list(children.get(-1, []))
    while frontier:
        order.extend(frontier)
        frontier = [c for k in frontier for c in children.get(k, [])]
    return order


def bind_positions(path, doc: dict, skin: dict, accessor: Accessor, count: int) -> np.ndarray:
    """[J, 3] the joints' bind positions (translations of the inverted inverse bind matrices), glTF axes."""
    return np.linalg.inv(inverse_bind_matrices(path, doc, skin, accessor, count))[:, :3, 3]


def inverse_bind_matrices(path, doc: dict, skin: dict, accessor: Accessor, count: int) -> np.ndarray:
    """[J, 4, 4] the skin's inverse bind matrices (identities when absent), glTF axes; AvatarInputError for
    another count, non-finite, non-affine or singular matrices."""
    index = skin.get("inverseBindMatrices")
    if index is None:
        return np.tile(np.eye(4), (count, 1, 1))
    acc = check_accessor(path, doc, index, "inverseBindMatrices", "MAT4", {FLOAT: None})
    if acc.get("count") != count:
        raise AvatarInputError(f"{path}: inverseBindMatrices holds {acc.get('count')} matrices for {count} joints")
    ibm = accessor(index).reshape(count, 4, 4).transpose(0, 2, 1)  # column-major in the file
    require_finite(ibm, path, "inverseBindMatrices", _error)
    if np.abs(ibm[:, 3] - np.array([0, 0, 0, 1.0])).max() > AFFINE_TOLERANCE:
        raise AvatarInputError(f"{path}: an inverse bind matrix is not affine (last row != 0 0 0 1)")
    det = np.linalg.det(ibm[:, :3, :3])
    if not (np.abs(det) > 1e-12).all():
        raise AvatarInputError(f"{path}: inverse bind matrix {int(np.argmin(np.abs(det)))} is singular")
    return ibm


def read_primitive(path, doc: dict, prim: dict, accessor: Accessor, num_joints: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions [V, 3] glTF axes, faces [F, 3] int64, weights [V, num_joints] by skin-list index) of one
    triangle primitive."""
    if not isinstance(prim, dict) or prim.get("mode", MODE_TRIANGLES) != MODE_TRIANGLES:
        raise AvatarInputError(f"{path}: a primitive of the skinned mesh has mode "
                               f"{prim.get('mode') if isinstance(prim, dict) else prim!r}; only triangles (4) are read")
    attrs = prim.get("attributes")
    if not isinstance(attrs, dict) or not {"POSITION", "JOINTS_0", "WEIGHTS_0"} <= set(attrs):
        raise AvatarInputError(f"{path}: a primitive of the skinned mesh lacks POSITION, JOINTS_0 or WEIGHTS_0 "
                               f"(a mesh without skinning weights cannot be animated)")
    pos_acc = check_accessor(path, doc, attrs["POSITION"], "POSITION", "VEC3", {FLOAT: None})
    count = pos_acc.get("count")
    if isinstance(count, int) and count * num_joints > MAX_WEIGHT_ENTRIES:
        raise AvatarInputError(f"{path}: {count:,} vertices x {num_joints} joints is more than the "
                               f"{MAX_WEIGHT_ENTRIES:,} skinning weights read; decimate the mesh first")
    positions = accessor(attrs["POSITION"])
    require_finite(positions, path, "POSITION", _error)
    idx, val = [], []
    for n in range(MAX_INFLUENCES // 4):
        if f"JOINTS_{n}" not in attrs and f"WEIGHTS_{n}" not in attrs:
            break
        if f"JOINTS_{n}" not in attrs or f"WEIGHTS_{n}" not in attrs:
            raise AvatarInputError(f"{path}: JOINTS_{n} and WEIGHTS_{n} come in pairs; one is missing")
        for name, comps in ((f"JOINTS_{n}", {UNSIGNED_BYTE: False, UNSIGNED_SHORT: False}),
                            (f"WEIGHTS_{n}", {FLOAT: None, UNSIGNED_BYTE: True, UNSIGNED_SHORT: True})):
            if check_accessor(path, doc, attrs[name], name, "VEC4", comps).get("count") != count:
                raise AvatarInputError(f"{path}: {name} has another count than POSITION ({count})")
        idx.append(accessor(attrs[f"JOINTS_{n}"]).astype(np.int64))
        val.append(accessor(attrs[f"WEIGHTS_{n}"]))
    weights = dense_weights(path, np.concatenate(idx, 1), np.concatenate(val, 1), num_joints, "JOINTS_n/WEIGHTS_n")
    if "indices" in prim:
        check_accessor(path, doc, prim["indices"], "indices", "SCALAR",
                        {UNSIGNED_BYTE: None, UNSIGNED_SHORT: None, UNSIGNED_INT: None})
        flat = accessor(prim["indices"]).astype(np.int64).ravel()
    else:
        flat = np.arange(len(positions), dtype=np.int64)
    if len(flat) % 3 or not len(flat):
        raise AvatarInputError(f"{path}: a triangle primitive has {len(flat)} indices, not a positive multiple of 3")
    faces = flat.reshape(-1, 3)
    require_indices(faces, len(positions), path, "indices", _error)
    return positions, faces, weights


def skin_joints(path, doc: dict, skin: dict) -> list[int]:
    """The node indices of ``skin``'s joints; AvatarInputError unless a non-empty list of distinct existing
    nodes, at most MAX_JOINTS."""
    joints = skin.get("joints")
    nodes = doc.get("nodes")
    if not isinstance(joints, list) or not joints or len(set(map(str, joints))) != len(joints) \
            or not isinstance(nodes, list) or not all(isinstance(j, int) and 0 <= j < len(nodes) for j in joints):
        raise AvatarInputError(f"{path}: the skin's \"joints\" must be a non-empty list of distinct node indices")
    if len(joints) > MAX_JOINTS:
        raise AvatarInputError(f"{path}: the skin has {len(joints)} joints, more than the {MAX_JOINTS} read")
    return joints


def skinned_mesh(path, doc: dict, accessor: Accessor) -> GltfSkin:
    """The template of the glTF document ``doc`` (see the module docstring); ``accessor(i)`` reads accessor i
    (its bounds checked against the buffer) as float64 [count, components]."""
    node = find_skinned_node(path, doc)
    skin = document_entry(path, doc, "skins", node["skin"], "skin")
    joints = skin_joints(path, doc, skin)
    J = len(joints)
    mesh = document_entry(path, doc, "meshes", node["mesh"], "mesh")
    prims = mesh.get("primitives")
    if not isinstance(prims, list) or not prims:
        raise AvatarInputError(f"{path}: the skinned mesh has no primitives")
    positions, faces, weights, start = [], [], [], 0
    for prim in prims:
        p, f, w = read_primitive(path, doc, prim, accessor, J)
        if (start + len(p)) * J > MAX_WEIGHT_ENTRIES:
            raise AvatarInputError(f"{path}: {start + len(p):,} vertices x {J} joints is more than the "
                                   f"{MAX_WEIGHT_ENTRIES:,} skinning weights read; decimate the mesh first")
        positions.append(p)
        faces.append(f + start)
        weights.append(w)
        start += len(p)
    rest = bind_positions(path, doc, skin, accessor, J) * GLTF_TO_WORLD
    parents = joint_parents(path, doc, joints)
    order = parents_first(parents)
    if len(order) != J:
        raise AvatarInputError(f"{path}: the joints' hierarchy does not reach every joint from a root")
    roots = [k for k in order if parents[k] < 0]
    if len(roots) > 1:  # one common root in front, at the origin, with no weight
        order = [-1] + order
    slot = {k: i for i, k in enumerate(order)}
    our_parents = [-1 if k < 0 else slot[parents[k]] if parents[k] >= 0 else (0 if len(roots) > 1 else -1)
                   for k in order]
    rest_ours = np.stack([np.zeros(3) if k < 0 else rest[k] for k in order])
    dense = np.concatenate(weights)
    dense_ours = np.stack([np.zeros(len(dense)) if k < 0 else dense[:, k] for k in order], 1)
    names = [ADDED_ROOT if k < 0 else joint_name(path, doc["nodes"][joints[k]], k) for k in order]
    skeleton = Skeleton(torch.tensor(our_parents, dtype=torch.int64), torch.tensor(rest_ours, dtype=torch.float32),
                        names)
    vertices = np.concatenate(positions) * GLTF_TO_WORLD
    return GltfSkin(torch.tensor(vertices, dtype=torch.float32), torch.tensor(np.concatenate(faces)),
                    Skin(skeleton, torch.tensor(dense_ours, dtype=torch.float32)), order)
