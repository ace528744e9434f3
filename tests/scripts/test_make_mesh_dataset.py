"""scripts/make_mesh_dataset.py: spot at a tiny size (JSON layout, mesh_to_world, images), bad meshes refused."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("open3d")
import trimesh

ROOT = Path(__file__).resolve().parents[2]
SPOT = ROOT.parent / "shared" / "data" / "meshes" / "spot" / "spot_triangulated.obj"
spec = importlib.util.spec_from_file_location("make_mesh_dataset", ROOT / "scripts" / "make_mesh_dataset.py")
mmd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mmd)


@pytest.mark.skipif(not SPOT.is_file(), reason=f"{SPOT} absent (../shared data)")
def test_spot_tiny_dataset(tmp_path):
    import imageio.v3 as iio

    out = tmp_path / "spot"
    info = mmd.make_dataset(SPOT, out, views=4, test_views=2, size=48)
    train = json.loads((out / "transforms_train.json").read_text())
    test = json.loads((out / "transforms_test.json").read_text())
    assert {"camera_angle_x", "frames", "mesh_to_world"} <= set(train)
    assert len(train["frames"]) == 4 and len(test["frames"]) == 2
    m2w = np.array(train["mesh_to_world"])
    assert m2w.shape == (4, 4) and np.allclose(m2w, info["mesh_to_world"])
    # the normalised mesh lies in the unit ball, touching it
    v = trimesh.load(SPOT, process=False).vertices
    world = v @ m2w[:3, :3].T + m2w[:3, 3]
    assert abs(np.linalg.norm(world, axis=1).max() - 1) < 1e-9
    for split, doc in (("train", train), ("test", test)):
        for k, frame in enumerate(doc["frames"]):
            assert frame["file_path"] == f"./{split}/r_{k}"
            c2w = np.array(frame["transform_matrix"])
            assert c2w.shape == (4, 4) and np.allclose(c2w[:3, :3].T @ c2w[:3, :3], np.eye(3), atol=1e-9)
            # OpenGL: the camera looks along -z, i.e. at the origin
            assert np.allclose(-c2w[:3, 2], -c2w[:3, 3] / np.linalg.norm(c2w[:3, 3]))
    frame = out / "train" / "r_0"
    rgba = iio.imread(frame.with_name("r_0.png"))
    depth = iio.imread(frame.with_name("r_0_depth.png"))
    normal = iio.imread(frame.with_name("r_0_normal.png")).astype(float)
    assert train["pixel_samples"] == mmd.DEFAULT_SAMPLES > 1
    # antialiased: partly covered pixels on the silhouette; depth is the pixel centre's ray
    full, any_hit, centre = rgba[..., 3] == 255, rgba[..., 3] > 0, depth > 0
    assert rgba.shape == (48, 48, 4) and 0.05 < full.mean() < 0.9 and ((0 < rgba[..., 3]) & ~full).any()
    assert depth.dtype == np.uint16 and not (full & ~centre).any() and not (centre & ~any_hit).any()
    hit = centre
    z = depth[hit] / train["depth_scale"]
    radius = np.linalg.norm(np.array(train["frames"][0]["transform_matrix"])[:3, 3])
    assert (z > radius - 1.01).all() and (z < radius + 1.01).all()  # inside the unit ball's depth range
    n = normal[hit] / 255 * 2 - 1
    assert np.allclose(np.linalg.norm(n, axis=1), 1, atol=0.02)


@pytest.mark.skipif(not SPOT.is_file(), reason=f"{SPOT} absent (../shared data)")
def test_one_sample_is_aliased_and_samples_average_it(tmp_path):
    """--samples 1: binary alpha where the centre ray hits; --samples 4: alpha is the hit share of 16 rays,
    so its mean over the image is close to the one-ray coverage, and fully covered pixels keep their colour."""
    import imageio.v3 as iio

    mmd.make_dataset(SPOT, tmp_path / "a", views=1, test_views=1, size=64, samples=1)
    mmd.make_dataset(SPOT, tmp_path / "b", views=1, test_views=1, size=64, samples=4)
    a = iio.imread(tmp_path / "a" / "train" / "r_0.png").astype(float)
    b = iio.imread(tmp_path / "b" / "train" / "r_0.png").astype(float)
    assert set(np.unique(a[..., 3])) == {0, 255}
    partial = (b[..., 3] > 0) & (b[..., 3] < 255)
    assert partial.sum() > 20
    assert abs(a[..., 3].mean() - b[..., 3].mean()) < 0.02 * a[..., 3].mean()
    inner = (b[..., 3] == 255) & (a[..., 3] == 255)
    assert np.abs(a[inner, :3] - b[inner, :3]).mean() < 3.0  # colour levels of 255
    with pytest.raises(mmd.MeshInputError, match="--samples 0"):
        mmd.make_dataset(SPOT, tmp_path / "c", views=1, size=16, samples=0)


def write(tmp_path, mesh, name="m.ply"):
    path = tmp_path / name
    mesh.export(path)
    return path


def test_empty_mesh_refused(tmp_path):
    path = tmp_path / "empty.obj"
    path.write_text("# nothing\n")
    with pytest.raises(mmd.MeshInputError, match="empty mesh"):
        mmd.make_dataset(path, tmp_path / "out", views=2, size=16)
    assert not (tmp_path / "out" / "transforms_train.json").exists()


def test_non_manifold_mesh_refused(tmp_path):
    box = trimesh.creation.box()
    # a third triangle on an existing edge: that edge is shared by three faces
    e0, e1 = box.faces[0][:2]
    v = np.vstack([box.vertices, [[3.0, 3.0, 3.0]]])
    f = np.vstack([box.faces, [[e0, e1, len(v) - 1]]])
    path = write(tmp_path, trimesh.Trimesh(v, f, process=False))
    with pytest.raises(mmd.MeshInputError, match="non-manifold .*each edge in at most two faces"):
        mmd.make_dataset(path, tmp_path / "out", views=2, size=16)
    assert not (tmp_path / "out" / "transforms_train.json").exists()


def test_manifold_box_accepted(tmp_path):
    path = write(tmp_path, trimesh.creation.box())
    mmd.check_mesh(mmd.load_mesh(path), path)


def test_repeated_faces_are_dropped_not_refused(tmp_path):
    """A scan's repeated triangles (same three positions, either orientation, also through split seam
    vertices) are dropped and counted; a real third face on an edge is still refused."""
    box = trimesh.creation.box()
    v = np.vstack([box.vertices, box.vertices[box.faces[3]]])  # face 3's corners again, as new vertices
    n = len(box.vertices)
    f = np.vstack([box.faces, box.faces[0][::-1], [[n, n + 1, n + 2]]])  # face 0 reversed, face 3 via copies
    path = write(tmp_path, trimesh.Trimesh(v, f, process=False))
    mesh = mmd.load_mesh(path)
    assert mesh.metadata["duplicate_faces_dropped"] == 2 and len(mesh.faces) == len(box.faces)
    np.testing.assert_allclose(mesh.area, box.area)
    info = mmd.make_dataset(path, tmp_path / "out", views=2, size=16, samples=1)
    assert info["duplicate_faces_dropped"] == 2 and (tmp_path / "out" / "transforms_train.json").is_file()
    assert mmd.load_mesh(write(tmp_path, box, "plain.ply")).metadata["duplicate_faces_dropped"] == 0
