"""Partitioning: up axis, balanced half-open cells that tile the plane, camera assignment, refusals."""

import json

import numpy as np
import pytest

from recon.distributed.partition import (Partition, check_blocks, PartitionConfig, PartitionError, box_coverage, in_core,
                                         partition_scene, up_axis)
from recon.training.trainer import TrainConfig, load_training_scene


@pytest.fixture(scope="module")
def city_scene(tiny_city):
    return load_training_scene(TrainConfig(data=tiny_city))


def test_up_axis_from_cameras_is_world_z(city_scene):
    np.testing.assert_allclose(up_axis(city_scene.frames_train), [0, 0, 1], atol=1e-6)


def test_up_axis_of_rotated_scene_follows_cameras(city_scene):
    """Cameras all pitched the same way still give the plane normal when their up vectors disagree
    (the procedural demo's orbit looks down at the ground: up = -y)."""
    scene = load_training_scene(TrainConfig(data="procedural"))
    up = up_axis(scene.frames_train)
    assert up @ np.array([0, -1.0, 0]) > 0.95


def test_cells_tile_the_plane_half_open_and_balance_cameras(city_scene, tiny_city):
    part = partition_scene(city_scene, PartitionConfig(blocks_xy="3x2"), source=str(tiny_city))
    assert len(part.blocks) == 6
    rng = np.random.default_rng(0)
    xy = rng.uniform(-50, 50, size=(20000, 2))
    # plus points exactly on the inner borders: half-open boxes still give exactly one owner
    borders = [b.core[0][0] for b in part.blocks if b.core[0][0] is not None]
    xy = np.concatenate([xy, np.stack([np.array(borders), np.zeros(len(borders))], 1)])
    owners = np.stack([in_core(xy, b.core) for b in part.blocks]).sum(0)
    assert (owners == 1).all()
    # columns hold equal shares of the training cameras' centres (within one per cut)
    cams = part.ground(np.stack([-f.camera.world_to_cam[:3, :3].double().numpy().T @ f.camera.world_to_cam[:3, 3].double().numpy()
                                 for f in city_scene.frames_train]))
    per_block = [int(in_core(cams, b.core).sum()) for b in part.blocks]
    cols = [per_block[0] + per_block[1], per_block[2] + per_block[3], per_block[4] + per_block[5]]
    assert max(cols) - min(cols) <= 3 + len(city_scene.frames_train) // 20
    for b in part.blocks:
        assert len(b.train_images) >= 3 and b.num_points > 0
        # expanded box contains the bounded core
        assert np.all(np.asarray(b.expanded[0]) <= np.asarray(b.bounded[0]))
        assert np.all(np.asarray(b.expanded[1]) >= np.asarray(b.bounded[1]))


def test_visibility_rule_adds_cameras_outside_the_expanded_box(city_scene, tiny_city):
    part = partition_scene(city_scene, PartitionConfig(blocks_xy="3x2", visibility=1.0), source=str(tiny_city))
    loose = partition_scene(city_scene, PartitionConfig(blocks_xy="3x2", visibility=0.25), source=str(tiny_city))
    for a, b in zip(part.blocks, loose.blocks):
        assert set(a.train_images) <= set(b.train_images)
    assert sum(len(b.train_images) for b in loose.blocks) > sum(len(b.train_images) for b in part.blocks)


def test_box_coverage_counts_rays_hitting_the_box():
    dirs = np.stack([np.linspace(-1, 1, 5), np.zeros(5), np.ones(5)], 1)  # x spread, looking +z
    cov = box_coverage(np.zeros(3), dirs, np.array([-0.1, -1, 1]), np.array([10, 1, 2]))
    assert cov == pytest.approx(3 / 5)  # x/z >= -0.1 for directions 0, 0.5, 1
    assert box_coverage(np.zeros(3), -dirs, np.array([-0.1, -1, 1]), np.array([10, 1, 2])) == 0.0  # behind


def test_kd_split_by_max_images(city_scene, tiny_city):
    n = len(city_scene.frames_train)
    part = partition_scene(city_scene, PartitionConfig(max_images_per_block=n // 3, min_images_per_block=1),
                           source=str(tiny_city))
    assert len(part.blocks) >= 3
    rng = np.random.default_rng(1)
    xy = rng.uniform(-50, 50, size=(5000, 2))
    assert (np.stack([in_core(xy, b.core) for b in part.blocks]).sum(0) == 1).all()


def test_refuses_blocks_with_too_few_images(city_scene, tiny_city):
    with pytest.raises(PartitionError, match=r"block 0 has \d+ images.*--min-images-per-block"):
        partition_scene(city_scene, PartitionConfig(blocks_xy="3x2", min_images_per_block=10_000), source=str(tiny_city))
    with pytest.raises(PartitionError, match="cannot be split into 40 columns"):
        partition_scene(city_scene, PartitionConfig(blocks_xy="40x1"), source=str(tiny_city))


def test_refuses_a_blocks_file_with_an_empty_block(tiny_blocks):
    part = Partition.read(tiny_blocks)
    part.blocks[2].train_images = []
    with pytest.raises(PartitionError, match="block 2 has no cameras"):
        check_blocks(part, PartitionConfig(min_images_per_block=1), "blocks.json")


def test_bad_split_flags(city_scene):
    for cfg, match in ((PartitionConfig(blocks_xy="3by2"), "AxB"), (PartitionConfig(blocks_xy="0x2"), ">= 1"),
                       (PartitionConfig(overlap=-1), "--overlap"), (PartitionConfig(visibility=0), "--visibility")):
        with pytest.raises(PartitionError, match=match):
            partition_scene(city_scene, cfg)


def test_blocks_file_round_trip_and_dataset_identity(tiny_blocks, city_scene):
    part = Partition.read(tiny_blocks)
    part.check_dataset(city_scene, str(tiny_blocks))
    assert (tiny_blocks.parent / "blocks.png").is_file()
    other = load_training_scene(TrainConfig(data="procedural"))
    with pytest.raises(PartitionError, match="made from another dataset"):
        part.check_dataset(other, str(tiny_blocks))


def test_damaged_blocks_file(tmp_path):
    bad = tmp_path / "blocks.json"
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(PartitionError, match="not a blocks file"):
        Partition.read(bad)
    with pytest.raises(PartitionError, match="no such file"):
        Partition.read(tmp_path / "missing.json")
