"""`splatforge view` on a NeRF run whose field is the Gaussian RBF decoder on dense grids (issue 54): the viewer
opens it like any NeRF run (server frames of the field itself, the baked splats hidden) and its first frame is the
field's own render of the camera; ``scripts/check_first_view.py`` on the run folder reports that field's first
frame (its decoder, coverage) and saves it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("viser")

from viewer.commands import ViewConfig, build_viewer  # noqa: E402
from viewer.hybrid import hybrid_image  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))


@pytest.fixture(scope="module")
def rbf_run(tmp_path_factory):
    """(run folder, trainer) of a 20-step dense + rbf NeRF run on the tiny procedural scene."""
    pytest.importorskip("open3d")
    from recon.training.trainer import Trainer
    from tests.recon.nerf.test_field_choice import RBF
    from tests.recon.nerf.test_nerf_train import tiny
    from tests.recon.tiny_runs import quiet

    run = tmp_path_factory.mktemp("rbf")
    trainer = Trainer(tiny(run, 20, field=RBF), log=quiet)
    trainer.run()
    return run, trainer


def test_rbf_nerf_run_first_frame_is_the_field(rbf_run, tmp_path):
    from recon.nerf.rbf import RBFLayer

    run, trainer = rbf_run
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


def test_check_first_view_renders_the_rbf_field(rbf_run, tmp_path, capsys, monkeypatch):
    """The scripted first-view check on the run folder: the picture it saves is the field's render (the RBF
    decoder's), not the baked splats', rendered without gradients as the viewer renders it (with them the field ran
    twice per sample and kept its activations: a 320 x 240 view of a young RBF field took over 15 minutes)."""
    from PIL import Image

    import check_first_view
    from recon.models.nerf import NerfModel

    grad_enabled = []
    render_front = NerfModel.render_front

    def recording(self, *args, **kwargs):
        grad_enabled.append(torch.is_grad_enabled())
        return render_front(self, *args, **kwargs)

    monkeypatch.setattr(NerfModel, "render_front", recording)
    run, _ = rbf_run
    png = tmp_path / "first.png"
    assert check_first_view.main([str(run), "--png", str(png), "--width", "64", "--height", "48"]) == 0
    assert grad_enabled == [False]
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["field"] == "NerfField" and result["field_decoder"] == "RBFLayer"
    assert result["field_render_cpu_seconds"] > 0  # the field was rendered, and timed
    assert result["field_std"] > 5 and 0 < result["field_coverage"] <= 1
    img = np.asarray(Image.open(png)).astype(np.float64)
    assert img.shape == (48, 64, 3) and abs(img.std() - result["field_std"]) < 1.0  # the field's frame was saved
