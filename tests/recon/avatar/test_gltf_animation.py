"""GLB animations as avatar clips (recon/avatar/gltf_keyframes.py, recon/avatar/gltf_animation.py,
recon/data/skinned_glb.read_glb_animation, render --animation FILE.glb): a two-joint rig with STEP, LINEAR (slerp)
and CUBICSPLINE keyframes samples to the poses worked out by hand; a rig with a bind rotation, helper nodes and
two roots skins as glTF says under its animation; our own avatar GLB's animation renders the captured poses as
the model does; damaged animations are one line naming the file."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from recon.avatar.gltf_keyframes import sample
from recon.avatar.skin_file import AvatarInputError
from recon.avatar.skinning import Skeleton, joint_transforms, pose_vertices
from recon.data.skinned_glb import read_glb_animation, read_skinned_glb
from tests.recon.avatar.test_gltf_template import D, corrupt, glb_bytes, hand_rig_parts

FLOAT = 5126
S2 = math.sqrt(0.5)


def two_joint_rig(times=(0.0, 1.0)):
    """(GLB bytes) of a root at the origin and a tip 1 up (glTF +y), a skin without a mesh, and one animation:
    the root's rotation LINEAR from identity to 90 degrees about glTF x, the tip's rotation STEP from identity
    to 90 degrees about glTF z, the root's translation CUBICSPLINE from 0 to (1, 0, 0) with out-tangent
    (0, 2, 0) at the first keyframe and in-tangent 0 at the second."""
    ibm = np.stack([np.eye(4), np.eye(4)])
    ibm[1, :3, 3] = [0, -1, 0]
    t = np.array(times, np.float32)
    root_rot = np.array([[0, 0, 0, 1], [S2, 0, 0, S2]], np.float32)  # xyzw
    tip_rot = np.array([[0, 0, 0, 1], [0, 0, S2, S2]], np.float32)
    root_move = np.array([[0, 0, 0], [0, 0, 0], [0, 2, 0],  # in-tangent, value, out-tangent of keyframe 0
                          [0, 0, 0], [1, 0, 0], [0, 0, 0]], np.float32)
    arrays = [(np.transpose(ibm, (0, 2, 1)).reshape(2, 16).astype(np.float32), FLOAT, "MAT4", False),
              (t, FLOAT, "SCALAR", False), (root_rot, FLOAT, "VEC4", False), (tip_rot, FLOAT, "VEC4", False),
              (root_move, FLOAT, "VEC3", False)]
    doc = {"scene": 0, "scenes": [{"nodes": [0]}],
           "nodes": [{"name": "root", "children": [1]}, {"name": "tip", "translation": [0, 1, 0]}],
           "skins": [{"joints": [0, 1], "inverseBindMatrices": 0}],
           "animations": [{"name": "wave", "samplers": [
               {"input": 1, "output": 2, "interpolation": "LINEAR"},
               {"input": 1, "output": 3, "interpolation": "STEP"},
               {"input": 1, "output": 4, "interpolation": "CUBICSPLINE"}],
               "channels": [{"sampler": 0, "target": {"node": 0, "path": "rotation"}},
                            {"sampler": 1, "target": {"node": 1, "path": "rotation"}},
                            {"sampler": 2, "target": {"node": 0, "path": "translation"}}]}]}
    return glb_bytes(doc, arrays)


def skeleton(scale: float = 1.0, shift=(0.0, 0.0, 0.0)) -> Skeleton:
    """The two-joint rig's skeleton in our axes (tip at D (0, 1, 0) = (0, -1, 0)), scaled and shifted."""
    rest = scale * torch.tensor([[0.0, 0, 0], [0, -1, 0]]) + torch.tensor(shift)
    return Skeleton(torch.tensor([-1, 0]), rest, ["root", "tip"])


def quat(axis, degrees) -> np.ndarray:
    half = math.radians(degrees) / 2
    return np.array([math.cos(half), *(math.sin(half) * np.asarray(axis, float))])


def same_rotations(a: torch.Tensor, b: np.ndarray, atol=1e-6) -> bool:
    """wxyz quaternions equal up to sign (q and -q are one rotation)."""
    a = a.double().numpy()
    return np.allclose(np.abs((a * b).sum(-1)), 1.0, atol=atol)


def write(tmp_path, raw: bytes, name: str = "clip.glb"):
    path = tmp_path / name
    path.write_bytes(raw)
    return path


def test_keyframe_samplers_by_hand():
    times = np.array([0.0, 2.0])
    values = np.array([[0.0], [4.0]])
    t = np.array([-1.0, 0.0, 0.5, 1.999, 2.0, 3.0])
    np.testing.assert_allclose(sample("STEP", times, values, t, False)[:, 0], [0, 0, 0, 0, 4, 4])
    np.testing.assert_allclose(sample("LINEAR", times, values, t, False)[:, 0], [0, 0, 1, 3.998, 4, 4])
    cubic = np.array([[[9.0], [0.0], [1.0]], [[-1.0], [4.0], [9.0]]])  # (a_k, v_k, b_k); a_0 and b_1 unused
    s = 0.25  # t = 0.5 of dt = 2: h00 v0 + dt h10 b0 + h01 v1 + dt h11 a1
    expected = (2 * s**3 - 3 * s**2 + 1) * 0 + 2 * (s**3 - 2 * s**2 + s) * 1 + (-2 * s**3 + 3 * s**2) * 4 \
        + 2 * (s**3 - s**2) * -1
    np.testing.assert_allclose(sample("CUBICSPLINE", times, cubic, t[[1, 2, 4]], False)[:, 0], [0, expected, 4])
    q = sample("LINEAR", times, np.array([[0, 0, 0, 1.0], [0, 0, -S2, -S2]]), np.array([1.0]), True)  # -q: short arc
    np.testing.assert_allclose(np.abs(q[0]), [0, 0, math.sin(math.pi / 8), math.cos(math.pi / 8)], atol=1e-12)


@pytest.mark.parametrize("scale,shift", [(1.0, (0, 0, 0)), (2.0, (0.1, 0.2, -0.3))])
def test_two_joint_rig_samples_to_the_poses_by_hand(tmp_path, scale, shift):
    path = write(tmp_path, two_joint_rig())
    poses = read_glb_animation(path, skeleton(scale, shift), fps=4.0)
    assert len(poses) == 5  # t = 0, 0.25, 0.5, 0.75, 1
    # glTF x is our x; glTF z is our -z (D = diag(1, -1, -1) conjugates a rotation about a to one about D a).
    # root: slerp 0 -> 90 degrees (22.5 at t = 0.25; a normalised lerp would give 21.6); tip: STEP holds key 0
    # until t = 1; translation: Hermite h10(s) b0 + h01(s) v1 (a1 = 0, dt = 1), glTF y flipped
    x, z = [1, 0, 0], [0, 0, -1]
    expected = [([quat(x, 0), quat(x, 0)], [0, 0, 0]),
                ([quat(x, 22.5), quat(x, 0)], [0.15625, -0.28125, 0]),  # h10 = 0.140625, h01 = 0.15625
                ([quat(x, 45), quat(x, 0)], [0.5, -0.25, 0]),  # h10 = 0.125, h01 = 0.5
                ([quat(x, 67.5), quat(x, 0)], [0.84375, -0.09375, 0]),  # h10 = 0.046875, h01 = 0.84375
                ([quat(x, 90), quat(z, 90)], [1, 0, 0])]
    for (rot, trans), (want_rot, want_trans) in zip(poses, expected):
        assert same_rotations(rot, np.stack(want_rot)), (rot, want_rot)
        np.testing.assert_allclose(trans.numpy(), scale * np.array(want_trans), atol=1e-6)


def test_hand_rig_with_bind_rotation_and_two_roots_skins_as_gltf_under_its_animation(tmp_path):
    angle = 0.7  # the knee node's rotation about glTF x at t = 1 (its bind rotation is 0.4 about z)
    knee_rot = np.array([[0, 0, 0, 1], [math.sin(angle / 2), 0, 0, math.cos(angle / 2)]], np.float32)
    tail_move = np.array([[1.2, 0.5, 0], [1.5, 0.5, 0]], np.float32)
    path = write(tmp_path, rig_with_animation(knee_rot, tail_move)[0], "rig.glb")
    rig = read_skinned_glb(path)
    with pytest.raises(AvatarInputError, match="off its bone"):  # hip and tail (two roots) move apart
        read_glb_animation(path, rig.skin.skeleton, fps=1.0)
    raw, B, positions, dense = rig_with_animation(knee_rot, None)
    path = write(tmp_path, raw, "rig2.glb")
    poses = read_glb_animation(path, rig.skin.skeleton, fps=1.0)
    assert len(poses) == 2
    rot, trans = poses[1]
    ours = pose_vertices(rig.skin.skeleton, rig.vertices.double(), rig.skin.weights.double(), rot.double(),
                         trans.double()).numpy()
    # glTF: knee global = hip's T(0.1, 0, 0) x the knee node's T(0, 1, 0) R_x(angle); joint matrix G IBM
    G = B.copy()
    c, s = math.cos(angle), math.sin(angle)
    G[0, :3, :3] = [[1, 0, 0], [0, c, -s], [0, s, c]]
    A = G @ np.linalg.inv(B)
    theirs = np.einsum("vj,jab->vab", dense, A)
    theirs = np.einsum("vab,vb->va", theirs[:, :3, :3], positions) + theirs[:, :3, 3]
    np.testing.assert_allclose(ours, theirs * np.diag(D), atol=2e-5)
    assert np.abs(ours - rig.vertices.double().numpy()).max() > 0.2


def rig_with_animation(knee_rot: np.ndarray, tail_move: np.ndarray | None):
    """(GLB bytes, B, positions, dense) of test_gltf_template's hand rig (a bind rotation, a helper node, two
    roots) with an animation (keyframes at 0 and 1 s) on the knee's rotation and, when given, the tail's
    translation."""
    doc, arrays, B, positions, dense, _ = hand_rig_parts()
    n = len(arrays)
    arrays = arrays + [(np.array([0.0, 1.0], np.float32), FLOAT, "SCALAR", False), (knee_rot, FLOAT, "VEC4", False)]
    samplers = [{"input": n, "output": n + 1}]
    channels = [{"sampler": 0, "target": {"node": 3, "path": "rotation"}}]
    if tail_move is not None:
        arrays.append((tail_move, FLOAT, "VEC3", False))
        samplers.append({"input": n, "output": n + 2, "interpolation": "LINEAR"})
        channels.append({"sampler": 1, "target": {"node": 4, "path": "translation"}})
    doc = {**doc, "animations": [{"samplers": samplers, "channels": channels}]}
    return glb_bytes(doc, arrays), B, positions, dense


@pytest.fixture(scope="module")
def run_dir(tiny_avatar, tmp_path_factory):
    """A meshgs run of the tiny capture (4 steps)."""
    from recon.training.trainer import TrainConfig, Trainer

    out = tmp_path_factory.mktemp("anim") / "run"
    Trainer(TrainConfig(data=tiny_avatar, out=out, method="meshgs", steps=4, sh_degree=1, progress=False),
            log=lambda s: None, device="cpu").run()
    return out


def test_exported_avatar_glb_animation_renders_the_captured_poses(tiny_avatar, run_dir, tmp_path):
    import imageio.v3 as iio

    from recon.avatar.skin_file import pose_record
    from recon.commands.export import ExportConfig, run_export
    from recon.commands.render import render_video
    from recon.data.detect import load_scene

    out = run_dir
    glb = run_export(ExportConfig(input=out, out=tmp_path / "avatar.glb", quiet=True)).path
    av = load_scene(tiny_avatar).avatar
    P = len(av.names)
    poses = read_glb_animation(glb, av.skin.skeleton, fps=2.0)  # the export's keyframes: 2 per second
    assert len(poses) == P
    for k, (rot, trans) in enumerate(poses):
        assert same_rotations(rot, av.rotations[k].double().numpy(), atol=1e-5)
        torch.testing.assert_close(trans, av.translations[k].float(), atol=1e-5, rtol=0)
        torch.testing.assert_close(joint_transforms(av.skin.skeleton, rot, trans),
                                   joint_transforms(av.skin.skeleton, av.rotations[k].float(),
                                                    av.translations[k].float()), atol=1e-5, rtol=0)
    clip = tmp_path / "clip.json"
    clip.write_text(json.dumps({"fps": 2, "poses": [pose_record(av.rotations[k], av.translations[k])
                                                    for k in range(P)]}))
    from_glb = render_video(out, "fixed", tmp_path / "glb_frames", progress=False, animation=glb, fps=2)
    from_json = render_video(out, "fixed", tmp_path / "json_frames", progress=False, animation=clip)
    frames = sorted(from_glb.iterdir())
    assert len(frames) == P and len(list(from_json.iterdir())) == P
    for f in frames:
        a, b = iio.imread(f).astype(int), iio.imread(from_json / f.name).astype(int)
        assert np.abs(a - b).max() <= 1, f.name
    first, last = iio.imread(frames[0]).astype(int), iio.imread(frames[-1]).astype(int)
    assert np.abs(first - last).max() > 10  # the poses differ on screen
    # by name and by index; a name that is not there lists the animations
    assert len(read_glb_animation(glb, av.skin.skeleton, fps=2.0, choice="poses")) == P
    assert len(read_glb_animation(glb, av.skin.skeleton, fps=4.0, choice="0")) == 2 * P - 1
    with pytest.raises(AvatarInputError, match="0: 'poses'"):
        read_glb_animation(glb, av.skin.skeleton, fps=2.0, choice="walk")


def _rename_tip(doc):
    doc["nodes"][1]["name"] = "other"


def _no_animations(doc):
    del doc["animations"]


def _bad_interpolation(doc):
    doc["animations"][0]["samplers"][0]["interpolation"] = "BEZIER"


def _cubic_count(doc):
    doc["animations"][0]["samplers"][0]["interpolation"] = "CUBICSPLINE"


def _bad_sampler(doc):
    doc["animations"][0]["channels"][0]["sampler"] = 7


def _bad_node(doc):
    doc["animations"][0]["channels"][0]["target"]["node"] = 9


def _matrix_node(doc):
    doc["nodes"][1]["matrix"] = np.eye(4).ravel().tolist()


def _scale_key(doc):
    doc["animations"][0]["channels"][2]["target"]["path"] = "scale"  # the root's cubic keys as scales: 0 at t = 0


def _tip_translation(doc):
    doc["animations"][0]["channels"][2]["target"]["node"] = 1  # moves the tip off its bone


def _bind_elsewhere(doc):
    del doc["skins"][0]["inverseBindMatrices"]  # identities: both joints bound at the origin


def _rotation_as_vec3(doc):
    doc["animations"][0]["samplers"][0]["output"] = 4


def _accessor_past_the_end(doc):
    doc["bufferViews"][1]["byteLength"] = 4  # the keyframe times: 2 floats in 4 bytes


def _no_skin(doc):
    del doc["skins"]


@pytest.mark.parametrize("edit,needle", [
    (_rename_tip, "lacks 1 of the avatar's 2 joints ('tip'"), (_no_animations, "holds no animations"),
    (_bad_interpolation, "interpolation 'BEZIER'"), (_cubic_count, "CUBICSPLINE needs 3 per keyframe"),
    (_bad_sampler, "sampler 7"), (_bad_node, "node 9"), (_matrix_node, "has a \"matrix\""),
    (_scale_key, "scales, shears or mirrors joint"), (_tip_translation, "off its bone"),
    (_bind_elsewhere, "binds joint"), (_rotation_as_vec3, "VEC3"), (_accessor_past_the_end, "runs past"),
    (_no_skin, "holds no skin"),
])
def test_damaged_animations_are_one_line(tmp_path, edit, needle):
    path = write(tmp_path, corrupt(two_joint_rig(), edit))
    with pytest.raises(AvatarInputError) as info:
        read_glb_animation(path, skeleton(), fps=2.0)
    msg = str(info.value)
    assert needle in msg and "\n" not in msg and str(path) in msg, msg


def test_unordered_keyframes_and_too_many_frames_are_one_line(tmp_path):
    path = write(tmp_path, two_joint_rig(times=(1.0, 0.5)))
    with pytest.raises(AvatarInputError, match="strictly increasing"):
        read_glb_animation(path, skeleton(), fps=2.0)
    path = write(tmp_path, two_joint_rig(times=(0.0, 1e6)), "long.glb")
    with pytest.raises(AvatarInputError, match="lower --fps"):
        read_glb_animation(path, skeleton(), fps=30.0)


def test_render_cli_glb_animation_errors_are_one_line(run_dir, tmp_path, capsys):
    from recon.cli import main

    path = write(tmp_path, two_joint_rig())
    with pytest.raises(SystemExit) as info:
        main(["render", "--run", str(run_dir), "--animation", str(path), "--out", str(tmp_path / "f"),
              "--path", "fixed"])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and len(err.splitlines()) == 1 and str(path) in err and "lacks" in err, err
    with pytest.raises(SystemExit) as info:
        main(["render", "--run", str(run_dir), "--animation-name", "walk", "--out", str(tmp_path / "g")])
    assert info.value.code == 2 and "--animation-name" in capsys.readouterr().err
