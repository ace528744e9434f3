"""The avatar capture layout: dataset maker, loader, detection, and one-line errors for bad input."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from recon.avatar.skin_file import AvatarInputError, read_animation, read_skin
from recon.data.detect import detect_format, load_scene
from recon.data.scene import DataFormatError

ROOT = Path(__file__).resolve().parents[3]


def copy(src, tmp_path):
    dst = tmp_path / "capture"
    shutil.copytree(src, dst)
    return dst


def test_loader_splits_poses_and_cameras(tiny_avatar):
    assert detect_format(tiny_avatar) == "avatar"
    scene = load_scene(tiny_avatar)
    av = scene.avatar
    assert scene.source_format == "avatar" and av.unseen.tolist() == [False, False, False, True]
    # 9 cameras, 0, 4 and 8 are test cameras: 3 train poses x 6 train cameras; test: 4 poses x 3 test cameras
    assert len(scene.frames_train) == 18 and len(scene.frames_test) == 12
    assert {f.time for f in scene.frames_train} == {0.0, 1 / 3, 2 / 3}
    assert sum(f.time == 1.0 for f in scene.frames_test) == 3
    assert {f.name.split("/")[-1] for f in scene.frames_test} == {"cam_00.png", "cam_04.png", "cam_08.png"}
    assert av.skin.weights.shape == (len(av.rest_vertices), 3)
    # the loaded template, skinned into pose 3, differs from the rest pose; pose lookup by time
    assert av.pose_index(1.0) == 3 and (av.vertices_at(1.0) - av.rest_vertices).norm(dim=1).max() > 0.01
    with pytest.raises(ValueError):
        av.pose_index(0.5)


def test_mesh_without_skin_is_one_line(tiny_avatar, tmp_path):
    d = copy(tiny_avatar, tmp_path)
    (d / "skin.json").unlink()
    with pytest.raises(AvatarInputError, match="has no skin") as err:
        load_scene(d)
    assert "\n" not in str(err.value)
    (d / "skin.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(AvatarInputError, match="not a splatforge skin file"):
        load_scene(d)


def test_pose_with_wrong_joint_count_is_one_line(tiny_avatar, tmp_path):
    d = copy(tiny_avatar, tmp_path)
    doc = json.loads((d / "poses.json").read_text())
    doc["poses"][1]["joint_rotations"] = doc["poses"][1]["joint_rotations"][:-1]
    (d / "poses.json").write_text(json.dumps(doc))
    with pytest.raises(AvatarInputError, match="2 joint rotations but the skeleton has 3 joints") as err:
        load_scene(d)
    assert "poses.json: pose 'pose_001'" in str(err.value) and "\n" not in str(err.value)


def test_skin_of_another_mesh_and_bad_weights(tiny_avatar, tmp_path):
    d = copy(tiny_avatar, tmp_path)
    with pytest.raises(AvatarInputError, match="weights for .* vertices, but the template mesh has 5"):
        read_skin(d / "skin.json", 5)
    doc = json.loads((d / "skin.json").read_text())
    doc["influences"]["weights"][0] = [-1.0] * len(doc["influences"]["weights"][0])
    (d / "skin.json").write_text(json.dumps(doc))
    with pytest.raises(AvatarInputError, match="negative skinning weights"):
        read_skin(d / "skin.json")


def test_animation_clip_checks(tmp_path):
    clip = tmp_path / "clip.json"
    clip.write_text(json.dumps({"fps": 10, "poses": [{"joint_rotations": [[1, 0, 0, 0]] * 3}]}))
    poses, fps = read_animation(clip, 3)
    assert fps == 10 and torch.equal(poses[0][0], torch.tensor([[1.0, 0, 0, 0]] * 3))
    with pytest.raises(AvatarInputError, match="pose 0: the pose has 3 joint rotations but the skeleton has 4"):
        read_animation(clip, 4)
    clip.write_text(json.dumps({"poses": [{"joint_rotations": [[2, 0, 0, 0]] * 3}]}))
    with pytest.raises(AvatarInputError, match="not a unit quaternion"):
        read_animation(clip, 3)


def test_make_avatar_dataset_script_bad_mesh(tmp_path):
    (tmp_path / "bad.obj").write_text("this is not a mesh\n")
    r = subprocess.run([sys.executable, str(ROOT / "scripts/make_avatar_dataset.py"), str(tmp_path / "bad.obj"),
                        "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "make_avatar_dataset:" in r.stderr


def test_corrective_bulge_by_hand():
    """recon/avatar/correctives.py: zero in the rest pose and for a bent root; a bent joint j moves a vertex by
    A theta exp(-d^2 / (2 sigma^2)) along its normal."""
    from recon.avatar.correctives import apply_corrective, bulge_heights
    from recon.avatar.quaternions import axis_angle

    rest = torch.tensor([[0.0, 0, 0], [0.3, 0, 0], [1.0, 0.2, 0]], dtype=torch.float64)
    joints = torch.tensor([[0.0, 0, 0], [1.0, 0, 0]], dtype=torch.float64)
    rot = torch.tensor([[1.0, 0, 0, 0]] * 2, dtype=torch.float64)
    assert bulge_heights(rest, joints, rot, 0.1).abs().max() == 0
    rot[0] = axis_angle(torch.tensor([0.0, 0, 1]), torch.tensor(0.5)).double()  # the root turns the body only
    assert bulge_heights(rest, joints, rot, 0.1).abs().max() == 0
    rot[1] = axis_angle(torch.tensor([0.0, 1, 0]), torch.tensor(-0.4)).double()  # bent by 0.4 rad either way
    h = bulge_heights(rest, joints, rot, 0.1, sigma=0.5)
    d2 = torch.tensor([1.0, 0.49, 0.04], dtype=torch.float64)
    torch.testing.assert_close(h, 0.1 * 0.4 * torch.exp(-d2 / 0.5), rtol=1e-6, atol=1e-9)
    normals = torch.tensor([[0.0, 0, 1]] * 3, dtype=torch.float64)
    torch.testing.assert_close(apply_corrective(rest, normals, h) - rest, h[:, None] * normals)


def test_dataset_maker_corrective_bulges_the_posed_meshes(tiny_avatar, tmp_path):
    """--corrective renders the same poses and cameras as plain skinning, bulged (recorded in poses.json); a
    value outside [0, 1] is one line."""
    import numpy as np
    import imageio.v3 as iio

    from recon.data.avatar_dataset import make_avatar_dataset
    from recon.data.mesh_render import MeshInputError
    from tests.recon.avatar.conftest import make_tiny_mesh

    mesh = make_tiny_mesh(tmp_path / "blob.ply")
    out = tmp_path / "bulged"
    info = make_avatar_dataset(mesh, out, poses=3, unseen=1, views=9, size=24, samples=1, seed=0, per_side=1,
                               corrective=0.2)
    assert info["largest_bulge"] > 0.01
    doc = json.loads((out / "poses.json").read_text())
    assert doc["corrective"]["amplitude"] == 0.2
    plain = json.loads((tiny_avatar / "poses.json").read_text())
    assert [p["joint_rotations"] for p in doc["poses"]] == [p["joint_rotations"] for p in plain["poses"]]
    diff = max(np.abs(iio.imread(out / f"images/pose_00{k}/cam_01.png").astype(int)
                      - iio.imread(tiny_avatar / f"images/pose_00{k}/cam_01.png").astype(int)).max() for k in range(4))
    assert diff > 20
    with pytest.raises(MeshInputError, match="--corrective 2"):
        make_avatar_dataset(mesh, tmp_path / "bad", corrective=2.0)
