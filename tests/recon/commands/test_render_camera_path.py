"""`splatforge render --path FILE`: a camera path saved with the viewer's keyframe helper is rendered as
a video through its keyframes (interpolated), with the frame count asked for and frames that differ."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from recon.data.camera_paths import interpolate_keyframes
from tests.recon.tiny_runs import tiny_run

W, H = 48, 32


def fake_client(position, look_at=(0.0, 0.0, 0.0), fov=math.radians(60), size=(W, H)):
    """What ViewerServer.add_keyframe reads from a viser client: camera wxyz/position/fov/image size."""
    from rasterizer.quaternions import rotmat_to_quat as matrix_to_quat_wxyz

    c = np.asarray(position, dtype=np.float64)
    z = np.asarray(look_at) - c
    z /= np.linalg.norm(z)
    x = np.cross([0.0, 1.0, 0.0], z)  # OpenCV camera: x right, y down (world +y is down)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    R_wc = np.stack([x, y, z], axis=1)
    cam = SimpleNamespace(wxyz=matrix_to_quat_wxyz(R_wc), position=c, fov=fov, image_width=size[0],
                          image_height=size[1])
    return SimpleNamespace(camera=cam)


def save_keyframes(tmp_path: Path, positions) -> Path:
    pytest.importorskip("viser")
    from viewer.scene import SplatScene
    from viewer.server import ViewerServer

    from recon.export.splats import empty_splats

    dummy = SplatScene(empty_splats(), tmp_path / "x.ply")
    v = ViewerServer(dummy, output_dir=tmp_path / "viewer", verbose=False)  # never started: helpers only
    path = None
    for p in positions:
        path = v.add_keyframe(fake_client(p, size=(2 * W, 2 * H)))  # a "browser window" twice the video size
    return path


def test_interpolation_hits_keyframes_and_moves_smoothly():
    from viewer.camera_path import viser_camera_to_frame

    keys = [viser_camera_to_frame(fake_client(p).camera.wxyz, p, 1.0, W, H)
            for p in [(0, -0.5, -3.0), (2.5, -0.5, -1.5), (3.0, -1.0, 1.0)]]
    cams = interpolate_keyframes([k.world_to_cam for k in keys], [k.K for k in keys], W, H, 9)
    assert len(cams) == 9
    assert np.allclose(cams[0].world_to_cam.numpy(), keys[0].world_to_cam, atol=1e-5)
    assert np.allclose(cams[4].world_to_cam.numpy(), keys[1].world_to_cam, atol=1e-5)  # middle keyframe
    assert np.allclose(cams[-1].world_to_cam.numpy(), keys[2].world_to_cam, atol=1e-5)
    centres = np.stack([-(c.world_to_cam[:3, :3].T @ c.world_to_cam[:3, 3]).numpy() for c in cams])
    steps = np.linalg.norm(np.diff(centres, axis=0), axis=1)
    assert steps.min() > 0.05 and steps.max() < 3 * steps.min()  # moves every frame, no jumps
    for c in cams:  # rotations stay orthonormal
        R = c.world_to_cam[:3, :3].double().numpy()
        assert np.allclose(R @ R.T, np.eye(3), atol=1e-5)


def test_render_video_along_saved_camera_path(tmp_path, capsys):
    import imageio.v2 as imageio
    import imageio_ffmpeg

    from recon.cli import main

    run = tiny_run(tmp_path)
    path_file = save_keyframes(tmp_path, [(0.0, -0.3, -3.0), (2.2, -0.6, -2.2), (3.0, -0.3, 0.0)])
    assert path_file.name == "camera_path.json"
    out = tmp_path / "video.mp4"
    main(["render", "--run", str(run), "--path", str(path_file), "--out", str(out), "--frames", "7", "--fps", "10",
          "--max-side", str(W), "--no-progress"])
    assert "wrote" in capsys.readouterr().out
    assert imageio_ffmpeg.count_frames_and_secs(str(out))[0] == 7
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as a plain open() would, not mkstemp's 0600
    with imageio.get_reader(out) as reader:
        frames = [reader.get_data(i).astype(np.float64) for i in range(7)]
    assert frames[0].shape == (H, W, 3)
    assert frames[0].std() > 5  # splats are in view, not a blank background
    diffs = [np.abs(a - b).mean() for a, b in zip(frames, frames[1:])]
    assert min(diffs) > 0.5, diffs  # every frame differs from the next


def test_render_path_errors_name_the_file(tmp_path, capsys):
    from recon.commands.render import render

    run = tiny_run(tmp_path)
    for name, text in [("missing.json", None), ("broken.json", "{not json"), ("empty.json", '{"frames": []}')]:
        f = tmp_path / name
        if text is not None:
            f.write_text(text)
        with pytest.raises(SystemExit) as exc:
            render(run=run, path=str(f), out=tmp_path / "v.mp4", frames=3, progress=False)
        assert exc.value.code == 2
        assert name in capsys.readouterr().err
    assert not (tmp_path / "v.mp4").exists()


def test_missing_video_encoder_is_named(tmp_path, capsys, monkeypatch):
    """Without imageio-ffmpeg, imageio would pick another plugin for .mp4 and fail with an unrelated
    message; the command names the missing package before rendering anything."""
    from recon.commands.render import MissingEncoderError, render, render_video

    run = tiny_run(tmp_path)
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import fails
    with pytest.raises(MissingEncoderError, match="imageio-ffmpeg"):
        render_video(run, "orbit", tmp_path / "v.mp4", frames=2, progress=False)
    with pytest.raises(SystemExit) as exit_info:
        render(run, "orbit", tmp_path / "v.mp4", frames=2, progress=False)
    assert exit_info.value.code == 2
    assert "imageio-ffmpeg" in capsys.readouterr().err and not (tmp_path / "v.mp4").exists()
