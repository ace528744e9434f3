"""A rigged GLB as an avatar template (recon/avatar/gltf_skin.py, recon/data/skinned_glb.py): our own avatar GLB
reads back as the template it was exported from (rest pose and posed vertices); a hand-built rig with byte joints,
normalized integer weights, two weight sets, unordered joints, a bind rotation, two root joints and two
primitives skins as glTF says; bad files are one line; the loader and the dataset maker take a GLB."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from recon.avatar.gltf_skin import ADDED_ROOT
from recon.avatar.quaternions import axis_angle, to_rotmat
from recon.avatar.skin_file import AvatarInputError
from recon.avatar.skinning import pose_vertices
from recon.data.skinned_glb import read_skinned_glb
from recon.export.avatar_glb import write_avatar_glb
from recon.models import MeshGaussians
from recon.training.trainer import TrainConfig

D = np.diag([1.0, -1.0, -1.0])


@pytest.fixture(scope="module")
def exported(tiny_avatar, tmp_path_factory):
    """(the tiny capture's avatar, the path of an avatar GLB exported from a model of it)."""
    from recon.data.detect import load_scene

    scene = load_scene(tiny_avatar)
    model = MeshGaussians.initialize(TrainConfig(method="meshgs", sh_degree=0), scene,
                                     torch.Generator().manual_seed(0), log=lambda s: None)
    path = tmp_path_factory.mktemp("glb") / "avatar.glb"
    write_avatar_glb(path, model.to_avatar_record())
    return scene.avatar, path


def test_exported_avatar_glb_reads_back_as_its_template(exported):
    avatar, path = exported
    rig = read_skinned_glb(path)
    torch.testing.assert_close(rig.vertices, avatar.rest_vertices, atol=1e-6, rtol=0)
    assert torch.equal(rig.faces, avatar.faces) and rig.order == list(range(avatar.skin.num_joints))
    assert torch.equal(rig.skin.skeleton.parents, avatar.skin.skeleton.parents)
    assert rig.skin.skeleton.names == avatar.skin.skeleton.names
    torch.testing.assert_close(rig.skin.skeleton.rest_positions, avatar.skin.skeleton.rest_positions, atol=1e-6, rtol=0)
    torch.testing.assert_close(rig.skin.weights, avatar.skin.weights, atol=1e-6, rtol=0)
    for k in (1, len(avatar.names) - 1):  # a training pose and the unseen one
        theirs = avatar.posed_vertices(avatar.rotations[k], avatar.translations[k])
        ours = pose_vertices(rig.skin.skeleton, rig.vertices, rig.skin.weights, avatar.rotations[k],
                             avatar.translations[k])
        assert (theirs - ours).abs().max() < 1e-5 and (theirs - avatar.rest_vertices).abs().max() > 0.05


# ------------------------------------------------------------------------------------- a hand-built rig


def glb_bytes(doc: dict, arrays: list[tuple[np.ndarray, int, str, bool]]) -> bytes:
    """A GLB of ``doc`` with one accessor per (array, componentType, type, normalized) appended."""
    blobs, views, accessors, offset = [], [], [], 0
    for arr, ct, type_, normalized in arrays:
        raw = np.ascontiguousarray(arr).tobytes()
        views.append({"buffer": 0, "byteOffset": offset, "byteLength": len(raw)})
        acc = {"bufferView": len(views) - 1, "componentType": ct, "type": type_,
               "count": int(arr.shape[0] if type_ != "MAT4" else arr.shape[0])}
        if normalized:
            acc["normalized"] = True
        accessors.append(acc)
        raw += b"\0" * (-len(raw) % 4)
        blobs.append(raw)
        offset += len(raw)
    binary = b"".join(blobs)
    doc = {**doc, "asset": {"version": "2.0"}, "buffers": [{"byteLength": len(binary)}], "bufferViews": views,
           "accessors": accessors}
    js = json.dumps(doc).encode()
    js += b" " * (-len(js) % 4)
    return b"".join([struct.pack("<III", 0x46546C67, 2, 12 + 8 + len(js) + 8 + len(binary)),
                     struct.pack("<II", len(js), 0x4E4F534A), js, struct.pack("<II", len(binary), 0x004E4942), binary])


def strip(n: int, x0: float) -> tuple[np.ndarray, np.ndarray]:
    """A zig-zag strip of 2 n vertices along glTF +y at x = x0 (positions [2n, 3], faces [2(n-1), 3])."""
    y = np.repeat(np.linspace(0.0, 2.0, n), 2)
    x = x0 + np.tile([0.0, 0.3], n)
    pos = np.stack([x, y, 0.1 * np.sin(3 * y)], 1)
    faces = np.array([[2 * i, 2 * i + 1, 2 * i + 2] for i in range(n - 1)]
                     + [[2 * i + 1, 2 * i + 3, 2 * i + 2] for i in range(n - 1)])
    return pos, faces


BIND_ROT = 0.4  # radians about glTF z: the knee's bind rotation (absorbed into its rest frame)


def hand_rig():
    """(GLB bytes, glTF-axes bind globals [3, 4, 4] of skin joints (knee, hip, tail), positions [V, 3],
    dense weights [V, 3] by skin index) of a two-primitive rig."""
    doc, arrays, B, positions, dense, faces = hand_rig_parts()
    return glb_bytes(doc, arrays), B, positions, dense, faces


def hand_rig_parts():
    """(document, accessor arrays for :func:`glb_bytes`, B, positions, dense, faces) of :func:`hand_rig`."""
    c, s = np.cos(BIND_ROT), np.sin(BIND_ROT)
    B = np.stack([np.eye(4)] * 3)
    B[0, :3, :3] = [[c, -s, 0], [s, c, 0], [0, 0, 1]]
    B[0, :3, 3] = [0.1, 1.0, 0.0]  # knee (child of hip)
    B[1, :3, 3] = [0.1, 0.0, 0.0]  # hip (a root under the armature)
    B[2, :3, 3] = [1.2, 0.5, 0.0]  # tail (another root)
    ibm = np.linalg.inv(B)
    p0, f0 = strip(6, 0.0)
    p1, f1 = strip(4, 1.0)
    y0 = p0[:, 1] / 2.0
    w0 = np.stack([y0, 1 - y0, np.zeros_like(y0)], 1)  # knee, hip by height
    w0_u8 = np.round(w0 * 255).astype(np.uint8)
    w0_u8[:, 1] = 255 - w0_u8[:, 0]
    j0 = np.tile(np.array([[0, 1, 2, 2]], np.uint8), (len(p0), 1))
    w0_4 = np.concatenate([w0_u8[:, :2], np.zeros((len(p0), 2), np.uint8)], 1)
    # primitive 1: uint16 joints, normalized uint16 weights split over JOINTS_0 and a float JOINTS_1 set
    j1a = np.tile(np.array([[2, 1, 0, 0]], np.uint16), (len(p1), 1))
    w1a = np.tile(np.array([[49151, 0, 0, 0]], np.uint16), (len(p1), 1))  # 0.75 on the tail
    j1b = np.tile(np.array([[1, 0, 0, 0]], np.uint16), (len(p1), 1))
    w1b = np.tile(np.array([[0.25, 0, 0, 0]], np.float32), (len(p1), 1))  # 0.25 on the hip
    dense = np.zeros((len(p0) + len(p1), 3))
    dense[: len(p0), :2] = w0_u8[:, :2] / 255.0
    dense[len(p0):, 2], dense[len(p0):, 1] = 49151 / 65535, 0.25
    dense /= dense.sum(1, keepdims=True)
    arrays = [(p0.astype(np.float32), 5126, "VEC3", False), (f0.astype(np.uint16).ravel(), 5123, "SCALAR", False),
              (j0, 5121, "VEC4", False), (w0_4, 5121, "VEC4", True),
              (p1.astype(np.float32), 5126, "VEC3", False), (f1.astype(np.uint32).ravel(), 5125, "SCALAR", False),
              (j1a, 5123, "VEC4", False), (w1a, 5123, "VEC4", True), (j1b, 5123, "VEC4", False),
              (w1b, 5126, "VEC4", False),
              (np.transpose(ibm, (0, 2, 1)).reshape(3, 16).astype(np.float32), 5126, "MAT4", False)]
    doc = {"scene": 0, "scenes": [{"nodes": [0, 5]}],
           "nodes": [{"name": "armature", "translation": [0, 0, 0], "children": [1, 4]},
                     {"name": "pelvis_helper", "children": [2]},  # not a joint: hip's parent is none of them
                     {"name": "hip", "translation": [0.1, 0, 0], "children": [3]},
                     {"name": "knee", "translation": [0, 1, 0]},
                     {"name": "tail", "translation": [1.2, 0.5, 0]},
                     {"name": "body", "mesh": 0, "skin": 0}],
           "meshes": [{"primitives": [
               {"attributes": {"POSITION": 0, "JOINTS_0": 2, "WEIGHTS_0": 3}, "indices": 1, "mode": 4},
               {"attributes": {"POSITION": 4, "JOINTS_0": 6, "WEIGHTS_0": 7, "JOINTS_1": 8, "WEIGHTS_1": 9},
                "indices": 5}]}],
           "skins": [{"joints": [3, 2, 4], "inverseBindMatrices": 10}]}
    return doc, arrays, B, np.concatenate([p0, p1]), dense, (f0, f1)


def test_hand_built_rig_skins_as_gltf_says(tmp_path):
    raw, B, positions, dense, (f0, f1) = hand_rig()
    path = tmp_path / "rig.glb"
    path.write_bytes(raw)
    rig = read_skinned_glb(path)
    sk = rig.skin.skeleton
    # two roots (hip, tail) under an added root; parents first: added, hip, tail, knee
    assert sk.names == [ADDED_ROOT, "hip", "tail", "knee"] and sk.parents.tolist() == [-1, 0, 0, 1]
    assert rig.order == [-1, 1, 2, 0]
    torch.testing.assert_close(rig.vertices.double(), torch.tensor(positions * np.diag(D)), atol=1e-6, rtol=0)
    assert torch.equal(rig.faces, torch.tensor(np.concatenate([f0, f1 + 12])))
    torch.testing.assert_close(sk.rest_positions[1:].double(), torch.tensor(B[[1, 2, 0], :3, 3] * np.diag(D)),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(rig.skin.weights[:, 1:].double(), torch.tensor(dense[:, [1, 2, 0]]), atol=1e-6, rtol=0)
    assert (rig.skin.weights[:, 0] == 0).all()
    # our pose: the knee bent 50 degrees about world x (our axes); glTF: the knee's global T(p) R_gl R_bind
    angle, axis = np.radians(50.0), torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    rotations = torch.tensor([[1.0, 0, 0, 0]] * 4, dtype=torch.float64)
    rotations[3] = axis_angle(axis, torch.tensor(angle, dtype=torch.float64))
    ours = pose_vertices(sk, rig.vertices.double(), rig.skin.weights.double(), rotations).numpy()
    R_gl = D @ to_rotmat(rotations[3]).numpy() @ D
    G = B.copy()
    G[0, :3, :3] = R_gl @ B[0, :3, :3]
    A = G @ np.linalg.inv(B)  # glTF: joint global x inverse bind matrix
    theirs = np.einsum("vj,jab->vab", dense, A)
    theirs = np.einsum("vab,vb->va", theirs[:, :3, :3], positions) + theirs[:, :3, 3]
    np.testing.assert_allclose(ours, theirs * np.diag(D), atol=1e-6)
    assert np.abs(ours - rig.vertices.double().numpy()).max() > 0.3  # the bend moved the upper strip


def corrupt(raw: bytes, edit) -> bytes:
    """``raw`` (a GLB) with its JSON document changed by ``edit(doc)`` (the BIN chunk kept)."""
    from recon.export.glb import parse_glb

    doc, binary = parse_glb("x.glb", raw)
    edit(doc)
    js = json.dumps(doc).encode()
    js += b" " * (-len(js) % 4)
    return b"".join([struct.pack("<III", 0x46546C67, 2, 12 + 8 + len(js) + 8 + len(binary)),
                     struct.pack("<II", len(js), 0x4E4F534A), js, struct.pack("<II", len(binary), 0x004E4942), binary])


def _no_skin(doc):
    del doc["nodes"][5]["skin"]


def _float_joints(doc):
    doc["accessors"][2]["componentType"] = 5126


def _bad_child(doc):
    doc["nodes"][3]["children"] = [2]  # knee -> hip: hip gets two parents


def _too_few_ibms(doc):
    doc["accessors"][10]["count"] = 2


def _lines(doc):
    doc["meshes"][0]["primitives"][0]["mode"] = 1


def _huge(doc):
    doc["accessors"][0]["count"] = 1 << 27  # checked before any allocation


@pytest.mark.parametrize("edit, needle", [
    (_no_skin, "no skinned mesh"), (_float_joints, "JOINTS_0 is a VEC4 of componentType 5126"),
    (_bad_child, "has another parent"), (_too_few_ibms, "inverseBindMatrices holds 2 matrices for 3 joints"),
    (_lines, "only triangles"), (_huge, "more than the 134,217,728 skinning weights"),
])
def test_bad_rigs_are_one_line(tmp_path, edit, needle):
    raw, *_ = hand_rig()
    path = tmp_path / "bad.glb"
    path.write_bytes(corrupt(raw, edit))
    with pytest.raises(AvatarInputError, match=needle) as info:
        read_skinned_glb(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_joint_index_outside_the_skin_and_a_truncated_file(tmp_path):
    raw, *_ = hand_rig()
    path = tmp_path / "bad.glb"
    path.write_bytes(corrupt(raw, lambda doc: doc["skins"][0].update(joints=[3, 2])))  # index 2 of 2 joints
    with pytest.raises(AvatarInputError, match="names joint 2, outside 0..1"):
        read_skinned_glb(path)
    path.write_bytes(raw[:-40])
    with pytest.raises(AvatarInputError, match="GLB length field"):
        read_skinned_glb(path)


def as_gltf(glb: Path, out: Path, uri: str | None) -> dict:
    """``glb`` re-saved as ``out`` (.gltf JSON) with its BIN chunk in the file ``uri`` beside it (None: a base64
    data: URI); returns the document."""
    import base64

    from recon.export.glb import parse_glb

    doc, binary = parse_glb(glb, glb.read_bytes())
    if uri is None:
        doc["buffers"][0]["uri"] = "data:application/octet-stream;base64," + base64.b64encode(binary).decode()
    else:
        (out.parent / uri.replace("%20", " ")).write_bytes(binary)
        doc["buffers"][0]["uri"] = uri
    out.write_text(json.dumps(doc))
    return doc


def test_a_gltf_with_its_buffer_in_a_file_or_a_data_uri_reads_as_the_glb(exported, tmp_path):
    _, glb = exported
    want = read_skinned_glb(glb)
    for uri in ("avatar%20data.bin", None):
        path = tmp_path / "rig.gltf"
        as_gltf(glb, path, uri)
        got = read_skinned_glb(path)
        assert torch.equal(got.vertices, want.vertices) and torch.equal(got.faces, want.faces)
        assert torch.equal(got.skin.weights, want.skin.weights) and got.skin.skeleton.names == want.skin.skeleton.names


def test_bad_gltf_buffers_are_one_line(exported, tmp_path):
    _, glb = exported
    path = tmp_path / "rig.gltf"
    doc = as_gltf(glb, path, "rig.bin")
    cases = [({**doc, "buffers": doc["buffers"] * 2}, "only a .gltf with one buffer"),
             ({**doc, "buffers": [{**doc["buffers"][0], "uri": "missing.bin"}]}, "missing.bin"),
             ({**doc, "buffers": [{**doc["buffers"][0], "byteLength": doc["buffers"][0]["byteLength"] + 4}]},
              "less than its byteLength"),
             ({**doc, "buffers": [{**doc["buffers"][0], "uri": "data:application/octet-stream;base64,@@"}]},
              "not valid base64"),
             ({**doc, "buffers": [{"uri": 3, "byteLength": 4}]}, "needs a 'uri' string")]
    for bad, needle in cases:
        path.write_text(json.dumps(bad))
        with pytest.raises(AvatarInputError, match=needle) as err:
            read_skinned_glb(path)
        assert "\n" not in str(err.value) and str(path) in str(err.value) or "missing.bin" in str(err.value)
    path.write_text("[" * 10000)
    with pytest.raises(AvatarInputError, match="rig.gltf"):
        read_skinned_glb(path)


def test_loader_takes_template_glb_instead_of_obj_and_skin(exported, tiny_avatar, tmp_path):
    from recon.data.detect import load_scene

    avatar, path = exported
    root = tmp_path / "capture"
    shutil.copytree(tiny_avatar, root)
    (root / "template.obj").unlink()
    (root / "skin.json").unlink()
    shutil.copy(path, root / "template.glb")
    scene = load_scene(root)
    torch.testing.assert_close(scene.avatar.rest_vertices, avatar.rest_vertices, atol=1e-6, rtol=0)
    torch.testing.assert_close(scene.avatar.vertices_at(1.0), avatar.vertices_at(1.0), atol=1e-5, rtol=0)
    (root / "template.glb").unlink()
    with pytest.raises(AvatarInputError, match="no rigged template.glb"):
        load_scene(root)


def test_dataset_maker_takes_a_rigged_glb(exported, tmp_path):
    pytest.importorskip("open3d")
    from recon.data.avatar_dataset import make_avatar_dataset
    from recon.data.detect import load_scene
    from recon.data.mesh_render import MeshInputError

    avatar, path = exported
    info = make_avatar_dataset(path, tmp_path / "out", poses=2, unseen=1, views=2, size=16, samples=1)
    assert info["joints"] == avatar.skin.num_joints and info["vertices"] == len(avatar.rest_vertices)
    scene = load_scene(tmp_path / "out")
    av = scene.avatar
    # the template moved into the unit sphere by a similarity: joints moved with it, weights kept
    edge, edge0 = av.rest_vertices[1] - av.rest_vertices[0], avatar.rest_vertices[1] - avatar.rest_vertices[0]
    scale = float(edge.norm() / edge0.norm())
    shift = av.rest_vertices[0] - scale * avatar.rest_vertices[0]
    torch.testing.assert_close(av.skin.skeleton.rest_positions, scale * avatar.skin.skeleton.rest_positions + shift,
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(av.skin.weights, avatar.skin.weights, atol=1e-6, rtol=0)
    assert float(av.rest_vertices.norm(dim=1).max()) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(MeshInputError, match="leave --skin out"):
        make_avatar_dataset(path, tmp_path / "out2", skin_path=tmp_path / "out" / "skin.json")
