"""The viewer on an avatar (a --method meshgs run): posed on the server at the GUI's time through the 4D
playback controls (slider labelled "pose time", play/pause); times between captured poses interpolate,
a captured pose's time gives the model's own render."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("viser")
pytest.importorskip("open3d")  # the tiny avatar capture is rendered with it (tests/recon/avatar/conftest.py)

from tests.recon.avatar.conftest import make_tiny_mesh  # noqa: E402
from tests.viewer.test_viewer import wait_for  # noqa: E402
from viewer.avatar import AvatarScene  # noqa: E402
from viewer.commands import ViewConfig, build_viewer  # noqa: E402
from viewer.scene import load_scene  # noqa: E402


@pytest.fixture(scope="module")
def avatar_run(tmp_path_factory) -> Path:
    """A tiny meshgs run (4 poses at times 0, 1/3, 2/3, 1; 10 CPU steps) of the procedural blob."""
    from recon.data.avatar_dataset import make_avatar_dataset
    from recon.training.trainer import TrainConfig, Trainer

    root = tmp_path_factory.mktemp("avatar_view")
    make_avatar_dataset(make_tiny_mesh(root / "blob.ply"), root / "capture", poses=3, unseen=1, views=9, size=24,
                        samples=1, seed=0, per_side=1)
    cfg = TrainConfig(data=root / "capture", out=root / "run", method="meshgs", steps=10, sh_degree=1,
                      progress=False)
    Trainer(cfg, log=lambda s: None, device="cpu").run()
    return root / "run"


def frame_of(scene):
    """A training camera of the run (looking at the avatar)."""
    return scene.cameras[0].camera


def test_meshgs_run_loads_as_an_avatar_scene_posed_by_time(avatar_run):
    scene = load_scene(avatar_run)
    assert isinstance(scene, AvatarScene) and scene.dynamic and scene.time == 0.0 and scene.cameras
    assert scene.time_label == "pose time" and "4 captured poses" in scene.time_hint
    at0 = scene.browser().centers.copy()
    scene.set_time(0.5)  # between poses 1 and 2: not a captured pose
    mid = scene.browser().centers.copy()
    scene.set_time(1.0)
    end = scene.browser().centers.copy()
    assert np.abs(mid - at0).max() > 0.01 and np.abs(end - mid).max() > 0.01
    expected = scene.model.to_splat_data(0.5).means  # the pose the model itself takes at t = 0.5
    scene.set_time(0.5)
    np.testing.assert_allclose(scene.browser().centers, expected, atol=1e-6)


def test_two_times_render_differently_and_a_captured_pose_is_the_models_render(avatar_run):
    scene = load_scene(avatar_run)
    frame = frame_of(scene)
    white = (1.0, 1.0, 1.0)
    scene.set_time(0.5)
    mid = scene.render_image(frame, white, "cpu")
    scene.set_time(1 / 3)
    pose1 = scene.render_image(frame, white, "cpu")
    assert np.abs(mid - pose1).max() > 0.05
    with torch.no_grad():
        own, _, _ = scene.model.render([frame], None, torch.ones(3), t=1 / 3)
    np.testing.assert_allclose(pose1, own[0].clamp(0, 1).numpy(), atol=1e-4)


def test_pose_time_slider_and_play_drive_the_avatar(avatar_run, tmp_path):
    v = build_viewer(ViewConfig(path=avatar_run, port=0, output=tmp_path, time=0.0), verbose=False).start()
    try:
        assert {"time", "play", "speed", "rate"} <= set(v.gui) and v.gui["time"].label == "pose time"
        before = v.splat_handle.buffer.copy()
        v.gui["time"].value = 0.5  # what the browser's slider does
        assert v.scene.time == 0.5 and not np.array_equal(before, v.splat_handle.buffer)
        v.gui["speed"].value = 0.5
        v.set_playing(True)
        wait_for(lambda: v.slice_rate is not None, timeout=30.0, what="a second of playback")
        assert v.playing and v.slice_rate > 0
        v.set_playing(False)
        assert not v.playing
    finally:
        v.stop()


def test_play_flag_accepted_and_time_outside_0_1_refused(avatar_run, tmp_path):
    from viewer.scene import ViewerInputError

    with pytest.raises(ViewerInputError, match="--time 1.5: outside"):
        build_viewer(ViewConfig(path=avatar_run, port=0, time=1.5), verbose=False)
    v = build_viewer(ViewConfig(path=avatar_run, port=0, output=tmp_path, time=2 / 3, play=True), verbose=False)
    assert math.isclose(v.scene.time, 2 / 3)
