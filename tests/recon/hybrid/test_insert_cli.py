"""`splatforge insert`: flags, bad input (one-line errors naming the flag or file), outputs, GLB export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from recon.commands.insert import (InsertConfig, check_compositable, clip_times, colourise_depth, depth_png16,
                                   parse_camera, parse_size, plan, preview_path, write_outputs, InsertPlan)
from recon.core.errors import OutputError, UsageError
from recon.hybrid.assets import AssetError
from recon.models.base import NotCompositableError, SceneModel
from recon.training.trainer import TrainConfig
from tests.recon.tiny_runs import tiny_run

ROOT = Path(__file__).resolve().parents[3]


def cube_obj(path: Path, size: float = 0.2) -> Path:
    """A closed cube OBJ of edge ``size`` centred at the origin."""
    import trimesh

    trimesh.creation.box(extents=(size, size, size)).export(str(path))
    return path


@pytest.fixture
def run_and_cube(tmp_path):
    return tiny_run(tmp_path), cube_obj(tmp_path / "cube.obj")


def cfg(run, assets, tmp_path, **kw) -> InsertConfig:
    kw.setdefault("out", tmp_path / "frame.png")
    kw.setdefault("progress", False)
    return InsertConfig(run=run, asset=tuple(assets), **kw)


# ------------------------------------------------------------------------------------------ flags


def test_repeated_flags_parse_with_tyro(tmp_path):
    import tyro

    from recon.commands.insert import InsertConfig as C

    c = tyro.cli(C, args=["--run", "R", "--asset", "a.obj", "--asset", "b.glb", "--pose", "0,0,0", "--pose",
                          "1,2,3,10,0,0,2", "--material", "mirror", "--material", "glass:1.4", "--light",
                          "sun:10,20", "--light", "point:0,0,3,5", "--out", "x.png"])
    assert c.asset == (Path("a.obj"), Path("b.glb"))
    assert c.pose == ("0,0,0", "1,2,3,10,0,0,2")
    assert c.material == ("mirror", "glass:1.4")
    assert c.light == ("sun:10,20", "point:0,0,3,5")
    assert tyro.cli(C, args=["--run", "R", "--asset", "a.obj", "--out", "x.png"]).light == ()


def test_size_and_camera_strings():
    assert parse_size("480x272") == (480, 272)
    assert parse_camera("3") == ("train", 3) and parse_camera("test:7") == ("test", 7)
    for bad in ("480", "0x10", "ax3"):
        with pytest.raises(UsageError, match="--size"):
            parse_size(bad)
    with pytest.raises(UsageError, match="--camera"):
        parse_camera("val:2")
    assert clip_times(3) == [0.0, 0.5, 1.0] and clip_times(1) == [0.0]


# ------------------------------------------------------------------------------------------ bad input


def test_mesh_that_does_not_load(run_and_cube, tmp_path):
    run, _ = run_and_cube
    bad = tmp_path / "broken.glb"
    bad.write_bytes(b"glTF\x02\x00\x00\x00garbage that is not a glb")
    with pytest.raises(AssetError, match="broken.glb"):
        plan(cfg(run, [bad], tmp_path))
    with pytest.raises(AssetError, match="no such mesh file"):
        plan(cfg(run, [tmp_path / "missing.obj"], tmp_path))


def test_mesh_without_faces(run_and_cube, tmp_path):
    import trimesh

    run, _ = run_and_cube
    cloud = tmp_path / "points.ply"
    trimesh.PointCloud(np.random.default_rng(0).normal(size=(50, 3))).export(str(cloud))
    with pytest.raises(AssetError, match="points.ply: holds no triangles"):
        plan(cfg(run, [cloud], tmp_path))


@pytest.mark.parametrize("pose", ["1,2", "a,b,c", "0,0,0,1,2,3,-1", "0,0,nan", "1,2,3,4"])
def test_pose_string_that_does_not_parse(run_and_cube, tmp_path, pose):
    run, cube = run_and_cube
    with pytest.raises(AssetError, match="--pose"):
        plan(cfg(run, [cube], tmp_path, pose=(pose,)))


def test_counts_of_pose_and_material_must_match_assets(run_and_cube, tmp_path):
    run, cube = run_and_cube
    with pytest.raises(UsageError, match=r"--pose: given 1 time\(s\) for 2 --asset"):
        plan(cfg(run, [cube, cube], tmp_path, pose=("0,0,0",)))
    with pytest.raises(UsageError, match=r"--material: given 2 time\(s\) for 1 --asset"):
        plan(cfg(run, [cube], tmp_path, pose=("0,0,0",), material=("mirror", "diffuse")))
    with pytest.raises(UsageError, match="--pose"):
        plan(cfg(run, [cube, cube], tmp_path))  # two assets, no poses
    with pytest.raises(AssetError, match="--material 'chrome'"):
        plan(cfg(run, [cube], tmp_path, pose=("0,0,0",), material=("chrome",)))


def test_asset_outside_the_scene_is_a_warning(run_and_cube, tmp_path):
    run, cube = run_and_cube
    said = []
    p = plan(cfg(run, [cube], tmp_path, pose=("50,50,50",)), warn=said.append)
    assert len(said) == 1 and "cube.obj" in said[0] and "outside the scene's bounds" in said[0]
    assert p.warnings == said
    said.clear()
    plan(cfg(run, [cube], tmp_path, pose=("0,0,0",)), warn=said.append)
    assert said == []


class _NoFront(SceneModel):
    method = "nofront"


class _FrontOnly(SceneModel):
    method = "frontonly"

    def render_front(self, cameras, depth_limit, *, t=None, backend="auto"):
        raise AssertionError("not called by the check")


for _cls in (_NoFront, _FrontOnly):
    _cls.__abstractmethods__ = frozenset()


def test_method_that_cannot_be_composited():
    from recon.hybrid.assets import Material

    with pytest.raises(NotCompositableError, match="'nofront' cannot be composited"):
        check_compositable(_NoFront, [Material()])
    check_compositable(_FrontOnly, [Material()])
    with pytest.raises(NotCompositableError, match="--material mirror.*use --material diffuse"):
        check_compositable(_FrontOnly, [Material(), Material("mirror")])


def test_run_that_cannot_be_composited_is_refused_before_rendering(run_and_cube, tmp_path, monkeypatch):
    from recon.run.folder import Run

    run, cube = run_and_cube
    monkeypatch.setattr(Run, "model_class", property(lambda self: _NoFront))
    with pytest.raises(NotCompositableError, match="cannot be composited"):
        plan(cfg(run, [cube], tmp_path, pose=("0,0,0",)))
    assert not (tmp_path / "frame.png").exists()


def test_output_checks(run_and_cube, tmp_path):
    run, cube = run_and_cube
    (tmp_path / "frame.png").write_bytes(b"x")
    with pytest.raises(OutputError, match="already exists; pass --force"):
        plan(cfg(run, [cube], tmp_path, pose=("0,0,0",)))
    with pytest.raises(OutputError, match="--out .*frame.jpg"):
        plan(cfg(run, [cube], tmp_path, pose=("0,0,0",), out=tmp_path / "frame.jpg"))
    with pytest.raises(OutputError, match="--depth"):
        plan(cfg(run, [cube], tmp_path, pose=("0,0,0",), out=tmp_path / "f2.png", depth=tmp_path / "d.exr"))
    with pytest.raises(UsageError, match="needs --path"):
        plan(cfg(run, [cube], tmp_path, pose=("0,0,0",), out=tmp_path / "clip.mp4"))
    with pytest.raises(UsageError, match="--time"):
        plan(cfg(run, [cube], tmp_path, pose=("0,0,0",), out=tmp_path / "f3.png", time=0.5))
    with pytest.raises(UsageError, match="--camera test:999"):
        plan(cfg(run, [cube], tmp_path, pose=("0,0,0",), out=tmp_path / "f4.png", camera="test:999"))


def test_plan_cameras_sizes_and_times(run_and_cube, tmp_path):
    run, cube = run_and_cube
    p = plan(cfg(run, [cube], tmp_path, pose=("0,0,0",), out=tmp_path / "f.png", camera="1", size="40x30"))
    assert len(p.cameras) == 1 and (p.cameras[0].width, p.cameras[0].height) == (40, 30)
    p = plan(cfg(run, [cube], tmp_path, pose=("0,0,0",), out=tmp_path / "c.mp4", path="orbit", frames=5, max_side=32))
    assert len(p.cameras) == 5 and max(p.cameras[0].width, p.cameras[0].height) == 32
    assert p.times == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert p.frame.shape == (3, 3) and np.allclose(p.frame.T @ p.frame, np.eye(3), atol=1e-9)


def test_cli_prints_one_line_error(run_and_cube, tmp_path):
    run, cube = run_and_cube
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "recon.cli", "insert", "--run", str(run), "--asset", str(cube),
                        "--pose", "1,2,x", "--out", str(tmp_path / "f.png")], capture_output=True, text=True,
                       env=env, timeout=240, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert lines[-1].startswith("splatforge insert: error: --pose '1,2,x'"), r.stderr
    assert "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------------ outputs


def test_depth_and_mask_outputs_round_trip(tmp_path):
    from PIL import Image

    depth = np.zeros((6, 8), np.float32)
    depth[2:4, 3:6] = [[1.5, 2.0, 2.25], [3.0, 0.0, 4.5]]
    mask = np.full((6, 8), -1, np.int32)
    mask[2:4, 3:5] = 1
    rgb = np.zeros((6, 8, 3), np.uint8)
    c = InsertConfig(run=tmp_path, out=tmp_path / "f.png", depth=tmp_path / "d.png", mask=tmp_path / "m.png")
    p = InsertPlan(c, "image", None, [], [], np.eye(3))
    written = write_outputs(p, {"rgb": [rgb], "depth": [depth], "mask": [mask]}, warn=print)
    assert set(written) >= {tmp_path / "f.png", tmp_path / "d.png", preview_path(tmp_path / "d.png"),
                            tmp_path / "m.png"}
    d = Image.open(tmp_path / "d.png")
    assert float(d.text["depth_scale"]) == 1000.0
    stored = np.asarray(d).astype(np.float64)
    assert np.allclose(stored / 1000.0, depth, atol=5e-4)
    assert np.array_equal(np.asarray(Image.open(tmp_path / "m.png")), (mask + 1).astype(np.uint8))
    preview = np.asarray(Image.open(preview_path(tmp_path / "d.png")))
    assert preview.shape == (6, 8, 3) and (preview[depth == 0] == 0).all() and (preview[depth > 0].sum(-1) > 0).all()
    c2 = InsertConfig(run=tmp_path, out=tmp_path / "f2", depth=tmp_path / "d.npy", mask=tmp_path / "m.npy")
    write_outputs(InsertPlan(c2, "folder", None, [], [], np.eye(3)),
                  {"rgb": [rgb, rgb], "depth": [depth, 2 * depth], "mask": [mask, mask]}, warn=print)
    assert np.load(tmp_path / "d.npy").shape == (2, 6, 8) and np.load(tmp_path / "m.npy").dtype == np.int32
    assert sorted(os.listdir(tmp_path / "f2")) == ["frame_00000.png", "frame_00001.png"]


def test_depth_png_clips_with_a_warning():
    said = []
    out = depth_png16(np.array([[0.0, 10.0, 100.0]]), 1000.0, said.append)
    assert out.tolist() == [[0, 10000, 65535]] and "--depth-scale" in said[0]
    assert colourise_depth(np.zeros((2, 2))).sum() == 0


# ------------------------------------------------------------------------------------------ export


def _plane(n=21, half=1.0):
    g = np.linspace(-half, half, n)
    x, y = np.meshgrid(g, g)
    v = np.stack([x.ravel(), y.ravel(), np.zeros(x.size)], 1)
    idx = np.arange(n * n).reshape(n, n)
    f = np.concatenate([np.stack([idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, 1:].ravel()], 1),
                        np.stack([idx[:-1, :-1].ravel(), idx[1:, 1:].ravel(), idx[1:, :-1].ravel()], 1)])
    return v, f


def test_export_glb_reads_back_and_manifest_validates(tmp_path):
    import trimesh

    from recon.hybrid.assets import PlacedAsset, Pose, load_mesh, parse_light
    from recon.hybrid.export_glb import export_scene, shadow_strength, validate_manifest, world_to_gltf

    frame = np.eye(3)  # up = world z
    cube = load_mesh(cube_obj(tmp_path / "cube.obj", 0.4))
    asset = PlacedAsset(cube, Pose((0.0, 0.0, 0.3), 20.0, 0.0, 0.0, 1.0))
    sun = parse_light("sun:0,90", frame)  # straight overhead: the shadow is the cube's footprint
    splats = tmp_path / "splats.ply"
    splats.write_bytes(b"ply\nfake splat bytes")
    proxy = _plane()
    written = export_scene(tmp_path / "scene.glb", [asset], frame, [sun], proxy, splats, ambient=0.3)
    assert [w.name for w in written] == ["scene.glb", "scene.splats.ply", "scene.manifest.json"]
    assert (tmp_path / "scene.splats.ply").read_bytes() == splats.read_bytes()
    back = trimesh.load(str(tmp_path / "scene.glb"))
    nodes = set(back.graph.nodes_geometry)
    assert {"asset_0_cube", "scene_proxy", "shadow_catcher"} <= nodes
    m, _ = back.graph["asset_0_cube"]
    assert np.allclose(m, world_to_gltf(frame) @ asset.pose.matrix(frame), atol=1e-6)
    proxy_back = back.geometry["scene_proxy"]
    colours = np.asarray(proxy_back.visual.vertex_colors)[:, 0]
    under = (np.abs(proxy[0][:, 0]) < 0.15) & (np.abs(proxy[0][:, 1]) < 0.15)
    far = np.abs(proxy[0]).max(1) > 0.5
    assert colours[under].max() < colours[far].min()  # darkened under the cube only
    data = json.loads((tmp_path / "scene.manifest.json").read_text())
    validate_manifest(data)
    assert data["files"] == {"meshes": "scene.glb", "splats": "scene.splats.ply"}
    assert data["draw_order"][0]["what"] == "assets" and data["draw_order"][1]["depth_write"] is False
    s = shadow_strength(np.array([[0.0, 0.0, 0.0], [0.9, 0.9, 0.0]]), [asset], frame, [sun], 0.3)
    assert np.allclose(s, [0.7, 0.0])
    broken = dict(data, draw_order=list(reversed(data["draw_order"])))
    with pytest.raises(ValueError, match="draw_order"):
        validate_manifest(broken)
    with pytest.raises(FileExistsError):
        export_scene(tmp_path / "scene.glb", [asset], frame, [sun], proxy, splats)


# ------------------------------------------------------------------------------------------ end to end


def test_insert_renders_frame_depth_and_mask(run_and_cube, tmp_path):
    """Two cubes: one between the first training camera and the splat cloud (visible), one at the cloud's
    centre (hidden by the splats in front of it): the mask holds the first, the depth there is the cube's."""
    pytest.importorskip("recon.hybrid.render", reason="the HybridRenderer (recon/hybrid/render.py) is not here")
    from PIL import Image

    from recon.commands.insert import run_insert
    from recon.run.folder import Run

    run, cube = run_and_cube
    cam = Run.open(run).scene.frames_train[0].camera
    centre = cam.center.double().numpy()
    front = centre * (1.3 / np.linalg.norm(centre))  # outside the [-0.8, 0.8]^3 cloud, toward the camera
    summary = run_insert(cfg(run, [cube, cube], tmp_path, pose=(",".join(map(str, front)) + ",0,0,0,1",
                                                                   "0,0,0,0,0,0,1"),
                             out=tmp_path / "f.png", depth=tmp_path / "d.npy", mask=tmp_path / "m.png", size="48x32"))
    rgb = np.asarray(Image.open(tmp_path / "f.png"))
    mask = np.asarray(Image.open(tmp_path / "m.png"))
    depth = np.load(tmp_path / "d.npy")
    assert rgb.shape == (32, 48, 3) and mask.shape == (32, 48) and depth.shape == (32, 48)
    assert (mask == 1).sum() > 4 and (mask == 0).any()
    assert (mask == 2).sum() < (mask == 1).sum()  # the centre cube is mostly behind the splats
    z_front = float(np.linalg.norm(centre) - 1.3)
    assert np.all(np.abs(depth[mask == 1] - z_front) < 0.5)
    assert summary["frames"] == 1 and summary["timings_ms"]


def test_insert_video_with_moving_asset_and_export(run_and_cube, tmp_path):
    """--path orbit with --asset-path: an .mp4, depth .npy [N, H, W] whose asset moves (its mask changes), a
    mask video; --export-glb writes the GLB (asset + proxy), the splat copy and a valid manifest."""
    pytest.importorskip("recon.hybrid.render", reason="the HybridRenderer (recon/hybrid/render.py) is not here")
    import trimesh

    from recon.commands.insert import run_insert
    from recon.hybrid.export_glb import validate_manifest

    run, cube = run_and_cube
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keyframes": [{"time": 0, "pose": "-1.2,0,0,0,0,0,1.5"},
                                              {"time": 1, "pose": [1.2, 0, 0, 90, 0, 0, 1.5]}]}))
    summary = run_insert(cfg(run, [cube], tmp_path, asset_path=(keys,), path="fixed", frames=3, fps=5,
                             out=tmp_path / "clip.mp4", depth=tmp_path / "d.npy", mask=tmp_path / "m.mp4",
                             size="48x32", export_glb=tmp_path / "scene.glb"))
    names = sorted(Path(p).name for p in summary["written"])
    assert names == ["clip.mp4", "d.npy", "m.mp4", "scene.glb", "scene.manifest.json", "scene.splats.ply"]
    depth = np.load(tmp_path / "d.npy")
    assert depth.shape == (3, 32, 48)
    assert not np.array_equal(depth[0], depth[2])  # the same camera, the asset moved
    back = trimesh.load(str(tmp_path / "scene.glb"))
    assert {"asset_0_cube", "scene_proxy"} <= set(back.graph.nodes_geometry)
    validate_manifest(json.loads((tmp_path / "scene.manifest.json").read_text()))


def test_export_keeps_the_parts_of_a_multi_part_asset(tmp_path):
    import trimesh

    from recon.hybrid.assets import PlacedAsset, Pose, load_mesh, parse_light
    from recon.hybrid.export_glb import export_scene, world_to_gltf

    two = trimesh.Scene()
    red = trimesh.creation.box(extents=(0.2, 0.2, 0.2))
    red.visual.vertex_colors = [255, 0, 0, 255]
    two.add_geometry(red, node_name="a")
    two.add_geometry(trimesh.creation.icosphere(radius=0.1), node_name="b",
                     transform=trimesh.transformations.translation_matrix([0.5, 0, 0]))
    two.export(str(tmp_path / "two.glb"))
    asset = PlacedAsset(load_mesh(tmp_path / "two.glb"), Pose((1.0, 2.0, 3.0), 90.0, 0.0, 0.0, 2.0))
    assert len(asset.mesh.parts) == 2
    frame = np.eye(3)
    export_scene(tmp_path / "s.glb", [asset], frame, [parse_light("sun:0,60", frame)], None, None)
    back = trimesh.load(str(tmp_path / "s.glb"))
    parts = sorted(n for n in back.graph.nodes_geometry if n.startswith("asset_0_two_part"))
    assert parts == ["asset_0_two_part0", "asset_0_two_part1"]
    for n in parts:
        assert np.allclose(back.graph[n][0], world_to_gltf(frame) @ asset.pose.matrix(frame), atol=1e-6)
    world = [np.asarray(v) @ asset.pose.matrix(frame)[:3, :3].T + asset.pose.matrix(frame)[:3, 3]
             for v in (p.vertices for p in asset.mesh.parts)]
    assert np.allclose(np.concatenate(world).mean(0), np.concatenate(asset.world_vertices(frame)).mean(0))
    visuals = [back.geometry[back.graph[n][1]].visual for n in parts]
    red_parts = [v for v in visuals if getattr(v, "kind", None) == "vertex"
                 and (np.asarray(v.vertex_colors)[:, :3] == [255, 0, 0]).all()]
    assert len(red_parts) == 1  # the red part kept its vertex colours


def test_held_time_renderer_poses_keyframed_assets_at_the_clip_time(run_and_cube, tmp_path):
    """A 4D run held at --time T with --asset-path: each frame's renderer has the assets still at the clip's
    pose (the renderer's own time then only moves the scene)."""
    pytest.importorskip("recon.hybrid.render", reason="the HybridRenderer (recon/hybrid/render.py) is not here")
    from recon.commands.insert import held_renderer
    from recon.hybrid.assets import AssetPath, PlacedAsset, Pose, load_mesh
    from recon.hybrid.render import HybridRenderer
    from recon.run.folder import Run

    run, cube = run_and_cube
    opened = Run.open(run)
    path = AssetPath((0.0, 1.0), (Pose((0.0, 0.0, 0.0)), Pose((1.0, 0.0, 0.0), 90.0)))
    asset = PlacedAsset(load_mesh(cube), path=path)
    base = HybridRenderer(opened.load_model(), [asset], [], np.eye(3), None, 0.3, 1, None, shadow_strength=0.5)
    held = held_renderer(base, [asset], 0.5)
    assert held.assets[0].path is None and held.assets[0].pose == path.at(0.5)
    assert held.assets[0].pose_at(0.9) == path.at(0.5)
    assert (held.ambient, held.bounces, held.shadow_strength) == (0.3, 1, 0.5)


def test_4d_run_scene_time_follows_the_clip_or_is_held(tmp_path, monkeypatch):
    """A tiny procedural-4d run: along a path the renderer is asked for times 0, 0.5, 1 (the clip time, which
    also poses the keyframed asset); with --time 0.5 every frame is asked for 0.5 while the asset still moves."""
    pytest.importorskip("recon.hybrid.render", reason="the HybridRenderer (recon/hybrid/render.py) is not here")
    from recon.commands.insert import run_insert
    from recon.hybrid.render import HybridRenderer
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    run = tmp_path / "run4d"
    train_model(TrainConfig(data=Path("procedural-4d"), out=run, method="4dgs", steps=20, data_factor=4, sh_degree=1,
                            save_every=0, progress=False), log=lambda *a: None)
    cube = cube_obj(tmp_path / "cube.obj")
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keyframes": [{"time": 0, "pose": "-0.5,0,0"}, {"time": 1, "pose": "0.5,0,0"}]}))
    calls = []
    original = HybridRenderer.render

    def spy(self, camera, time=None, shadows=True):
        calls.append((time, self.assets[0].pose_at(time).translation[0]))
        return original(self, camera, time=time, shadows=shadows)

    monkeypatch.setattr(HybridRenderer, "render", spy)
    run_insert(cfg(run, [cube], tmp_path, asset_path=(keys,), path="fixed", frames=3, out=tmp_path / "a",
                   size="24x24"))
    assert [c[0] for c in calls] == [0.0, 0.5, 1.0]
    assert np.allclose([c[1] for c in calls], [-0.5, 0.0, 0.5])
    calls.clear()
    run_insert(cfg(run, [cube], tmp_path, asset_path=(keys,), path="fixed", frames=3, out=tmp_path / "b",
                   size="24x24", time=0.5))
    assert [c[0] for c in calls] == [0.5, 0.5, 0.5]
    assert np.allclose([c[1] for c in calls], [-0.5, 0.0, 0.5])


def test_drop_to_ground_rests_assets_on_the_proxy_surface(tmp_path):
    from recon.commands.insert import drop_to_ground
    from recon.hybrid.assets import AssetPath, PlacedAsset, Pose, load_mesh

    frame = np.eye(3)  # up = world z
    v, f = _plane(n=11, half=2.0)
    v[:, 2] = 0.2  # a floor at z = 0.2
    cube = load_mesh(cube_obj(tmp_path / "cube.obj", 0.4))
    above = PlacedAsset(cube, Pose((0.3, -0.2, 1.5), 30.0, 0.0, 0.0, 1.0))
    sunk = PlacedAsset(cube, Pose((0.0, 0.0, 0.1), 0.0, 0.0, 0.0, 1.0))
    away = PlacedAsset(cube, Pose((9.0, 9.0, 1.0)))
    moving = PlacedAsset(cube, path=AssetPath((0.0, 1.0), (Pose((0, 0, 1)), Pose((1, 0, 1)))))
    said = []
    out = drop_to_ground([above, sunk, away, moving], frame, (v, f), said.append)
    for a in out[:2]:
        low = np.concatenate(a.world_vertices(frame))[:, 2].min()
        assert abs(low - 0.2) < 1e-4
    assert out[0].pose.translation[:2] == (0.3, -0.2) and out[0].pose.yaw == 30.0
    assert out[2] is away and out[3] is moving
    assert len(said) == 2 and "no scene surface under" in said[0] and "--asset-path" in said[1]
    assert drop_to_ground([above], frame, None, said.append) == [above] and "no proxy mesh" in said[-1]


@pytest.mark.parametrize("method,material", [("2dgs", "mirror"), ("nerf", "glass:1.5"), ("2dgs", "diffuse")])
def test_every_compositable_method_through_the_command(tmp_path, method, material):
    """A few steps of a 2dgs and a nerf run on the procedural scene, then one frame with a cube (diffuse with
    its shadow, or mirror / glass through the method's trace_rays): RGB, depth and mask are written, the
    cube is seen, and its pixels carry its depth."""
    from recon.commands.insert import run_insert
    from recon.training.train_run import train_model

    run = tmp_path / method
    if method == "nerf":
        from tests.recon.nerf.test_nerf_train import tiny

        config = tiny(run, 6)
    else:
        config = TrainConfig(data=Path("procedural"), out=run, method=method, steps=6, data_factor=4, sh_degree=0,
                             save_every=0, progress=False, eval_every=0)
    train_model(config, log=lambda *a: None)
    cube = cube_obj(tmp_path / "cube.obj", 0.5)
    out = run_insert(cfg(run, [cube], tmp_path, pose=("0,0,0,20,0,0,1",), material=(material,),
                         light=("sun:45,60",), size="40x30", depth=tmp_path / "d.npy", mask=tmp_path / "m.npy"))
    assert out["frames"] == 1 and (tmp_path / "frame.png").is_file()
    mask, depth = np.load(tmp_path / "m.npy"), np.load(tmp_path / "d.npy")
    assert mask.shape == (30, 40) and (mask == 0).sum() > 0  # (a 6-step NeRF is still foggy: few pixels)
    assert np.all(depth[mask == 0] > 0)
