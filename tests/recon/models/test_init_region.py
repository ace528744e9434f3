"""Random initialisation goes where the cameras look (recon.models.init_region, issue: captures without points)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from recon.data import load_scene
from recon.data.colmap import ColmapPoints
from recon.data.procedural import look_at_world_to_cam, orbit_cameras
from recon.data.procedural_scene import ground_truth_surfels, procedural_scene
from recon.data.scene import Frame, nerfpp_norm
from recon.data.frame_images import frame_rgba
from recon.models.init_region import (
    BLENDER_HALF_SIZE,
    InitBoxError,
    axes_convergence,
    box_contains,
    convergence_region,
    optical_axes,
    parse_init_box,
    random_init_region,
)
from recon.training.trainer import TrainConfig, build_model
from recon.training.train_run import train_model
from rasterizer import Camera
from tests.conftest import SHARED_DATA
from tests.recon.data.test_data_colmap import synthetic_model, write_dataset
from tests.recon.data.test_data_nerfstudio import cv_w2c_to_gl_c2w

ARC_DEG = 90.0


def frames_of(cameras: list[Camera]) -> list[Frame]:
    return [Frame(f"f{i}", Path(f"f{i}.png"), cam) for i, cam in enumerate(cameras)]


def arc_scene():
    """The procedural scene seen from a 90-degree arc, with its points removed (a capture without points)."""
    s = procedural_scene(arc_deg=ARC_DEG)
    return dataclasses.replace(s, points=None, point_colors=None, source_format="nerfstudio")


def write_nerfstudio(scene, root: Path) -> Path:
    """``root/transforms.json`` (instant-ngp style, no ply_file_path) + RGBA PNGs of every frame."""
    (root / "images").mkdir(parents=True)
    frames = []
    for i, fr in enumerate(scene.frames):
        name = f"images/frame_{i:03d}.png"
        Image.fromarray(frame_rgba(fr)).save(root / name)
        frames.append({"file_path": name,
                       "transform_matrix": cv_w2c_to_gl_c2w(fr.camera.world_to_cam.double().numpy()).tolist()})
    K = scene.frames[0].camera.K.double().numpy()
    meta = {"fl_x": K[0, 0], "fl_y": K[1, 1], "cx": K[0, 2], "cy": K[1, 2],
            "w": scene.frames[0].width, "h": scene.frames[0].height, "frames": frames}
    (root / "transforms.json").write_text(json.dumps(meta))
    return root


# ------------------------------------------------------------------------------------ geometry


def test_axes_convergence_finds_the_meeting_point():
    target = np.array([0.3, -1.2, 2.0])
    rng = np.random.default_rng(0)
    centers = target + rng.normal(size=(12, 3)) * 4.0
    dirs = (target - centers) / np.linalg.norm(target - centers, axis=1, keepdims=True)
    point, conditioning = axes_convergence(centers, dirs)
    np.testing.assert_allclose(point, target, atol=1e-9)
    assert conditioning > 0.1


def test_parallel_axes_do_not_converge_and_fall_back_to_the_frusta():
    # forward-facing: cameras on a line along x, all looking down +z
    cams = [Camera.from_fov(torch.tensor(look_at_world_to_cam(np.array([x, 0.0, 0.0]), np.array([x, 0.0, 5.0]),
                                                              np.array([0.0, -1.0, 0.0])), dtype=torch.float32),
                            64, 48, math.radians(60)) for x in np.linspace(-1, 1, 6)]
    frames = frames_of(cams)
    _, conditioning = axes_convergence(*optical_axes(frames))
    assert conditioning < 1e-6
    assert convergence_region(frames) is None
    extent = nerfpp_norm(frames)[1]
    region = random_init_region(frames, "colmap", extent)
    assert "forward-facing" in region.reason
    # in front of the cameras (z > 0), reaching FRUSTUM_FAR extents, and not behind them
    assert region.center[2] > 0 and region.center[2] - region.half[2] > -1e-9
    assert box_contains(region, np.array([[0.0, 0.0, 1.0 * extent], [0.0, 0.0, 2.9 * extent]])).all()
    assert not box_contains(region, np.array([[0.0, 0.0, -0.5]])).any()


def test_arc_capture_box_contains_the_objects_and_the_old_box_did_not():
    scene = arc_scene()
    region = random_init_region(scene.frames_train, scene.source_format, scene.extent)
    means = ground_truth_surfels().means
    assert "converge" in region.reason
    assert box_contains(region, means).all()
    # the rule this replaces: a cube of half 0.5 x extent around the camera centroid, among the cameras
    old_center, extent = scene.nerfpp_norm()
    old = dataclasses.replace(region, center=old_center, half=np.full(3, 0.5 * extent))
    assert not box_contains(old, means).any()


def test_ring_capture_still_uses_the_look_at_point():
    scene = procedural_scene()
    region = random_init_region(scene.frames_train, "colmap", scene.extent)
    np.testing.assert_allclose(region.center, (0.0, 0.25, 0.0), atol=1e-5)
    assert box_contains(region, ground_truth_surfels().means).all()


def rig(radius: float, look_at=(0.0, 0.0, 0.0)) -> list[Frame]:
    """NeRF-synthetic-like rig: cameras on upper hemisphere rings at ``radius`` looking at ``look_at``."""
    cams = []
    for elevation in (20.0, 45.0):
        cams += orbit_cameras(8, radius, 32, 32, math.radians(40), look_at, elevation=math.radians(elevation))
    return frames_of(cams)


def test_blender_rules():
    cube = random_init_region(rig(4.0311), "blender", 5.0)
    np.testing.assert_array_equal(cube.center, 0.0)
    np.testing.assert_array_equal(cube.half, BLENDER_HALF_SIZE)
    larger = random_init_region(rig(40.0), "blender", 50.0)
    np.testing.assert_allclose(larger.half, BLENDER_HALF_SIZE * 40.0 / 4.0311, rtol=1e-4)
    assert "farther" in larger.reason
    moved = random_init_region(rig(4.0, look_at=(6.0, 0.0, 0.0)), "dnerf", 5.0)
    np.testing.assert_allclose(moved.center, (6.0, 0.0, 0.0), atol=1e-5)
    assert "outside the 3DGS cube" in moved.reason


def test_lego_keeps_the_3dgs_cube():
    root = SHARED_DATA / "lego_400"
    if not root.is_dir():
        pytest.skip(f"{root} is absent (shared test data)")
    scene = load_scene(root, data_factor=2)
    region = random_init_region(scene.frames_train, scene.source_format, scene.extent)
    np.testing.assert_array_equal(region.half, BLENDER_HALF_SIZE)
    np.testing.assert_array_equal(region.center, 0.0)


# ------------------------------------------------------------------------------------ --init-box


def test_init_box_overrides_and_bad_values_are_named():
    region = parse_init_box("1,-2,3.5,0.25")
    np.testing.assert_array_equal(region.center, (1.0, -2.0, 3.5))
    np.testing.assert_array_equal(region.half, 0.25)
    assert parse_init_box(None) is None
    for bad in ("1,2,3", "a,b,c,d", "0,0,0,-1", "0,0,nan,1"):
        with pytest.raises(InitBoxError, match=r"--init-box .*cx,cy,cz,half"):
            parse_init_box(bad)
    scene = arc_scene()
    assert random_init_region(scene.frames_train, "nerfstudio", scene.extent, "9,9,9,1").center.tolist() == [9, 9, 9]


def test_bad_init_box_fails_before_training(tmp_path):
    with pytest.raises(InitBoxError):
        train_model(TrainConfig(steps=1, out=tmp_path / "run", init_box="1,2", progress=False), log=lambda *a: None)


# ------------------------------------------------------------------------------------ other no-points paths


def test_colmap_with_empty_points3d_inits_where_the_cameras_look(tmp_path):
    model = synthetic_model(n_cams=8)
    model.points = ColmapPoints.empty()
    for im in model.images.values():
        im.xys, im.point3D_ids = np.zeros((0, 2)), np.zeros((0,), dtype=np.int64)
    scene = load_scene(write_dataset(tmp_path / "colmap", model))
    assert scene.points is None or len(scene.points) == 0
    lines = []
    gaussians = build_model(TrainConfig(init_num_random=500), scene, torch.Generator().manual_seed(0), lines.append)
    assert len(gaussians) == 500
    assert len(lines) == 1 and "optical axes converge" in lines[0] and "no points" in lines[0]
    means = gaussians.params["means"].detach().numpy()
    assert np.abs(means.mean(axis=0)).max() < 0.5  # the orbit cameras look at the origin


def test_init_type_random_ignores_the_points():
    scene = procedural_scene(data_factor=4)
    lines = []
    cfg = TrainConfig(init_type="random", init_num_random=300)
    assert len(build_model(cfg, scene, torch.Generator().manual_seed(0), lines.append)) == 300
    assert "random init: 300 Gaussians" in lines[0]
    assert len(build_model(TrainConfig(), scene, torch.Generator().manual_seed(0), lines.append)) == len(scene.points)


# ------------------------------------------------------------------------------------ the capture that trained to noise


ARC_MIN_PSNR = 16.0  # measured 19.4 dB with this rule; the old centroid box gave 10.2 dB


def test_arc_capture_without_points_trains(tmp_path):
    """An instant-ngp-style capture on a 90-degree arc, no point cloud, trained as a new user would."""
    root = write_nerfstudio(arc_scene(), tmp_path / "arc")
    lines = []
    metrics = train_model(TrainConfig(data=root, out=tmp_path / "run", steps=200, data_factor=2,
                                      init_num_random=20_000, save_every=0, progress=False), log=lines.append)
    assert any("optical axes converge" in line and "no points" in line for line in lines), lines
    assert metrics["test"]["psnr"] >= ARC_MIN_PSNR, metrics
