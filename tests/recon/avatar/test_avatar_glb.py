"""The avatar GLB: a reader written here from the spec (recon/export/AVATAR_GLB.md) rebuilds the posed Gaussians
from the file alone (numpy: node hierarchy, inverse bind matrices, JOINTS_0 / WEIGHTS_0 skinning, triangle
frames, the binding) and matches splatforge's own posing and render."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from recon.core.avatar_record import cap_per_triangle
from recon.export.glb import parse_glb, read_accessor
from recon.models import MeshGaussians
from recon.training.trainer import TrainConfig

D = np.diag([1.0, -1.0, -1.0])


def quat_xyzw_to_matrix(q):
    x, y, z, w = (q / np.linalg.norm(q, axis=-1, keepdims=True)).T
    return np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                     2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                     2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1).reshape(-1, 3, 3)


def read_avatar_glb(path: Path, keyframe: int):
    """(means [N, 3], rotation matrices [N, 3, 3], log_scales [N, 3], logit opacities [N], sh [N, K, 3]) of the
    Gaussians posed at animation keyframe ``keyframe``, in glTF axes, from the file alone."""
    doc, binary = parse_glb(path, path.read_bytes())
    acc = lambda i: read_accessor(path, doc, binary, i)  # noqa: E731
    prim = doc["meshes"][0]["primitives"][0]
    verts = acc(prim["attributes"]["POSITION"])
    faces = acc(prim["indices"]).astype(np.int64).reshape(-1, 3)
    joints = acc(prim["attributes"]["JOINTS_0"]).astype(np.int64)
    weights = acc(prim["attributes"]["WEIGHTS_0"])
    skin = doc["skins"][0]
    ibm = acc(skin["inverseBindMatrices"]).reshape(-1, 4, 4).transpose(0, 2, 1)
    nodes = doc["nodes"]
    J = len(skin["joints"])
    local_r = [np.eye(3) for _ in range(J)]
    local_t = [np.asarray(nodes[j]["translation"], dtype=np.float64) for j in range(J)]
    for ch in doc["animations"][0]["channels"]:
        out = acc(doc["animations"][0]["samplers"][ch["sampler"]]["output"])[keyframe]
        j = ch["target"]["node"]
        if ch["target"]["path"] == "rotation":
            local_r[j] = quat_xyzw_to_matrix(out[None])[0]
        else:
            local_t[j] = out
    parent = {k: j for j in range(J) for k in nodes[j].get("children", [])}
    world = [None] * J
    for j in range(J):  # parents first
        m = np.eye(4)
        m[:3, :3], m[:3, 3] = local_r[j], local_t[j]
        world[j] = m if j not in parent else world[parent[j]] @ m
    skinning = np.stack([world[j] @ ibm[j] for j in range(J)])
    blended = np.einsum("vk,vkab->vab", weights, skinning[joints])
    posed = np.einsum("vab,vb->va", blended[:, :3, :3], verts) + blended[:, :3, 3]
    g = prim["extensions"]["SPLATFORGE_bound_gaussians"]["attributes"]
    face = acc(g["FACE"]).astype(np.int64)[:, 0]
    c = posed[faces[face]]  # [N, 3 corners, 3]
    e1, e2 = c[:, 1] - c[:, 0], c[:, 2] - c[:, 0]
    t = e1 / np.linalg.norm(e1, axis=1, keepdims=True)
    n = np.cross(e1, e2)
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    frames = np.stack([t, np.cross(n, t), n], -1)
    size = (np.linalg.norm(e1, axis=1) + np.linalg.norm(e2, axis=1) + np.linalg.norm(c[:, 2] - c[:, 1], axis=1)) / 3
    bary, offset, local_log_scales = acc(g["BARYCENTRIC"]), acc(g["OFFSET"])[:, 0], acc(g["LOG_SCALE"])
    ext = prim["extensions"]["SPLATFORGE_bound_gaussians"]
    if "poseCorrection" in ext:
        bary, offset, local_log_scales = pose_correction(ext["poseCorrection"], acc, local_r, verts, faces[face], bary,
                                                         local_log_scales)
    means = np.einsum("nc,ncx->nx", bary, c) + (offset * size)[:, None] * n
    rot = frames @ quat_xyzw_to_matrix(acc(g["ROTATION"]))
    log_scales = local_log_scales + np.log(size)[:, None]
    sh = np.stack([acc(i) for i in g["SH"]], 1)
    return means, rot, log_scales, acc(g["LOGIT_OPACITY"])[:, 0], sh


def pose_correction(pc: dict, acc, local_r: list, verts: np.ndarray, corners: np.ndarray, bary: np.ndarray,
                    log_scales: np.ndarray):
    """(bary, offsets, local log-scales) corrected by the file's pose MLP (AVATAR_GLB.md, "poseCorrection") for
    the glTF local joint rotations ``local_r`` (J matrices), from the file alone."""
    layers = {ly["name"]: (acc(ly["weight"])[:, 0].reshape(ly["shape"]),
                           acc(ly["bias"])[:, 0] if "bias" in ly else 0.0) for ly in pc["layers"]}

    def linear(name, x):
        w, b = layers[name]
        return x @ w.T + b

    ours = [D @ r @ D for r in local_r[1:]]  # the MLP's inputs are in splatforge's axes
    p = np.concatenate([(r - np.eye(3)).ravel() for r in ours]) if ours else np.zeros(1)
    code = linear("pose.2", np.tanh(linear("pose.0", p))) - linear("pose.2", np.tanh(linear("pose.0", 0 * p)))
    rest = verts @ D
    x = np.einsum("nc,ncx->nx", bary, rest[corners])
    x = 2 * (x - rest.min(0)) / (rest.max(0) - rest.min(0)) - 1
    scaled = np.concatenate([x * np.pi * 2 ** k for k in range(pc["frequencies"])], -1)
    e = np.concatenate([x, np.sin(scaled), np.cos(scaled)], -1)
    h = np.maximum(linear("gauss.2", np.maximum(linear("gauss.0", e), 0)), 0)
    o = linear("head", h * code)
    d = pc["barycentricShift"] * np.tanh(o[:, :2])
    bary = bary + np.concatenate([-d.sum(1, keepdims=True), d], 1)
    offsets = pc["maxOffset"] * np.tanh(acc(pc["rawOffset"])[:, 0] + o[:, 2])
    return bary, offsets, log_scales + pc["scaleShift"] * np.tanh(o[:, 3:6])


@pytest.fixture(scope="module")
def model(tiny_avatar):
    from recon.data.detect import load_scene

    scene = load_scene(tiny_avatar)
    m = MeshGaussians.initialize(TrainConfig(method="meshgs", sh_degree=1), scene, torch.Generator().manual_seed(0),
                                 log=lambda s: None)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a trained-looking model: offsets, rotations, sizes, opacities all varied
        m.params["offsets"].add_(0.5 * torch.randn(len(m), generator=g))
        m.params["quats"].add_(0.4 * torch.randn(len(m), 4, generator=g))
        m.params["log_scales"].add_(0.3 * torch.randn(len(m), 3, generator=g))
        m.params["logit_opacities"].add_(2.0 * torch.randn(len(m), generator=g))
        m.params["shN"].add_(0.2 * torch.randn(m.params["shN"].shape, generator=g))
    return m, scene


def test_glb_round_trip_rebuilds_the_posed_gaussians_and_render(model, tmp_path):
    from recon.export.avatar_glb import write_avatar_glb
    from rasterizer import rasterize_gaussians, stack_cameras

    m, scene = model
    path = tmp_path / "avatar.glb"
    write_avatar_glb(path, m.to_avatar_record())
    av = m.avatar
    for k in (0, 3):  # a training pose and the unseen one
        means, rot, log_scales, logits, sh = read_avatar_glb(path, k)
        with torch.no_grad():
            w = m.world_gaussians(av.posed_vertices(av.rotations[k], av.translations[k]))
        np.testing.assert_allclose(means, w.means.numpy() @ D, atol=2e-5)
        from recon.avatar.quaternions import to_rotmat

        np.testing.assert_allclose(rot, D @ to_rotmat(w.quats).numpy(), atol=2e-5)
        np.testing.assert_allclose(log_scales, w.log_scales.numpy(), atol=2e-5)
        # the render of what the file holds equals splatforge's own render of the pose
        cam = scene.frames_test[0].camera
        viewmats, Ks, W, H = stack_cameras([cam])
        flip = torch.eye(4)
        flip[:3, :3] = torch.tensor(D, dtype=torch.float32)
        from recon.avatar.quaternions import from_rotmat

        quats = from_rotmat(torch.tensor(rot, dtype=torch.float32))
        rgb, _, _ = rasterize_gaussians(torch.tensor(means, dtype=torch.float32), quats,
                                        torch.exp(torch.tensor(log_scales, dtype=torch.float32)),
                                        torch.sigmoid(torch.tensor(logits, dtype=torch.float32)),
                                        torch.tensor(sh, dtype=torch.float32), viewmats @ flip, Ks, W, H,
                                        sh_degree=1, backgrounds=torch.ones(1, 3))
        with torch.no_grad():
            ours, _, _ = m.render_pose([cam], av.rotations[k], av.translations[k], background=torch.ones(3))
        assert (rgb - ours).abs().max() < 2e-3


def test_device_budget_caps_gaussians_per_triangle(model):
    m, _ = model
    record = m.to_avatar_record()
    capped = cap_per_triangle(record, 1)
    counts = np.bincount(capped.face_ids, minlength=len(record.faces))
    assert counts.max() == 1 and len(capped) == len(np.unique(record.face_ids))
    for f in np.unique(record.face_ids)[:20]:  # the most opaque one of each triangle is kept
        assert capped.logit_opacities[capped.face_ids == f][0] == record.logit_opacities[record.face_ids == f].max()


def test_broken_glb_is_one_line(tmp_path):
    from recon.export.splats import SplatFileError

    bad = tmp_path / "bad.glb"
    bad.write_bytes(b"glTF\x02\x00\x00\x00\x10\x00\x00\x00junk")
    with pytest.raises(SplatFileError) as err:
        parse_glb(bad, bad.read_bytes())
    assert "\n" not in str(err.value)
