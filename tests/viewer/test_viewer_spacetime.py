"""The viewer on 4D models (ply4d files, 4dgs runs): sliced on the server at the GUI's time, the Time folder
(slider, play/pause, speed, slices / s), --time / --play checks before any server starts, and in headless
Chromium: moving the time slider changes the picture (browser tests skip as in test_viewer.py)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch
import pytest

pytest.importorskip("viser")

from recon.export import read_ply4d, write_ply4d, write_splats  # noqa: E402
from recon.core.spacetime_data import SpaceTimeData  # noqa: E402
from tests.viewer.test_viewer import (  # noqa: E402,F401  (browser: a fixture)
    BROWSER_TIMEOUT, _slider_track, browser, render_until, set_camera, small_scene, wait_for)
from viewer.commands import ViewConfig, build_viewer  # noqa: E402
from viewer.scene import ViewerInputError, load_scene  # noqa: E402
from viewer.spacetime import SpaceTimeScene  # noqa: E402


def two_moments(n: int = 200, seed: int = 0) -> SpaceTimeData:
    """n short-lived 4D Gaussians in front of an identity camera: the first half live around t = 0 on the
    left (x < 0), the second half around t = 1 on the right (x > 0); temporal standard deviation 0.1."""
    rng = np.random.default_rng(seed)
    half = n // 2
    x = np.concatenate([rng.uniform(-1.2, -0.2, half), rng.uniform(0.2, 1.2, n - half)])
    means = np.stack([x, rng.uniform(-0.8, 0.8, n), rng.uniform(3.5, 4.5, n),
                      np.r_[np.zeros(half), np.ones(n - half)]], axis=1)
    scales = np.log(np.c_[rng.uniform(0.05, 0.1, (n, 3)), np.full((n, 1), 0.1)])
    identity = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1))
    return SpaceTimeData(means, scales, identity, identity, np.full(n, 3.0), rng.uniform(-1.5, 1.5, (n, 1, 3)))


@pytest.fixture(scope="module")
def file4d(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("viewer4d") / "moving.ply"
    write_ply4d(path, two_moments())
    return path


def test_4d_file_loads_as_a_sliced_scene(file4d):
    scene = load_scene(file4d)
    assert isinstance(scene, SpaceTimeScene) and scene.dynamic and scene.total() == 200
    scene.set_time(0.0)
    early = scene.browser()
    assert len(early) == 100 and (early.centers[:, 0] < 0).all()  # only the t = 0 half, on the left
    scene.set_time(1.0)
    late = scene.browser()
    assert len(late) == 100 and (late.centers[:, 0] > 0).all()
    s = scene.model.slice(1.0)
    np.testing.assert_allclose(late.covariances, s.covars.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(late.opacities[:, 0], s.opacities.detach().numpy(), rtol=1e-6)
    assert len(scene.browser(min_opacity=0.99)) == 0  # opacity sigmoid(3) = 0.95 < 0.99
    np.testing.assert_allclose(scene.browser(2.0).covariances, 4 * late.covariances, rtol=1e-6)


def test_time_gui_slices_plays_and_stops(file4d, tmp_path):
    v = build_viewer(ViewConfig(path=file4d, port=0, output=tmp_path, time=0.0), verbose=False).start()
    try:
        assert {"time", "play", "speed", "rate"} <= set(v.gui)
        before = v.splat_handle.buffer.copy()
        v.gui["time"].value = 1.0  # what the browser's slider does
        assert v.scene.time == 1.0 and not np.array_equal(before, v.splat_handle.buffer)
        assert v.gui["shown"].value == "100 of 200"
        v.gui["speed"].value = 0.2
        v.set_playing(True)
        assert v.gui["play"].label == "pause"
        wait_for(lambda: v.slice_rate is not None, timeout=30.0, what="a second of playback")
        assert v.playing and v.slice_rate > 0
        v.set_playing(False)
        stopped_at = v.scene.time
        time.sleep(0.3)
        assert not v.playing and v.scene.time == stopped_at and v.gui["play"].label == "play"
    finally:
        v.stop()
    assert not v.playing


def test_render_frame_renders_the_model_at_the_current_time(file4d, tmp_path):
    from viewer.camera_path import viser_camera_to_frame

    v = build_viewer(ViewConfig(path=file4d, port=0, output=tmp_path, time=0.0), verbose=False)
    frame = viser_camera_to_frame((1.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0), math.radians(60), 64, 48)
    early = v.render_frame(frame, background=(0.0, 0.0, 0.0))
    v.scene.set_time(1.0)
    late = v.render_frame(frame, background=(0.0, 0.0, 0.0))
    lit = lambda img: img.sum(-1) > 0.05  # noqa: E731
    assert lit(early)[:, :28].mean() > 0.1 and lit(early)[:, 36:].mean() < 0.01  # left half at t = 0
    assert lit(late)[:, 36:].mean() > 0.1 and lit(late)[:, :28].mean() < 0.01  # right half at t = 1


def test_render_of_a_4d_scene_honours_the_crop_box_and_min_opacity(file4d, tmp_path):
    """The render button leaves out what the browser leaves out, for 4D models as for 3D: a crop box around
    part of the t = 0 Gaussians renders exactly like a file holding only those; a threshold above every
    opacity (sigmoid(3) = 0.95 at most) leaves the background."""
    from viewer.camera_path import viser_camera_to_frame
    from viewer.crop import CropBox

    frame = viser_camera_to_frame((1.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0), math.radians(60), 64, 48)
    black = (0.0, 0.0, 0.0)
    scene = load_scene(file4d)
    scene.set_time(0.0)
    full = scene.render_image(frame, black, "cpu")
    crop = CropBox((-0.7, -1.0, 3.0), (-0.2, 1.0, 5.0))  # the right part of the t = 0 (left) half
    cropped = scene.render_image(frame, black, "cpu", crop=crop)
    data = two_moments()
    inside = crop.contains(data.means4[:, :3])  # identity rotations: the sliced centre is (x, y, z)
    assert 0 < len(scene.browser(crop=crop)) == int(inside[:100].sum())
    only = tmp_path / "only.ply"
    write_ply4d(only, data.subset(inside))
    alone = load_scene(only)
    alone.set_time(0.0)
    np.testing.assert_allclose(cropped, alone.render_image(frame, black, "cpu"), atol=1e-6)
    lit = lambda img: img.sum(-1) > 0.05  # noqa: E731
    assert lit(cropped).sum() < 0.8 * lit(full).sum()
    assert np.array_equal(scene.render_image(frame, (0.2, 0.3, 0.4), "cpu", min_opacity=0.99),
                          np.broadcast_to(np.float32([0.2, 0.3, 0.4]), (48, 64, 3)))
    outside = CropBox((5.0, 5.0, 5.0), (6.0, 6.0, 6.0))
    assert not scene.render_image(frame, black, "cpu", crop=outside).any()
    np.testing.assert_array_equal(scene.render_image(frame, black, "cpu", min_opacity=0.0), full)


def test_time_flags_checked_before_a_server_starts(file4d, tmp_path, monkeypatch):
    import viser

    monkeypatch.setattr(viser, "ViserServer", lambda *a, **k: (_ for _ in ()).throw(AssertionError("started")))
    with pytest.raises(ViewerInputError, match="--time 1.5: outside"):
        build_viewer(ViewConfig(path=file4d, port=0, time=1.5), verbose=False)
    flat = tmp_path / "flat.ply"
    write_splats(flat, small_scene(20))
    with pytest.raises(ViewerInputError, match="holds 3D Gaussians, which do not change with time"):
        build_viewer(ViewConfig(path=flat, port=0, time=0.5), verbose=False)
    broken = tmp_path / "broken.ply"
    broken.write_bytes(file4d.read_bytes()[:400])
    with pytest.raises(ViewerInputError, match="broken.ply"):
        build_viewer(ViewConfig(path=broken, port=0), verbose=False)


def test_4dgs_run_folder_opens_its_4d_model(tmp_path):
    from recon.training.trainer import TrainConfig, Trainer

    cfg = TrainConfig(data=Path("procedural-4d"), out=tmp_path / "run", method="4dgs", steps=2, sh_degree=0,
                      progress=False, data_factor=4)
    Trainer(cfg, log=lambda s: None, device="cpu").run()
    scene = load_scene(tmp_path / "run")
    assert isinstance(scene, SpaceTimeScene) and scene.run_dir == tmp_path / "run" and scene.cameras
    np.testing.assert_array_equal(scene.model.to_spacetime_data().means4,
                                  read_ply4d(tmp_path / "run" / "splats4d.ply").means4)


# ---------------------------------------------------------------------------------- in the browser


@pytest.fixture(scope="module")
def live4d(browser, file4d, tmp_path_factory):  # noqa: F811
    v = build_viewer(ViewConfig(path=file4d, port=0, output=tmp_path_factory.mktemp("out4d"), time=0.0),
                     verbose=False).start()
    page = browser.new_page(viewport={"width": 640, "height": 480})
    page.goto(v.url)
    wait_for(v.server.get_clients, what="the browser to connect")
    client = next(iter(v.server.get_clients().values()))
    yield v, client, page
    page.close()
    v.stop()


def left_right(img: np.ndarray) -> tuple[float, float]:
    """Covered fraction of the left and right thirds of a frame."""
    lit = img.sum(-1) > 0.05
    w = lit.shape[1]
    return float(lit[:, : w // 3].mean()), float(lit[:, 2 * w // 3:].mean())


def test_time_slider_changes_the_picture(live4d):
    v, client, page = live4d
    cam = set_camera(client, fov=math.radians(60))
    render_until(client, cam, lambda img: left_right(img)[0] > 0.05 and left_right(img)[1] < 0.01,
                 "the t = 0 Gaussians (left only)")
    thumb, root = _slider_track(page, "time")
    thumb.wait_for(state="visible", timeout=BROWSER_TIMEOUT * 1000)
    box = root.bounding_box()
    page.mouse.click(box["x"] + 0.95 * box["width"], box["y"] + 0.5 * box["height"])  # near the end: t ~ 0.95
    wait_for(lambda: v.scene.time > 0.9, what="the slider's time on the server")
    render_until(client, cam, lambda img: left_right(img)[1] > 0.05 and left_right(img)[0] < 0.01,
                 "the t = 1 Gaussians (right only)")


def test_train_viewer_on_a_4d_run_shows_the_model_at_the_slider_time(tmp_path):
    from recon.training.trainer import TrainConfig, Trainer
    from viewer.training import TrainingViewer

    cfg = TrainConfig(data=Path("procedural-4d"), out=tmp_path / "run", method="4dgs", steps=1000, sh_degree=0,
                      progress=False, data_factor=4, save_every=0)
    trainer = Trainer(cfg, log=lambda *a: None, device="cpu")
    trainer.prepare_out()
    hook = TrainingViewer(every=2, port=0, verbose=False)
    trainer.hooks.append(hook)
    hook.start(trainer)
    try:
        v = hook.viewer
        assert isinstance(v.scene, SpaceTimeScene) and "time" in v.gui
        v.gui["time"].value = 0.8
        shown = v.scene.model
        for _ in range(4):
            trainer.advance(trainer.step)
        assert hook.updates >= 1 and v.scene.model is not shown and v.scene.time == 0.8
        want = trainer.model.slice(0.8)  # the snapshot is the trained model, sliced at the slider's time
        np.testing.assert_allclose(v.scene.browser().centers,
                                   want.means.detach().numpy(), rtol=1e-6, atol=1e-7)
        before = trainer.model.params["means4"].detach().clone()
        trainer.advance(trainer.step)  # the optimiser moves the model, not the viewer's copy
        assert not torch.equal(before, trainer.model.params["means4"].detach())
        np.testing.assert_array_equal(v.scene.model.params["means4"].detach().numpy(), before.numpy())
    finally:
        hook.stop()
