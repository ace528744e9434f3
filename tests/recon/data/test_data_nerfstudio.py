"""nerfstudio / instant-ngp transforms.json loading on synthetic data written to tmp_path."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from plyfile import PlyData, PlyElement

from recon.data import DataFormatError, MissingImageError, load_mask, load_nerfstudio, load_scene
from recon.data.undistort import undistorted_intrinsics
from recon.data.procedural import orbit_cameras

W, H = 48, 32


def cv_w2c_to_gl_c2w(w2c: np.ndarray) -> np.ndarray:
    """Test-side inverse of the loader's conversion, written independently: invert, then flip y and z."""
    c2w = np.linalg.inv(w2c)
    c2w[:3, 1:3] *= -1
    return c2w


def write_images(root: Path, names: list[str], mode: str = "RGB") -> None:
    rng = np.random.default_rng(0)
    for n in names:
        (root / n).parent.mkdir(parents=True, exist_ok=True)
        ch = 4 if mode == "RGBA" else 3
        Image.fromarray(rng.integers(0, 256, size=(H, W, ch), dtype=np.uint8), mode).save(root / n)


def write_ply(path: Path, xyz: np.ndarray, rgb: np.ndarray) -> None:
    v = np.zeros(len(xyz), dtype=[("x", "f4"), ("y", "f4"), ("z", "f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1")])
    v["x"], v["y"], v["z"] = xyz.T
    v["red"], v["green"], v["blue"] = rgb.T
    PlyData([PlyElement.describe(v, "vertex")]).write(str(path))


def make_dataset(root: Path, n: int = 9, extra: dict | None = None, frame_extra=None) -> tuple[Path, list]:
    """transforms.json with orbit cameras (OpenGL c2w), global intrinsics; returns (root, cameras)."""
    root.mkdir(parents=True, exist_ok=True)
    cams = orbit_cameras(n, 3.0, W, H, math.radians(50))
    frames = []
    for i, cam in enumerate(cams):
        fr = {"file_path": f"images/frame_{i:05d}.png", "transform_matrix": cv_w2c_to_gl_c2w(cam.world_to_cam.double().numpy()).tolist()}
        if frame_extra:
            fr.update(frame_extra(i))
        frames.append(fr)
    K = cams[0].K.double().numpy()
    meta = {"fl_x": K[0, 0], "fl_y": K[1, 1], "cx": K[0, 2], "cy": K[1, 2], "w": W, "h": H, "frames": frames}
    meta.update(extra or {})
    (root / "transforms.json").write_text(json.dumps(meta))
    write_images(root, [f["file_path"] for f in frames])
    return root, cams


def test_poses_and_intrinsics_convert_to_opencv(tmp_path):
    root, cams = make_dataset(tmp_path / "ns")
    scene = load_scene(root)
    assert scene.source_format == "nerfstudio"
    assert len(scene.frames) == 9 and len(scene.frames_test) == 2  # frames 0 and 8 (every 8th by name)
    assert [f.name for f in scene.frames_test] == ["images/frame_00000.png", "images/frame_00008.png"]
    by_name = {f.name: f for f in scene.frames}
    for i, cam in enumerate(cams):
        f = by_name[f"images/frame_{i:05d}.png"]
        torch.testing.assert_close(f.camera.world_to_cam, cam.world_to_cam, atol=1e-5, rtol=0)
        torch.testing.assert_close(f.camera.K, cam.K)
        origin = f.camera.world_to_cam.double() @ torch.tensor([0, 0, 0, 1.0], dtype=torch.float64)
        assert origin[2] > 0  # the orbit target is in front of the camera


def test_per_frame_intrinsics_override(tmp_path):
    root, _ = make_dataset(tmp_path / "ns", frame_extra=lambda i: {"fl_x": 40.0 + i, "fl_y": 41.0 + i, "cx": 20.0, "cy": 15.0})
    scene = load_scene(root, test_every=0)
    for i, f in enumerate(scene.frames):
        np.testing.assert_allclose(f.camera.K.numpy(), [[40 + i, 0, 20], [0, 41 + i, 15], [0, 0, 1]])


def test_instant_ngp_camera_angle_x(tmp_path):
    root, _ = make_dataset(tmp_path / "ngp")
    meta = json.loads((root / "transforms.json").read_text())
    for k in ("fl_x", "fl_y", "cx", "cy", "w", "h"):
        meta.pop(k)
    meta["camera_angle_x"] = math.radians(50)
    (root / "transforms.json").write_text(json.dumps(meta))
    f = load_scene(root).frames[0]
    assert (f.width, f.height) == (W, H)  # read from the image
    fx = 0.5 * W / math.tan(math.radians(25))
    np.testing.assert_allclose(f.camera.K.numpy(), [[fx, 0, W / 2], [0, fx, H / 2], [0, 0, 1]], rtol=1e-6)


def test_applied_transform_undone_and_points(tmp_path):
    """ns-process-data style: poses and PLY in a transformed world; we get back the original world."""
    A = np.eye(4)[[0, 2, 1, 3]]
    A[2] *= -1  # the transform ns-process-data applies to COLMAP worlds
    rng = np.random.default_rng(0)
    xyz = rng.uniform(-1, 1, (30, 3))
    rgb = rng.integers(0, 256, (30, 3)).astype(np.uint8)

    root, cams = make_dataset(tmp_path / "ns", extra={"applied_transform": A[:3].tolist(), "ply_file_path": "sparse_pc.ply"})
    meta = json.loads((root / "transforms.json").read_text())
    for fr in meta["frames"]:
        fr["transform_matrix"] = (A @ np.array(fr["transform_matrix"])).tolist()
    (root / "transforms.json").write_text(json.dumps(meta))
    write_ply(root / "sparse_pc.ply", xyz @ A[:3, :3].T + A[:3, 3], rgb)

    scene = load_scene(root, test_every=0)
    by_name = {f.name: f for f in scene.frames}
    for i, cam in enumerate(cams):
        torch.testing.assert_close(by_name[f"images/frame_{i:05d}.png"].camera.world_to_cam, cam.world_to_cam, atol=1e-5, rtol=0)
    np.testing.assert_allclose(scene.points, xyz, atol=1e-6)
    np.testing.assert_array_equal(scene.point_colors, rgb)
    # opting out keeps the file's world
    kept = load_nerfstudio(root, undo_applied_transform=False)
    np.testing.assert_allclose(kept.points, xyz @ A[:3, :3].T, atol=1e-6)


def test_masks(tmp_path):
    root, _ = make_dataset(tmp_path / "ns", frame_extra=lambda i: {"mask_path": f"masks/frame_{i:05d}.png"})
    (root / "masks").mkdir()
    for i in range(9):
        m = np.zeros((H, W), np.uint8)
        m[:, : W // 2] = 255
        Image.fromarray(m, "L").save(root / "masks" / f"frame_{i:05d}.png")
    scene = load_scene(root)
    mask = load_mask(scene.frames[0])
    assert mask.shape == (H, W) and mask[:, 0].min() == 1.0 and mask[:, -1].max() == 0.0
    half = load_scene(root, data_factor=2, cache_dir=tmp_path / "cache")
    assert load_mask(half.frames[0]).shape == (H // 2, W // 2)
    (root / "masks" / "frame_00003.png").unlink()
    with pytest.raises(MissingImageError, match=r"frame_00003\.png"):
        load_scene(root)


def test_a_mask_bomb_or_a_mask_of_another_size_is_refused_when_the_data_loads(tmp_path):
    """Loss masks are checked from their headers when the dataset loads, not when training first draws them."""
    from tests.corpus.bad_files import png_declaring

    root, _ = make_dataset(tmp_path / "ns", frame_extra=lambda i: {"mask_path": f"masks/frame_{i:05d}.png"})
    (root / "masks").mkdir()
    for i in range(9):
        Image.fromarray(np.full((H, W), 255, np.uint8), "L").save(root / "masks" / f"frame_{i:05d}.png")
    assert len(load_scene(root).frames) == 9
    (root / "masks" / "frame_00004.png").write_bytes(png_declaring(30000, 30000))
    with pytest.raises(MissingImageError, match=r"frame_00004\.png.*(30000x30000|too many pixels)") as err:
        load_scene(root)
    assert "\n" not in str(err.value)
    Image.fromarray(np.full((H // 2, W), 255, np.uint8), "L").save(root / "masks" / "frame_00004.png")
    with pytest.raises(MissingImageError, match=rf"mask file .*frame_00004\.png is {W}x{H // 2}.*transforms\.json"):
        load_scene(root)


@pytest.mark.parametrize("model,coeffs", [
    ("OPENCV", {"k1": -0.15, "k2": 0.03, "p1": 0.001, "p2": -0.001}),
    ("OPENCV_FISHEYE", {"k1": 0.05, "k2": -0.01, "k3": 0.001, "k4": 0.0}),
])
def test_distortion_is_undistorted(tmp_path, model, coeffs):
    root, cams = make_dataset(tmp_path / "ns", n=2, extra={"camera_model": model, **coeffs})
    scene = load_scene(root, cache_dir=tmp_path / "cache", test_every=0)
    K = cams[0].K.double().numpy()
    c = [coeffs[k] for k in ("k1", "k2", "p1", "p2")] + [0.0, 0.0] if model == "OPENCV" else [coeffs[k] for k in ("k1", "k2", "k3", "k4")]
    np.testing.assert_allclose(scene.frames[0].camera.K.double().numpy(), undistorted_intrinsics(model, c, K, W, H), rtol=1e-6)
    assert scene.frames[0].image_path.suffix == ".png" and "undistorted" in scene.frames[0].image_path.parts
    assert scene.load_image(scene.frames[0]).shape == (H, W, 3)


def test_unsupported_camera_model_named(tmp_path):
    root, _ = make_dataset(tmp_path / "ns", extra={"camera_model": "EQUIRECTANGULAR"})
    with pytest.raises(DataFormatError, match=r"transforms\.json.*EQUIRECTANGULAR"):
        load_scene(root)


def test_missing_ply_named(tmp_path):
    root, _ = make_dataset(tmp_path / "ns", extra={"ply_file_path": "nope.ply"})
    with pytest.raises(DataFormatError, match=r"nope\.ply"):
        load_scene(root)


def test_bad_matrix_named(tmp_path):
    root, _ = make_dataset(tmp_path / "ns", frame_extra=lambda i: {"transform_matrix": [[1, 0], [0, 1]]} if i == 2 else {})
    with pytest.raises(DataFormatError, match=r"transforms\.json.*frame 2"):
        load_scene(root)
