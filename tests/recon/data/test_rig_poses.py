"""Camera matrices a Panoptic file labels world-to-camera but that are camera-to-world (issue 55).

The shared classroom capture stores camera-to-world under ``w2c``: read as labelled, its three cameras point away
from each other and 4D training fits each camera on its own. recon.data.rig recognises such a rig by its geometry
(the optical axes meet behind the cameras as labelled, in front of them inverted) and the loader inverts them,
with a note the trainer logs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from recon.data import load_scene
from recon.data.rig import axes_of, converges, rig_pose_direction
from tests.recon.data.test_dynamic_loaders import rendered, write_panoptic  # noqa: F401  (fixture)

CLASSROOM = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "d3dgs_classroom"


def look_at(centre, target) -> np.ndarray:
    """OpenCV world-to-camera [4, 4] of a camera at ``centre`` looking at ``target`` (world -y up)."""
    z = np.asarray(target, float) - centre
    z /= np.linalg.norm(z)
    x = np.cross(z, [0.0, -1.0, 0.0])
    x /= np.linalg.norm(x)
    R = np.stack([x, np.cross(z, x), z])
    w2c = np.eye(4)
    w2c[:3, :3], w2c[:3, 3] = R, -R @ centre
    return w2c


def ring(n: int = 5) -> np.ndarray:
    """[n, 4, 4] cameras on a ring of radius 4 at height 2 looking at the origin."""
    angles = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return np.stack([look_at(np.array([4 * np.cos(a), -2.0, 4 * np.sin(a)]), [0, 0, 0]) for a in angles])


def test_an_inward_ring_reads_as_labelled_and_its_inverse_is_recognised():
    w2c = ring()
    assert converges(w2c) and not converges(np.linalg.inv(w2c))
    assert rig_pose_direction(w2c) == "world_to_cam"
    assert rig_pose_direction(np.linalg.inv(w2c)) == "cam_to_world"
    centres, dirs = axes_of(w2c)
    np.testing.assert_allclose(np.linalg.norm(centres[:, [0, 2]], axis=1), 4.0, atol=1e-9)
    np.testing.assert_allclose(np.einsum("ni,ni->n", dirs, -centres / np.linalg.norm(centres, axis=1)[:, None]), 1.0)


def test_forward_facing_and_single_cameras_keep_the_label():
    parallel = np.stack([look_at(np.array([x, 0.0, 0.0]), [x, 0.0, 5.0]) for x in np.linspace(-1, 1, 4)])
    assert rig_pose_direction(parallel) == "world_to_cam"
    assert rig_pose_direction(np.linalg.inv(parallel)) == "world_to_cam"  # neither converges: as labelled
    assert rig_pose_direction(ring(1)) == "world_to_cam"


def test_panoptic_loader_inverts_camera_to_world_files_and_says_so(tmp_path, rendered):  # noqa: F811
    good = write_panoptic(tmp_path / "good", rendered, points=False)
    flipped = write_panoptic(tmp_path / "flipped", rendered, points=False)
    for name in ("train_meta.json", "test_meta.json"):  # one tool wrote both files: both camera-to-world
        meta = json.loads((flipped / name).read_text())
        meta["w2c"] = [[np.linalg.inv(np.array(m)).tolist() for m in step] for step in meta["w2c"]]
        (flipped / name).write_text(json.dumps(meta))
    a, b = load_scene(good), load_scene(flipped)
    assert a.notes == []
    assert len(b.notes) == 2 and all("camera-to-world" in n for n in b.notes)
    assert "train_meta.json" in b.notes[0] and "test_meta.json" in b.notes[1]
    assert len(a.frames_train) == len(b.frames_train)
    for fa, fb in zip(a.frames_train, b.frames_train):
        np.testing.assert_allclose(fb.camera.world_to_cam.numpy(), fa.camera.world_to_cam.numpy(), atol=1e-5)
    # the test split's one camera cannot tell its direction: it follows the train split's
    assert len(a.frames_test) == len(b.frames_test) > 0
    for fa, fb in zip(a.frames_test, b.frames_test):
        np.testing.assert_allclose(fb.camera.world_to_cam.numpy(), fa.camera.world_to_cam.numpy(), atol=1e-5)


def test_damaged_matrices_keep_the_label_for_the_camera_checks():
    """NaN, infinite or singular matrices are not guessed at (no LinAlgError): the scene's camera checks refuse
    them with the file's name."""
    rig = ring()
    for bad in (np.nan, np.inf):
        damaged = rig.copy()
        damaged[1, 0, 0] = bad
        assert rig_pose_direction(damaged) == "world_to_cam"
    singular = rig.copy()
    singular[2] = 0.0
    assert rig_pose_direction(singular) == "world_to_cam"


def test_trainer_logs_the_loaders_notes(tmp_path, rendered):  # noqa: F811
    from recon.training.trainer import TrainConfig, Trainer

    root = write_panoptic(tmp_path / "pan", rendered, points=False)
    (root / "test_meta.json").unlink()
    meta = json.loads((root / "train_meta.json").read_text())
    meta["w2c"] = [[np.linalg.inv(np.array(m)).tolist() for m in step] for step in meta["w2c"]]
    (root / "train_meta.json").write_text(json.dumps(meta))
    lines = []
    Trainer(TrainConfig(data=root, out=tmp_path / "run", method="4dgs", steps=1, progress=False,
                        init_num_random=50), log=lines.append)
    assert any("camera-to-world" in line for line in lines)


@pytest.mark.skipif(not CLASSROOM.is_dir(), reason="shared classroom capture (../shared/data/d3dgs_classroom) absent")
def test_the_classroom_capture_is_an_inward_rig_once_inverted():
    scene = load_scene(CLASSROOM)  # factor 1: no downscaled copies to make
    assert scene.notes and "camera-to-world" in scene.notes[0]
    first = np.stack([f.camera.world_to_cam.numpy() for f in scene.frames_train[:3]]).astype(np.float64)
    assert converges(first)
    centres, _ = axes_of(first)
    assert np.all(centres[:, 1] < -1.5)  # the cameras hang about 2 m above the floor (OpenCV: -y is up)
