"""Blender / NeRF-synthetic and D-NeRF loading: real facts on ../shared/data (skipped when absent)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from recon.data import MissingImageError, load_scene
from rasterizer.camera import opengl_cam_to_world_to_opencv_world_to_cam

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"
LEGO = SHARED / "lego_400"
MUTANT = SHARED / "dnerf_mutant"


def need(path: Path) -> Path:
    if not (path / "transforms_train.json").is_file():
        pytest.skip(f"real-data test: ../shared/data/{path.name} not found")
    return path


def synthetic_blender(root: Path, n: int) -> Path:
    """A Blender-format folder with ``n`` train and test frames of 400x400 RGBA (transparent corners)."""
    from PIL import Image

    from recon.data.procedural import orbit_cameras

    yy, xx = np.mgrid[0:400, 0:400]
    alpha = (((xx - 200) ** 2 + (yy - 200) ** 2) < 120**2).astype(np.uint8) * 255
    for split in ("train", "test"):
        (root / split).mkdir(parents=True)
        frames = []
        for i, cam in enumerate(orbit_cameras(n, 4.0, 400, 400, 0.6911112070083618)):
            c2w = np.linalg.inv(cam.world_to_cam.double().numpy())
            c2w[:3, 1:3] *= -1  # OpenCV -> OpenGL camera axes
            frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": c2w.tolist()})
            rgb = np.random.default_rng(i).integers(0, 256, (400, 400, 3), dtype=np.uint8)
            Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(root / split / f"r_{i}.png")
        meta = {"camera_angle_x": 0.6911112070083618, "frames": frames}
        (root / f"transforms_{split}.json").write_text(json.dumps(meta))
    return root


def mini_lego(tmp_path: Path, n: int = 3) -> Path:
    """The first ``n`` train and test frames of lego_400 copied to tmp_path (synthetic when absent)."""
    root = tmp_path / "lego_mini"
    if not (LEGO / "transforms_train.json").is_file():
        return synthetic_blender(root, n)
    for split in ("train", "test"):
        meta = json.loads((LEGO / f"transforms_{split}.json").read_text())
        meta["frames"] = meta["frames"][:n]
        (root / split).mkdir(parents=True)
        for fr in meta["frames"]:
            shutil.copy(LEGO / (fr["file_path"] + ".png"), root / (fr["file_path"] + ".png"))
        (root / f"transforms_{split}.json").write_text(json.dumps(meta))
    return root


def test_lego_facts():
    scene = load_scene(need(LEGO))
    assert scene.source_format == "blender"
    assert len(scene.frames_train) == 100 and len(scene.frames_test) == 200
    assert scene.background == (1.0, 1.0, 1.0) and scene.points is None
    f = scene.frames_train[0]
    assert (f.width, f.height) == (400, 400)
    K = f.camera.K
    assert abs(K[0, 0].item() - 555.6) < 0.1 and abs(K[1, 1].item() - 555.6) < 0.1
    assert (K[0, 2].item(), K[1, 2].item()) == (200.0, 200.0)
    assert f.camera.world_to_cam.dtype == torch.float32 and f.camera.world_to_cam.shape == (4, 4)
    assert f.name == "train/r_0" and f.image_path.name == "r_0.png"


def test_lego_image_composited_on_white():
    scene = load_scene(need(LEGO))
    img = scene.load_image(scene.frames_train[0])
    assert img.shape == (400, 400, 3) and img.dtype == np.float32
    assert img.min() >= 0.0 and img.max() <= 1.0
    assert np.allclose(img[0, 0], 1.0)  # corners are transparent -> white
    assert (img.mean(axis=-1) < 0.9).mean() > 0.05  # the model itself is there


def test_lego_cameras_look_at_the_object():
    """Real check of the OpenGL -> OpenCV conversion: the origin is in front of and inside every camera."""
    scene = load_scene(need(LEGO))
    for f in scene.frames_train:
        w2c, K = f.camera.world_to_cam.double(), f.camera.K.double()
        xc = w2c[:3, 3]  # world origin in camera coordinates
        assert xc[2] > 2.0
        uv = (K @ xc)[:2] / xc[2]
        assert 100 < uv[0] < 300 and 100 < uv[1] < 300
    # lego cameras sit on a hemisphere of radius 4.03 around the origin
    c2w = np.stack([np.linalg.inv(f.camera.world_to_cam.double().numpy()) for f in scene.frames_train])
    centers = c2w[:, :3, 3]
    np.testing.assert_allclose(np.linalg.norm(centers, axis=1), 4.031, atol=0.01)
    center, radius = scene.nerfpp_norm()
    np.testing.assert_allclose(center, centers.mean(axis=0), atol=1e-5)
    assert radius == pytest.approx(1.1 * np.linalg.norm(centers - centers.mean(axis=0), axis=1).max(), rel=1e-5)
    assert scene.extent == pytest.approx(radius)


def test_opengl_conversion_by_hand():
    """A camera at (0, 0, 5) looking down -z in OpenGL terms sees the origin straight ahead, y flipped."""
    c2w_gl = np.eye(4)
    c2w_gl[2, 3] = 5.0
    w2c = opengl_cam_to_world_to_opencv_world_to_cam(c2w_gl)
    np.testing.assert_allclose(w2c @ [0, 0, 0, 1], [0, 0, 5, 1])
    np.testing.assert_allclose(w2c @ [0, 1, 0, 1], [0, -1, 5, 1])  # world up -> image up (y down)
    np.testing.assert_allclose(w2c @ [1, 0, 0, 1], [1, 0, 5, 1])


def test_dnerf_time():
    scene = load_scene(need(MUTANT))
    assert scene.source_format == "dnerf"
    assert len(scene.frames_train) == 150 and len(scene.frames_test) == 20
    times = [f.time for f in scene.frames_train]
    assert all(t is not None and 0.0 <= t <= 1.0 for t in times)
    assert min(times) == 0.0 and max(times) == 1.0
    assert scene.frames_train[0].width == 800


def test_data_factor_2_halves_K_and_size(tmp_path):
    root = mini_lego(tmp_path)
    full = load_scene(root)
    half = load_scene(root, data_factor=2, cache_dir=tmp_path / "cache")
    for a, b in zip(full.frames, half.frames):
        assert (b.width, b.height) == (200, 200)
        torch.testing.assert_close(b.camera.K[:2], a.camera.K[:2] / 2)
        torch.testing.assert_close(b.camera.world_to_cam, a.camera.world_to_cam)
        img = half.load_image(b)
        assert img.shape == (200, 200, 3)
        # area downscale: the half-size image equals the 2x2 mean of the full one (premultiplied alpha)
        ref = full.load_image(a).reshape(200, 2, 200, 2, 3).mean(axis=(1, 3))
        assert np.abs(img - ref).mean() < 0.01
    assert (tmp_path / "cache" / "train_2" / "r_0.png").is_file()
    # second load reuses the cache
    again = load_scene(root, data_factor=2, cache_dir=tmp_path / "cache")
    assert [f.image_path for f in again.frames] == [f.image_path for f in half.frames]


def test_data_factor_default_cache_next_to_data(tmp_path):
    root = mini_lego(tmp_path, n=1)
    scene = load_scene(root, data_factor=4)
    assert scene.frames_train[0].image_path == root / "train_4" / "r_0.png"
    assert scene.frames_train[0].camera.K[0, 0].item() == pytest.approx(555.555 / 4, rel=1e-4)


def test_missing_image_named(tmp_path):
    root = mini_lego(tmp_path)
    (root / "train" / "r_1.png").unlink()
    with pytest.raises(MissingImageError, match=r"r_1\.png.*"):
        load_scene(root)
    with pytest.raises(MissingImageError, match=r"transforms_train\.json"):
        load_scene(root)


def test_unreadable_image_named(tmp_path):
    root = mini_lego(tmp_path)
    scene = load_scene(root)
    (root / "train" / "r_2.png").write_bytes(b"not a png")
    with pytest.raises(MissingImageError, match=r"r_2\.png"):
        scene.load_image(scene.frames_train[2])


def test_black_background(tmp_path):
    root = mini_lego(tmp_path, n=1)
    scene = load_scene(root, background=(0.0, 0.0, 0.0))
    assert np.allclose(scene.load_image(scene.frames_train[0])[0, 0], 0.0)


def test_bad_json_named(tmp_path):
    root = mini_lego(tmp_path, n=1)
    (root / "transforms_test.json").write_text("{ not json")
    with pytest.raises(ValueError, match=r"transforms_test\.json.*JSON"):
        load_scene(root)
