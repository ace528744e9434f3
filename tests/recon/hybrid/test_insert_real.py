"""Real data: ../shared/data/meshes/spot inserted into short-trained lego_400 and colmap_bird runs (made here,
tiny: a few hundred steps at a coarse data factor). Checks the structure the hybrid render must have:

- the asset is visible (mask non-empty) and, where the scene lies in front of it, hidden (occlusion: the
  mesh's own projection is larger than the visible mask, and at the hidden pixels the scene is nearer);
- depth order: where the asset is visible the frame's depth is the mesh's depth;
- shadows only darken: turning shadows on changes no scene pixel to brighter, and darkens some.

Skips with the reason when ../shared/data is absent. The pictures for people to look at are made with the
``splatforge insert`` commands of the README, not here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT.parent / "shared" / "data"
SPOT = DATA / "meshes" / "spot" / "spot_triangulated.obj"

pytestmark = pytest.mark.skipif(not SPOT.is_file(), reason=f"{DATA} (shared data with meshes/spot) is not here")


def _train(tmp_path_factory, name: str, data: Path, factor: int, steps: int, **kw) -> Path:
    if not data.is_dir():
        pytest.skip(f"{data} is not here")
    pytest.importorskip("recon.hybrid.render", reason="the HybridRenderer (recon/hybrid/render.py) is not here")
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    run = tmp_path_factory.mktemp(name) / "run"
    train_model(TrainConfig(data=data, out=run, steps=steps, data_factor=factor, save_every=0, progress=False,
                            sh_degree=1, **kw), log=lambda *a: None)
    return run


@pytest.fixture(scope="module")
def lego_run(tmp_path_factory):
    return _train(tmp_path_factory, "lego", DATA / "lego_400", 8, 250, init_num_random=8000)


@pytest.fixture(scope="module")
def bird_run(tmp_path_factory):
    return _train(tmp_path_factory, "bird", DATA / "colmap_bird", 8, 300)


def _renderer(run_dir: Path, pose, material="diffuse", light="sun:30,65"):
    from recon.hybrid.assets import PlacedAsset, load_mesh, parse_light, parse_material
    from recon.hybrid.render import HybridRenderer, ground_frame_of
    from recon.run.folder import Run

    run = Run.open(run_dir)
    frame = ground_frame_of(run.scene.frames_train)
    assets = [PlacedAsset(load_mesh(SPOT), pose, parse_material(material))]
    return run, HybridRenderer.for_run(run, assets, [parse_light(light, frame)], warn=lambda m: None)


def _mesh_only(renderer, camera):
    """(t [H, W], hit [H, W]) of the bare mesh along the camera's primary rays, camera z."""
    from recon.hybrid.raycast import MeshScene
    from recon.hybrid.render import primary_rays

    origins, dirs, z_per_t = primary_rays(camera)
    hits = MeshScene(renderer.assets, renderer.frame).first_hit(origins, dirs)
    H, W = camera.height, camera.width
    z = np.where(hits.hit, hits.t * np.asarray(z_per_t).reshape(-1), 0.0)
    return z.reshape(H, W), hits.hit.reshape(H, W)


def _check_structure(run, renderer, camera):
    import torch

    with torch.no_grad():
        lit = renderer.render(camera, shadows=True)
        flat = renderer.render(camera, shadows=False)
        scene = run.load_model().render_front([camera], torch.full((1, camera.height, camera.width), float("inf")))
    visible = np.asarray(lit.asset_id) >= 0
    mesh_z, mesh_hit = _mesh_only(renderer, camera)
    assert visible.sum() > 20, "the asset is not visible"
    assert (visible <= mesh_hit).all(), "asset pixels where the mesh is not"
    # depth order: visible asset pixels carry the mesh's depth
    d = np.asarray(lit.depth)
    assert np.allclose(d[visible], mesh_z[visible], rtol=1e-3, atol=1e-3)
    # occlusion: mesh pixels hidden by the scene have scene content nearer than the mesh
    hidden = mesh_hit & ~visible
    scene_alpha = 1.0 - scene[1][0, ..., 0].numpy()
    scene_z = scene[2][0, ..., 0].numpy()
    if hidden.any():
        opaque = hidden & (scene_alpha > 0.9)
        assert opaque.sum() >= 0.5 * hidden.sum()
        assert np.median(scene_z[opaque] - mesh_z[opaque]) < 0, "hidden pixels have the scene behind the mesh"
    # shadows only darken the scene, and darken some of it
    a = lit.rgb.numpy().astype(np.float64)
    b = flat.rgb.numpy().astype(np.float64)
    outside = ~visible
    diff = (a - b).sum(-1)[outside]
    assert diff.max() <= 1e-4, "a shadow made a scene pixel brighter"
    assert (diff < -0.05).sum() >= 5, "no shadow on the scene"
    return visible.sum(), hidden.sum(), (diff < -0.05).sum()


def test_spot_in_lego(lego_run):
    from recon.hybrid.assets import Pose

    # the lego bulldozer stands on the z = 0 plane region around the origin (Blender, z up); spot half inside it
    run, renderer = _renderer(lego_run, Pose((0.0, 0.3, 0.35), 30.0, 0.0, 0.0, 0.5))
    from recon.commands.insert import resized

    cam = resized(run.scene.frames_test[0].camera, (100, 100), None)
    visible, hidden, shadowed = _check_structure(run, renderer, cam)
    assert visible > 0 and shadowed > 0


def test_spot_in_colmap_bird(bird_run):
    """Spot between the first training camera and the scene's centre (where the cameras look), lit from the
    camera's side so that its shadow falls on the scene behind it."""
    import math

    from recon.data.camera_paths import scene_rig
    from recon.commands.insert import resized
    from recon.hybrid.assets import Pose
    from recon.hybrid.render import ground_frame_of
    from recon.run.folder import Run

    run0 = Run.open(bird_run)
    rig = scene_rig(run0.cameras)
    cam = resized(run0.scene.frames_train[0].camera, (120, 68), None)
    eye = cam.center.double().numpy()
    offset = eye - rig["center"]
    frame = ground_frame_of(run0.scene.frames_train)
    g = frame.T @ offset
    azimuth = math.degrees(math.atan2(g[1], g[0]))
    pose = Pose(tuple(rig["center"] + 0.4 * offset), math.degrees(math.atan2(g[1], g[0])), 0.0, 0.0,
                0.12 * rig["radius"])
    run, renderer = _renderer(bird_run, pose, light=f"sun:{azimuth + 20:.1f},35")
    _check_structure(run, renderer, cam)
