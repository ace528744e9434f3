"""`splatforge view DIR` on an LOD export (viewer/lod.py): chunk selection by distance and budget, the streamed
scene, the level colours, the panel; no browser (the chunk logic runs on the server)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("viser")

from recon.lod.export_lod import write_lod  # noqa: E402
from recon.lod.hierarchy import build_hierarchy  # noqa: E402
from tests.recon.lod.scenes import camera_at, small_model  # noqa: E402
from viewer.commands import ViewConfig, build_viewer  # noqa: E402
from viewer.lod import LEVEL_COLOURS, LodScene, select_chunks  # noqa: E402
from viewer.scene import ViewerInputError, load_scene  # noqa: E402


@pytest.fixture(scope="module")
def lod_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("lod") / "city"
    h = build_hierarchy(small_model(4000, seed=2, extent=3.0), depth=10)
    write_lod(h, out, view_budget=2500, chunk_size=300, progress=False)
    return out


def _covered_once(manifest, selection):
    """Every Gaussian of the model is drawn by exactly one selected chunk (its level-0 chunk or an ancestor)."""
    chosen = set(selection)
    for i in manifest.chunks_of_level(0):
        path, j = 0, i
        while j >= 0:
            path += j in chosen
            j = manifest.chunks[j].parent
        assert path == 1


def test_selection_is_fine_near_coarse_far_and_within_budget(lod_dir):
    scene = load_scene(lod_dir)
    assert isinstance(scene, LodScene)
    m = scene.lod.manifest
    near = select_chunks(m, camera_at(1.0), budget=10 ** 9, pixels=1.0)
    far = select_chunks(m, camera_at(200.0), budget=10 ** 9, pixels=1.0)
    tight = select_chunks(m, camera_at(1.0), budget=800, pixels=0.25)
    for sel in (near, far, tight):
        _covered_once(m, sel)
    count = lambda sel: sum(m.chunks[i].count for i in sel)  # noqa: E731
    assert count(far) < count(near) / 4
    assert count(tight) <= 800
    assert np.mean([m.chunks[i].level for i in far]) > np.mean([m.chunks[i].level for i in near])


def test_scene_streams_chunks_and_colours_levels(lod_dir):
    scene = load_scene(lod_dir)
    assert scene.update_camera(camera_at(1.0)) is True
    assert len(scene.splats) == sum(scene.lod.manifest.chunks[i].count for i in scene.selection)
    assert scene.update_camera(camera_at(1.0)) is False  # same view: nothing re-sent
    assert "Gaussians" in scene.drawn_text() and "L0" in scene.drawn_text()
    scene.colour_levels = True
    b = scene.browser()
    levels = scene.levels_of(scene.selection)
    np.testing.assert_allclose(b.rgbs, LEVEL_COLOURS[levels % len(LEVEL_COLOURS)], atol=1e-5)
    assert scene.total() == 4000


def test_viewer_serves_lod_export_with_panel(lod_dir):
    v = build_viewer(ViewConfig(path=lod_dir, port=0), verbose=False).start()
    try:
        assert {"lod_drawn", "lod_budget", "lod_colour"} <= set(v.gui)
        before = v.splat_handle.buffer.copy()
        v.gui["lod_colour"].value = True  # runs the toggle's callback
        assert not np.array_equal(before, v.splat_handle.buffer)
    finally:
        v.stop()


def test_damaged_lod_export_is_one_line(lod_dir, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(lod_dir, bad)
    victim = sorted((bad / "chunks" / "L00").iterdir())[0]
    victim.unlink()
    with pytest.raises(ViewerInputError, match="missing chunk"):
        load_scene(bad)
    (bad / "manifest.json").write_text('{"format": "splatforge-lod"')
    with pytest.raises(ViewerInputError, match="manifest.json"):
        load_scene(bad)


# ---------------------------------------------------------------------------------- in the browser

from tests.viewer.test_viewer import browser, set_camera, wait_for  # noqa: E402,F401  (browser: a fixture)


def test_browser_camera_streams_finer_chunks_when_near(browser, lod_dir):  # noqa: F811
    """Headless Chromium connected: moving its camera from far to near makes the server stream finer levels
    (and the HUD says so)."""
    v = build_viewer(ViewConfig(path=lod_dir, port=0), verbose=False).start()
    page = browser.new_page(viewport={"width": 320, "height": 240})
    try:
        page.goto(v.url)
        wait_for(v.server.get_clients, what="the browser to connect")
        client = next(iter(v.server.get_clients().values()))
        levels = lambda: [v.scene.lod.manifest.chunks[i].level for i in v.scene.selection]  # noqa: E731
        set_camera(client, position=(0.0, 0.0, -300.0))
        wait_for(lambda: min(levels()) >= 2, what="coarse chunks for a far camera")
        far_count = len(v.scene.splats)
        set_camera(client, position=(0.0, 0.0, -3.5))
        wait_for(lambda: 0 in levels(), what="level-0 chunks for a near camera")
        wait_for(lambda: "L0" in v.gui["lod_drawn"].value, what="the HUD to show level 0")
        assert len(v.scene.splats) > far_count
    finally:
        page.close()
        v.stop()
