"""COLMAP reading/writing, distortion math, undistortion and the COLMAP loader.

Real data: ../shared/data/colmap_bird (skipped when absent). Synthetic models are written to tmp_path.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from recon.data import load_scene
from recon.data.colmap import (
    ColmapCamera,
    ColmapFormatError,
    ColmapImage,
    ColmapModel,
    ColmapPoints,
    colmap_world_to_cam,
    read_model,
    split_params,
    write_model,
)
from recon.data.undistort import UnsupportedCameraModelError, distort_points, undistort_points, undistorted_intrinsics
from rasterizer.quaternions import quat_to_rotmat_np as qvec_to_rotmat
from rasterizer.quaternions import rotmat_to_quat as rotmat_to_qvec
from recon.data.procedural import orbit_cameras
from recon.data.scene import MissingImageError

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"
BIRD = SHARED / "colmap_bird"


def need_bird() -> Path:
    if not (BIRD / "sparse" / "0" / "cameras.bin").is_file():
        pytest.skip("real-data test: ../shared/data/colmap_bird not found")
    return BIRD


# --------------------------------------------------------------------------------------------------
# synthetic scenes


def pattern(xy: np.ndarray) -> np.ndarray:
    """Smooth RGB in [0, 1] as a function of the normalised ray (x, y): [..., 2] -> [..., 3]."""
    x, y = xy[..., 0], xy[..., 1]
    return np.stack([0.5 + 0.4 * np.sin(4 * x), 0.5 + 0.4 * np.cos(3 * y), 0.5 + 0.2 * np.sin(2 * x + 3 * y)], -1)


def synthetic_model(model: str = "PINHOLE", params=None, n_cams: int = 6, width: int = 64, height: int = 48, seed: int = 0):
    """COLMAP model of orbit cameras around random points; xys are the exact (distorted) projections."""
    rng = np.random.default_rng(seed)
    pts = rng.uniform(-0.6, 0.6, size=(40, 3))
    cams = orbit_cameras(n_cams, 4.0, width, height, math.radians(60))
    K = cams[0].K.double().numpy()
    if params is None:
        params = {"PINHOLE": [K[0, 0], K[1, 1], K[0, 2], K[1, 2]], "SIMPLE_PINHOLE": [K[0, 0], K[0, 2], K[1, 2]]}[model]
    cameras = {1: ColmapCamera(1, model, width, height, np.array(params, dtype=np.float64))}
    images, tracks = {}, [[] for _ in pts]
    for i, cam in enumerate(cams):
        w2c = cam.world_to_cam.double().numpy()
        xc = pts @ w2c[:3, :3].T + w2c[:3, 3]
        xy = xc[:, :2] / xc[:, 2:]
        (fx, fy, cx, cy), coeffs = split_params(model, np.array(params, dtype=np.float64))
        xy_d = distort_points(model, coeffs, xy)
        xys = np.stack([fx * xy_d[:, 0] + cx, fy * xy_d[:, 1] + cy], -1)
        q = rotmat_to_qvec(w2c[:3, :3])
        images[i + 1] = ColmapImage(i + 1, q, w2c[:3, 3].copy(), 1, f"img_{i:02d}.png", xys, np.arange(len(pts), dtype=np.int64))
        for j in range(len(pts)):
            tracks[j].append((i + 1, j))
    points = ColmapPoints(
        np.arange(1, len(pts) + 1, dtype=np.int64),
        pts,
        rng.integers(0, 256, size=(len(pts), 3)).astype(np.uint8),
        rng.uniform(0, 1, len(pts)),
        [np.array(t, np.int64) for t in tracks],
    )
    # point ids are 1-based in the points file; the images' 2D points reference them
    for im in images.values():
        im.point3D_ids = im.point3D_ids + 1
    return ColmapModel(cameras, images, points)


def write_dataset(root: Path, model: ColmapModel, ext: str = ".bin", image_fn=None) -> Path:
    """Write ``root/sparse/0`` and one image per registered image into ``root/images``."""
    write_model(model, root / "sparse" / "0", ext)
    (root / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for im in model.images.values():
        cam = model.cameras.get(im.camera_id, next(iter(model.cameras.values())))
        arr = image_fn(cam) if image_fn else rng.integers(0, 256, size=(cam.height, cam.width, 3), dtype=np.uint8)
        Image.fromarray(arr).save(root / "images" / im.name)
    return root


# --------------------------------------------------------------------------------------------------
# real data


def test_bird_model_facts():
    model = read_model(need_bird() / "sparse" / "0")
    assert len(model.images) == 184 and len(model.cameras) == 184
    assert len(model.points) == 6271
    assert {c.model for c in model.cameras.values()} == {"SIMPLE_PINHOLE"}
    focals = np.array([c.params[0] for c in model.cameras.values()])
    assert abs(np.median(focals) - 906) < 10  # one camera per image; focal lengths spread 790..1040
    assert np.all((focals > 700) & (focals < 1200))
    assert {(c.width, c.height) for c in model.cameras.values()} == {(544, 960)}


def inside_fraction(w2c: np.ndarray, K: np.ndarray, pts: np.ndarray, width: int, height: int) -> np.ndarray:
    """[C] fraction of points [P, 3] in front of and inside each camera (w2c [C, 4, 4], K [C, 3, 3])."""
    xc = np.einsum("cij,pj->cpi", w2c[:, :3, :3], pts) + w2c[:, None, :3, 3]  # [C, P, 3]
    uvw = np.einsum("cij,cpj->cpi", K, xc)
    with np.errstate(divide="ignore", invalid="ignore"):
        u, v = uvw[..., 0] / uvw[..., 2], uvw[..., 1] / uvw[..., 2]
    ok = (xc[..., 2] > 0) & (u >= 0) & (u < width) & (v >= 0) & (v < height)
    return ok.mean(axis=1)


def test_bird_points_project_inside_images():
    """A real check of the world-to-camera convention: sparse points land in front of and inside most cameras."""
    scene = load_scene(need_bird())
    assert scene.source_format == "colmap"
    assert len(scene.frames) == 184 and len(scene.frames_test) == 23  # every 8th of 184
    pts = scene.points.astype(np.float64)
    w2c = np.stack([f.camera.world_to_cam.double().numpy() for f in scene.frames])
    K = np.stack([f.camera.K.double().numpy() for f in scene.frames])
    inside = inside_fraction(w2c, K, pts, 544, 960)
    assert np.median(inside) > 0.9
    assert np.mean(inside > 0.5) > 0.9
    # the opposite convention (the matrix read as cam_to_world) fails the same check
    assert np.median(inside_fraction(np.linalg.inv(w2c), K, pts, 544, 960)) < 0.5


def test_bird_reprojection_matches_keypoints():
    """Projected 3D points land on their 2D keypoints (median about 1 px): pose and K convention are right."""
    model = read_model(need_bird() / "sparse" / "0")
    scene = load_scene(need_bird())
    by_name = {f.name: f for f in scene.frames}
    id_to_row = {int(i): r for r, i in enumerate(model.points.ids)}
    errs = []
    for im in list(model.images.values())[:20]:
        f = by_name[im.name]
        valid = im.point3D_ids >= 0
        xyz = model.points.xyz[[id_to_row[int(i)] for i in im.point3D_ids[valid]]]
        w2c, K = f.camera.world_to_cam.double().numpy(), f.camera.K.double().numpy()
        xc = xyz @ w2c[:3, :3].T + w2c[:3, 3]
        uv = (xc @ K.T)[:, :2] / xc[:, 2:]
        errs.append(np.linalg.norm(uv - im.xys[valid], axis=1))
    assert np.median(np.concatenate(errs)) < 2.0


def test_bird_round_trip_binary_text_binary_is_exact(tmp_path):
    src = need_bird() / "sparse" / "0"
    model = read_model(src)
    write_model(model, tmp_path / "txt", ".txt")
    model_txt = read_model(tmp_path / "txt", ".txt")
    write_model(model_txt, tmp_path / "bin", ".bin")
    for name in ("cameras.bin", "images.bin", "points3D.bin"):
        assert (tmp_path / "bin" / name).read_bytes() == (src / name).read_bytes(), name


def test_bird_data_factor_2(tmp_path):
    # a copy with 8 of the 184 images keeps the test fast
    root = tmp_path / "bird"
    (root / "images").mkdir(parents=True)
    model = read_model(need_bird() / "sparse" / "0")
    names = sorted(im.name for im in model.images.values())[:8]
    model.images = {k: v for k, v in model.images.items() if v.name in names}
    for n in names:
        shutil.copy(BIRD / "images" / n, root / "images" / n)
    write_model(model, root / "sparse" / "0")
    full = load_scene(root)
    half = load_scene(root, data_factor=2, cache_dir=tmp_path / "cache")
    for a, b in zip(full.frames, half.frames):
        assert (b.width, b.height) == (272, 480)
        torch.testing.assert_close(b.camera.K[:2], a.camera.K[:2] / 2)
        assert half.load_image(b).shape == (480, 272, 3)
        assert b.image_path.parent == tmp_path / "cache" / "images_2"


# --------------------------------------------------------------------------------------------------
# read/write


def test_quaternion_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(20):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        q = q if q[0] >= 0 else -q
        R = qvec_to_rotmat(q)
        np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-12)
        np.testing.assert_allclose(rotmat_to_qvec(R), q, atol=1e-10)


@pytest.mark.parametrize("first", [".bin", ".txt"])
def test_synthetic_round_trip_exact(tmp_path, first):
    model = synthetic_model("OPENCV", [50.0, 51.0, 32.0, 24.0, 0.1, -0.02, 0.001, 0.002])
    model.images[2].xys, model.images[2].point3D_ids = np.zeros((0, 2)), np.zeros((0,), np.int64)  # empty line
    model.images[4].name = "sub dir/with space.png"
    second = ".txt" if first == ".bin" else ".bin"
    write_model(model, tmp_path / "a", first)
    write_model(read_model(tmp_path / "a", first), tmp_path / "b", second)
    write_model(read_model(tmp_path / "b", second), tmp_path / "c", first)
    for name in ("cameras", "images", "points3D"):
        assert (tmp_path / "a" / f"{name}{first}").read_bytes() == (tmp_path / "c" / f"{name}{first}").read_bytes()
    back = read_model(tmp_path / "c", first)
    for k, im in model.images.items():
        assert back.images[k].name == im.name
        np.testing.assert_array_equal(back.images[k].xys, im.xys)
        np.testing.assert_array_equal(back.images[k].qvec, im.qvec)


def test_synthetic_poses_reproject_exactly(tmp_path):
    model = synthetic_model("PINHOLE")
    scene = load_scene(write_dataset(tmp_path / "d", model), test_every=0)
    by_name = {f.name: f for f in scene.frames}
    for im in model.images.values():
        f = by_name[im.name]
        w2c, K = f.camera.world_to_cam.double().numpy(), f.camera.K.double().numpy()
        xc = model.points.xyz @ w2c[:3, :3].T + w2c[:3, 3]
        uv = (xc @ K.T)[:, :2] / xc[:, 2:]
        np.testing.assert_allclose(uv, im.xys, atol=2e-3)  # float32 storage of world_to_cam


def test_hand_made_text_models(tmp_path):
    """COLMAP's "reconstruct from known poses" recipe: an empty points3D.txt loads as a model without points. A
    record deleted by hand under an unchanged "# Number of ..." comment is refused (it reads like a file cut at a
    line boundary) with what to do; without the comment it loads."""
    model = synthetic_model("PINHOLE")
    write_model(model, tmp_path / "a", ".txt")
    (tmp_path / "a" / "points3D.txt").write_text("")
    assert len(read_model(tmp_path / "a", ".txt").points.ids) == 0
    write_model(model, tmp_path / "b", ".txt")
    path = tmp_path / "b" / "points3D.txt"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # the last point deleted, the header comment unchanged
    with pytest.raises(ColmapFormatError, match="points3D.txt.*delete the '# Number of points' line"):
        read_model(tmp_path / "b", ".txt")
    path.write_text("".join(ln for ln in lines[:-1] if not ln.startswith("# Number of")))
    assert len(read_model(tmp_path / "b", ".txt").points.ids) == len(model.points.ids) - 1


# --------------------------------------------------------------------------------------------------
# bad inputs


def test_truncated_cameras_bin_names_file(tmp_path):
    model = synthetic_model()
    root = write_dataset(tmp_path / "d", model)
    f = root / "sparse" / "0" / "cameras.bin"
    f.write_bytes(f.read_bytes()[:-5])
    with pytest.raises(ColmapFormatError, match=r"cameras\.bin.*truncated"):
        load_scene(root)


def test_empty_images_bin_names_file(tmp_path):
    root = write_dataset(tmp_path / "d", synthetic_model())
    (root / "sparse" / "0" / "images.bin").write_bytes(b"")
    with pytest.raises(ValueError, match=r"images\.bin.*truncated"):
        load_scene(root)


def test_images_txt_unknown_camera_names_file(tmp_path):
    model = synthetic_model()
    model.images[3].camera_id = 99
    root = write_dataset(tmp_path / "d", model, ".txt")
    with pytest.raises(ColmapFormatError, match=r"images\.txt.*img_02\.png.*camera id 99"):
        load_scene(root)


def test_unsupported_camera_model_named(tmp_path):
    model = synthetic_model()
    model.cameras[1] = ColmapCamera(1, "FOV", 64, 48, np.array([50.0, 50.0, 32.0, 24.0, 0.1]))
    root = write_dataset(tmp_path / "d", model, ".txt")
    with pytest.raises(UnsupportedCameraModelError, match=r"cameras\.txt.*FOV"):
        load_scene(root)


def test_missing_image_named(tmp_path):
    root = write_dataset(tmp_path / "d", synthetic_model())
    (root / "images" / "img_04.png").unlink()
    with pytest.raises(MissingImageError, match=r"img_04\.png.*"):
        load_scene(root)


def test_malformed_text_line_names_file_and_line(tmp_path):
    root = write_dataset(tmp_path / "d", synthetic_model(), ".txt")
    (root / "sparse" / "0" / "cameras.txt").write_text("# c\n1 PINHOLE 64 48 50 50 32\n")
    with pytest.raises(ColmapFormatError, match=r"cameras\.txt, line 2.*takes 4 params"):
        load_scene(root)


# --------------------------------------------------------------------------------------------------
# distortion


DISTORTIONS = [
    ("OPENCV", [0.12, -0.05, 0.002, -0.001]),
    ("OPENCV", [-0.25, 0.07, 0.001, 0.0015, -0.01, 0.002]),  # nerfstudio's k3, k4 extension
    ("OPENCV_FISHEYE", [0.08, -0.02, 0.005, -0.001]),
    ("SIMPLE_RADIAL", [-0.1]),
    ("RADIAL", [0.05, -0.01]),
]


@pytest.mark.parametrize("model,coeffs", DISTORTIONS)
def test_undistort_points_recovers_pinhole_rays(model, coeffs):
    """Ground-truth pinhole rays -> distort -> undistort gives the rays back (1e-5 on the unit rays)."""
    rng = np.random.default_rng(0)
    # rays up to 40 degrees off the axis (an 80-degree field of view), where these lenses are invertible
    r = np.tan(np.radians(40.0)) * np.sqrt(rng.uniform(0, 1, 500))
    phi = rng.uniform(0, 2 * np.pi, 500)
    rays_true = np.stack([r * np.cos(phi), r * np.sin(phi), np.ones(500)], -1)
    rays_true /= np.linalg.norm(rays_true, axis=1, keepdims=True)
    xy = rays_true[:, :2] / rays_true[:, 2:]
    xy_d = distort_points(model, coeffs, xy)
    assert np.abs(xy_d - xy).max() > 1e-3  # the distortion is not negligible
    xy_u = undistort_points(model, coeffs, xy_d)
    rays = np.c_[xy_u, np.ones(len(xy_u))]
    rays /= np.linalg.norm(rays, axis=1, keepdims=True)
    np.testing.assert_allclose(rays, rays_true, atol=1e-5)


def test_fisheye_matches_theta_formula():
    """OPENCV_FISHEYE: |x_d| = theta (1 + k1 theta^2 + ...) with theta the ray's angle to the axis."""
    k = [0.1, 0.01, -0.002, 0.0005]
    theta = np.linspace(0.01, 1.2, 50)
    xy = np.stack([np.tan(theta), np.zeros_like(theta)], -1)
    rd = np.linalg.norm(distort_points("OPENCV_FISHEYE", k, xy), axis=1)
    np.testing.assert_allclose(rd, theta * (1 + k[0] * theta**2 + k[1] * theta**4 + k[2] * theta**6 + k[3] * theta**8), rtol=1e-12)


@pytest.mark.parametrize("model,params", [
    ("OPENCV", [60.0, 58.0, 40.5, 30.2, -0.18, 0.04, 0.001, -0.002]),
    ("OPENCV_FISHEYE", [52.0, 52.0, 40.0, 30.0, 0.05, -0.01, 0.002, 0.0]),
])
def test_distorted_colmap_scene_is_undistorted(tmp_path, model, params):
    """Images rendered through a distorted camera come back as correct pinhole images with pinhole rays."""
    W, H = 80, 60
    K = np.array([[params[0], 0, params[2]], [0, params[1], params[3]], [0, 0, 1.0]])
    coeffs = params[4:]

    def render_distorted(cam):
        u, v = np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5)
        xy_d = np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1]], -1).reshape(-1, 2)
        rgb = pattern(undistort_points(model, coeffs, xy_d)).reshape(H, W, 3)
        return np.clip(np.rint(rgb * 255), 0, 255).astype(np.uint8)

    model_ = synthetic_model(model, params, n_cams=3, width=W, height=H)
    root = write_dataset(tmp_path / "d", model_, image_fn=render_distorted)
    scene = load_scene(root, cache_dir=tmp_path / "cache", test_every=0)
    K_new = undistorted_intrinsics(model, coeffs, K, W, H)
    for f in scene.frames:
        assert f.camera.distortion is None and f.camera.model == "pinhole"
        np.testing.assert_allclose(f.camera.K.double().numpy(), K_new, rtol=1e-6)
        assert (f.width, f.height) == (W, H)
        # pinhole rays of the new K show the pattern value of that ray
        u, v = np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5)
        xy = np.stack([(u - K_new[0, 2]) / K_new[0, 0], (v - K_new[1, 2]) / K_new[1, 1]], -1)
        img = scene.load_image(f)
        err = np.abs(img - pattern(xy))[2:-2, 2:-2]
        assert err.mean() < 0.01 and err.max() < 0.05
        # and sparse points still project onto their keypoints' rays
    # cached files are reused on a second load
    again = load_scene(root, cache_dir=tmp_path / "cache", test_every=0)
    assert [f.image_path for f in again.frames] == [f.image_path for f in scene.frames]
    assert all(p.image_path.is_relative_to(tmp_path / "cache" / "undistorted") for p in scene.frames)


def test_undistorted_keypoints_match_projection(tmp_path):
    """Distorted keypoints, undistorted with undistort_points and K_new, equal pinhole projections."""
    W, H = 80, 60
    params = [60.0, 58.0, 40.5, 30.2, -0.18, 0.04, 0.001, -0.002]
    model = synthetic_model("OPENCV", params, n_cams=3, width=W, height=H)
    root = write_dataset(tmp_path / "d", model)
    scene = load_scene(root, cache_dir=tmp_path / "cache", test_every=0)
    by_name = {f.name: f for f in scene.frames}
    for im in model.images.values():
        f = by_name[im.name]
        w2c, K_new = f.camera.world_to_cam.double().numpy(), f.camera.K.double().numpy()
        xc = model.points.xyz @ w2c[:3, :3].T + w2c[:3, 3]
        uv = (xc @ K_new.T)[:, :2] / xc[:, 2:]
        xy_d = (im.xys - [params[2], params[3]]) / [params[0], params[1]]
        xy = undistort_points("OPENCV", params[4:], xy_d)
        np.testing.assert_allclose(xy * [K_new[0, 0], K_new[1, 1]] + [K_new[0, 2], K_new[1, 2]], uv, atol=2e-3)


def test_truncated_points_and_trailing_bytes_named(tmp_path):
    root = write_dataset(tmp_path / "d", synthetic_model())
    f = root / "sparse" / "0" / "points3D.bin"
    data = f.read_bytes()
    f.write_bytes(data[:-3])
    with pytest.raises(ColmapFormatError, match=r"points3D\.bin.*truncated"):
        read_model(root / "sparse" / "0")
    f.write_bytes(data + b"xx")
    with pytest.raises(ColmapFormatError, match=r"points3D\.bin.*trailing"):
        read_model(root / "sparse" / "0")


def test_existing_images_n_folder_is_used_with_its_own_size(tmp_path):
    """A dataset's own images_2/ (e.g. rounded up, as ImageMagick makes them) is reused; K follows its size."""
    W, H = 65, 49
    model = synthetic_model("PINHOLE", [50.0, 50.0, 32.5, 24.5], n_cams=2, width=W, height=H)
    root = write_dataset(tmp_path / "d", model)
    (root / "images_2").mkdir()
    for im in model.images.values():
        Image.new("RGB", (33, 25)).save(root / "images_2" / im.name)
    scene = load_scene(root, data_factor=2, cache_dir=tmp_path / "cache", test_every=0)
    f = scene.frames[0]
    assert f.image_path.parent == root / "images_2" and (f.width, f.height) == (33, 25)
    np.testing.assert_allclose(f.camera.K[0].numpy(), [50.0 * 33 / 65, 0, 32.5 * 33 / 65], rtol=1e-6)
    np.testing.assert_allclose(f.camera.K[1].numpy(), [0, 50.0 * 25 / 49, 24.5 * 25 / 49], rtol=1e-6)
    assert not (tmp_path / "cache").exists()


def test_colmap_zero_qvec_still_gives_a_nan_pose():
    """COLMAP refuses a zero qvec at load through a NaN pose; the shared (zero -> identity) function
    must not turn it into a valid identity rotation."""
    im = ColmapImage(id=1, qvec=np.zeros(4), tvec=np.zeros(3), camera_id=1, name="a.png")
    assert np.isnan(colmap_world_to_cam(im)[:3, :3]).all()
    im = ColmapImage(id=1, qvec=np.array([0.3, -0.2, 0.9, 0.1]), tvec=np.ones(3), camera_id=1, name="a.png")
    w, x, y, z = im.qvec / np.linalg.norm(im.qvec)  # the loader's formula before the shared one
    np.testing.assert_allclose(colmap_world_to_cam(im)[:3, :3], np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]]), rtol=0, atol=1e-15)
