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
