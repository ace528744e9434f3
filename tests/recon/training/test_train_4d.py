"""--method 4dgs: the 4D Gaussian model (slicing per camera time, the densification signal mapped back to
all 4D Gaussians, the 3D slice export), ADC in 4D, and training / resume / eval on procedural-4d."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from recon.data.procedural_4d import procedural_4d_scene
from recon.core.errors import ConfigValueError, UsageError
from recon.models import GaussianModel, SpaceTimeGaussians
from recon.strategy.adc4d import ADC4DStrategy, spatial_sizes, split_4d
from recon.strategy import METHOD_STRATEGIES
from recon.training.trainer import ConfigMismatchError, TrainConfig, Trainer


@pytest.fixture(scope="module")
def small_scene():
    return procedural_4d_scene(width=32, height=32, n_train=4, n_times=6, test_time_stride=2, n_points=600)


def make_model(scene, seed=0) -> SpaceTimeGaussians:
    cfg = TrainConfig(method="4dgs", sh_degree=1)
    model = SpaceTimeGaussians.initialize(cfg, scene, torch.Generator().manual_seed(seed), log=lambda s: None)
    with torch.no_grad():  # tilt some Gaussians in time (velocities) and shorten them (culling)
        g = torch.Generator().manual_seed(seed + 1)
        model.params["quats_left"].add_(0.3 * torch.randn(len(model), 4, generator=g))
        model.params["quats_right"].add_(0.3 * torch.randn(len(model), 4, generator=g))
        model.params["log_scales4"][:, 3] = -3.0
    return model


def test_initialisation_from_points_with_times(small_scene):
    model = SpaceTimeGaussians.initialize(TrainConfig(method="4dgs"), small_scene, torch.Generator().manual_seed(0))
    assert len(model) == 600
    torch.testing.assert_close(model.params["means4"][:, 3], torch.as_tensor(small_scene.point_times))
    torch.testing.assert_close(model.params["means4"][:, :3], torch.as_tensor(small_scene.points))


def test_static_scene_refused():
    from recon.data.procedural_scene import procedural_scene

    with pytest.raises(UsageError, match="carry no time"):
        SpaceTimeGaussians.initialize(TrainConfig(method="4dgs"), procedural_scene(width=16, height=16, n_train=2,
                                                                                     n_test=1), torch.Generator())


def test_render_several_times_equals_one_at_a_time(small_scene):
    model = make_model(small_scene)
    frames = [small_scene.frames_train[i] for i in (0, 7, 13, 2)]  # mixed times and cameras
    cams, times = [f.camera for f in frames], [f.time for f in frames]
    rgb, alpha, meta = model.render(cams, 1, torch.ones(3), t=times)
    assert rgb.shape == (4, 32, 32, 3) and meta["radii"].shape == (4, len(model), 2)
    for c, (cam, t) in enumerate(zip(cams, times)):
        one, one_alpha, one_meta = model.render([cam], 1, torch.ones(3), t=t)
        torch.testing.assert_close(rgb[c], one[0])
        torch.testing.assert_close(meta["radii"][c], one_meta["radii"][0])


def test_screen_signal_scattered_to_all_4d_gaussians(small_scene):
    model = make_model(small_scene)
    frames = [small_scene.frames_train[i] for i in (1, 20)]
    rgb, _, meta = model.render([f.camera for f in frames], 1, None, t=[f.time for f in frames])
    (rgb * torch.rand_like(rgb)).sum().backward()
    grad = meta["means2d"].grad
    assert grad.shape == (2, len(model), 2)
    for c, f in enumerate(frames):
        s = model.slice(f.time)
        assert len(s) < len(model)  # some are culled at this time...
        culled = torch.ones(len(model), dtype=torch.bool)
        culled[s.indices] = False
        assert grad[c][culled].abs().max() == 0 and (meta["radii"][c][culled] == 0).all()  # ...and get nothing
        assert grad[c][s.indices].abs().sum() > 0
    # the ADC statistics take the scattered signal as they are
    strategy = ADC4DStrategy()
    state = strategy.initialize_state(model)
    strategy.update_state(model, meta, state)
    assert state["count"].max() <= 2 and state["grad2d"].shape == (len(model),)


def test_all_culled_slice_renders_background_and_gives_a_zero_signal(small_scene):
    model = make_model(small_scene)
    with torch.no_grad():
        model.params["means4"][:, 3] = 5.0  # every Gaussian far from t = 0
    rgb, _, meta = model.render([small_scene.frames_train[0].camera], 1, torch.ones(3), t=0.0)
    assert meta["num_sliced"] == [0] and torch.equal(rgb, torch.ones_like(rgb))
    rgb.sum().backward()
    strategy = ADC4DStrategy()
    state = strategy.initialize_state(model)
    strategy.update_state(model, meta, state)  # no "no gradient" error: nothing was visible
    assert state["count"].sum() == 0 and meta["means2d"].grad.abs().sum() == 0


def test_slice_export_renders_like_the_4d_model(small_scene):
    model = make_model(small_scene)
    frame = small_scene.frames_test[0]
    want, _, _ = model.render([frame.camera], 1, torch.ones(3), t=frame.time)
    flat = GaussianModel.from_splat_data(model.to_splat_data(t=frame.time))
    got, _, _ = flat.render([frame.camera], 1, torch.ones(3))
    torch.testing.assert_close(got, want, atol=2e-4, rtol=0)
    with pytest.raises(UsageError, match="splats4d.ply"):
        SpaceTimeGaussians.from_splat_data(model.to_splat_data())


def test_rotmats_to_quats_matches_the_scalar_conversion():
    import numpy as np

    from rasterizer.quaternions import quat_to_rotmat, rotmat_to_quat
    from recon.models.spacetime import rotmats_to_quats

    q = torch.randn(500, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    q[:4] = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1.0]])  # each branch
    R = quat_to_rotmat(q / q.norm(dim=-1, keepdim=True))
    want = np.stack([rotmat_to_quat(m) for m in R.numpy()])
    np.testing.assert_allclose(rotmats_to_quats(R).numpy(), want, atol=1e-12)


def test_state_dict_round_trip_and_3d_checkpoint_refused(small_scene):
    model = make_model(small_scene)
    back = SpaceTimeGaussians.from_state_dict(model.state_dict())
    for name, p in model.params.items():
        torch.testing.assert_close(back.params[name], p)
    flat = GaussianModel.from_splat_data(model.to_splat_data())
    with pytest.raises(ValueError, match="holds a '3dgs' model, not --method 4dgs"):
        SpaceTimeGaussians.from_state_dict(flat.state_dict())


def test_split_4d_draws_children_from_the_4d_gaussian(small_scene):
    model = make_model(small_scene)
    n = len(model)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[:5] = True
    parents = {k: v.detach()[:5].clone() for k, v in model.params.items()}
    sizes = spatial_sizes(model)[:5]
    torch.manual_seed(0)
    assert split_4d(model, mask) == 5 and len(model) == n + 5
    children = model.params["means4"].detach()[-10:].reshape(2, 5, 4)
    assert (children[:, :, 3] != parents["means4"][:, 3]).all()  # moved in time too
    torch.testing.assert_close(model.params["log_scales4"].detach()[-5:],
                               parents["log_scales4"] - torch.log(torch.tensor(1.6)))
    torch.testing.assert_close(spatial_sizes(model)[-5:], sizes / 1.6)


def test_strategy_the_method_lacks_refused_before_loading(monkeypatch):
    monkeypatch.setitem(METHOD_STRATEGIES, "4dgs", {"adc": ADC4DStrategy})
    cfg = TrainConfig(data=Path("/nonexistent"), method="4dgs", strategy="mcmc")
    with pytest.raises(ConfigValueError, match="--strategy mcmc: not available with --method 4dgs"):
        Trainer(cfg)


def test_mcmc_in_4d_grows_relocates_and_moves_in_time(small_scene):
    cfg = TrainConfig(method="4dgs", strategy="mcmc", steps=60, sh_degree=1, progress=False, max_gaussians=900,
                      init_scale=1.0)  # MCMC's default 0.1 starts slower than 60 steps show
    trainer = Trainer(cfg, log=lambda s: None, scene=small_scene, device="cpu", writes_outputs=False)
    assert type(trainer.strategy).__name__ == "MCMC4DStrategy" and len(trainer.model) == 600
    before = trainer.evaluate(None)["psnr"]
    times0 = trainer.model.params["means4"].detach()[:, 3].clone()
    metrics = trainer.train_and_finish()
    assert 600 < len(trainer.model) <= 900
    assert metrics["test"]["psnr"] > before + 2.0, (before, metrics["test"]["psnr"])
    assert (trainer.model.params["means4"].detach()[:600, 3] - times0).abs().max() > 0
    # the 4D noise moves a transparent Gaussian in time as well as in space
    model = make_model(small_scene)
    with torch.no_grad():
        model.params["logit_opacities"].fill_(-10.0)
    before4 = model.params["means4"].detach().clone()
    trainer.strategy.inject_noise(model, 1.0)
    moved = (model.params["means4"].detach() - before4).abs()
    assert (moved[:, 3] > 0).all() and (moved[:, :3] > 0).all()


def train(scene, out: Path, steps: int, **kw) -> Trainer:
    cfg = TrainConfig(data=Path("procedural-4d"), out=out, method="4dgs", steps=steps, sh_degree=1,
                      progress=False, **kw)
    trainer = Trainer(cfg, log=lambda s: None, scene=scene, device="cpu")
    trainer.run()
    return trainer


def test_training_improves_psnr_and_resumes(small_scene, tmp_path):
    first = Trainer(TrainConfig(method="4dgs", sh_degree=1, progress=False), log=lambda s: None, scene=small_scene,
                    device="cpu", writes_outputs=False)
    before = first.evaluate(None)["psnr"]
    trainer = train(small_scene, tmp_path / "run", steps=60, save_every=30)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["test"]["psnr"] > before + 2.0, (before, metrics["test"]["psnr"])
    assert [p["time"] for p in metrics["test"]["per_time"]] == [0.2, 0.6, 1.0]
    for name in ("config.yaml", "loss.png", "history.json", "splats.ply"):
        assert (tmp_path / "run" / name).is_file()
    # resume: a longer run continues from the step-60 checkpoint
    lines = []
    cfg = TrainConfig(data=Path("procedural-4d"), out=tmp_path / "run", method="4dgs", steps=70, sh_degree=1,
                      progress=False, save_every=30)
    resumed = Trainer(cfg, log=lines.append, scene=small_scene, device="cpu")
    resumed.run()
    assert any("resuming" in s and "from step 60" in s for s in lines), lines
    assert resumed.step == 70 and len(resumed.history.loss) == 70
    assert isinstance(resumed.model, SpaceTimeGaussians) and trainer.step == 60


def test_3d_run_resumed_as_4d_refused(small_scene, tmp_path):
    cfg = TrainConfig(data=Path("procedural-4d"), out=tmp_path / "run", steps=2, sh_degree=1, progress=False)
    Trainer(cfg, log=lambda s: None, scene=small_scene, device="cpu").run()
    with pytest.raises(ConfigMismatchError, match="holds a --method 3dgs run; --method 4dgs cannot resume it"):
        train(small_scene, tmp_path / "run", steps=4)


def test_eval_renders_each_view_at_its_time(tmp_path):
    from recon.commands.evaluate import _evaluate

    cfg = TrainConfig(data=Path("procedural-4d"), out=tmp_path / "run", method="4dgs", steps=3, sh_degree=0,
                      progress=False, data_factor=2)
    Trainer(cfg, log=lambda s: None, device="cpu").run()
    trained = json.loads((tmp_path / "run" / "metrics.json").read_text())
    metrics = _evaluate(tmp_path / "run", None, None, None, tmp_path / "eval", "cpu")
    assert metrics["num_views"] == 10 and len(metrics["per_time"]) == 10
    assert metrics["psnr"] == pytest.approx(trained["test"]["psnr"], abs=1e-4)  # the run's 4D model (splats4d.ply)
    assert (tmp_path / "eval" / "renders" / "test_009.png").is_file()
    with pytest.raises(UsageError, match="splats4d.ply"):  # its splats.ply is a 3D slice
        _evaluate(tmp_path / "run", tmp_path / "run" / "splats.ply", None, None, tmp_path / "eval2", "cpu")
    # export writes a slice at the time asked for, and says why it reports no test PSNR
    from recon.commands.export import ExportConfig, run_export

    report = run_export(ExportConfig(input=tmp_path / "run", out=tmp_path / "slice.splat", time=0.5))
    assert (tmp_path / "slice.splat").is_file() and report.psnr_before is None
    assert any("3D slice at one time" in n for n in report.notes)
