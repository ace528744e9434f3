"""The viewer's crop box (viewer/crop.py): Gaussians whose centre is outside the box are left out of the splats
sent to the browser and of the render button's image, as the min-opacity filter leaves faint ones out."""

import numpy as np
import pytest

from rasterizer.camera import Camera
from recon.export import SplatData, write_splats
from tests.viewer.test_viewer import small_scene
from viewer.commands import ViewConfig, build_viewer
from viewer.crop import CropBox, parse_crop
from viewer.scene import ViewerInputError
from viewer.server import ViewerServer
from viewer.splat_scene import SplatScene, browser_splats

HALF = "-1,-1,3,0,1,5"  # the x < 0 half of small_scene's box [-1, 1]^2 x [3, 5]


def test_parse_crop_and_one_line_errors():
    box = parse_crop(HALF)
    assert box.lo == (-1.0, -1.0, 3.0) and box.hi == (0.0, 1.0, 5.0) and box.text() == HALF
    assert box.contains(np.array([[-0.5, 0, 4], [0.5, 0, 4], [0.0, 1.0, 5.0]])).tolist() == [True, False, True]
    for bad, what in (("1,0,0,0,1,1", "min x 1 > max x 0"), ("0,0,0,1,1", "six numbers"),
                      ("0,0,a,1,1,1", "six numbers"), ("0,0,0,1,nan,1", "finite")):
        with pytest.raises(ValueError, match="--crop") as err:
            parse_crop(bad)
        assert what in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_crop_filter_drops_gaussians_outside_the_box_from_the_browser_splats():
    data = small_scene(300)
    box = parse_crop(HALF)
    inside = data.means[:, 0] <= 0
    b = browser_splats(data, crop=box)
    assert len(b) == inside.sum() and 0 < len(b) < 300
    assert np.all(b.centers[:, 0] <= 0)
    both = browser_splats(data, min_opacity=0.8, crop=box)  # with the opacity filter: both apply
    assert len(both) == (inside & (np.arange(300) % 2 == 0)).sum()
    assert len(browser_splats(data, crop=CropBox((5.0, 5, 5), (6.0, 6, 6)))) == 0


def test_view_crop_flag_sends_only_the_box_and_the_gui_toggles_it(tmp_path):
    path = tmp_path / "scene.ply"
    write_splats(path, small_scene(300), force=True)
    inside = int((small_scene(300).means[:, 0] <= 0).sum())
    with pytest.raises(ViewerInputError, match=r"--crop 1,0,0,0,1,1: min x 1 > max x 0"):
        build_viewer(ViewConfig(path=path, port=0, crop="1,0,0,0,1,1"), verbose=False)
    v = build_viewer(ViewConfig(path=path, port=0, output=tmp_path / "o", crop=HALF), verbose=False).start()
    try:
        assert v.crop == parse_crop(HALF) and v.gui["crop_on"].value
        assert len(v.splat_handle.buffer) == inside and v.gui["shown"].value == f"{inside} of 300"
        assert v.crop_handle is not None and v.crop_handle.visible
        v.gui["crop_on"].value = False  # the checkbox's callback: the crop box off, all splats again
        assert v.crop is None and len(v.splat_handle.buffer) == 300 and v.gui["crop_status"].value == "off"
        v.gui["crop_max"].value = (-2.0, 1.0, 5.0)  # min x > max x while on: the previous box stays
        v.gui["crop_on"].value = True
        assert v.crop is None and "min x" in v.gui["crop_status"].value
        v.gui["crop_max"].value = (0.0, 1.0, 5.0)
        assert v.crop == parse_crop(HALF) and len(v.splat_handle.buffer) == inside
    finally:
        v.stop()


def test_render_button_applies_the_crop_box(tmp_path):
    """The viewer's render (ViewerServer.render_frame) leaves out what the crop box hides from the browser."""
    means = np.array([[0.0, 0, 3], [0.0, 0, 1.5]], np.float32)  # red behind, blue in front
    data = SplatData(means, np.tile([1.0, 0, 0, 0], (2, 1)).astype(np.float32),
                     np.log(np.full((2, 3), 0.5, np.float32)), np.full(2, 3.0, np.float32),
                     np.array([[[1.5, -1.5, -1.5]], [[-1.5, -1.5, 1.5]]], np.float32))
    v = ViewerServer(SplatScene(data, tmp_path / "x.ply"), output_dir=tmp_path)
    cam = Camera.from_arrays(np.eye(4), [[16.0, 0, 8], [0, 16.0, 8], [0, 0, 1]], 16, 16)
    both = v.render_frame(cam, background=(1.0, 1.0, 1.0))
    assert both[8, 8, 2] > 0.8 and both[8, 8, 0] < 0.3  # the blue one covers the red one
    v._crop = parse_crop("-1,-1,2,1,1,4")  # only the red one's centre is inside
    cropped = v.render_frame(cam, background=(1.0, 1.0, 1.0))
    assert cropped[8, 8, 0] > 0.8 and cropped[8, 8, 2] < 0.3
    v._crop = parse_crop("5,5,5,6,6,6")
    assert np.allclose(v.render_frame(cam, background=(1.0, 1.0, 1.0)), 1.0)  # nothing left: the background
