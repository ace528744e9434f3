"""Mesh extraction: TSDF fusion of synthetic sphere depth, guards, and `splatforge mesh` on a tiny 3dgs run."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("open3d")

from recon.geometry import mesh_extraction as mx
from recon.geometry.tsdf import sub_grid as SUB_GRID
from recon.geometry.mesh_metrics import chamfer_distance


def look_at(center: np.ndarray) -> np.ndarray:
    """[4, 4] world-to-camera (OpenCV: x right, y down, z forward) looking from ``center`` at the origin."""
    fwd = -center / np.linalg.norm(center)
    up = np.array([0.0, 0.0, 1.0]) if abs(fwd[2]) < 0.9 else np.array([0.0, 1.0, 0.0])
    right = np.cross(fwd, up); right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    R = np.stack([right, down, fwd])
    w2c = np.eye(4); w2c[:3, :3] = R; w2c[:3, 3] = -R @ center
    return w2c


def sphere_views(radius=0.5, n=24, size=64, dist=2.0) -> mx.DepthViews:
    """Analytic depth of a sphere at the origin from ``n`` cameras on a Fibonacci sphere."""
    f = size * 0.9
    K = np.array([[f, 0, size / 2], [0, f, size / 2], [0, 0, 1.0]])
    i = np.arange(n) + 0.5
    phi, theta = np.arccos(1 - 2 * i / n), np.pi * (1 + 5 ** 0.5) * i
    centers = dist * np.stack([np.sin(phi) * np.cos(theta), np.sin(phi) * np.sin(theta), np.cos(phi)], 1)
    ys, xs = np.mgrid[0:size, 0:size] + 0.5
    rays = np.stack([(xs - K[0, 2]) / f, (ys - K[1, 2]) / f, np.ones_like(xs)], -1)  # camera frame, z = 1
    depths, w2cs = [], []
    for c in centers:
        w2c = look_at(c)
        d_world = rays @ w2c[:3, :3]  # R^T applied to each ray (z-scaled)
        o = c
        a = (d_world ** 2).sum(-1); b = 2 * d_world @ o; cc = o @ o - radius ** 2
        disc = b * b - 4 * a * cc
        t = np.where(disc > 0, (-b - np.sqrt(np.maximum(disc, 0))) / (2 * a), 0.0)  # t = camera z
        depths.append(t.astype(np.float32)); w2cs.append(w2c)
    rgb = np.full((n, size, size, 3), 0.5, np.float32)
    return mx.DepthViews(rgb, np.stack(depths), np.repeat(K[None], n, 0), np.stack(w2cs))


def icosphere(radius):
    import trimesh
    s = trimesh.creation.icosphere(subdivisions=4, radius=radius)
    return s.vertices, s.faces


def test_sphere_tsdf_chamfer_small():
    views = sphere_views()
    voxel = mx.default_voxel_size(views.surface_points(), resolution=96)
    blocks = mx.check_memory(views.surface_points(), voxel, 4.0, 1.0)
    mesh = mx.fuse_tsdf(views, voxel, 4.0, blocks)
    mesh = mx.keep_largest_component(mesh)
    cd = chamfer_distance(mesh.vertices, mesh.faces, *icosphere(0.5), samples=20000)
    assert cd["chamfer_pct"] < 0.5, cd
    # a wrong truth (bigger sphere) is far: the metric can fail
    assert chamfer_distance(mesh.vertices, mesh.faces, *icosphere(0.6), samples=20000)["chamfer_pct"] > 3


def test_canonical_order_depends_only_on_the_geometry():
    """A shuffled copy (vertices renumbered, faces reordered and cyclically rotated) comes out identical;
    every triangle keeps its corners and orientation; fuse_tsdf returns meshes in that order."""
    import trimesh

    sphere = trimesh.creation.icosphere(subdivisions=2)
    rng = np.random.default_rng(0)
    colors = rng.random((len(sphere.vertices), 3)).astype(np.float32)
    mesh = mx.MeshArrays(np.asarray(sphere.vertices), np.asarray(sphere.faces, dtype=np.int64), colors)
    perm = rng.permutation(len(mesh.vertices))
    rank = np.empty_like(perm)
    rank[perm] = np.arange(len(perm))
    faces = np.roll(rank[mesh.faces][rng.permutation(len(mesh.faces))], 1, axis=1)  # same oriented triangles
    a, b = mx.canonical_order(mesh), mx.canonical_order(mx.MeshArrays(mesh.vertices[perm], faces, colors[perm]))
    for x, y in ((a.vertices, b.vertices), (a.faces, b.faces), (a.colors, b.colors)):
        np.testing.assert_array_equal(x, y)
    assert (a.faces[:, 0] == a.faces.min(axis=1)).all() and (np.diff(a.faces[:, 0]) >= 0).all()

    def normals(m):  # per-face (unnormalised) normals, rows sorted: the oriented triangles as a set
        t = m.vertices[m.faces]
        n = np.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0])
        return n[np.lexsort(np.round(n, 9).T[::-1])]

    np.testing.assert_allclose(normals(a), normals(mesh), atol=1e-12)
    fused = mx.fuse_tsdf(sphere_views(n=8, size=32), 0.05, 4.0, 4000)
    np.testing.assert_array_equal(fused.faces, mx.canonical_order(fused).faces)
    np.testing.assert_array_equal(fused.vertices, mx.canonical_order(fused).vertices)


def test_chamfer_is_exact_for_known_offsets():
    """Distances go to the other mesh's triangles: the same mesh scores ~0 (no sampling floor), a sphere
    0.05 larger scores 0.05 in both directions, and a cube shifted by 0.1 along x scores what the exact
    point-to-surface distances of that shift are (mean over the area of the moved faces)."""
    import trimesh

    v, f = icosphere(0.5)
    same = chamfer_distance(v, f, v, f, samples=20000)
    assert same["chamfer_pct"] < 1e-4, same
    big_v, big_f = icosphere(0.55)
    cd = chamfer_distance(big_v, big_f, v, f, samples=20000)
    diag = same["diagonal"]
    # the icosphere's flat faces lie inside the true sphere by up to ~3e-3 of the radius: tolerance 5e-3 x r
    for key in ("accuracy_pct", "completeness_pct"):
        assert abs(cd[key] / 100 * diag - 0.05) < 5e-3 * 0.55, cd
    box = trimesh.creation.box(extents=(1, 1, 1))
    moved = box.copy()
    moved.apply_translation((0.1, 0, 0))
    cd = chamfer_distance(moved.vertices, moved.faces, box.vertices, box.faces, samples=60000, seed=3)
    # points of the moved cube: its +x face (1/6 of the area) is 0.1 from the true one; its -x face lies
    # inside the true cube, min(0.1, 0.5 - |y|, 0.5 - |z|) from its surface: mean = int_0^0.1 (1 - 2t)^2 dt
    # = (1 - 0.8^3) / 6; each side face sticks out by 0 < s < 0.1 on 0.1 of its length (mean 0.05 there)
    inner = (1 - 0.8 ** 3) / 6
    expected = (0.1 + inner + 4 * 0.1 * 0.05) / 6
    assert abs(cd["accuracy_pct"] / 100 * cd["diagonal"] - expected) < 5e-4, (cd, expected)


def test_empty_depth_refused_and_empty_mesh_guard():
    views = sphere_views(n=4)
    views.depth[:] = 0
    with pytest.raises(mx.EmptyMeshError, match="empty mesh; try a larger --voxel-size"):
        mx.fuse_tsdf(views, 0.02, 4.0, 100)


def test_memory_refusal_names_the_number():
    pts = sphere_views(n=6).surface_points()
    with pytest.raises(mx.MeshMemoryError, match=r"needs about [0-9.]+ GiB .* over --max-memory-gb 0.001"):
        mx.check_memory(pts, 0.002, 4.0, 0.001)
    with pytest.raises(mx.MeshMemoryError, match="voxel blocks"):
        mx.check_memory(pts, 1e-7, 4.0, 4.0)


def test_mesh_command_on_tiny_3dgs_run(tmp_path):
    import trimesh
    from recon.commands.mesh import MeshConfig, extract_run_mesh
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    run = tmp_path / "run"
    train_model(TrainConfig(data=Path("procedural"), out=run, steps=60, data_factor=2, save_every=0,
                            progress=False), log=lambda *a: None)
    out = tmp_path / "m.ply"
    summary = extract_run_mesh(MeshConfig(run=run, out=out, depth="median", resolution=64, keep_largest=True,
                                          progress=False))
    assert summary["depth"] == "expected" and summary["faces"] > 100
    m = trimesh.load(out, process=False)
    assert len(m.faces) == summary["faces"] and m.visual.vertex_colors.shape[0] == len(m.vertices)
    with pytest.raises(FileExistsError):
        extract_run_mesh(MeshConfig(run=run, out=out, resolution=64, progress=False))
    with pytest.raises(mx.MeshMemoryError):
        extract_run_mesh(MeshConfig(run=run, out=tmp_path / "big.glb", voxel_size=1e-4, progress=False))
    assert not (tmp_path / "big.glb").exists()


def test_mesh_command_supersample_renders_finer_views(tmp_path, monkeypatch):
    """--supersample N fuses views rendered at N x the training views' resolution (default 1, also for a run
    trained with --supersample); it must be >= 1."""
    from recon.commands.mesh import MeshConfig, extract_run_mesh
    from recon.core.errors import UsageError
    from recon.run.folder import Run
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    run = tmp_path / "run"
    train_model(TrainConfig(data=Path("procedural"), out=run, steps=30, data_factor=2, save_every=0,
                            supersample=2, progress=False), log=lambda *a: None)
    base = Run.open(run).cameras
    sizes = []
    real = mx.render_views

    def spy(model, cameras, *a, **k):
        sizes.append([(c.width, c.height) for c in cameras])
        return real(model, cameras, *a, **k)

    monkeypatch.setattr(mx, "render_views", spy)
    plain = extract_run_mesh(MeshConfig(run=run, out=tmp_path / "plain.ply", resolution=48, progress=False))
    fine = extract_run_mesh(MeshConfig(run=run, out=tmp_path / "fine.ply", resolution=48, supersample=2,
                                       progress=False))
    assert plain["supersample"] == 1 and fine["supersample"] == 2
    assert sizes[0] == [(c.width, c.height) for c in base]
    assert sizes[1] == [(2 * c.width, 2 * c.height) for c in base]
    assert plain["faces"] > 100 and fine["faces"] > 100
    with pytest.raises(UsageError, match="--supersample 0"):
        extract_run_mesh(MeshConfig(run=run, out=tmp_path / "bad.ply", supersample=0, progress=False))
    assert not (tmp_path / "bad.ply").exists()


def test_mesh_command_on_tiny_2dgs_run_uses_median_depth(tmp_path):
    import trimesh
    from recon.commands.mesh import MeshConfig, extract_run_mesh
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    run = tmp_path / "run2d"
    train_model(TrainConfig(data=Path("procedural"), out=run, steps=60, data_factor=2, save_every=0, progress=False,
                            method="2dgs"), log=lambda *a: None)
    summaries = {}
    for kind in ("median", "expected"):
        out = tmp_path / f"{kind}.ply"
        summaries[kind] = extract_run_mesh(MeshConfig(run=run, out=out, depth=kind, resolution=64, progress=False))
        assert summaries[kind]["depth"] == kind and summaries[kind]["faces"] > 100
        assert len(trimesh.load(out, process=False).faces) == summaries[kind]["faces"]


@pytest.mark.parametrize("max_blocks", [27, 100])
def test_extraction_in_pieces_equals_one_call(max_blocks, monkeypatch):
    """Above open3d's block limit marching cubes runs in pieces (recon.geometry.tsdf): with a limit of a few
    blocks the sphere's grid is cut into many slabs (most triangles' neighbours in another piece) and the
    mesh is the one call's, vertex for vertex and face for face."""
    from recon.geometry import tsdf as tx

    views = sphere_views(n=12, size=48)
    whole = mx.fuse_tsdf(views, 0.012, 4.0, 4000)
    made = []
    monkeypatch.setattr(tx, "sub_grid", lambda *a: made.append(len(a[-1])) or SUB_GRID(*a))
    pieces = mx.fuse_tsdf(views, 0.012, 4.0, 4000, max_blocks=max_blocks)
    assert len(whole.faces) > 5000 and len(made) >= 3 and max(made) <= max_blocks  # pieces with borders
    np.testing.assert_array_equal(pieces.vertices, whole.vertices)
    np.testing.assert_array_equal(pieces.colors, whole.colors)
    np.testing.assert_array_equal(pieces.faces, whole.faces)


def test_pieces_are_slabs_and_neighbours_only_active_blocks():
    from recon.geometry import tsdf as tx

    keys = np.array([[x, y, z] for x in range(10) for y in range(3) for z in range(2)])
    groups = tx.piece_groups(keys, 6)
    assert sorted(np.concatenate(groups).tolist()) == list(range(len(keys)))
    assert all(len(np.unique(keys[g][:, 0])) == 1 for g in groups)  # cut across the longest axis (x)
    near = tx.with_neighbours(keys[groups[0]], keys)  # the x = 0 slab and its x = 1 neighbours
    assert sorted(np.unique(near[:, 0]).tolist()) == [0, 1] and len(near) == 12
    assert len(np.unique(tx.block_codes(np.array([[-5, 0, 7], [7, 0, -5], [0, -5, 7]])))) == 3


def test_weld_merges_equal_vertices_and_ignores_faceless_pieces():
    from recon.geometry import tsdf as tx

    v1 = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [9, 9, 9]], np.float32)  # the last one unused
    v2 = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0]], np.float32)  # shares an edge with the first piece
    c1, c2 = np.full((4, 3), 0.25, np.float32), np.full((3, 3), 0.25, np.float32)
    empty = (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int64), None)
    v, f, c = tx.weld([(v1, np.array([[0, 1, 2]]), c1), empty, (v2, np.array([[0, 2, 1]]), c2)])
    assert len(v) == 4 and c is not None and c.shape == (4, 3)
    np.testing.assert_array_equal(v[f], np.stack([v1[[0, 1, 2]], v2[[0, 2, 1]]]))
