"""`splatforge train --method 2dgs` (issue 18, item 2): 2D Gaussian surfels trained on the procedural scene
(32 x 32 at data_factor 4, cpu backend): PSNR improves, geometry losses switch on at their (scaled) steps
and reach the parameters, densification reads the ray-transform signal and splits in the surfel's plane,
resume, eval, renders with depth and normals, export with a tiny third scale, refused combinations."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from recon.outputs import files as rf
from recon.core.errors import ConfigValueError
from recon.export import read_splats
from recon.models import GaussianModel, SurfelModel, model_class
from recon.models.surfels import FLAT_LOG_SCALE
from recon.losses.surfels import SurfelConfig, normal_consistency_loss, normals_from_depth
from recon.training.trainer import ConfigMismatchError, TrainConfig, Trainer
from recon.training.train_run import train_model
from tests.recon.tiny_runs import quiet, tiny_config, train_from_untrained


def tiny(out, steps, **kw) -> TrainConfig:
    return tiny_config(out, steps, dict(method="2dgs", init_num_random=300), **kw)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """60 steps with both losses switched on from step 20 / 40 (explicit start steps, steps_scaler 1)."""
    out = tmp_path_factory.mktemp("run2dgs")
    cfg = tiny(out, 60, save_every=30, steps_scaler=1.0,
               surfels=SurfelConfig(dist_start_iter=20, normal_start_iter=40),
               adc=TrainConfig().adc.__class__(refine_start_iter=10, refine_every=20, refine_stop_iter=50))
    return train_from_untrained(cfg)


def test_registered_and_trains(trained):
    cfg, trainer, before, metrics = trained
    assert model_class("2dgs") is SurfelModel and isinstance(trainer.model, SurfelModel)
    assert trainer.model.params["log_scales"].shape == (len(trainer.model), 2)
    assert metrics["test"]["psnr"] > before + 2.0, (before, metrics)
    assert metrics["steps"] == 60 and metrics["seconds_per_step"] > 0
    assert rf.read_config_dict(cfg.out / rf.CONFIG_FILE)["method"] == "2dgs"


def test_renders_show_depth_and_normals(trained):
    cfg, _, _, metrics = trained
    renders = cfg.out / rf.RENDERS_DIR
    for kind in ("", "_depth", "_normals"):
        files = sorted(renders.glob(f"test_[0-9][0-9][0-9]{kind}.png"))
        assert len(files) == metrics["test"]["num_views"] == 8, kind
    from PIL import Image

    depth = np.asarray(Image.open(renders / "test_000_depth.png"))
    normals = np.asarray(Image.open(renders / "test_000_normals.png"))
    assert depth.shape == normals.shape == (32, 32, 3)
    assert depth.max() > depth.min() and normals.std() > 0  # not blank


def test_eval_reads_the_run_back(trained, tmp_path):
    from recon.commands.evaluate import _evaluate

    cfg, _, _, metrics = trained
    evaluated = _evaluate(cfg.out, None, None, None, tmp_path / "eval", "cpu")
    assert abs(evaluated["psnr"] - metrics["test"]["psnr"]) < 1e-4
    saved = json.loads((tmp_path / "eval" / rf.METRICS_FILE).read_text())
    assert saved["steps"] == 60 and abs(saved["test"]["psnr"] - metrics["test"]["psnr"]) < 1e-4
    assert len(list((tmp_path / "eval" / rf.RENDERS_DIR).glob("test_*_normals.png"))) == 8


def test_export_ply_has_a_tiny_third_scale(trained):
    cfg, trainer, _, _ = trained
    data = read_splats(cfg.out / rf.SPLATS_FILE)
    assert data.log_scales.shape == (len(trainer.model), 3)
    assert np.all(data.log_scales[:, 2] == np.float32(FLAT_LOG_SCALE)) and math.exp(FLAT_LOG_SCALE) < 1.01e-6
    assert np.all(data.log_scales[:, 2] < data.log_scales[:, :2].min(axis=1))
    back = SurfelModel.from_splat_data(data)
    assert torch.equal(back.params["log_scales"], trainer.model.params["log_scales"].detach())
    assert torch.equal(back.params["means"], trainer.model.params["means"].detach())


def test_resume_continues_the_surfel_run(trained, tmp_path):
    cfg, _, _, _ = trained
    out = tmp_path / "r"
    lines = []
    train_model(tiny(out, 4, save_every=2), log=lines.append)
    resumed = Trainer(tiny(out, 6, save_every=2), log=lines.append)
    resumed.prepare_out()
    assert resumed.step == 4 and isinstance(resumed.model, SurfelModel)
    assert resumed.model.params["log_scales"].shape[1] == 2 and resumed.model.surfel_depth == "intersection"
    metrics = train_model(tiny(out, 6, save_every=2), log=lines.append)
    assert metrics["steps"] == 6 and any("resuming" in line for line in lines)


def test_method_mismatch_on_resume_is_refused(tmp_path):
    out2, out3 = tmp_path / "two", tmp_path / "three"
    train_model(tiny(out2, 2), log=quiet)
    train_model(tiny(out3, 2, method="3dgs"), log=quiet)
    with pytest.raises(ConfigMismatchError, match=r"--method 2dgs run; --method 3dgs cannot resume it"):
        Trainer(tiny(out2, 4, method="3dgs"), log=quiet).prepare_out()
    with pytest.raises(ConfigMismatchError, match=r"--method 3dgs run; --method 2dgs cannot resume it"):
        Trainer(tiny(out3, 4), log=quiet).prepare_out()
    # the checkpoints themselves name their method (a config.yaml edited by hand)
    surfel_state = torch.load(rf.list_checkpoints(out2)[-1][1], weights_only=True)["model"]
    gauss_state = torch.load(rf.list_checkpoints(out3)[-1][1], weights_only=True)["model"]
    with pytest.raises(ValueError, match="holds a '2dgs' model, not a '3dgs' one"):
        GaussianModel.from_state_dict(surfel_state)
    with pytest.raises(ValueError, match="holds a '3dgs' model, not a '2dgs' one"):
        SurfelModel.from_state_dict(gauss_state)
    del gauss_state["method"]  # checkpoints from before the entry are 3dgs ones
    assert isinstance(GaussianModel.from_state_dict(gauss_state), GaussianModel)


@pytest.mark.parametrize("kw, message", [
    (dict(strategy="mcmc"), r"--strategy mcmc: --method 2dgs trains with adaptive density control only"),
    (dict(adc=TrainConfig().adc.__class__(absgrad=True)), r"--adc.absgrad: not available with --method 2dgs"),
    (dict(antialiased=True), r"--antialiased: not available with --method 2dgs"),
])
def test_unsupported_options_refused_before_loading(tmp_path, monkeypatch, kw, message):
    monkeypatch.setattr("recon.training.trainer.load_training_scene", lambda cfg: pytest.fail("scene loaded"))
    with pytest.raises(ConfigValueError, match=message):
        Trainer(tiny(tmp_path / "x", 2, **kw))


def test_surfel_section_values_checked(tmp_path):
    with pytest.raises(ConfigValueError, match=r"--surfels.dist-lambda -1"):
        Trainer(tiny(tmp_path / "x", 2, surfels=SurfelConfig(dist_lambda=-1.0)))


# ------------------------------------------------------------------------------------------ losses


@pytest.fixture
def model_and_view():
    trainer = Trainer(tiny("unused", 30_000), log=quiet, writes_outputs=False)
    return trainer, [trainer.scene.frames_train[0].camera]


def test_losses_switch_on_at_their_scaled_steps(model_and_view):
    trainer, cams = model_and_view
    cfg = dataclass_replace(trainer.cfg, steps=3000)  # steps_scaler 0.1: starts at 300 and 700
    _, _, meta = trainer.model.render(cams, 0, torch.ones(3))
    assert trainer.model.loss_terms(meta, 299, cfg) == {}
    assert set(trainer.model.loss_terms(meta, 300, cfg)) == {"distortion"}
    assert set(trainer.model.loss_terms(meta, 699, cfg)) == {"distortion"}
    assert set(trainer.model.loss_terms(meta, 700, cfg)) == {"distortion", "normal"}
    off = dataclass_replace(cfg, surfels=SurfelConfig(dist_lambda=0.0, normal_lambda=0.0))
    assert trainer.model.loss_terms(meta, 10_000, off) == {}


@pytest.mark.parametrize("name", ["distortion", "normal"])
def test_each_loss_has_gradients(model_and_view, name):
    trainer, cams = model_and_view
    model = trainer.model
    _, _, meta = model.render(cams, 0, torch.ones(3))
    term = model.loss_terms(meta, 10**6, trainer.cfg)[name]
    assert term.dim() == 0 and float(term.detach()) > 0
    term.backward()
    for p in ("means", "quats", "log_scales", "logit_opacities"):
        g = model.params[p].grad
        assert g is not None and torch.isfinite(g).all() and float(g.abs().sum()) > 0, (name, p)


def test_normal_term_uses_the_configured_depth(model_and_view):
    """--surfels.normal-depth picks the depth map whose normals the rendered normals must match."""
    trainer, cams = model_and_view
    _, _, meta = trainer.model.render(cams, 0, torch.ones(3))
    for kind, key in (("expected", "depth"), ("median", "median_depth")):
        cfg = dataclass_replace(trainer.cfg, surfels=SurfelConfig(normal_depth=kind))
        want = cfg.surfels.normal_lambda * normal_consistency_loss(meta["normals"], meta[key], meta["alpha"],
                                                                   meta["Ks"])
        assert float(trainer.model.loss_terms(meta, 10**6, cfg)["normal"]) == pytest.approx(float(want), rel=1e-12)
    assert not torch.equal(meta["depth"], meta["median_depth"])


def test_render_geometry_is_one_render_of_depth_and_normals(model_and_view):
    """render_geometry returns what render_depth returns plus the same render's world normals."""
    trainer, cams = model_and_view
    model, bg = trainer.model, torch.ones(3)
    with torch.no_grad():
        rgb, alpha, meta = model.render(cams, background=bg)
    for kind, key in (("median", "median_depth"), ("expected", "depth")):
        g_rgb, g_depth, g_alpha, g_normals = model.render_geometry(cams, kind, bg)
        torch.testing.assert_close(g_rgb, rgb, rtol=0, atol=0)
        torch.testing.assert_close(g_depth, meta[key], rtol=0, atol=0)
        torch.testing.assert_close(g_alpha, alpha, rtol=0, atol=0)
        torch.testing.assert_close(g_normals, meta["normals_world"], rtol=0, atol=0)
        d_rgb, d_depth, d_alpha = model.render_depth(cams, kind, bg)
        assert torch.equal(d_rgb, g_rgb) and torch.equal(d_depth, g_depth) and torch.equal(d_alpha, g_alpha)
    assert float(alpha.max()) > 0.5 and float(g_normals.abs().sum()) > 0


def test_normals_from_depth_of_planes():
    K = torch.tensor([[[20.0, 0, 8], [0, 20.0, 8], [0, 0, 1]]], dtype=torch.float64)
    flat = torch.full((1, 16, 16, 1), 3.0, dtype=torch.float64)
    n = normals_from_depth(flat, K)
    assert torch.allclose(n[:, 1:-1, 1:-1], torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64))
    assert n[:, 0].abs().sum() == 0 and n[:, :, -1].abs().sum() == 0  # border: no central difference
    # the plane z = 3 + 0.5 x (camera frame): unit normal (0.5, 0, -1) / |.|, facing the camera
    ys, xs = torch.meshgrid(torch.arange(16.0) + 0.5, torch.arange(16.0) + 0.5, indexing="ij")
    rx = (xs - 8) / 20  # x / z along each pixel's ray
    tilted = (3.0 / (1 - 0.5 * rx)).double()[None, :, :, None]
    want = torch.tensor([0.5, 0.0, -1.0], dtype=torch.float64) / math.sqrt(1.25)
    assert torch.allclose(normals_from_depth(tilted, K)[:, 1:-1, 1:-1], want, atol=1e-12)
    # consistency with a render normal equal to the depth normal (alpha 1) is 0; opposite: 2
    alpha = torch.ones(1, 16, 16, 1, dtype=torch.float64)
    nd = normals_from_depth(tilted, K)
    assert float(normal_consistency_loss(nd, tilted, alpha, K)) == pytest.approx(0.0, abs=1e-12)
    assert float(normal_consistency_loss(-nd, tilted, alpha, K)) == pytest.approx(2.0, abs=1e-12)


# ------------------------------------------------------------------------------------------ densification


def test_densification_signal_comes_from_the_ray_transforms(model_and_view):
    trainer, cams = model_and_view
    model = trainer.model
    rgb, _, meta = model.render(cams, 0, torch.ones(3))
    rgb.sum().backward()
    signal = model.screen_gradient(meta)
    visible = (meta["radii"] > 0).all(dim=-1)
    wide = visible & (meta["radii"] > 2).all(dim=-1)  # wider than a pixel: means2d carries (almost) nothing
    assert signal.shape == meta["means2d"].shape and float(signal[wide].abs().sum()) > 0
    expect = meta["ray_transforms"].grad[..., :2, 2] * meta["depths"][..., None]
    assert torch.equal(signal, expect)
    with pytest.raises(ValueError, match="absgrad"):
        model.screen_gradient(meta, absgrad=True)


def test_split_keeps_children_in_the_surfel_plane(model_and_view):
    from rasterizer.reference.covariance import quat_to_rotmat
    from recon.strategy import ops

    model = model_and_view[0].model
    n = len(model)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[:5] = True
    means, quats = model.params["means"].detach()[:5].clone(), model.params["quats"].detach()[:5].clone()
    scales = model.scales.detach()[:5].clone()
    assert ops.split(model, mask) == 5 and len(model) == n + 5
    children = model.params["means"].detach()[-10:].reshape(2, 5, 3)
    normal = quat_to_rotmat(quats)[:, :, 2]
    offsets = children - means[None]
    assert torch.allclose((offsets * normal[None]).sum(-1), torch.zeros(2, 5), atol=1e-5)
    assert float(offsets.norm(dim=-1).max()) > 0
    assert torch.allclose(model.scales.detach()[-10:], (scales / 1.6).repeat(2, 1))


def dataclass_replace(obj, **kw):
    import dataclasses

    return dataclasses.replace(obj, **kw)


def test_output_drawing():
    from recon.outputs.images import draw_output

    depth = torch.tensor([[[0.0], [2.0]], [[3.0], [4.0]]])
    img = draw_output("depth", depth)
    assert img.shape == (2, 2, 3) and img.dtype == np.uint8
    assert tuple(img[0, 0]) == (0, 0, 0) and img[0, 1, 0] > img[1, 0, 0] > img[1, 1, 0] > 0  # near = bright
    normals = torch.tensor([[[0.0, 0.0, -1.0], [0.0, 0.0, 0.0]]])
    assert draw_output("normals", normals).tolist() == [[[128, 128, 0], [128, 128, 128]]]
    with pytest.raises(ValueError, match="no drawing for a model output named 'curvature'"):
        draw_output("curvature", depth)


@pytest.mark.parametrize("suffix", [".ply", ".splat"])
def test_export_measures_the_surfel_run(trained, tmp_path, suffix):
    from recon.commands.export import ExportConfig, run_export

    cfg, trainer, _, metrics = trained
    report = run_export(ExportConfig(input=cfg.out, out=tmp_path / f"m{suffix}"))
    assert report.splats == len(trainer.model)
    assert abs(report.psnr_before - metrics["test"]["psnr"]) < 1e-4
    assert report.psnr_after > metrics["test"]["psnr"] - 1.0  # read back as surfels: the first two scales


def test_auto_background_trains_surfels_on_random_colours_when_images_have_alpha(tmp_path):
    """2dgs with background auto composites its training views on random colours when the images have alpha
    (a fixed one is learnt as a shell of surfels); 3dgs keeps the dataset's, and an explicit choice stands."""
    from recon.training.trainer import training_background

    class Alpha:
        def __init__(self, has):
            self.has = has

        def has_alpha(self):
            return self.has

    cfg = tiny(tmp_path, 1)
    assert training_background(cfg, SurfelModel, Alpha(True)) == "random"
    assert training_background(cfg, SurfelModel, Alpha(False)) == "auto"
    assert training_background(cfg, GaussianModel, Alpha(True)) == "auto"
    assert training_background(dataclass_replace(cfg, background="white"), SurfelModel, Alpha(True)) == "white"
    trainer = Trainer(cfg, log=quiet)  # the procedural scene's images have alpha
    assert trainer.images.has_alpha() and trainer.train_background == "random"
    assert len({tuple(trainer.step_background().tolist()) for _ in range(4)}) == 4
