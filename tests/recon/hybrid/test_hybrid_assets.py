"""recon.hybrid.assets and recon.hybrid.raycast: parsing, loading, poses, textures, first hits, occlusion."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from recon.hybrid.assets import (AssetError, MeshAsset, MeshPart, PlacedAsset, Pose, check_inside, load_asset_path,
                                 load_mesh, parse_light, parse_material, parse_pose, rotation_zyx, sample_texture)
from recon.hybrid.raycast import MeshScene

SHARED = Path(__file__).resolve().parents[4] / "shared" / "data" / "meshes"
Z_UP = np.eye(3)  # ground frame with world z up


def quad(size: float = 1.0, z: float = 0.0, color=(1.0, 0.0, 0.0)) -> MeshAsset:
    """A square [-size, size]^2 in the file's x/z plane (Y-up file: its normal +y is the ground's up)."""
    v = np.array([[-size, z, -size], [size, z, -size], [size, z, size], [-size, z, size]], np.float64)
    f = np.array([[0, 2, 1], [0, 3, 2]], np.int32)
    return MeshAsset("quad", [MeshPart(v, f, color=np.asarray(color, np.float32))])


# ------------------------------------------------------------------------------------------ parsing


def test_parse_pose_forms():
    assert parse_pose("1,2,3") == Pose((1.0, 2.0, 3.0))
    p = parse_pose(" 1, 2, 3, 90, 0, 0, 0.5 ")
    assert p.translation == (1.0, 2.0, 3.0) and p.yaw == 90 and p.scale == 0.5
    assert parse_pose("0,0,0,10,20,30").scale == 1.0


@pytest.mark.parametrize("bad", ["", "1,2", "1,2,3,4", "a,b,c", "1,2,3,0,0,0,0", "1,2,3,0,0,0,-1", "1,nan,3"])
def test_parse_pose_errors(bad):
    with pytest.raises(AssetError, match="--pose"):
        parse_pose(bad)


def test_parse_material():
    assert parse_material("diffuse").kind == "diffuse"
    assert parse_material("MIRROR").kind == "mirror"
    assert parse_material("glass").ior == 1.5
    assert parse_material("glass:1.33").ior == pytest.approx(1.33)
    for bad in ("wood", "glass:x", "glass:0.5", "mirror:2"):
        with pytest.raises(AssetError, match="--material"):
            parse_material(bad)


def test_parse_light_sun_direction_in_ground_frame():
    light = parse_light("sun:0,90", Z_UP)
    assert np.allclose(light.direction, [0, 0, 1], atol=1e-12)
    light = parse_light("sun:90,0,2,1,0.5,0.25", Z_UP)
    assert np.allclose(light.direction, [0, 1, 0], atol=1e-12)
    assert light.intensity == 2 and light.color == (1.0, 0.5, 0.25)
    # another ground frame (columns e1 = x, e2 = -z, up = y; right-handed)
    frame = np.stack([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]], axis=1)
    assert np.allclose(parse_light("sun:0,90", frame).direction, [0, 1, 0])


def test_parse_light_point_and_errors():
    light = parse_light("point:1,2,3,5", Z_UP)
    d, dist = light.toward(np.array([[1.0, 2.0, 0.0]]))
    assert np.allclose(d, [[0, 0, 1]]) and dist[0] == pytest.approx(3.0)
    for bad in ("lamp:1,2", "sun:1", "sun:0,120", "point:1,2", "point:1,2,3,-1", "sun:a,b"):
        with pytest.raises(AssetError, match="--light"):
            parse_light(bad, Z_UP)


# ------------------------------------------------------------------------------------------ poses


def test_rotation_is_proper_and_yaw_turns_about_up():
    R = rotation_zyx(30, -20, 75)
    assert np.allclose(R @ R.T, np.eye(3)) and np.linalg.det(R) == pytest.approx(1.0)
    assert np.allclose(rotation_zyx(90, 0, 0) @ [1, 0, 0], [0, 1, 0])


def test_pose_matrix_maps_file_up_to_scene_up():
    m = Pose((1.0, 2.0, 3.0), scale=2.0).matrix(Z_UP)
    top = m[:3, :3] @ np.array([0, 1.0, 0]) + m[:3, 3]  # file +y (up) at unit height
    assert np.allclose(top, [1, 2, 5])
    m = Pose(yaw=90).matrix(Z_UP)
    assert np.allclose(m[:3, :3] @ [1.0, 0, 0], [0, 1, 0])  # yaw about the scene's up
    assert np.linalg.det(m[:3, :3]) > 0


def test_asset_path_interpolates_and_takes_short_way(tmp_path):
    f = tmp_path / "keys.json"
    f.write_text(json.dumps({"keyframes": [{"time": 0, "pose": "0,0,0,350,0,0,1"},
                                           {"time": 1, "pose": [2, 0, 0, 10, 0, 0, 3]}]}))
    path = load_asset_path(f)
    mid = path.at(0.5)
    assert mid.translation == pytest.approx((1.0, 0.0, 0.0))
    assert mid.scale == pytest.approx(2.0)
    assert math.isclose(mid.yaw % 360, 0.0, abs_tol=1e-9) or math.isclose(mid.yaw % 360, 360.0, abs_tol=1e-9)
    assert path.at(-1).translation == (0.0, 0.0, 0.0) and path.at(2).translation == (2.0, 0.0, 0.0)


@pytest.mark.parametrize("text", ["{", "[]", '{"keyframes": [{"time": 0}]}',
                                  '{"keyframes": [{"time": 1, "pose": "0,0,0"}, {"time": 0, "pose": "0,0,0"}]}',
                                  '{"keyframes": [{"time": 0, "pose": "0,0"}]}'])
def test_asset_path_errors(tmp_path, text):
    f = tmp_path / "keys.json"
    f.write_text(text)
    with pytest.raises(AssetError, match="--asset-path"):
        load_asset_path(f)
    with pytest.raises(AssetError, match="no such file"):
        load_asset_path(tmp_path / "missing.json")


# ------------------------------------------------------------------------------------------ loading


def test_load_errors(tmp_path):
    with pytest.raises(AssetError, match="no such mesh file"):
        load_mesh(tmp_path / "nope.obj")
    bad = tmp_path / "bad.glb"
    bad.write_bytes(b"not a glb at all")
    with pytest.raises(AssetError, match="bad.glb"):
        load_mesh(bad)
    points = tmp_path / "points.ply"
    points.write_text("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
                      "property float z\nend_header\n0 0 0\n1 0 0\n0 1 0\n")
    with pytest.raises(AssetError, match="no triangles"):
        load_mesh(points)


def test_load_vertex_coloured_ply_and_glb_roundtrip(tmp_path):
    import trimesh

    mesh = trimesh.creation.box(extents=(1, 2, 3))
    mesh.visual.vertex_colors = np.tile([255, 0, 0, 255], (len(mesh.vertices), 1))
    mesh.export(tmp_path / "box.ply")
    asset = load_mesh(tmp_path / "box.ply")
    assert asset.face_count == 12
    assert np.allclose(asset.parts[0].vertex_colors, [1, 0, 0])
    scene = trimesh.Scene()
    scene.add_geometry(mesh, transform=trimesh.transformations.translation_matrix([5, 0, 0]))
    scene.export(tmp_path / "box.glb")
    asset = load_mesh(tmp_path / "box.glb")
    assert asset.vertices[:, 0].min() == pytest.approx(4.5)  # the node transform is applied
    z_up = load_mesh(tmp_path / "box.ply", up="z")
    assert np.ptp(z_up.vertices[:, 1]) == pytest.approx(3.0)  # file z (3) is the y-up frame's y


@pytest.mark.skipif(not (SHARED / "spot").is_dir(), reason="../shared/data/meshes/spot is absent")
def test_spot_texture_loads():
    asset = load_mesh(SHARED / "spot" / "spot_triangulated.obj")
    part = asset.parts[0]
    assert asset.face_count == 5856 and part.texture.shape == (1024, 1024, 3) and part.uv is not None
    colours = part.albedo(np.arange(0, 5856, 50), np.full((118, 2), 1 / 3))
    assert colours.std() > 0.02  # the texture varies over the cow


def test_sample_texture_bilinear_and_orientation():
    tex = np.zeros((2, 2, 3), np.float32)
    tex[0, 0] = [1, 0, 0]  # top-left texel: u ~ 0.25, v ~ 0.75 (v up)
    assert np.allclose(sample_texture(tex, np.array([[0.25, 0.75]])), [[1, 0, 0]])
    assert np.allclose(sample_texture(tex, np.array([[0.5, 0.75]])), [[0.5, 0, 0]])
    assert np.allclose(sample_texture(tex, np.array([[1.25, -0.25]])), [[1, 0, 0]])  # wraps


# ------------------------------------------------------------------------------------------ ray casting


def test_first_hit_quad_exact():
    scene = MeshScene([PlacedAsset(quad(color=(0.2, 0.4, 0.6)), Pose((0.0, 0.0, 1.0)))], Z_UP)
    o = np.array([[0.3, -0.2, 3.0], [0.3, -0.2, -3.0], [5.0, 0.0, 3.0]])
    d = np.array([[0, 0, -1.0], [0, 0, 1.0], [0, 0, -1.0]])
    hits = scene.first_hit(o, d)
    assert np.allclose(hits.t[:2], [2.0, 4.0], atol=1e-5) and np.isinf(hits.t[2])
    assert hits.asset.tolist() == [0, 0, -1]
    assert np.allclose(hits.normal[0], [0, 0, 1]) and np.allclose(hits.normal[1], [0, 0, -1])  # facing the ray
    assert hits.front.tolist() == [True, False, False]
    assert np.allclose(scene.albedo(hits), [[0.2, 0.4, 0.6], [0.2, 0.4, 0.6], [0, 0, 0]])
    assert np.allclose(scene.first_hit(o[:1], d[:1], t_min=2.5).t, np.inf)


def test_occluded_segment_and_proxy():
    blocker = PlacedAsset(quad(0.5), Pose((0.0, 0.0, 1.0)))
    floor = (np.array([[-5, -5, 0], [5, -5, 0], [5, 5, 0], [-5, 5, 0]], np.float64), np.array([[0, 1, 2], [0, 2, 3]]))
    scene = MeshScene([blocker], Z_UP, proxy=floor)
    up = np.array([[0, 0, 1.0]] * 3)
    o = np.array([[0, 0, 0.0], [2, 0, 0.0], [0, 0, 0.0]])
    assert scene.occluded(o, up).tolist() == [True, False, True]
    assert scene.occluded(o, up, np.array([0.5, 10, 2.0])).tolist() == [False, False, True]  # segment ends first
    down = scene.occluded(np.array([[2, 0, 1.0]]), np.array([[0, 0, -1.0]]))
    assert down.tolist() == [True]  # the proxy occludes


def test_check_inside_warns():
    messages = []
    asset = PlacedAsset(quad(), Pose((10.0, 0.0, 0.0)))
    check_inside([asset], Z_UP, np.full(3, -1.0), np.full(3, 1.0), messages.append)
    assert len(messages) == 1 and "outside the scene's bounds" in messages[0]
    check_inside([PlacedAsset(quad(), Pose())], Z_UP, np.full(3, -1.0), np.full(3, 1.0), messages.append)
    assert len(messages) == 1
