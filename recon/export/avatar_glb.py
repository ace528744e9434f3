"""An avatar as one binary glTF: the skinned template mesh, its skeleton, an animation, and the Gaussians bound
to the triangles in triangle-local form (extension ``SPLATFORGE_bound_gaussians``; spec: AVATAR_GLB.md beside
this file). Writes :class:`recon.core.avatar_record.AvatarRecord`s.

Axes: glTF is +Y up; our world is turned by D = diag(1, -1, -1) (a proper rotation: 180 degrees about x) as
:mod:`recon.export.glb` does. Vertices and joint positions are multiplied by D, joint rotations conjugated
(q_D q q_D^-1), root translations multiplied by D, SH coefficients take the axis-flip signs of
:mod:`recon.export.glb`; the triangle-local Gaussian parameters do not change (the triangle frames turn with
the mesh).
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np

from recon.core.atomic import atomic_open
from recon.core.avatar_record import AvatarRecord

from .spz import sh_axis_flip_signs
from .glb import (ARRAY_BUFFER, CHUNK_BIN, CHUNK_JSON, FLOAT, GLB_MAGIC, GLB_VERSION, OPENCV_TO_GLTF, UNSIGNED_INT,
                  UNSIGNED_SHORT, _align4)

EXTENSION = "SPLATFORGE_bound_gaussians"
ELEMENT_ARRAY_BUFFER = 34963
MODE_TRIANGLES = 4
Q_D = np.array([0.0, 1.0, 0.0, 0.0])  # wxyz of D = diag(1, -1, -1): 180 degrees about x


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], -1)


def to_gltf_rotations(q: np.ndarray) -> np.ndarray:
    """[..., 4] xyzw glTF rotations of world wxyz rotations ``q``: q_D q q_D^-1, reordered."""
    conj = np.array([1.0, -1.0, -1.0, -1.0]) * Q_D
    out = _quat_mul(_quat_mul(np.broadcast_to(Q_D, q.shape), q), np.broadcast_to(conj, q.shape))
    return out[..., [1, 2, 3, 0]]


class _Buffer:
    """Accumulates buffer views and accessors of one BIN chunk."""

    def __init__(self):
        self.views, self.accessors, self.blobs, self.offset = [], [], [], 0

    def add(self, arr: np.ndarray, type_: str, component: int, target: int | None = ARRAY_BUFFER,
            minmax: bool = False) -> int:
        dtype = {FLOAT: "<f4", UNSIGNED_INT: "<u4", UNSIGNED_SHORT: "<u2"}[component]
        arr = np.ascontiguousarray(arr, dtype=dtype)
        raw = arr.tobytes()
        view = {"buffer": 0, "byteOffset": self.offset, "byteLength": len(raw)}
        if target is not None:
            view["target"] = target
        self.views.append(view)
        count = arr.shape[0] if type_ != "SCALAR" or arr.ndim == 1 else arr.size
        acc = {"bufferView": len(self.views) - 1, "componentType": component, "count": int(count), "type": type_}
        if minmax:
            flat = arr.reshape(int(count), -1)
            acc["min"], acc["max"] = flat.min(0).tolist(), flat.max(0).tolist()
        self.accessors.append(acc)
        pad = _align4(len(raw)) - len(raw)
        self.blobs.append(raw + b"\0" * pad)
        self.offset += len(raw) + pad
        return len(self.accessors) - 1


def pose_correction(buf: _Buffer, mlp: dict) -> dict:
    """The ``poseCorrection`` object of the extension (AVATAR_GLB.md): the pose MLP's constants, the raw
    offsets it corrects and each layer's weight (row-major [out, in]) and bias as SCALAR float accessors."""
    layers = []
    for name, weight, bias in mlp["layers"]:
        layer = {"name": name, "shape": [int(n) for n in weight.shape],
                 "weight": buf.add(weight.reshape(-1), "SCALAR", FLOAT, target=None)}
        if bias is not None:
            layer["bias"] = buf.add(bias.reshape(-1), "SCALAR", FLOAT, target=None)
        layers.append(layer)
    return {"frequencies": int(mlp["frequencies"]), "maxOffset": float(mlp["max_offset"]),
            "barycentricShift": float(mlp["bary_shift"]), "scaleShift": float(mlp["scale_shift"]),
            "rawOffset": buf.add(mlp["raw_offsets"], "SCALAR", FLOAT), "layers": layers}


def encode_avatar_glb(record: AvatarRecord, generator: str = "splatforge") -> bytes:
    """GLB bytes of ``record`` (layout: AVATAR_GLB.md)."""
    D = OPENCV_TO_GLTF
    J = len(record.parents)
    buf = _Buffer()
    verts = record.vertices.astype(np.float64) * D
    rest = record.rest_positions.astype(np.float64) * D
    attributes = {"POSITION": buf.add(verts, "VEC3", FLOAT, minmax=True),
                  "JOINTS_0": buf.add(record.joints.astype(np.uint16), "VEC4", UNSIGNED_SHORT),
                  "WEIGHTS_0": buf.add(record.weights, "VEC4", FLOAT)}
    indices = buf.add(record.faces.reshape(-1).astype(np.uint32), "SCALAR", UNSIGNED_INT, ELEMENT_ARRAY_BUFFER)
    inverse_bind = np.tile(np.eye(4), (J, 1, 1))
    inverse_bind[:, :3, 3] = -rest
    ibm = buf.add(np.transpose(inverse_bind, (0, 2, 1)).reshape(J, 16), "MAT4", FLOAT, target=None)  # column-major
    degree = int(round(np.sqrt(record.sh.shape[1]))) - 1
    sh = (record.sh * sh_axis_flip_signs(degree, D)[None, :, None]).astype(np.float32)  # glTF axes, as glb.py
    gaussians = {"FACE": buf.add(record.face_ids.astype(np.uint32), "SCALAR", UNSIGNED_INT),
                 "BARYCENTRIC": buf.add(record.bary, "VEC3", FLOAT),
                 "OFFSET": buf.add(record.offsets, "SCALAR", FLOAT),
                 "ROTATION": buf.add(record.quats[:, [1, 2, 3, 0]], "VEC4", FLOAT),
                 "LOG_SCALE": buf.add(record.log_scales, "VEC3", FLOAT),
                 "LOGIT_OPACITY": buf.add(record.logit_opacities, "SCALAR", FLOAT),
                 "SH": [buf.add(sh[:, k, :], "VEC3", FLOAT) for k in range(sh.shape[1])]}
    times = np.arange(len(record.rotations)) / float(record.fps)
    t_acc = buf.add(times, "SCALAR", FLOAT, target=None, minmax=True)
    gl_rot = to_gltf_rotations(record.rotations.astype(np.float64))  # [P, J, 4] xyzw
    samplers, channels = [], []
    for j in range(J):
        samplers.append({"input": t_acc, "output": buf.add(gl_rot[:, j], "VEC4", FLOAT, target=None),
                         "interpolation": "LINEAR"})
        channels.append({"sampler": len(samplers) - 1, "target": {"node": j, "path": "rotation"}})
    root = rest[0] + record.translations.astype(np.float64) * D
    samplers.append({"input": t_acc, "output": buf.add(root, "VEC3", FLOAT, target=None), "interpolation": "LINEAR"})
    channels.append({"sampler": len(samplers) - 1, "target": {"node": 0, "path": "translation"}})
    nodes = []
    for j in range(J):
        p = int(record.parents[j])
        local = rest[j] - (rest[p] if p >= 0 else 0.0)
        node = {"name": str(record.joint_names[j]), "translation": local.tolist()}
        kids = [k for k in range(J) if int(record.parents[k]) == j]
        if kids:
            node["children"] = kids
        nodes.append(node)
    nodes.append({"name": "avatar", "mesh": 0, "skin": 0})
    extension = {"count": len(record), "shDegree": int(round(np.sqrt(sh.shape[1]))) - 1, "attributes": gaussians}
    if record.pose_mlp is not None:
        extension["poseCorrection"] = pose_correction(buf, record.pose_mlp)
    primitive = {"attributes": attributes, "indices": indices, "mode": MODE_TRIANGLES,
                 "extensions": {EXTENSION: extension}}
    binary = b"".join(buf.blobs)
    doc = {"asset": {"version": "2.0", "generator": generator}, "extensionsUsed": [EXTENSION], "scene": 0,
           "scenes": [{"nodes": [0, J]}], "nodes": nodes, "meshes": [{"primitives": [primitive]}],
           "skins": [{"joints": list(range(J)), "inverseBindMatrices": ibm, "skeleton": 0}],
           "animations": [{"name": "poses", "samplers": samplers, "channels": channels}],
           "buffers": [{"byteLength": len(binary)}], "bufferViews": buf.views, "accessors": buf.accessors}
    js = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    js += b" " * (_align4(len(js)) - len(js))
    total = 12 + 8 + len(js) + 8 + len(binary)
    return b"".join([struct.pack("<III", GLB_MAGIC, GLB_VERSION, total), struct.pack("<II", len(js), CHUNK_JSON), js,
                     struct.pack("<II", len(binary), CHUNK_BIN), binary])


def write_avatar_glb(path: str | os.PathLike, record: AvatarRecord, force: bool = False) -> None:
    """Write ``record`` as an avatar GLB, atomically; ValueError for an empty record or non-finite numbers."""
    if len(record) == 0:
        raise ValueError("write_avatar_glb: the avatar has no Gaussians")
    for name in ("vertices", "bary", "offsets", "quats", "log_scales", "logit_opacities", "sh", "rotations"):
        if not np.isfinite(getattr(record, name)).all():
            raise ValueError(f"write_avatar_glb: {name} holds NaN or infinite values")
    mlp = record.pose_mlp
    arrays = [] if mlp is None else [mlp["raw_offsets"]] + [a for _, w, b in mlp["layers"] for a in (w, b)
                                                             if a is not None]
    if not all(np.isfinite(a).all() for a in arrays):
        raise ValueError("write_avatar_glb: the pose MLP holds NaN or infinite values")
    payload = encode_avatar_glb(record)
    with atomic_open(path, force=force) as f:
        f.write(payload)
