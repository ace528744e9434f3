"""The viewer's first view (viewer/framing.py, docs/viewer.md "The first view"): files without cameras are
framed on the opacity-weighted core, upright; a file with a view sidecar starts exactly at its training camera;
--up / --camera override. Unit level (the viewer is built, not served): what the browser is told to show."""

import math

import numpy as np
import pytest

from rasterizer.camera import rigid_inverse
from recon.core.splat_data import SplatData
from recon.export import write_splats
from recon.export.view_sidecar import ViewSidecar, write_view_sidecars
from viewer.commands import ViewConfig, build_viewer
from viewer.framing import FirstView, core_box, estimate_up, frame_splats, parse_camera, parse_up

Z_TO_MINUS_Y = np.array([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]])  # (x, y, z) -> (x, -z, y): z-up -> y-down


def toy_object(rng, n_plate=4000, n_tower=1000) -> np.ndarray:
    """[N, 3] a z-up object: a 2 x 1.4 base plate and a tower standing on it."""
    plate = rng.uniform([-1.0, -0.7, 0.0], [1.0, 0.7, 0.1], (n_plate, 3))
    tower = rng.uniform([-0.3, -0.3, 0.1], [0.3, 0.3, 0.8], (n_tower, 3))
    return np.concatenate([plate, tower])


def cloud(rotation=np.eye(3), seed=0, floaters=1500):
    """(SplatData, object point count): the toy object (opacity ~0.9) inside a sparse cube of floaters over
    [-2.5, 2.5]^3 (opacity 0.17), rotated by ``rotation``."""
    rng = np.random.default_rng(seed)
    obj = toy_object(rng)
    cube = rng.uniform(-2.5, 2.5, (floaters, 3))
    means = np.concatenate([obj, cube]) @ rotation.T
    opac = np.concatenate([np.full(len(obj), 0.9), np.full(floaters, 0.17)])
    n = len(means)
    data = SplatData(means.astype(np.float32), np.tile([1.0, 0, 0, 0], (n, 1)).astype(np.float32),
                     np.full((n, 3), math.log(0.02), np.float32), np.log(opac / (1 - opac)).astype(np.float32),
                     rng.uniform(-1, 1, (n, 1, 3)).astype(np.float32))
    return data, len(obj)


def object_fraction(view: FirstView, points: np.ndarray, width=640, height=480) -> float:
    """Fraction of a width x height frame of ``view`` covered by the 2D bounding box of ``points`` [N, 3]."""
    w2c = view.world_to_cam()
    cam = points @ w2c[:3, :3].T + w2c[:3, 3]
    assert np.all(cam[:, 2] > 0), "the object is behind the camera"
    f = 0.5 * height / math.tan(0.5 * view.fov)
    u = f * cam[:, 0] / cam[:, 2] + width / 2
    v = f * cam[:, 1] / cam[:, 2] + height / 2
    bw = np.clip(u.max(), 0, width) - np.clip(u.min(), 0, width)
    bh = np.clip(v.max(), 0, height) - np.clip(v.min(), 0, height)
    return float(bw * bh / (width * height))


@pytest.mark.parametrize("name, rotation, up", [("z-up", np.eye(3), [0, 0, 1]),
                                                 ("y-down", Z_TO_MINUS_Y, [0, -1, 0])])
def test_framed_upright_on_the_core(name, rotation, up):
    data, n_obj = cloud(rotation)
    view = frame_splats(data.means, data.logit_opacities, math.radians(50))
    assert np.allclose(view.up, up), f"{name}: estimated up {view.up}"
    lo, hi, mask = core_box(data.means.astype(np.float64), 1 / (1 + np.exp(-data.logit_opacities)))
    assert mask[:n_obj].mean() > 0.9 and mask[n_obj:].mean() < 0.2  # the floaters are not the core
    assert np.all(hi - lo < 2.5)  # the core box is the object's, not the floater cube's (5 wide)
    frac = object_fraction(view, data.means[:n_obj].astype(np.float64))
    assert 0.2 <= frac <= 0.8, f"{name}: the object covers {frac:.0%} of the frame"
    # looking down on it from above the horizon, at its centre
    fwd = view.look_at - view.position
    elevation = math.degrees(math.asin(-(fwd @ view.up) / np.linalg.norm(fwd)))
    assert 20 < elevation < 30
    assert np.linalg.norm(view.look_at - rotation @ np.array([0, 0, 0.4])) < 0.3


def test_up_sign_from_the_heavier_side_and_opencv_fallback():
    rng = np.random.default_rng(1)
    pts = toy_object(rng)
    assert np.allclose(estimate_up(pts, np.ones(len(pts))), [0, 0, 1])
    assert np.allclose(estimate_up(-pts, np.ones(len(pts))), [0, 0, -1])
    slab = rng.uniform([-1, -0.05, -1], [1, 0.05, 1], (3000, 3))  # symmetric: no heavier side -> OpenCV -y
    assert np.allclose(estimate_up(slab, np.ones(len(slab))), [0, -1, 0])


def test_a_model_without_gaussians_gets_a_default_view():
    """Regression: an empty model (a fresh viewer, a fully pruned file) crashed in np.percentile."""
    view = frame_splats(np.zeros((0, 3)), np.zeros(0), math.radians(50))
    assert np.allclose(view.look_at, 0) and np.allclose(view.up, [0, -1, 0])
    assert np.all(np.isfinite(view.position)) and np.linalg.norm(view.position) > 1.0
    view = frame_splats(np.zeros((0, 3)), np.zeros(0), math.radians(50), up=np.array([0.0, 0.0, 1.0]))
    assert np.allclose(view.up, [0, 0, 1]) and view.position[2] > 0  # above the horizon of +z


def test_flags_parse_and_refuse():
    assert np.allclose(parse_up("z"), [0, 0, 1]) and np.allclose(parse_up("-y"), [0, -1, 0])
    with pytest.raises(ValueError, match="--up"):
        parse_up("up")
    pos, look = parse_camera("0,0,-3,0,0,0")
    assert np.allclose(pos, [0, 0, -3]) and np.allclose(look, 0)
    with pytest.raises(ValueError, match="--camera"):
        parse_camera("1,2,3")


def splat_file(tmp_path, rotation=np.eye(3)):
    data, _ = cloud(rotation)
    path = tmp_path / "cloud.ply"
    write_splats(path, data)
    return path


def test_view_file_without_sidecar_is_framed_and_overrides(tmp_path):
    path = splat_file(tmp_path, Z_TO_MINUS_Y)
    v = build_viewer(ViewConfig(path=path, port=0, output=tmp_path / "o"), verbose=False)
    assert v.first_view.how == "framed" and np.allclose(v.first_view.up, [0, -1, 0])
    v = build_viewer(ViewConfig(path=path, port=0, output=tmp_path / "o", up="x"), verbose=False)
    assert np.allclose(v.first_view.up, [1, 0, 0]) and np.allclose(v.scene.up, [1, 0, 0])
    v = build_viewer(ViewConfig(path=path, port=0, output=tmp_path / "o", camera="0,0,-4,0,0.1,0"),
                     verbose=False)
    assert v.first_view.how == "camera" and np.allclose(v.first_view.position, [0, 0, -4])
    assert np.allclose(v.first_view.look_at, [0, 0.1, 0])
    from viewer.scene import ViewerInputError

    with pytest.raises(ViewerInputError, match="--up"):
        build_viewer(ViewConfig(path=path, port=0, up="w"), verbose=False)


def test_view_file_with_sidecar_starts_at_its_training_camera(tmp_path):
    from tests.recon.export.test_view_sidecar import ring_cameras

    path = splat_file(tmp_path)
    cams = ring_cameras()
    write_view_sidecars(path, ViewSidecar(cams, up=np.array([0.0, 0, 1]), start=3))
    v = build_viewer(ViewConfig(path=path, port=0, output=tmp_path / "o"), verbose=False)
    view = v.first_view
    assert view.how == "training camera" and len(v.scene.cameras) == 6 and np.allclose(v.scene.up, [0, 0, 1])
    w2c = cams[3].world_to_cam_numpy()
    assert np.allclose(view.world_to_cam(), w2c, atol=1e-9)  # exactly its pose
    assert np.isclose(view.fov, 2 * math.atan(0.5 * cams[3].height / cams[3].K_numpy()[1, 1]))
    assert np.allclose(view.position, rigid_inverse(w2c)[:3, 3])
    # --no-cameras ignores the sidecar
    v = build_viewer(ViewConfig(path=path, port=0, output=tmp_path / "o", cameras=False), verbose=False)
    assert v.first_view.how == "framed" and np.allclose(v.first_view.up, [0, 0, 1])


def test_render_button_applies_the_min_opacity_filter(tmp_path):
    """The viewer's render (ViewerServer.render_frame) leaves out what the browser's opacity filter hides."""
    from rasterizer.camera import Camera
    from viewer.server import ViewerServer
    from viewer.splat_scene import SplatScene

    means = np.array([[0.0, 0, 3], [0.0, 0, 1.5]], np.float32)
    data = SplatData(means, np.tile([1.0, 0, 0, 0], (2, 1)).astype(np.float32),
                     np.log(np.array([[0.5] * 3, [2.0] * 3], np.float32)),
                     np.log(np.array([0.95, 0.3]) / (1 - np.array([0.95, 0.3]))).astype(np.float32),
                     np.array([[[1.5, -1.5, -1.5]], [[-1.5, -1.5, 1.5]]], np.float32))  # red behind, faint blue
    v = ViewerServer(SplatScene(data, tmp_path / "x.ply"), output_dir=tmp_path)
    cam = Camera.from_arrays(np.eye(4), [[16.0, 0, 8], [0, 16.0, 8], [0, 0, 1]], 16, 16)
    both = v.render_frame(cam, background=(1.0, 1.0, 1.0))
    v._min_opacity = 0.5
    filtered = v.render_frame(cam, background=(1.0, 1.0, 1.0))
    assert both[8, 8, 2] > filtered[8, 8, 2] + 0.1  # the faint blue one is gone
    assert filtered[8, 8, 0] > 0.8 and filtered[8, 8, 2] < 0.3  # the red one is still there
    v._min_opacity = 0.99
    assert np.allclose(v.render_frame(cam, background=(1.0, 1.0, 1.0)), 1.0)  # nothing left: the background


# ------------------------------------------------------------------------ in headless Chromium (skips without)

from tests.viewer.test_viewer import browser  # noqa: E402,F401  (the module's Chromium fixture; skips without)


@pytest.mark.parametrize("with_sidecar", [False, True])
def test_first_view_in_the_browser(browser, tmp_path, with_sidecar):  # noqa: F811
    """A y-down file with floaters, served: the browser reports the chosen first camera (the sidecar's training
    camera exactly, else the framed view), upright, and its picture matches the rasterizer's render of it."""
    from tests.recon.export.test_view_sidecar import ring_cameras
    from tests.viewer.test_viewer import BROWSER_TIMEOUT, H, W, poll_until, psnr, render_until, wait_for
    from viewer.camera_path import viser_camera_to_frame, viser_to_world_to_cam

    path = splat_file(tmp_path, Z_TO_MINUS_Y)
    if with_sidecar:
        write_view_sidecars(path, ViewSidecar(ring_cameras(z_up=False, radius=4.0), up=np.array([0.0, -1, 0]), start=1))
    v = build_viewer(ViewConfig(path=path, port=0, output=tmp_path / "o"), verbose=False).start()
    page = browser.new_page(viewport={"width": 640, "height": 480})
    try:
        page.goto(v.url)
        wait_for(v.server.get_clients, what="the browser to connect")
        client = next(iter(v.server.get_clients().values()))
        view = v.first_view
        assert view.how == ("training camera" if with_sidecar else "framed")
        poll_until(lambda: np.array(client.camera.position), lambda p: np.allclose(p, view.position, atol=1e-3),
                   "the browser to report the first view's position", BROWSER_TIMEOUT)
        cam = (np.array(client.camera.wxyz), np.array(client.camera.position), float(client.camera.fov))
        w2c = viser_to_world_to_cam(cam[0], cam[1])
        assert -w2c[1, :3] @ np.array([0.0, -1.0, 0.0]) > 0.7  # the browser camera is upright (world up: -y)
        if with_sidecar:
            assert np.allclose(w2c, view.world_to_cam(), atol=1e-3)
        ref = v.render_frame(viser_camera_to_frame(*cam, W, H), background=(0.0, 0.0, 0.0))
        got = render_until(client, cam, lambda img: psnr(img, ref) >= 18.0, "the browser to match the render")
        assert psnr(got, ref) >= 18.0
    finally:
        page.close()
        v.stop()
