"""Viewer tests: camera conversions and files (no browser), input errors and ports (no browser), and the
page in headless Chromium (WebGL on SwiftShader): it loads, shows the splats, matches the rasterizer
for an SH-degree-0 scene, and reacts to the opacity slider and the render/keyframe buttons.

Browser tests skip when /usr/bin/chromium or playwright is absent (never run ``playwright install``).
They never wait a fixed time for the browser: splats, meshes and GUI changes reach the page
asynchronously, so each waits for its condition (:func:`poll_until`) under a generous timeout, and a
slow (shared, loaded) machine only makes them slower, never failing.
"""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("viser")

from recon.export import SplatData, write_splats  # noqa: E402
from viewer.camera_path import (  # noqa: E402
    CameraPath, CameraPathError, intrinsics_from_fov, load_camera_path, save_camera_path,
    viser_camera_to_frame, viser_to_world_to_cam, world_to_cam_to_viser)
from viewer.commands import ViewConfig, build_viewer, view  # noqa: E402
from viewer.scene import SplatScene, ViewerInputError, browser_splats, load_run_cameras, load_scene  # noqa: E402
from viewer.server import ViewerServer  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
W, H = 160, 120  # browser/rasterizer comparison size (SwiftShader is slow)
BROWSER_TIMEOUT = 180.0  # seconds any one browser-side condition may take (SwiftShader on a loaded machine)


def poll_until(grab, accept=bool, what: str = "condition", timeout: float = BROWSER_TIMEOUT,
               interval: float = 0.1):
    """``grab()`` again and again until ``accept(value)`` holds, and return that value; fail naming
    ``what`` after ``timeout`` seconds."""
    t0 = time.monotonic()
    while True:
        value = grab()
        if accept(value):
            return value
        assert time.monotonic() - t0 < timeout, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(interval)


def wait_for(cond, timeout: float = BROWSER_TIMEOUT, what: str = "condition") -> None:
    """Wait until ``cond()`` is true (see :func:`poll_until`)."""
    poll_until(cond, bool, what, timeout)


def small_scene(n: int = 300, seed: int = 0) -> SplatData:
    """n opaque-ish SH-degree-0 Gaussians in the box [-1, 1]^2 x [3, 5] (in front of an identity camera);
    every other splat has opacity 0.95, the rest 0.6 (for the opacity filter)."""
    rng = np.random.default_rng(seed)
    means = rng.uniform([-1, -1, 3], [1, 1, 5], (n, 3))
    opac = np.where(np.arange(n) % 2 == 0, 0.95, 0.6)
    return SplatData(means.astype(np.float32), rng.normal(size=(n, 4)).astype(np.float32),
                     np.log(rng.uniform(0.04, 0.12, (n, 3))).astype(np.float32),
                     np.log(opac / (1 - opac)).astype(np.float32),
                     rng.uniform(-1.5, 1.5, (n, 1, 3)).astype(np.float32))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(1.0 / max(np.mean((a - b) ** 2), 1e-12)))


@pytest.fixture(scope="module")
def splat_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("viewer") / "scene.ply"
    write_splats(path, small_scene(), force=True)
    return path


# ------------------------------------------------------------------------------- no browser needed


def test_viser_camera_conversion_round_trip():
    rng = np.random.default_rng(1)
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    q = q if q[0] >= 0 else -q
    c = rng.normal(size=3)
    w2c = viser_to_world_to_cam(q, c)
    assert np.allclose(w2c[:3, :3] @ c + w2c[:3, 3], 0)  # camera centre maps to the origin
    q2, c2 = world_to_cam_to_viser(w2c)
    assert np.allclose(q2, q) and np.allclose(c2, c)
    # identity viser camera = identity OpenCV camera: a point on +z projects to the image centre
    K = intrinsics_from_fov(math.radians(60), W, H)
    p = K @ (viser_to_world_to_cam((1, 0, 0, 0), (0, 0, 0))[:3] @ [0, 0, 4, 1])
    assert np.allclose(p[:2] / p[2], [W / 2, H / 2])
    assert np.isclose(K[1, 1], 0.5 * H / math.tan(math.radians(30)))


def test_camera_path_round_trip_and_errors(tmp_path):
    f = viser_camera_to_frame((1, 0, 0, 0), (0.5, 0, 0), 0.8, 64, 48)
    path = save_camera_path(tmp_path / "p.json", CameraPath([f, f], fps=24))
    back = load_camera_path(path)
    assert back.fps == 24 and len(back.frames) == 2
    assert np.allclose(back.frames[0].world_to_cam, f.world_to_cam) and back.frames[0].width == 64
    (tmp_path / "bad.json").write_text('{"frames": [{"world_to_cam": [[1]], "K": [], "width": 1, "height": 1}]}')
    with pytest.raises(CameraPathError, match="bad.json"):
        load_camera_path(tmp_path / "bad.json")


def test_browser_splats_and_filters():
    data = small_scene(10)
    b = browser_splats(data)
    assert b.centers.shape == (10, 3) and b.covariances.shape == (10, 3, 3) and b.opacities.shape == (10, 1)
    assert np.allclose(b.covariances, b.covariances.transpose(0, 2, 1), atol=1e-6)
    s = np.exp(data.log_scales.astype(np.float64))
    assert np.allclose(np.linalg.eigvalsh(b.covariances).sum(1), (s ** 2).sum(1), rtol=1e-4)
    assert len(browser_splats(data, min_opacity=0.8)) == 5
    assert np.allclose(browser_splats(data, 2.0).covariances, 4 * b.covariances, rtol=1e-5)


def test_static_scene_time_hook_and_dynamic_override(splat_file):
    scene = load_scene(splat_file)
    assert scene.set_time(0.5) is False  # static: nothing happens

    class Moving(SplatScene):
        def set_time(self, t):
            self.splats.means[:, 0] += t
            return True

    moving = Moving(scene.splats, scene.source, dynamic=True)
    v = ViewerServer(moving, port=0, verbose=False).start()
    try:
        before = v.splat_handle.buffer.copy()
        v.set_time(1.0)
        assert not np.array_equal(before, v.splat_handle.buffer)
        assert "time" in v.gui
    finally:
        v.stop()


@pytest.fixture
def no_server(monkeypatch):
    """Fail the test if anything constructs a viser server."""
    import viser

    def boom(*a, **k):
        raise AssertionError("a server was started for bad input")

    monkeypatch.setattr(viser, "ViserServer", boom)


@pytest.mark.parametrize("kind", ["missing", "corrupt", "empty_dir", "bad_mesh"])
def test_bad_input_fails_before_server_starts(tmp_path, splat_file, capsys, no_server, kind):
    mesh = ()
    if kind == "missing":
        path = tmp_path / "nope.ply"
    elif kind == "corrupt":
        path = tmp_path / "broken.ply"
        path.write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 5\nend_header\n\x00")
    elif kind == "empty_dir":
        path = tmp_path / "run"
        path.mkdir()
    else:
        path = splat_file
        mesh = (tmp_path / "broken.obj",)
        mesh[0].write_text("this is not a mesh\n")
    with pytest.raises(SystemExit) as exc:
        view(ViewConfig(path=path, port=0, mesh=mesh))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    named = mesh[0].name if mesh else path.name
    assert "error" in err and named in err
    with pytest.raises(ViewerInputError):
        build_viewer(ViewConfig(path=path, port=0, mesh=mesh))


def test_port_in_use_moves_on_or_fails(splat_file, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        v = build_viewer(ViewConfig(path=splat_file, port=busy)).start()
        try:
            assert v.port != busy
            assert f"port {busy} is in use; serving on port {v.port}" in capsys.readouterr().out
        finally:
            v.stop()
        with pytest.raises(SystemExit):
            view(ViewConfig(path=splat_file, port=busy, strict_port=True))
        assert f"port {busy}" in capsys.readouterr().err


def test_view_command_exits_after(splat_file, tmp_path):
    t0 = time.monotonic()
    view(ViewConfig(path=splat_file, port=0, exit_after=0.3, output=tmp_path))
    assert time.monotonic() - t0 < 10


# ---------------------------------------------------------------------------------- in the browser


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (no 'playwright install')")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def live(browser, splat_file, tmp_path_factory):
    """(viewer, client, page): the small scene served and open in Chromium."""
    out = tmp_path_factory.mktemp("viewer_out")
    v = build_viewer(ViewConfig(path=splat_file, port=0, output=out), verbose=False).start()
    page = browser.new_page(viewport={"width": 640, "height": 480})
    page.goto(v.url)
    wait_for(v.server.get_clients, what="the browser to connect")  # listed once its camera is reported
    client = next(iter(v.server.get_clients().values()))
    yield v, client, page
    page.close()
    v.stop()


def browser_camera_reports(client) -> list:
    """The cameras (fov, position, wxyz) the browser of ``client`` has reported, newest last. (Setting
    ``client.camera`` changes viser's copy at once, so only the browser's own reports tell what the
    browser shows.)"""
    reports = getattr(client, "_test_camera_reports", None)
    if reports is None:
        reports = client._test_camera_reports = []
        client.camera.on_update(lambda cam: reports.append(
            (float(cam.fov), np.array(cam.position), np.array(cam.wxyz))))
    return reports


def set_camera(client, wxyz=(1.0, 0.0, 0.0, 0.0), position=(0.0, 0.0, 0.0), fov=math.radians(60)):
    """Move the browser camera (viser's ``get_render(fov=...)`` alone does not change the fov the
    browser renders with, so the client camera is set first) and wait until the browser reports it.
    The camera is set again every few seconds until then: a page that has just connected may still
    be settling its initial camera after ours arrived."""
    reports = browser_camera_reports(client)
    if not reports:  # nothing reported since we started listening: the camera as first reported
        reports.append((float(client.camera.fov), np.array(client.camera.position), np.array(client.camera.wxyz)))

    def there() -> bool:
        got_fov, got_position, got_wxyz = reports[-1]
        return (abs(got_fov - fov) < 1e-4 and np.allclose(got_position, position, atol=1e-4)
                and abs(float(np.dot(got_wxyz, wxyz))) > 1 - 1e-6)

    t0 = time.monotonic()
    next_set = t0
    while not there():
        now = time.monotonic()
        assert now - t0 < BROWSER_TIMEOUT, (
            f"timed out after {BROWSER_TIMEOUT:.0f} s waiting for the browser to report camera fov {fov:.4f}, "
            f"position {position}, wxyz {wxyz}; {len(reports)} reports, the last {reports[-1]}")
        if now >= next_set:  # (viser sends only what differs from the camera the browser last reported)
            client.camera.fov = fov
            client.camera.position = position
            client.camera.wxyz = wxyz
            next_set = now + 5.0
        time.sleep(0.05)
    return wxyz, position, fov


def browser_rgba(client, wxyz, position, fov) -> np.ndarray:
    """[H, W, 4] float browser frame, RGBA with straight alpha (PNG transport)."""
    return client.get_render(H, W, wxyz=wxyz, position=position, fov=fov, transport_format="png",
                             timeout=BROWSER_TIMEOUT).astype(np.float64) / 255.0


def browser_render(client, wxyz, position, fov, background=(0.0, 0.0, 0.0)) -> np.ndarray:
    """[H, W, 3] float browser frame composited over ``background``."""
    rgba = browser_rgba(client, wxyz, position, fov)
    a = rgba[..., 3:]
    return rgba[..., :3] * a + np.asarray(background) * (1 - a)


def render_until(client, cam, accept, what: str, background=(0.0, 0.0, 0.0)) -> np.ndarray:
    """The first browser frame (:func:`browser_render` of camera ``cam``) that ``accept`` takes."""
    return poll_until(lambda: browser_render(client, *cam, background=background), accept, what)


def shows_splats(img: np.ndarray) -> bool:
    """The small scene is on screen: splats cover part of the picture (not blank, not all filled)."""
    covered = (img.sum(-1) > 0.05).mean()
    return 0.05 < covered < 0.9 and img.std() > 0.05


def test_page_loads_and_canvas_shows_splats(live):
    v, client, page = live
    assert "viser" in page.content().lower() or page.locator("canvas").count() > 0
    canvas = page.locator("canvas").first
    canvas.wait_for(state="visible", timeout=BROWSER_TIMEOUT * 1000)
    page.get_by_text("min opacity").first.wait_for(timeout=BROWSER_TIMEOUT * 1000)  # GUI panel is there
    cam = set_camera(client)
    render_until(client, cam, shows_splats, "the splats on the canvas")  # not blank, nor fully filled


def test_browser_matches_rasterizer(live, record_property):
    v, client, _ = live
    cam = set_camera(client, wxyz=(0.9990482, 0.0, 0.0436194, 0.0), position=(-0.2, 0.1, 0.2))
    ref = v.render_frame(viser_camera_to_frame(*cam, W, H), background=(0.0, 0.0, 0.0))
    got = render_until(client, cam, lambda img: psnr(img, ref) >= 20.0, "the browser to match the rasterizer")
    value = psnr(got, ref)
    record_property("psnr_browser_vs_rasterizer", value)
    print(f"PSNR browser vs rasterizer: {value:.2f} dB")
    assert value >= 20.0, value


def _slider_track(page, label: str):
    """The slider track element following a GUI label."""
    row = page.locator("div", has=page.get_by_text(label, exact=True)).filter(
        has=page.get_by_role("slider")).last
    return row.get_by_role("slider").first, row.locator(".mantine-Slider-root").first


def test_opacity_slider_changes_picture(live):
    v, client, page = live
    cam = set_camera(client)
    before = render_until(client, cam, shows_splats, "all splats on the canvas")
    thumb, root = _slider_track(page, "min opacity")
    thumb.wait_for(state="visible", timeout=BROWSER_TIMEOUT * 1000)
    box = root.bounding_box()
    page.mouse.click(box["x"] + 0.8 * box["width"], box["y"] + 0.5 * box["height"])
    # the slider value, then the re-sent splats ("shown"), then their picture arrive asynchronously
    wait_for(lambda: v.gui["shown"].value.startswith("150 of 300"), what="the opacity filter (shown 150 of 300)")
    assert 0.6 < v.gui["opacity"].value < 0.95, v.gui["opacity"].value  # 0.6 splats go, 0.95 stay
    render_until(client, cam, lambda after: np.abs(after - before).mean() > 0.01
                 and (after.sum(-1) > 0.05).mean() > 0.02,  # changed, and the opaque half is still there
                 "the filtered splats in the browser")
    page.mouse.click(box["x"] + 1, box["y"] + 0.5 * box["height"])  # back to 0 for other tests
    wait_for(lambda: v.gui["shown"].value.startswith("300 of 300"), what="the opacity filter reset")


def test_render_and_keyframe_buttons(live):
    v, client, page = live
    cam = set_camera(client)
    n_renders = len(v.renders_saved)
    page.get_by_role("button", name="keyframe", exact=True).click()
    page.get_by_role("button", name="render", exact=True).click()
    wait_for(lambda: len(v.renders_saved) > n_renders and (v.output_dir / "camera_path.json").exists(),
             what="the render and the keyframe")
    assert len(v.renders_saved) == n_renders + 1 and v.renders_saved[-1].exists()
    path = load_camera_path(v.output_dir / "camera_path.json")
    frame = path.frames[-1]
    assert (frame.width, frame.height) == (client.camera.image_width, client.camera.image_height)
    assert np.allclose(frame.world_to_cam, viser_to_world_to_cam(cam[0], cam[1]), atol=1e-4)


def test_mesh_and_run_folder(tmp_path, splat_file):
    import shutil

    import trimesh

    mesh_file = tmp_path / "box.obj"
    trimesh.creation.box(extents=(0.5, 0.5, 0.5)).export(mesh_file)
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(splat_file, run / "splats.ply")
    v = build_viewer(ViewConfig(path=run, port=0, mesh=(mesh_file,)), verbose=False)
    assert v.scene.run_dir == run and v.output_dir == run / "viewer"
    v.start()
    try:
        assert len(v.meshes) == 1 and len(v.meshes[0][1].faces) == 12
    finally:
        v.stop()


def test_block_cells_of_a_block_run(tmp_path, splat_file):
    import shutil

    from recon.distributed.partition import Block, Partition, RobustBox
    from viewer.blocks import box_corners

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(splat_file, run / "splats.ply")
    up, e1, e2 = np.array([0.0, 0, 1]), np.array([1.0, 0, 0]), np.array([0.0, 1, 0])
    blocks = [Block(0, [[None, None], [0.0, None]], [[-1.0, -1.0], [0.0, 1.0]], [[-1.2, -1.2], [0.2, 1.2]], [], [], 0),
              Block(1, [[0.0, None], [None, None]], [[0.0, -1.0], [1.0, 1.0]], [[-0.2, -1.2], [1.2, 1.2]], [], [], 0)]
    Partition({}, up, e1, e2, RobustBox(np.array([-1.0, -1]), np.array([1.0, 1]), (0.0, 0.5)), {}, blocks).write(
        run / "blocks.json")
    v = build_viewer(ViewConfig(path=run, port=0), verbose=False)
    v.start()
    try:
        assert len(v.block_cells) == 6 and not any(h.visible for h in v.block_cells)
        v.gui["block_cells"].value = True
        poll_until(lambda: all(h.visible for h in v.block_cells), bool, "the cells to show")
    finally:
        v.stop()
    corners = box_corners([[-1.0, -1.0], [0.0, 1.0]], (0.0, 0.5), np.stack([e1, e2, up]))
    assert np.allclose(corners.min(0), [-1, -1, 0]) and np.allclose(corners.max(0), [0, 1, 0.5])
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(splat_file, plain / "splats.ply")
    v = build_viewer(ViewConfig(path=plain, port=0), verbose=False)
    v.start()
    try:
        assert v.block_cells == [] and v.gui["block_cells"] is None
    finally:
        v.stop()


def _connect(browser, v, viewport=(640, 480)):
    """(page, client) of a new page on viewer ``v``, once its camera is reported."""
    before = set(v.server.get_clients())
    page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
    page.goto(v.url)
    new = poll_until(lambda: [c for cid, c in v.server.get_clients().items() if cid not in before], bool,
                     "the browser to connect and report its camera")  # listed after its first camera report
    return page, new[0]


def test_browser_disconnect_and_reconnect(browser, splat_file, tmp_path):
    """A page that goes away and comes back (reload, new tab) gets the scene and a working GUI again."""
    v = build_viewer(ViewConfig(path=splat_file, port=0, output=tmp_path), verbose=False).start()
    try:
        page, client = _connect(browser, v)
        cam = set_camera(client)
        ref = v.render_frame(viser_camera_to_frame(*cam, W, H), background=(0.0, 0.0, 0.0))
        first = render_until(client, cam, lambda img: psnr(img, ref) >= 20.0, "the first page to show the scene")
        page.close()  # disconnect
        wait_for(lambda: not v.server.get_clients(), what="the server to drop the closed page")
        page, client = _connect(browser, v)  # reconnect
        cam = set_camera(client)
        # the same scene, fully re-sent: wait for it (the splats reach a new page asynchronously)
        render_until(client, cam, lambda img: psnr(img, first) > 30.0, "the reconnected page to show the scene")
        page.get_by_role("button", name="render", exact=True).click()  # the GUI works for the new client
        wait_for(lambda: v.renders_saved, what="the render button of the new page")
        assert v.renders_saved[-1].exists()
        page.close()
    finally:
        v.stop()


def settled_render(client, cam, ready, what: str) -> np.ndarray:
    """[H, W, 4] float RGBA once ``ready(rgba)`` holds and the picture stopped changing (mean change
    under 1e-3 between two frames half a second apart): splats and meshes (geometry, then colours)
    reach the page asynchronously after it connects."""
    last = [None]

    def settled(now: np.ndarray) -> bool:
        before, last[0] = last[0], now
        return before is not None and ready(now) and np.abs(now - before).mean() < 1e-3

    return poll_until(lambda: browser_rgba(client, *cam), settled, what, interval=0.5)


def _mesh_box(tmp_path, name, z, colour=(0, 255, 0, 255)):
    import trimesh

    box = trimesh.creation.box(extents=(0.6, 0.6, 0.2))
    box.apply_translation((0.0, 0.0, z))
    box.visual.face_colors = np.tile(np.asarray(colour, np.uint8), (len(box.faces), 1))
    path = tmp_path / f"{name}.ply"
    box.export(path)
    return path


def _box_drawn(rgba: np.ndarray, z: float, coloured: bool = False) -> bool:
    """The 0.6 x 0.6 box at depth ``z`` is drawn: the inner part of its projection is opaque (the
    splats alone leave some of the image centre partly transparent), and with ``coloured`` green (the
    box's geometry can show before its colours)."""
    half = int(0.3 / (z - 0.1) * 0.5 * H / math.tan(math.radians(30)) * 0.6)
    inner = rgba[H // 2 - half:H // 2 + half, W // 2 - half:W // 2 + half]
    green = (inner[..., 1] - inner[..., 0]).mean() > 0.3
    return bool(inner[..., 3].min() > 0.99 and (green or not coloured))


def _splats_drawn(rgba: np.ndarray) -> bool:
    return shows_splats(rgba[..., :3] * rgba[..., 3:])


READY = {  # what each scene of test_mesh_occludes_splats_behind_it_and_not_in_front shows once loaded
    "none": _splats_drawn,
    "front": lambda rgba: _splats_drawn(rgba) and _box_drawn(rgba, 2.0, coloured=True),
    "behind": lambda rgba: _splats_drawn(rgba) and _box_drawn(rgba, 7.0),
}


def test_mesh_occludes_splats_behind_it_and_not_in_front(browser, splat_file, tmp_path):
    """A green box between the camera and the splats (z = 2) hides them in the image centre; the same box
    behind them (z = 7) is hidden where the splats are opaque: depth-tested, not drawn on top."""
    renders = {}
    for name, z in (("none", None), ("front", 2.0), ("behind", 7.0)):
        mesh = () if z is None else (_mesh_box(tmp_path, name, z),)
        v = build_viewer(ViewConfig(path=splat_file, port=0, mesh=mesh, cameras=False, output=tmp_path),
                         verbose=False).start()
        try:
            page, client = _connect(browser, v)
            cam = set_camera(client)
            renders[name] = settled_render(client, cam, READY[name], f"the scene with the box {name}")
            page.close()
        finally:
            v.stop()
    # the box at z = 2 spans |x|, |y| < 0.3 / 1.9 * f around the centre: look well inside it
    f = 0.5 * H / math.tan(math.radians(30))
    half = int(0.3 / 1.9 * f * 0.6)
    centre = (slice(H // 2 - half, H // 2 + half), slice(W // 2 - half, W // 2 + half))
    front = renders["front"][centre]
    assert (front[..., 1] > front[..., 0] + 0.1).mean() > 0.9  # green box in front of everything
    assert (front[..., 1] > front[..., 2] + 0.1).mean() > 0.9
    none, behind = renders["none"][centre], renders["behind"][centre]
    opaque = none[..., 3] > 0.98  # splats fully cover these pixels: the box behind must not show
    assert opaque.sum() > 20, opaque.sum()
    diff = np.abs(behind[..., :3] - none[..., :3])[opaque].max(-1)
    assert (diff < 0.1).mean() > 0.9, (diff < 0.1).mean()


def test_2dgs_run_and_its_extracted_mesh_in_the_browser(browser, tmp_path):
    """`view RUN` on a 2dgs run shows its surfels (splats.ply holds them as flat 3D Gaussians) as the rasterizer
    renders them, and `--mesh` with the mesh `splatforge mesh` extracted from that run changes the picture."""
    pytest.importorskip("open3d")
    from recon.commands.mesh import MeshConfig, extract_run_mesh
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    run = tmp_path / "run2d"
    train_model(TrainConfig(data=Path("procedural"), out=run, steps=60, data_factor=2, save_every=0, progress=False,
                            method="2dgs", sh_degree=0), log=lambda *a: None)  # SH 0: the browser shows DC colour
    mesh = tmp_path / "mesh.ply"
    extract_run_mesh(MeshConfig(run=run, out=mesh, resolution=64, progress=False))
    pictures = []
    for meshes in ((), (mesh,)):
        v = build_viewer(ViewConfig(path=run, port=0, mesh=meshes, output=tmp_path / f"out{len(meshes)}",
                                    cameras=False), verbose=False).start()  # no frustums drawn over the picture
        try:
            assert v.scene.run_dir == run
            cam0 = load_run_cameras(run)[0].camera
            wxyz, position = world_to_cam_to_viser(cam0.world_to_cam.double().numpy())
            fov = 2.0 * math.atan(cam0.height / (2.0 * float(cam0.K[1, 1])))
            page, client = _connect(browser, v)
            cam = set_camera(client, wxyz, position, fov)
            if not meshes:
                ref = v.render_frame(viser_camera_to_frame(*cam, W, H), background=(0.0, 0.0, 0.0))
                assert shows_splats(ref), "the training camera sees the scene"
                pictures.append(render_until(client, cam, lambda img: shows_splats(img) and psnr(img, ref) >= 18.0,
                                             "the 2dgs run's surfels as the rasterizer renders them"))
            else:
                assert len(v.meshes) == 1 and len(v.meshes[0][1].faces) > 100
                pictures.append(render_until(client, cam, lambda img: np.abs(img - pictures[0]).mean() > 0.01,
                                             "the extracted mesh drawn with the surfels"))
            page.close()
        finally:
            v.stop()
