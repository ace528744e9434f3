"""mesh2splat's mesh checks and normalisation: the recorded transform maps the file's mesh into the unit
sphere and back."""

import numpy as np
import pytest

trimesh = pytest.importorskip("trimesh")
pytest.importorskip("open3d")

from recon.data.mesh_render import MeshInputError, check_scale, load_mesh, normalised_mesh  # noqa: E402
from recon.data.procedural_meshes import CATEGORIES, make_mesh, write_mesh_collection  # noqa: E402
from recon.mesh2splat.surface import chamfer_percent, surface_samples  # noqa: E402


def test_normalisation_round_trip(tmp_path):
    """world = M [x, 1] puts the bounding-box centre at the origin and the farthest vertex at 1; M^-1 gives
    the file's vertices back."""
    mesh = make_mesh("blob", seed=3)
    mesh.apply_transform(trimesh.transformations.compose_matrix(scale=[7.0] * 3, translate=[5.0, -2.0, 40.0]))
    path = tmp_path / "blob.ply"
    mesh.export(path)
    original = load_mesh(path)
    moved, m2w = normalised_mesh(original)
    v = np.asarray(moved.vertices)
    assert np.linalg.norm(v, axis=1).max() == pytest.approx(1.0, abs=1e-9)
    assert 0.5 * (v.min(0) + v.max(0)) == pytest.approx(np.zeros(3), abs=1e-9)
    back = (np.linalg.inv(m2w) @ np.c_[v, np.ones(len(v))].T).T[:, :3]
    assert back == pytest.approx(np.asarray(original.vertices), abs=1e-9)
    assert np.asarray(original.vertices) == pytest.approx(np.asarray(mesh.vertices), abs=1e-5)  # untouched


def test_absurd_scale_refused():
    box = trimesh.creation.box(extents=[1, 1, 1])
    check_scale(box, "box.ply")
    huge = box.copy()
    huge.apply_scale(1e9)
    with pytest.raises(MeshInputError, match="absurd scale"):
        check_scale(huge, "huge.ply")
    tiny = box.copy()
    tiny.apply_scale(1e-9)
    with pytest.raises(MeshInputError, match="absurd scale"):
        check_scale(tiny, "tiny.ply")


def test_procedural_collection_is_readable_and_manifold(tmp_path):
    paths = write_mesh_collection(tmp_path, per_category=5, seed=1)
    assert {p.parent.name for p in paths} == set(CATEGORIES)
    assert {p.suffix for p in paths} == {".ply", ".obj", ".glb", ".off"}
    for path in paths:
        mesh = load_mesh(path)  # the edge-manifold check included
        assert mesh.is_watertight, path


def test_surface_samples_lie_on_the_surface():
    mesh, _ = normalised_mesh(make_mesh("torus", seed=0))
    points, colours = surface_samples(mesh, 500, seed=0)
    assert points.shape == (500, 3) and colours.shape == (500, 3) and colours.dtype == np.uint8
    assert chamfer_percent(mesh, points) < 1e-3
    assert chamfer_percent(mesh, points + np.array([0.02, 0, 0], np.float32)) > 0.1


def test_pixel_samples_in_one_call_or_in_chunks_match_one_cast_per_sample(monkeypatch):
    """The view's sub-pixel rays cast together (or in chunks) give the colour sums and hit counts of one cast
    per sample position (the loop this replaced)."""
    import recon.data.mesh_render as mr

    mesh, _ = normalised_mesh(make_mesh("torus", seed=2))
    scene, shader = mr.raycasting_scene(mesh), mr.MeshShader(mesh)
    c2w, size, samples = mr.sphere_cameras(3)[1], 24, 3
    ys, xs = np.mgrid[0:size, 0:size] + 0.5
    xs, ys = xs.ravel(), ys.ravel()
    want_rgb, want_cover = np.zeros((size * size, 3)), np.zeros(size * size)
    offsets = (np.arange(samples) + 0.5) / samples - 0.5
    for dy in offsets:
        for dx in offsets:
            hits = mr.cast_pixels(scene, c2w, xs + dx, ys + dy, size)
            hit = np.isfinite(hits["t"])
            want_rgb[hit] += mr.shade(shader, hits, hit)
            want_cover[hit] += 1
    assert 0 < want_cover.sum() < samples * samples * size * size  # the object and the background both seen
    for per_call in (mr.RAYS_PER_CALL, 2 * size * size):  # one call; chunks of two samples
        monkeypatch.setattr(mr, "RAYS_PER_CALL", per_call)
        rgb, cover = mr.pixel_samples(scene, shader, c2w, xs, ys, size, samples)
        np.testing.assert_array_equal(cover, want_cover)
        np.testing.assert_allclose(rgb, want_rgb, rtol=0, atol=1e-12)
