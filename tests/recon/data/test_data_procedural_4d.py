"""--data procedural-4d: the built-in dynamic scene (fixed cameras, moving objects, frames with times)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recon.data.procedural_4d import moving_objects, procedural_4d_scene, surfels_at
from recon.core.errors import UsageError
from recon.data.data_arg import resolved_data
from recon.training.trainer import TrainConfig, load_training_scene


def test_default_scene_loads_through_the_trainer():
    scene = load_training_scene(TrainConfig(data=Path("procedural-4d")))
    assert scene.source_format == "procedural-4d"
    assert len(scene.frames_train) == 8 * 30 and len(scene.frames_test) == 10
    times = sorted({f.time for f in scene.frames_train})
    assert len(times) == 30 and times[0] == 0.0 and times[-1] == 1.0
    assert all(0.0 < f.time < 1.0 for f in scene.frames_test)
    assert scene.points.shape == (2000, 3) and scene.point_colors.shape == (2000, 3)
    assert scene.point_times.shape == (2000,) and 0 <= scene.point_times.min() and scene.point_times.max() <= 1
    assert resolved_data("procedural-4d") == Path("procedural-4d")


def test_cameras_are_fixed_and_objects_move():
    scene = procedural_4d_scene(width=48, height=48, n_train=4, n_times=5, test_time_stride=2)
    assert len(scene.frames_train) == 20 and [f.time for f in scene.frames_test] == [0.25, 0.75]
    by_cam = [f for f in scene.frames_train if f.name.startswith("cam01_")]
    assert [f.time for f in by_cam] == [0.0, 0.25, 0.5, 0.75, 1.0]
    for f in by_cam[1:]:  # one camera: same pose at every time
        np.testing.assert_array_equal(f.camera.world_to_cam.numpy(), by_cam[0].camera.world_to_cam.numpy())
    first, last = by_cam[0].rgba.astype(float), by_cam[-1].rgba.astype(float)
    changed = np.abs(first - last).max(axis=-1) > 30
    assert 0.01 < changed.mean() < 0.5  # objects moved; the ground (most of the picture) did not
    assert by_cam[0].rgba.shape == (48, 48, 4)


def test_motion_is_rigid():
    objects = moving_objects()
    a, b = surfels_at(0.1, objects), surfels_at(0.8, objects)
    n_ground = len(a.means) - sum(len(o.body.means) for o in objects)
    np.testing.assert_allclose(a.means[:n_ground], b.means[:n_ground])  # the ground is static
    start = n_ground
    for o in objects:  # pairwise distances inside each object are kept
        pa, pb = a.means[start:start + 50], b.means[start:start + 50]
        da = np.linalg.norm(pa[:, None] - pa[None], axis=-1)
        db = np.linalg.norm(pb[:, None] - pb[None], axis=-1)
        np.testing.assert_allclose(da, db, atol=1e-9)
        assert np.abs(pa - pb).max() > 0.05
        start += len(o.body.means)


def test_data_factor_and_bad_arguments():
    scene = procedural_4d_scene(width=48, height=48, n_train=2, n_times=2, data_factor=2)
    assert scene.frames_train[0].width == 24
    with pytest.raises(UsageError, match="data-factor"):
        procedural_4d_scene(data_factor=0)
    with pytest.raises(UsageError, match="n_times"):
        procedural_4d_scene(n_times=1)


def camera_centre(frame) -> np.ndarray:
    """World position of a frame's camera (OpenCV world-to-camera [R | t]: centre = -R^T t)."""
    w2c = frame.camera.world_to_cam.numpy().astype(np.float64)
    return -w2c[:3, :3].T @ w2c[:3, 3]


def test_dome_rig_places_panoptic_layout_cameras_between_each_other():
    from recon.data.procedural_4d import DOME_ELEVATIONS, DOME_TEST_ELEVATIONS
    from recon.data.procedural_scene import LOOK_AT

    scene = procedural_4d_scene(width=32, height=18, n_train=27, n_test=4, n_times=3, test_time_stride=1,
                                rig="dome", n_points=50)
    train = [f for f in scene.frames_train if f.time == 0.0]
    test = [f for f in scene.frames_test if f.time == 0.5]
    assert len(train) == 27 and len(test) == 4 and len(scene.frames_test) == 4 * 2  # test at t = 0.5 and 1.0
    assert train[0].rgba.shape == (18, 32, 4) and [f.name for f in test] == [f"test{j}_t001" for j in range(4)]
    look_at = np.asarray(LOOK_AT)
    centres = {f.name: camera_centre(f) for f in train + test}
    rel = {n: c - look_at for n, c in centres.items()}
    # elevation above the look-at point (up = -y): the train cameras fill the three rings, 9 each
    elevation = {n: np.degrees(np.arcsin(-r[1] / np.linalg.norm(r))) for n, r in rel.items()}
    rings = np.round([elevation[f.name] for f in train]).astype(int)
    assert sorted(set(rings)) == [round(e) for e in DOME_ELEVATIONS]
    assert all((rings == round(e)).sum() == 9 for e in DOME_ELEVATIONS)
    assert sorted({round(elevation[f.name]) for f in test}) == [round(e) for e in DOME_TEST_ELEVATIONS]
    # every camera at the same distance, looking at the scene's centre
    for f in train + test:
        np.testing.assert_allclose(np.linalg.norm(rel[f.name]), 3.0, atol=1e-4)
        axis = f.camera.world_to_cam.numpy()[2, :3]
        np.testing.assert_allclose(axis, -rel[f.name] / np.linalg.norm(rel[f.name]), atol=1e-4)
    # no two cameras in the same place: a test camera is a new view, at least 0.25 m from any train camera
    names = list(centres)
    gaps = [np.linalg.norm(centres[a] - centres[b]) for i, a in enumerate(names) for b in names[i + 1:]]
    assert min(gaps) > 0.25
    # the objects move in the test views too (test0 at t = 0.5 and at t = 1)
    first, last = scene.frames_test[0], scene.frames_test[4]
    assert first.name == "test0_t001" and last.name == "test0_t002"
    assert np.abs(first.rgba.astype(float) - last.rgba.astype(float)).max() > 30
    with pytest.raises(UsageError, match="rig"):
        procedural_4d_scene(rig="sphere")
