"""`splatforge view` on a NeRF run whose field is the Gaussian RBF decoder on dense grids (issue 54): the viewer
opens it like any NeRF run (server frames of the field itself, the baked splats hidden) and its first frame is the
field's own render of the camera."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("viser")

from viewer.commands import ViewConfig, build_viewer  # noqa: E402
from viewer.hybrid import hybrid_image  # noqa: E402


def test_rbf_nerf_run_first_frame_is_the_field(tmp_path):
    pytest.importorskip("open3d")
    from recon.nerf.rbf import RBFLayer
    from recon.training.trainer import Trainer
    from tests.recon.nerf.test_field_choice import RBF
    from tests.recon.nerf.test_nerf_train import tiny
    from tests.recon.tiny_runs import quiet

    run = tmp_path / "rbf"
    trainer = Trainer(tiny(run, 20, field=RBF), log=quiet)
    trainer.run()
    v = build_viewer(ViewConfig(path=run, port=0, cameras=False, output=tmp_path / "out", hybrid_size=64),
                     verbose=False)
    assert v.assets is not None and v.assets.assets == [] and v.assets.start_hybrid  # as any NeRF run
    renderer = v.assets.make_renderer()  # what the first frame request builds
    assert isinstance(renderer.model.field.density_mlp, RBFLayer)
    camera = trainer.scene.frames_test[0].camera
    with torch.no_grad():
        rgb, depth = hybrid_image(renderer.render(camera, time=None, shadows=False))
        expect, _, _ = trainer.model.render([camera], background=torch.ones(3))
    assert rgb.shape == (camera.height, camera.width, 3) and depth.shape == rgb.shape[:2]
    assert rgb.std() > 5  # an image, not a blank
    want = (expect[0].clamp(0, 1) * 255 + 0.5).to(torch.uint8).numpy().astype(np.int16)
    assert np.median(np.abs(rgb.astype(np.int16) - want)) <= 2
