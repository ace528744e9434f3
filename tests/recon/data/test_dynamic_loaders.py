"""CMU Panoptic (Dynamic 3D Gaussians' layout) and Neural 3D Video loaders, on fixtures written from the built-in
procedural-4d rig: every camera rendered at every time step by our rasterizer, saved in each format's layout."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from recon.data import load_scene
from recon.data.n3dv import llff_world_to_cam, selected_frames
from recon.data.procedural_4d import rig_cameras, surfels_at
from recon.data.procedural_scene import render_surfels
from recon.data.scene import DataFormatError, MissingImageError
from recon.core.errors import UsageError

SIZE, N_TRAIN, T = 48, 4, 6


def rig():
    """(train cameras, test camera, rgba [T, C+1, H, W, 4]) of the procedural-4d rig at T times."""
    train, test = rig_cameras(N_TRAIN, SIZE, SIZE, 3.0, math.radians(50.0))
    frames = np.stack([render_surfels(surfels_at(k / (T - 1)), train + [test]) for k in range(T)])
    return train, test, frames


@pytest.fixture(scope="module")
def rendered():
    return rig()


def write_panoptic(root: Path, rendered, points: bool = True) -> Path:
    train, test, frames = rendered
    for split, cams, idx in (("train", train, range(N_TRAIN)), ("test", [test], [N_TRAIN])):
        meta = {"w": SIZE, "h": SIZE, "k": [], "w2c": [], "fn": [], "cam_id": []}
        for k in range(T):
            meta["k"].append([c.K.tolist() for c in cams])
            meta["w2c"].append([c.world_to_cam.tolist() for c in cams])
            meta["fn"].append([f"{i}/{k:06d}.jpg" for i in idx])
            meta["cam_id"].append(list(idx))
            for i in idx:
                out = root / "ims" / str(i) / f"{k:06d}.jpg"
                out.parent.mkdir(parents=True, exist_ok=True)
                rgba = frames[k, i].astype(np.float32) / 255.0
                Image.fromarray((rgba[..., :3] * rgba[..., 3:] * 255).round().astype(np.uint8)).save(out, quality=95)
        (root / f"{split}_meta.json").write_text(json.dumps(meta))
    if points:
        s = surfels_at(0.5)
        np.savez(root / "init_pt_cld.npz", data=np.concatenate([s.means, s.colors, np.ones((len(s.means), 1))], 1))
    return root


def to_llff(w2c: np.ndarray, K: np.ndarray) -> np.ndarray:
    """[17] poses_bounds row of an OpenCV world-to-camera and K (the inverse of llff_world_to_cam)."""
    c2w = np.linalg.inv(w2c)
    right, down, fwd, centre = c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3]
    pose = np.stack([down, right, -fwd, centre, [SIZE, SIZE, K[0, 0]]], axis=1)  # [3, 5]
    return np.concatenate([pose.ravel(), [0.5, 8.0]])


def write_n3dv(root: Path, rendered, fps: int = 10, drop_last_frame_of: str | None = None) -> Path:
    import imageio.v3 as iio

    train, test, frames = rendered
    cams = [test] + train  # cam00 is the test view
    root.mkdir(parents=True, exist_ok=True)
    order = [N_TRAIN] + list(range(N_TRAIN))
    for j, (cam, i) in enumerate(zip(cams, order)):
        rgba = frames[:, i].astype(np.float32) / 255.0
        video = (rgba[..., :3] * rgba[..., 3:] * 255).round().astype(np.uint8)
        if drop_last_frame_of == f"cam{j:02d}":
            video = video[:-1]
        iio.imwrite(root / f"cam{j:02d}.mp4", video, plugin="FFMPEG", fps=fps, codec="libx264", quality=10,
                    pixelformat="yuv444p", macro_block_size=16)
    np.save(root / "poses_bounds.npy", np.stack([to_llff(c.world_to_cam.double().numpy(), c.K.double().numpy())
                                                 for c in cams]))
    return root


def test_panoptic_loads_cameras_times_points_and_images(tmp_path, rendered):
    root = write_panoptic(tmp_path / "pan", rendered)
    scene = load_scene(root)
    train, test, frames = rendered
    assert scene.source_format == "panoptic" and len(scene.frames_train) == N_TRAIN * T and len(scene.frames_test) == T
    assert sorted({f.time for f in scene.frames_train}) == pytest.approx([k / (T - 1) for k in range(T)])
    assert scene.duration == pytest.approx((T - 1) / 30.0) and scene.background == (0.0, 0.0, 0.0)
    first = scene.frames_train[1]  # time 0, camera 1
    np.testing.assert_allclose(first.camera.world_to_cam.numpy(), train[1].world_to_cam.numpy(), atol=1e-6)
    img = scene.load_image(first)
    expected = frames[0, 1, ..., :3].astype(np.float32) / 255 * frames[0, 1, ..., 3:] / 255
    assert np.abs(img - expected).mean() < 0.02
    assert scene.points is not None and scene.points.shape[1] == 3 and scene.point_colors.dtype == np.uint8


def test_panoptic_without_points_and_bad_meta(tmp_path, rendered):
    root = write_panoptic(tmp_path / "pan", rendered, points=False)
    assert load_scene(root).points is None
    meta = json.loads((root / "train_meta.json").read_text())
    meta["w2c"] = meta["w2c"][:-1]
    (root / "train_meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataFormatError, match=r"train_meta.json: 'w2c' has shape \(5, 4, 4, 4\).*disagree"):
        load_scene(root)


def test_panoptic_trains_4dgs_a_few_steps(tmp_path, rendered):
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    root = write_panoptic(tmp_path / "pan", rendered)
    metrics = train_model(TrainConfig(data=root, out=tmp_path / "run", method="4dgs", steps=20, save_every=0,
                                      progress=False), log=lambda *a: None)
    assert math.isfinite(metrics["test"]["psnr"]) and len(metrics["test"]["per_time"]) == T


def test_llff_pose_round_trip(rendered):
    train, _, _ = rendered
    w2c = train[2].world_to_cam.double().numpy()
    row = to_llff(w2c, train[2].K.double().numpy())
    np.testing.assert_allclose(llff_world_to_cam(row[:15].reshape(3, 5)), w2c, atol=1e-12)


def n3dv_image(scene, frame) -> np.ndarray:
    """float32 [H, W, 3] of a video frame, read as training reads it (FrameImages)."""
    from recon.data.frame_images import FrameImages

    return FrameImages([frame]).load(0).numpy()[..., :3].astype(np.float32) / 255.0


def count_video_reads(monkeypatch) -> list:
    """Patch imageio's iterator so that each video streamed is recorded."""
    import imageio.v3 as iio

    calls, real = [], iio.imiter

    def counting(path, *a, **k):
        calls.append(Path(path).name)
        return real(path, *a, **k)

    monkeypatch.setattr(iio, "imiter", counting)
    return calls


def test_n3dv_decodes_videos_once_into_the_frame_cache(tmp_path, rendered, monkeypatch):
    """The videos are streamed once into the frame cache (uint8 .npy per kept frame, no extracted JPEGs); a
    second load decodes nothing (frame counts cached too); a touched video is decoded again."""
    root = write_n3dv(tmp_path / "n3dv", rendered)
    train, test, frames = rendered
    calls = count_video_reads(monkeypatch)
    scene = load_scene(root, cache_dir=tmp_path / "cache")
    assert sorted(calls) == [f"cam{j:02d}.mp4" for j in range(N_TRAIN + 1)]  # one pass per video
    assert scene.source_format == "n3dv" and len(scene.frames_test) == T and len(scene.frames_train) == N_TRAIN * T
    assert scene.duration == pytest.approx((T - 1) / 10)
    assert all(f.name.startswith("cam00/") for f in scene.frames_test)
    np.testing.assert_allclose(scene.frames_test[0].camera.world_to_cam.numpy(), test.world_to_cam.numpy(), atol=1e-5)
    np.testing.assert_allclose(scene.frames_test[0].camera.K.numpy(), test.K.numpy(), atol=1e-4)
    img = n3dv_image(scene, scene.frames_test[2])
    expected = frames[2, N_TRAIN, ..., :3].astype(np.float32) / 255 * frames[2, N_TRAIN, ..., 3:] / 255
    assert np.abs(img - expected).mean() < 0.03
    assert not list(tmp_path.rglob("*.jpg")) and not list(root.rglob("*.jpg"))
    entries = sorted((tmp_path / "cache" / "frames").rglob("*.npy"))
    assert len(entries) == (N_TRAIN + 1) * T
    contents = [p.read_bytes() for p in entries]
    calls.clear()
    again = load_scene(root, cache_dir=tmp_path / "cache")  # second load: nothing decoded again (entries are
    assert calls == [] and [p.read_bytes() for p in entries] == contents  # claimed: mtime only, for pruning)
    assert np.array_equal(n3dv_image(again, again.frames_test[2]), img) and calls == []
    st = (root / "cam02.mp4").stat()
    os.utime(root / "cam02.mp4", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # an edited video: a new key
    load_scene(root, cache_dir=tmp_path / "cache")
    assert "cam02.mp4" in calls and "cam01.mp4" not in calls


def test_n3dv_data_factor_downscales_while_decoding(tmp_path, rendered):
    root = write_n3dv(tmp_path / "n3dv", rendered)
    full = load_scene(root, cache_dir=tmp_path / "cache")
    half = load_scene(root, cache_dir=tmp_path / "cache", data_factor=2)
    f = half.frames_train[3]
    assert (f.width, f.height) == (SIZE // 2, SIZE // 2)
    np.testing.assert_allclose(f.camera.K[:2].numpy(), full.frames_train[3].camera.K[:2].numpy() / 2, atol=1e-5)
    img = n3dv_image(half, f)
    big = n3dv_image(full, full.frames_train[3])
    box = big.reshape(SIZE // 2, 2, SIZE // 2, 2, 3).mean(axis=(1, 3))
    assert np.abs(img - box).max() < 2.5 / 255


def test_n3dv_frame_missing_from_the_cache_is_decoded_from_the_video(tmp_path, rendered):
    root = write_n3dv(tmp_path / "n3dv", rendered)
    scene = load_scene(root, cache_dir=tmp_path / "cache")
    frame = scene.frames_train[-1]
    before = n3dv_image(scene, frame)
    for p in (tmp_path / "cache" / "frames").rglob("*.npy"):
        p.write_bytes(b"damaged")
    from recon.data.frame_images import FrameImages

    images = FrameImages([frame])
    assert np.array_equal(images.load(0).numpy()[..., :3].astype(np.float32) / 255.0, before)
    assert images.decodes == 1
    reread = FrameImages([frame])  # the damaged entry was written again
    assert np.array_equal(reread.load(0).numpy(), images.load(0).numpy()) and reread.decodes == 0


def test_n3dv_frame_stride_and_time_range(tmp_path, rendered):
    root = write_n3dv(tmp_path / "n3dv", rendered)
    scene = load_scene(root, cache_dir=tmp_path / "cache", frame_stride=2, time_range="0.1:")
    assert [f.name for f in scene.frames_test] == ["cam00/000001.jpg", "cam00/000003.jpg", "cam00/000005.jpg"]
    assert [f.time for f in scene.frames_test] == [0.0, 0.5, 1.0] and scene.duration == pytest.approx(0.4)
    assert selected_frames(300, 30.0, 1, "2:3") == list(range(60, 91))
    with pytest.raises(UsageError, match="--time-range '5:1'"):
        selected_frames(300, 30.0, 1, "5:1")
    with pytest.raises(DataFormatError, match="apply to videos"):
        load_scene(write_panoptic(tmp_path / "pan", rendered, points=False), frame_stride=2)


def test_n3dv_refuses_uneven_missing_and_unreadable_videos(tmp_path, rendered):
    uneven = write_n3dv(tmp_path / "uneven", rendered, drop_last_frame_of="cam02")
    with pytest.raises(DataFormatError, match=r"different frame counts \(cam00: 6, cam01: 6, cam02: 5"):
        load_scene(uneven, cache_dir=tmp_path / "c1")
    missing = write_n3dv(tmp_path / "missing", rendered)
    (missing / "cam03.mp4").unlink()
    with pytest.raises(DataFormatError, match="5 camera poses but 4 camNN.mp4 videos"):
        load_scene(missing, cache_dir=tmp_path / "c2")
    broken = write_n3dv(tmp_path / "broken", rendered)
    (broken / "cam01.mp4").write_bytes(b"not a video")
    with pytest.raises(MissingImageError, match="cam01.mp4: cannot read the video"):
        load_scene(broken, cache_dir=tmp_path / "c3")


def test_n3dv_held_out_cameras_and_time_steps(tmp_path, rendered):
    """--test-cameras / --test-every on N3DV: added to cam00 (its protocol's test view), never taken from it."""
    root = write_n3dv(tmp_path / "n3dv", rendered)
    scene = load_scene(root, cache_dir=tmp_path / "cache", test_cameras="cam02", test_time_every=3)
    test_cams = {Path(f.name).parent.name for f in scene.frames_test}
    assert test_cams == {"cam00", "cam02", "cam01", "cam03", "cam04"}  # cam02 whole, every camera at held steps
    held = {f.time for f in scene.frames_test if Path(f.name).parent.name not in ("cam00", "cam02")}
    assert held == {1 / (T - 1), 4 / (T - 1)}  # steps 1 and 4 of 0..5 (k % 3 == 1)
    assert len(scene.frames_train) == (N_TRAIN - 1) * (T - 2)
    assert not any(Path(f.name).parent.name in ("cam00", "cam02") or f.time in held for f in scene.frames_train)
    with pytest.raises(UsageError, match="no camera 'cam9'"):
        load_scene(root, cache_dir=tmp_path / "cache", test_cameras="cam9")
