"""Loader of a multi-view, multi-pose avatar capture (layout: docs/avatars.md; written by
:mod:`recon.data.avatar_dataset`).

``DIR/poses.json`` (detected by its ``"format": "splatforge-avatar-poses"``) lists the poses (joint rotations,
root translation, split "train" or "unseen"), ``DIR/cameras.json`` the camera rig (Blender / OpenGL
camera-to-world, ``camera_angle_x``, width, height; each camera "train" or "test"), ``DIR/template.obj`` and
``DIR/skin.json`` the skinned template (or ``DIR/template.glb``, a rigged GLB holding both:
:mod:`recon.data.skinned_glb`), ``DIR/images/<pose>/<camera>.png`` the RGBA images. Splits: training
poses seen by training cameras are the training frames; every pose (training and unseen) seen by the test
cameras is a test frame, so the two groups of test views are scored from the same cameras (the unseen poses'
images from training cameras are not used). A frame's ``time`` is its pose's normalised time
(:func:`recon.avatar.avatar_data.pose_times`); ``Scene.avatar`` holds the template, skin and poses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rasterizer.camera import opengl_cam_to_world_to_opencv_world_to_cam
from recon.avatar.avatar_data import AvatarData, pose_times
from recon.avatar.skin_file import AvatarInputError, Skin, check_pose, read_skin
from recon.avatar.template import read_template
from recon.core.limits import load_json, with_path
from recon.data.finalize import finalize_frames
from recon.data.skinned_glb import read_skinned_glb
from recon.data.nerfstudio import matrix_4x4
from recon.data.scene import WHITE, DataFormatError, Frame, Scene, intrinsics_matrix, make_camera

POSES_FILE, CAMERAS_FILE, TEMPLATE_FILE, SKIN_FILE = "poses.json", "cameras.json", "template.obj", "skin.json"
TEMPLATE_GLB = "template.glb"  # a rigged GLB instead of template.obj + skin.json
POSES_FORMAT, CAMERAS_FORMAT = "splatforge-avatar-poses", "splatforge-avatar-cameras"
POSE_SPLITS, CAMERA_SPLITS = ("train", "unseen"), ("train", "test")

_error = with_path(DataFormatError)


def is_avatar(path: Path) -> bool:
    """True when ``path`` holds an avatar capture's poses.json."""
    return (Path(path) / POSES_FILE).is_file()


def _object(path: Path, fmt: str, what: str) -> dict:
    doc = load_json(path, what, _error)
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise DataFormatError(f"{path}: not an avatar {what} (no \"format\": \"{fmt}\")")
    return doc


def read_poses(path: Path, num_joints: int) -> tuple[torch.Tensor, torch.Tensor, list[str], torch.Tensor]:
    """(rotations [P, J, 4], translations [P, 3], names, unseen [P] bool) of poses.json; AvatarInputError or
    DataFormatError naming the file and the pose (a pose with the wrong joint count, duplicate names, ...)."""
    doc = _object(path, POSES_FORMAT, "poses file")
    poses = doc.get("poses")
    if not isinstance(poses, list) or not poses:
        raise DataFormatError(f"{path}: \"poses\" must be a non-empty list")
    rotations, translations, names, unseen = [], [], [], []
    for k, pose in enumerate(poses):
        if not isinstance(pose, dict) or not isinstance(pose.get("name"), str) or pose.get("split") not in POSE_SPLITS:
            raise DataFormatError(f"{path}: pose {k} needs a \"name\" and a \"split\" in {POSE_SPLITS}")
        if pose["name"] in names or "/" in pose["name"] or pose["name"] in ("", ".", ".."):
            raise DataFormatError(f"{path}: pose name {pose['name']!r} is repeated or not a plain folder name")
        r, t = check_pose(pose.get("joint_rotations"), pose.get("root_translation"), num_joints,
                          f"{path}: pose {pose['name']!r}")
        rotations.append(r)
        translations.append(t)
        names.append(pose["name"])
        unseen.append(pose["split"] == "unseen")
    if all(unseen):
        raise DataFormatError(f"{path}: every pose is \"unseen\"; at least one must be a training pose")
    return torch.stack(rotations), torch.stack(translations), names, torch.tensor(unseen)


def read_cameras(path: Path) -> tuple[list[dict], np.ndarray, int, int]:
    """(cameras [{"name", "split", "world_to_cam" [4, 4] OpenCV}], K [3, 3], width, height) of cameras.json."""
    doc = _object(path, CAMERAS_FORMAT, "camera rig file")
    try:
        fov, width, height = float(doc["camera_angle_x"]), int(doc["width"]), int(doc["height"])
    except (KeyError, TypeError, ValueError):
        raise DataFormatError(f"{path}: needs numbers \"camera_angle_x\", \"width\" and \"height\"") from None
    if not (0 < fov < np.pi and 0 < width <= 1 << 15 and 0 < height <= 1 << 15):
        raise DataFormatError(f"{path}: camera_angle_x {fov} / size {width}x{height} out of range")
    f = 0.5 * width / np.tan(0.5 * fov)
    cams = doc.get("cameras")
    if not isinstance(cams, list) or not cams:
        raise DataFormatError(f"{path}: \"cameras\" must be a non-empty list")
    out = []
    for k, cam in enumerate(cams):
        if not isinstance(cam, dict) or not isinstance(cam.get("name"), str) or cam.get("split") not in CAMERA_SPLITS:
            raise DataFormatError(f"{path}: camera {k} needs a \"name\" and a \"split\" in {CAMERA_SPLITS}")
        c2w = matrix_4x4(cam.get("transform_matrix"), path, f"transform_matrix of camera {cam['name']!r}")
        out.append({"name": cam["name"], "split": cam["split"],
                    "world_to_cam": opengl_cam_to_world_to_opencv_world_to_cam(c2w)})
    return out, intrinsics_matrix(f, f, width / 2, height / 2), width, height


def read_avatar_template(root: Path) -> tuple[torch.Tensor, torch.Tensor, Skin]:
    """(rest vertices [V, 3], faces [F, 3], skin) of the capture in ``root``: template.obj with skin.json, else
    template.glb (a rigged GLB); AvatarInputError naming what is missing."""
    if not (root / TEMPLATE_FILE).is_file() and (root / TEMPLATE_GLB).is_file():
        rig = read_skinned_glb(root / TEMPLATE_GLB)
        return rig.vertices, rig.faces, rig.skin
    if not (root / SKIN_FILE).is_file():
        raise AvatarInputError(f"{root / TEMPLATE_FILE}: the mesh has no skin ({root / SKIN_FILE} is missing, and "
                               f"there is no rigged {TEMPLATE_GLB}); a mesh without a skin cannot be animated: "
                               f"write one with scripts/make_avatar_dataset.py")
    vertices, faces = read_template(root / TEMPLATE_FILE)
    if int(faces.max()) >= len(vertices) or int(faces.min()) < 0:
        raise AvatarInputError(f"{root / TEMPLATE_FILE}: a face indexes a vertex outside 0..{len(vertices) - 1}")
    return vertices, faces, read_skin(root / SKIN_FILE, len(vertices))


def load_avatar(root: Path, data_factor: int = 1, cache_dir: Path | None = None,
                background: tuple[float, float, float] = WHITE) -> Scene:
    """The avatar capture in ``root`` as a :class:`Scene` (``source_format`` "avatar", ``avatar`` set)."""
    root = Path(root)
    vertices, faces, skin = read_avatar_template(root)
    rotations, translations, names, unseen = read_poses(root / POSES_FILE, skin.num_joints)
    cameras, K, width, height = read_cameras(root / CAMERAS_FILE)
    times = pose_times(len(names))
    train_raw, test_raw = [], []
    for p, name in enumerate(names):
        for cam in cameras:
            rel = f"images/{name}/{cam['name']}.png"
            frame = Frame(rel, root / rel, make_camera(cam["world_to_cam"], K, width, height), None, float(times[p]))
            if cam["split"] == "test":  # both pose groups are scored from the same cameras
                test_raw.append((frame, None))
            elif not unseen[p]:
                train_raw.append((frame, None))
    listed_in = root / POSES_FILE
    train = finalize_frames(train_raw, root, listed_in, data_factor, cache_dir)
    test = finalize_frames(test_raw, root, listed_in, data_factor, cache_dir) if test_raw else []
    avatar = AvatarData(vertices, faces, skin, rotations, translations, names, unseen)
    return Scene(train, test, None, None, tuple(background), "avatar", root, avatar=avatar)
