"""`splatforge view RUN` on a neus run (issue 50): its splats.ply is only baked from the field, so the viewer starts
in server mode (the baked splats hidden) and its first frame is the field's own render: the server image of a
training camera equals the NeusModel's render of that camera (within one 8-bit level). No browser needed (the
browser side of server mode is tested on a nerf run in test_viewer_hybrid.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("viser")

from recon.run.folder import Run  # noqa: E402
from recon.training.train_run import train_model  # noqa: E402
from tests.recon.nerf.test_neus_train import tiny  # noqa: E402
from tests.recon.tiny_runs import quiet  # noqa: E402
from viewer.commands import ViewConfig, build_viewer  # noqa: E402
from viewer.hybrid import hybrid_image  # noqa: E402


def test_neus_run_first_frame_is_the_field(tmp_path):
    pytest.importorskip("open3d")
    run = tmp_path / "neus"
    train_model(tiny(run, 10), log=quiet)
    v = build_viewer(ViewConfig(path=run, port=0, cameras=False, output=tmp_path / "out", hybrid_size=64),
                     verbose=False)
    assert v.assets is not None and v.assets.assets == [] and v.assets.start_hybrid
    v.start()
    try:
        assert v.splat_handle.visible is False  # the baked splats are not what is shown
        opened = Run.open(run)
        camera = opened.cameras[0]
        rgb, depth = hybrid_image(v.assets.ensure_renderer().render(camera.to(dtype=torch.float32)))
        model = opened.load_model()
        ref, alpha, _ = model.render([camera], background=opened.background())
        ref8 = (ref[0].clamp(0, 1) * 255 + 0.5).to(torch.uint8).numpy()
        assert rgb.shape == ref8.shape == (camera.height, camera.width, 3)
        diff = np.abs(rgb.astype(np.int16) - ref8.astype(np.int16))
        assert diff.max() <= 1, diff.max()
        assert rgb.std() > 10  # a picture, not a flat colour
        seen = alpha[0, ..., 0].numpy() > 0.5
        assert seen.any() and np.all(depth[seen] < 1e3)  # the field's depth where it is opaque
    finally:
        v.stop()
