"""The viewer with inserted assets (``splatforge view RUN --asset ...``, issue 21): pose <-> gizmo conversions,
flag errors before any server starts, the gizmo moving the pose read-out (and a typed pose moving the gizmo),
and in headless Chromium: the asset mesh appears, a gizmo drag (the browser's update message) changes the
read-out and the picture, and the server hybrid mode sends its image (with depth) as the background the
browser shows. Browser tests skip as in test_viewer.py; the hybrid test also needs ../shared/data's spot
mesh and :mod:`recon.hybrid.render`."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("viser")

from recon.export import write_splats  # noqa: E402
from tests.conftest import SHARED_DATA  # noqa: E402
from recon.hybrid.assets import AssetError, Pose, parse_pose  # noqa: E402
from tests.viewer.test_viewer import (  # noqa: E402,F401  (browser, no_server: fixtures)
    H, W, _connect, browser, browser_rgba, no_server, poll_until, set_camera, small_scene,
    wait_for)
from viewer.assets import (euler_zyx, format_pose, load_assets, pose_from_gizmo, pose_to_gizmo,  # noqa: E402
                           scene_frame)
from viewer.commands import ViewConfig, build_viewer, view  # noqa: E402
from viewer.hybrid import MODES, HybridUnavailable, hybrid_image  # noqa: E402
from viewer.scene import ViewerInputError  # noqa: E402

SPOT = SHARED_DATA / "meshes" / "spot" / "spot_triangulated.obj"


def random_frame(rng) -> np.ndarray:
    """A ground frame (columns e1, e2, up) for a random up direction, as the viewer builds it."""
    up = rng.normal(size=3)
    return scene_frame([], up / np.linalg.norm(up))


@pytest.fixture(scope="module")
def splat_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("viewer_hybrid") / "scene.ply"
    write_splats(path, small_scene(), force=True)
    return path


@pytest.fixture(scope="module")
def box_file(tmp_path_factory) -> Path:
    import trimesh

    box = trimesh.creation.box(extents=(0.4, 0.3, 0.2))
    box.visual.vertex_colors = np.tile([200, 40, 40, 255], (len(box.vertices), 1)).astype(np.uint8)
    path = tmp_path_factory.mktemp("viewer_hybrid_mesh") / "box.ply"
    box.export(path)
    return path


# ------------------------------------------------------------------------------- no browser needed


def test_gizmo_pose_round_trip_in_any_ground_frame():
    rng = np.random.default_rng(3)
    for k in range(50):
        frame = random_frame(rng)
        assert np.allclose(frame.T @ frame, np.eye(3)) and np.isclose(np.linalg.det(frame), 1.0)
        pitch = [89.9999, -90.0, 90.0][k % 3] if k < 6 else rng.uniform(-89, 89)
        pose = Pose(tuple(rng.normal(size=3)), rng.uniform(-180, 180), pitch, rng.uniform(-180, 180),
                    rng.uniform(0.1, 3))
        back = pose_from_gizmo(*pose_to_gizmo(pose, frame), pose.scale, frame)
        np.testing.assert_allclose(back.matrix(frame), pose.matrix(frame), atol=1e-9)  # same placement
        assert -90.0 <= back.pitch <= 90.0


def test_euler_angles_and_pose_string():
    from recon.hybrid.assets import rotation_zyx

    assert np.allclose(euler_zyx(rotation_zyx(30.0, -20.0, 10.0)), (30.0, -20.0, 10.0))
    pose = Pose((0.123456, -2.0, 1e-9), 30.04, -0.0, 179.96, 0.5)
    text = format_pose(pose)
    assert text == "0.1235,-2,1e-09,30.0,0.0,180.0,0.5", text
    back = parse_pose(text)
    assert np.allclose(back.as_list(), [0.1235, -2, 1e-9, 30.0, 0.0, 180.0, 0.5])


def test_assets_default_pose_and_flag_counts(box_file):
    two = load_assets([box_file, box_file], poses=["0,0,1,10,0,0,2", "1,1,1"], centre=np.array([1.0, 2.0, 3.0]))
    assert [a.pose.as_list() for a in two] == [[0, 0, 1, 10, 0, 0, 2], [1, 1, 1, 0, 0, 0, 1]]  # in --asset order
    with pytest.raises(AssetError, match="--pose: given 1 time"):  # as splatforge insert: one per asset
        load_assets([box_file, box_file], poses=["0,0,1"])
    z_up = load_assets([box_file], up="z")[0].mesh.vertices
    assert np.allclose(np.ptp(z_up, 0), [0.4, 0.2, 0.3])  # the file's z (0.2) became y
    default = load_assets([box_file], centre=np.array([1.0, 2.0, 3.0]), radius=2.0)[0]
    assert default.pose.translation == (1.0, 2.0, 3.0) and np.isclose(default.pose.scale, 0.3 * 2.0 / 0.4)
    assert default.material.kind == "diffuse"
    assert load_assets([box_file], materials=["glass:1.33"])[0].material.ior == 1.33


@pytest.mark.parametrize("flags, named", [
    ({"pose": ("1,2",)}, "--pose"),
    ({"pose": ("0,0,0", "1,1,1", "2,2,2")}, "--pose"),  # 3 poses for 1 asset
    ({"material": ("mirror", "glass")}, "--material"),
    ({"material": ("chrome",)}, "--material"),
    ({"light": ("moon:1,2",)}, "--light"),
    ({"asset": (Path("nope.glb"),)}, "nope.glb"),
    ({"asset": (), "pose": ("0,0,0",)}, "--asset"),  # asset flags without an asset
    ({"hybrid_size": 8}, "--hybrid-size"),
])
def test_asset_flag_errors_fail_before_server_starts(splat_file, box_file, capsys, no_server, flags, named):
    cfg = ViewConfig(path=splat_file, port=0, **{"asset": (box_file,), **flags})
    with pytest.raises(ViewerInputError, match=named.replace("-", r"\-")):
        build_viewer(cfg, verbose=False)
    with pytest.raises(SystemExit) as exc:
        view(cfg)
    assert exc.value.code == 2 and named in capsys.readouterr().err


OTHER_PAGE = "another-page"  # a client id of no connected page: viser then sends the new pose to every page


def drag_gizmo(v, client_id, i: int, wxyz, position) -> None:
    """What a browser sends while a user drags gizmo ``i``: viser's transform-controls update message,
    handled on the server's event loop exactly as one from the websocket (viser forwards the pose to every
    page but ``client_id``'s, which moved it itself)."""
    from viser import _messages

    name = v.assets.gizmos[i].name
    msg = _messages.TransformControlsUpdateMessage(name=name, wxyz=tuple(float(x) for x in wxyz),
                                                   position=tuple(float(x) for x in position))
    asyncio.run_coroutine_threadsafe(v.server.scene._handle_transform_controls_updates(client_id, msg),
                                     v.server.get_event_loop()).result(timeout=30)


def test_gizmo_moves_pose_readout_and_typed_pose_moves_gizmo(splat_file, box_file, tmp_path):
    v = build_viewer(ViewConfig(path=splat_file, port=0, output=tmp_path, asset=(box_file,),
                                pose=("0,0,4,0,0,0,1",)), verbose=False).start()
    try:
        layer = v.assets
        assert layer.pose_text(0) == "0,0,4,0.0,0.0,0.0,1"
        frame = layer.frame  # a splat file: -y up
        target = Pose((0.25, -0.5, 4.5), 40.0, 10.0, -5.0, 1.0)
        wxyz, position = pose_to_gizmo(target, frame)
        drag_gizmo(v, "test-client", 0, wxyz, position)
        wait_for(lambda: layer.pose_text(0) == format_pose(target), timeout=30, what="the pose read-out")
        assert np.allclose(layer.assets[0].pose.matrix(frame), target.matrix(frame), atol=1e-9)
        layer.gui["pose0"].value = "1,0,4,90,0,0,2"  # typed in the GUI
        wait_for(lambda: np.allclose(layer.gizmos[0].position, (1, 0, 4)), timeout=30, what="the gizmo to move")
        assert layer.assets[0].pose.scale == 2.0 and layer.gui["scale0"].value == 2.0
        assert all(h.scale == 2.0 for h in layer.mesh_handles[0])
        np.testing.assert_allclose(layer.gizmos[0].wxyz, pose_to_gizmo(parse_pose("1,0,4,90,0,0,2"), frame)[0])
        layer.gui["pose0"].value = "not a pose"  # refused: the asset stays
        assert layer.assets[0].pose.translation == (1.0, 0.0, 4.0)
    finally:
        v.stop()


def test_server_hybrid_needs_a_run_folder_and_falls_back(splat_file, box_file, tmp_path):
    """--hybrid on a splat file: the splats and meshes are hidden at start; the first render request finds no
    run, says so, and switches back to browser compositing (splats and meshes shown again)."""
    from types import SimpleNamespace

    v = build_viewer(ViewConfig(path=splat_file, port=0, output=tmp_path, asset=(box_file,), hybrid=True),
                     verbose=False)
    with pytest.raises(HybridUnavailable, match="run folder"):
        v.assets.make_renderer()
    v.start()
    try:
        layer = v.assets
        assert layer.hybrid and v.splat_handle.visible is False and not layer.mesh_handles[0][0].visible
        layer.request(SimpleNamespace(client_id="page"))  # what a connecting page's camera report does
        wait_for(lambda: not layer.hybrid, timeout=30, what="the fallback to browser compositing")
        assert "run folder" in layer.renderer_error and "run folder" in layer.gui["info"].value
        assert v.splat_handle.visible and layer.mesh_handles[0][0].visible and layer.frames_sent == 0
    finally:
        v.stop()


def test_hybrid_image_depth_for_viser():
    import torch

    class Frame:  # the fields of a recon.hybrid.render.HybridFrame that the viewer reads
        rgb = torch.tensor([[[0.5, 1.5, -1.0], [0.0, 0.25, 1.0]]])
        depth = np.array([[2.5, 0.0]], np.float32)

    rgb, depth = hybrid_image(Frame())
    assert rgb.dtype == np.uint8 and rgb.tolist() == [[[128, 255, 0], [0, 64, 255]]]
    assert depth.tolist() == [[2.5, 167.0]]  # no surface: far (viser's depth encoding saturates at 167.77)


# ---------------------------------------------------------------------------------- in the browser


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A small 3dgs run of the procedural scene (SH 0: the browser shows what the rasterizer renders)."""
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    run = tmp_path_factory.mktemp("viewer_hybrid_run") / "run"
    train_model(TrainConfig(data=Path("procedural"), out=run, steps=40, data_factor=2, save_every=0, progress=False,
                            method="3dgs", sh_degree=0), log=lambda *a: None)
    return run


SPOT_POSE = "-0.35,0.2,-0.55,30,0,0,0.45"  # spot on the procedural scene's ground (y = 0.5, up = -y), free space


def _look_at(eye, target) -> tuple:
    """viser (wxyz, position) of a camera at ``eye`` looking at ``target`` with up -y."""
    from recon.data.procedural import look_at_world_to_cam
    from viewer.camera_path import world_to_cam_to_viser

    w2c = look_at_world_to_cam(np.asarray(eye, float), np.asarray(target, float), np.array([0.0, -1.0, 0.0]))
    return world_to_cam_to_viser(w2c)


def settled(client, cam, ready=lambda rgba: True, what: str = "a settled picture") -> np.ndarray:
    """[H, W, 4] browser frame once it stops changing (two frames 0.5 s apart within 1e-3)."""
    last = [None]

    def ok(now):
        before, last[0] = last[0], now
        return before is not None and ready(now) and np.abs(now - before).mean() < 1e-3

    return poll_until(lambda: browser_rgba(client, *cam), ok, what, interval=0.5)


@pytest.fixture(scope="module")
def hybrid_ready():
    """Skip (before any training) unless open3d, the shared spot mesh and the hybrid renderer are there."""
    pytest.importorskip("open3d")
    if not SPOT.is_file():
        pytest.skip(f"{SPOT} not found (../shared/data is absent)")
    try:
        from recon.hybrid.render import HybridRenderer  # noqa: F401
    except ImportError as err:
        pytest.skip(f"recon.hybrid.render is not available ({err})")


def test_asset_gizmo_and_server_hybrid_in_browser(hybrid_ready, browser, run_dir, tmp_path, record_property):
    from recon.hybrid.render import HybridRenderer
    from recon.run.folder import Run

    wxyz, position = _look_at((2.0, -1.6, -2.2), (0.0, 0.3, 0.0))
    pictures = {}
    for name, assets in (("none", ()), ("spot", (SPOT,))):
        v = build_viewer(ViewConfig(path=run_dir, port=0, cameras=False, output=tmp_path / name, asset=assets,
                                    pose=(SPOT_POSE,) if assets else ()), verbose=False)
        if assets:  # the run's hybrid renderer without the proxy mesh (its TSDF build is slow; not under test)
            v.assets.make_renderer = lambda: HybridRenderer.for_run(Run.open(run_dir), v.assets.assets,
                                                                    v.assets.lights, proxy=False)
        v.start()
        page, client = _connect(browser, v)
        cam = set_camera(client, wxyz, position, math.radians(50))
        if not assets:
            pictures["none"] = settled(client, cam, what="the run's splats")
            page.close()
            v.stop()
            continue
        try:
            layer = v.assets
            # 1. the mesh appears: the picture differs from the scene without it, around where spot is
            with_spot = settled(client, cam, lambda rgba: np.abs(rgba - pictures["none"]).mean() > 0.005,
                                "spot in the browser")
            diff = np.abs(with_spot[..., :3] - pictures["none"][..., :3]).max(-1)
            mask = spot_mask(layer, cam)
            assert (diff[mask] > 0.1).mean() > 0.25, (diff[mask] > 0.1).mean()  # the box around a cow
            assert (diff[~mask] > 0.1).mean() < 0.05, (diff[~mask] > 0.1).mean()
            # 2. a mouse drag on the gizmo's x arrow in the page moves the asset along that axis
            start = layer.assets[0].pose
            axis = mouse_drag_arrow(page, client, layer.gizmos[0], lambda: layer.assets[0].pose != start, axis=0)
            cam = set_camera(client, *cam)  # a press that missed the arrow turned the camera instead
            time.sleep(1.0)  # the drag's last updates
            moved_by = np.subtract(layer.assets[0].pose.translation, start.translation)
            assert np.linalg.norm(moved_by) > 0.02 and moved_by @ axis > 0.95 * np.linalg.norm(moved_by), moved_by
            assert layer.pose_text(0) == format_pose(layer.assets[0].pose) != format_pose(start)
            assert np.allclose([layer.assets[0].pose.yaw, layer.assets[0].pose.pitch], [start.yaw, start.pitch])
            # the browser's update message with an exact pose: the read-out, the page's GUI and the mesh follow
            before = layer.pose_text(0)
            moved = Pose((0.25, 0.2, -0.7), -60.0, 0.0, 0.0, 0.45)
            drag_gizmo(v, OTHER_PAGE, 0, *pose_to_gizmo(moved, layer.frame))
            wait_for(lambda: layer.pose_text(0) == format_pose(moved) != before, what="the pose read-out")
            wait_for(lambda: format_pose(moved) in page_inputs(page), what="the read-out in the page")
            after = settled(client, cam, lambda rgba: np.abs(rgba - with_spot).mean() > 0.003, "spot moved")
            # 3. server hybrid: the browser shows the server's image (splats and browser mesh hidden)
            layer.gui["mode"].value = MODES[1]
            assert v.splat_handle.visible is False and not any(h.visible for h in layer.mesh_handles[0])
            wait_for(lambda: layer.frames_sent >= 1 or layer.renderer_error, what="the first server hybrid frame")
            assert layer.renderer_error is None, layer.renderer_error
            ref = server_reference(layer, client)
            shown = settled(client, cam, lambda rgba: close_to(rgba, ref), "the server image in the browser")
            page.screenshot(path=str(tmp_path / "viewer_hybrid.png"))
            print(f"screenshot: {tmp_path / 'viewer_hybrid.png'}")
            # the server image lines up with the browser's own picture of the same scene: away from the asset
            # (browser mesh shading, server shadow) the splats agree
            away = ~spot_mask(layer, cam)
            bg = layer.renderer.background.cpu().numpy()  # the run's background, behind the browser's splats
            browser_rgb = after[..., :3] * after[..., 3:] + bg * (1 - after[..., 3:])
            agree = np.median(np.abs(shown[..., :3] - browser_rgb).max(-1)[away])
            assert agree < 0.08, agree
            # moving the gizmo in hybrid mode re-renders on the server with the asset at its new place
            sent = layer.frames_sent
            drag_gizmo(v, OTHER_PAGE, 0, *pose_to_gizmo(parse_pose(SPOT_POSE), layer.frame))
            wait_for(lambda: layer.frames_sent > sent, what="a server frame after the gizmo moved")
            ref2 = server_reference(layer, client)
            settled(client, cam, lambda rgba: close_to(rgba, ref2) and np.abs(rgba - shown).mean() > 0.003,
                    "the re-rendered server image")
            times = [f["ms"] for f in layer.frame_times[1:]] or [layer.frame_times[0]["ms"]]
            record_property("hybrid_frame_ms_median", float(np.median(times)))
            print(f"hybrid frames {layer.frames_sent}, median {np.median(times):.0f} ms at "
                  f"{layer.frame_times[-1]['size']}, renderer built in {layer.build_seconds:.1f} s")
            # 4. back to browser compositing: splats and mesh return, the background image goes
            layer.gui["mode"].value = MODES[0]
            assert v.splat_handle.visible and all(h.visible for h in layer.mesh_handles[0])
            settled(client, cam, lambda rgba: np.abs(rgba - with_spot).mean() < 0.01, "browser compositing again")
            page.close()
        finally:
            v.stop()


def mouse_drag_arrow(page, client, gizmo, moved, axis: int = 0, tries: int = 4) -> np.ndarray:
    """Drag gizmo ``gizmo``'s translation arrow ``axis`` (its local axis) with the mouse in ``page`` by half its
    length, until ``moved()`` says the server saw it (SwiftShader on a loaded machine sometimes misses the
    first press: each try grabs the arrow at another point along it, waiting up to 20 s). Returns that axis
    (world unit vector). The page's canvas fills the viewport."""
    import viser.transforms as vtf
    from viewer.camera_path import viser_camera_to_frame

    cam = client.camera
    frame = viser_camera_to_frame(cam.wxyz, cam.position, cam.fov, int(cam.image_width), int(cam.image_height))
    w2c, K = frame.world_to_cam_numpy(), frame.K_numpy()
    direction = vtf.SO3(np.asarray(gizmo.wxyz)).as_matrix()[:, axis]
    centre = np.asarray(gizmo.position)

    def pixel(p):
        q = K @ (w2c[:3, :3] @ p + w2c[:3, 3])
        return q[:2] / q[2]

    for try_, f in enumerate((0.6, 0.75, 0.5, 0.85)[:tries]):
        a, b = pixel(centre + f * gizmo.scale * direction), pixel(centre + (f + 0.5) * gizmo.scale * direction)
        page.mouse.move(*(a - 3 * (b - a) / np.linalg.norm(b - a)))
        page.mouse.move(*a, steps=3)  # hover: the arrow highlights
        time.sleep(1.0)
        page.mouse.down()
        time.sleep(0.5)
        for s in np.linspace(0.0, 1.0, 8)[1:]:
            page.mouse.move(*(a + s * (b - a)))
            time.sleep(0.2)
        page.mouse.up()
        page.mouse.move(2, 2)  # away: no hover highlight in later pictures
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20.0:
            if moved():
                print(f"gizmo moved by mouse drag try {try_ + 1}")
                return direction
            time.sleep(0.1)
    raise AssertionError(f"{tries} mouse drags on the gizmo's arrow did not move it")


def page_inputs(page) -> list[str]:
    """The values of the page's text inputs (the GUI panel)."""
    return page.evaluate("() => Array.from(document.querySelectorAll('input')).map(e => e.value)")


def spot_mask(layer, cam) -> np.ndarray:
    """[H, W] bool: pixels of the browser frame (camera ``cam``) where the asset's bounding box projects,
    grown by 2 pixels."""
    from viewer.camera_path import viser_camera_to_frame

    frame = viser_camera_to_frame(*cam, W, H)
    points = np.concatenate(layer.assets[0].world_vertices(layer.frame))
    w2c, K = frame.world_to_cam_numpy(), frame.K_numpy()
    p = (points @ w2c[:3, :3].T + w2c[:3, 3]) @ K.T
    uv = p[:, :2] / p[:, 2:]
    lo, hi = np.floor(uv.min(0)) - 2, np.ceil(uv.max(0)) + 2
    jj, ii = np.mgrid[0:H, 0:W]
    return (ii >= lo[0]) & (ii <= hi[0]) & (jj >= lo[1]) & (jj <= hi[1])


def server_reference(layer, client) -> np.ndarray:
    """The hybrid renderer's picture of the client's camera at the browser frame size, [H, W, 3] float."""
    from viewer.camera_path import viser_camera_to_frame

    cam = viser_camera_to_frame(client.camera.wxyz, client.camera.position, client.camera.fov, W, H)
    import torch

    with torch.no_grad():
        out = layer.ensure_renderer().render(cam.to(dtype=torch.float32))
    return hybrid_image(out)[0].astype(np.float64) / 255.0


def served_picture(layer, client) -> np.ndarray:
    """The full-size server frame of the client's camera (``hybrid size``, not the browser's: a NeRF render at
    the browser size is slow) stretched to the browser frame size, [H, W, 3] float."""
    import torch

    with torch.no_grad():
        out = layer.ensure_renderer().render(layer.camera_for(client))
    rgb = torch.from_numpy(hybrid_image(out)[0].astype(np.float32) / 255.0).permute(2, 0, 1)[None]
    return torch.nn.functional.interpolate(rgb, size=(H, W), mode="bilinear")[0].permute(1, 2, 0).double().numpy()


def close_to(rgba: np.ndarray, ref: np.ndarray) -> bool:
    """The browser frame shows ``ref`` (the gizmo drawn on top and JPEG / resampling differences aside):
    opaque, and the median colour difference under 0.05."""
    return bool(rgba[..., 3].min() > 0.99 and np.median(np.abs(rgba[..., :3] - ref).max(-1)) < 0.05)


def test_nerf_run_shows_server_frames_low_while_moving_refined_when_still(browser, tmp_path):
    """`splatforge view NERF_RUN`: the run's splats.ply is only baked from the field, so the viewer starts in
    server mode (splats hidden) and sends frames of the field itself: a preview at half the size on each camera
    move, then the full size once the camera has been still for REFINE_DELAY; the browser shows them."""
    pytest.importorskip("open3d")
    from recon.training.train_run import train_model
    from tests.recon.nerf.test_nerf_train import tiny
    from viewer.hybrid import PREVIEW_FRACTION

    run = tmp_path / "nerf"
    train_model(tiny(run, 10), log=lambda *a: None)
    v = build_viewer(ViewConfig(path=run, port=0, cameras=False, output=tmp_path / "out", hybrid_size=96),
                     verbose=False)
    assert v.assets is not None and v.assets.assets == [] and v.assets.start_hybrid
    v.start()
    try:
        layer = v.assets
        assert v.splat_handle.visible is False  # the baked splats are not what is shown
        page, client = _connect(browser, v)
        wxyz, position = _look_at((2.0, -1.6, -2.2), (0.0, 0.3, 0.0))
        for k in range(3):  # a moving camera: previews
            cam = set_camera(client, wxyz, np.asarray(position) * (1.0 + 0.05 * k), math.radians(50))
            time.sleep(0.05)
        wait_for(lambda: any(f.get("preview") for f in layer.frame_times) or layer.renderer_error,
                 what="a preview frame")
        assert layer.renderer_error is None, layer.renderer_error
        wait_for(lambda: layer.frame_times and not layer.frame_times[-1]["preview"], what="the refined frame")
        preview = next(f for f in layer.frame_times if f["preview"])
        full = layer.frame_times[-1]
        assert max(full["size"]) == 96 and max(preview["size"]) == round(96 * PREVIEW_FRACTION)
        ref = served_picture(layer, client)
        settled(client, cam, lambda rgba: close_to(rgba, ref), "the field's server image in the browser")
        page.close()
    finally:
        v.stop()
