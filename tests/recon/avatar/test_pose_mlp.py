"""The optional pose MLP of --method meshgs (recon/avatar/pose_mlp.py): off by default, zero in the rest pose and
at the start, the binding bound kept whatever it outputs, trained and regularised through the trainer, in
checkpoints, the same through the fused no-grad path, and named when the export leaves it out; plus
``render --run RUN --time T`` on an avatar run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from recon.avatar.config import MeshGSConfig
from recon.avatar.pose_mlp import PoseOffsetMLP, pose_features
from recon.core.errors import ConfigValueError
from recon.data.detect import load_scene
from recon.models import MeshGaussians
from recon.training.trainer import TrainConfig, Trainer, validate_config


@pytest.fixture(scope="module")
def scene(tiny_avatar):
    return load_scene(tiny_avatar)


def make_model(scene, width=8, seed=0):
    cfg = TrainConfig(method="meshgs", sh_degree=1, meshgs=MeshGSConfig(pose_mlp_width=width))
    return MeshGaussians.initialize(cfg, scene, torch.Generator().manual_seed(seed), log=lambda s: None)


def shake(model, scale=3.0):
    """Large random MLP weights (the head included): corrections far from zero."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.pose_mlp.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=g) / max(p.shape[-1], 1) ** 0.5)


def test_off_by_default_and_zero_at_the_start_and_in_the_rest_pose(scene):
    assert MeshGSConfig().pose_mlp_width == 0 and make_model(scene, width=0).pose_mlp is None
    model = make_model(scene)
    av = scene.avatar
    (bary, offsets, _, log_scales), out = model.local_gaussians(av.rotations[3])
    assert out.shape == (len(model), 6) and (out == 0).all()  # head initialised to zero
    shake(model)
    _, out = model.local_gaussians(torch.tensor([[1.0, 0, 0, 0]] * av.skin.num_joints))
    assert (out == 0).all()  # exactly zero in the rest pose: pose code g(p) - g(0)
    (bary, offsets, _, log_scales), out = model.local_gaussians(av.rotations[3])
    assert out.abs().max() > 0.1
    assert (pose_features(av.rotations[0]) != 0).any() and pose_features(av.rotations[:1]).shape == (1,)


def test_corrections_keep_the_binding_bound(scene):
    model = make_model(scene)
    shake(model, scale=30.0)
    (bary, offsets, _, _), out = model.local_gaussians(scene.avatar.rotations[3])
    torch.testing.assert_close(bary.sum(1), torch.ones(len(model)))
    assert offsets.abs().max() <= model.options.max_offset + 1e-6  # inside the tanh: never off its slab


def test_gradients_reach_the_mlp_and_the_regulariser_penalises_it(scene):
    model = make_model(scene)
    cam = [scene.frames_train[0].camera]
    rgb, _, meta = model.render(cam, 1, torch.ones(3), t=1.0)
    assert "pose_mlp" in meta and not model.loss_terms(meta, 0, None)["pose_mlp"]  # zero output: zero term
    rgb.mean().backward()
    assert model.pose_mlp.head.weight.grad.abs().max() > 0  # the zero head still learns
    shake(model)
    _, _, meta = model.render(cam, 1, torch.ones(3), t=1.0)
    assert float(model.loss_terms(meta, 0, None)["pose_mlp"].detach()) > 0
    _, _, rest_meta = model.render(cam, 1, torch.ones(3), t=None)  # the rest pose: the MLP is not run
    assert "pose_mlp" not in rest_meta and model.loss_terms(rest_meta, 0, None) == {}


def test_fused_no_grad_path_matches_pytorch_with_the_mlp(scene):
    model = make_model(scene)
    shake(model)
    cam = [scene.frames_train[0].camera]
    reference, _, _ = model.render(cam, 1, torch.ones(3), t=0.5)
    with torch.no_grad():
        fused, _, _ = model.render(cam, 1, torch.ones(3), t=0.5)
        plain = make_model(scene, width=0)
        uncorrected, _, _ = plain.render(cam, 1, torch.ones(3), t=0.5)
    torch.testing.assert_close(fused, reference.detach(), atol=1e-5, rtol=1e-5)
    assert (fused - uncorrected).abs().max() > 1e-3  # the correction shows


def test_width_must_not_be_negative():
    with pytest.raises(ConfigValueError, match="pose-mlp-width"):
        validate_config(TrainConfig(method="meshgs", meshgs=MeshGSConfig(pose_mlp_width=-1)))
    with pytest.raises(ValueError):
        PoseOffsetMLP(3, 0)


@pytest.fixture(scope="module")
def mlp_run(tiny_avatar, tmp_path_factory):
    out = tmp_path_factory.mktemp("mlp") / "run"
    cfg = TrainConfig(data=Path(tiny_avatar), out=out, method="meshgs", steps=30, sh_degree=1, progress=False,
                      save_every=30, meshgs=MeshGSConfig(pose_mlp_width=8, pose_mlp_lr=0.01))
    trainer = Trainer(cfg, log=lambda s: None, device="cpu")
    trainer.run()
    return out, trainer.model


def test_training_moves_the_mlp_and_checkpoints_hold_it(mlp_run, scene):
    from recon.run.folder import Run

    out, trained = mlp_run
    assert trained.pose_mlp.head.weight.abs().max() > 0
    loaded = Run.open(out).load_model()
    assert loaded.pose_mlp is not None and loaded.options.pose_mlp_width == 8
    cam = [scene.frames_test[0].camera]
    with torch.no_grad():
        a, _, _ = trained.render(cam, 1, torch.ones(3), t=1.0)
        b, _, _ = loaded.render(cam, 1, torch.ones(3), t=1.0)
    torch.testing.assert_close(a, b)


def test_export_bakes_the_mlp_and_a_reader_of_the_file_applies_it(mlp_run, tmp_path):
    """The GLB's poseCorrection, applied by the test's numpy reader from the file alone, gives the model's own
    corrected Gaussians in an unseen pose; a device budget keeps the MLP's raw offsets in step."""
    from recon.commands.export import ExportConfig, run_export
    from recon.core.avatar_record import cap_per_triangle
    from recon.export.avatar_glb import write_avatar_glb
    from recon.run.folder import Run
    from tests.recon.avatar.test_avatar_glb import D, read_avatar_glb

    out, _ = mlp_run
    report = run_export(ExportConfig(input=out, out=tmp_path / "avatar.glb", quiet=True))
    assert any("pose MLP" in n and "poseCorrection" in n for n in report.notes)
    model = Run.open(out).load_model()
    with torch.no_grad():  # corrections of a visible size
        model.pose_mlp.head.weight.copy_(torch.randn(model.pose_mlp.head.weight.shape,
                                                     generator=torch.Generator().manual_seed(3)))
    av = model.avatar
    k = len(av.names) - 1  # the unseen pose
    v = av.posed_vertices(av.rotations[k], av.translations[k])
    with torch.no_grad():
        corrected, plain = model.world_gaussians(v, av.rotations[k]), model.world_gaussians(v)
    assert (corrected.means - plain.means).abs().max() > 1e-3
    for cap, name in ((None, "full.glb"), (1, "capped.glb")):
        record = model.to_avatar_record()
        keep = np.arange(len(record))
        if cap is not None:
            capped = cap_per_triangle(record, cap)
            keep, record = _kept(record, capped), capped
            assert len(record) < len(keep) * 2 and len(keep) == len(record)
        write_avatar_glb(tmp_path / name, record)
        means, _, log_scales, _, _ = read_avatar_glb(tmp_path / name, k)
        np.testing.assert_allclose(means, corrected.means.numpy()[keep] @ D, atol=3e-5)
        np.testing.assert_allclose(log_scales, corrected.log_scales.numpy()[keep], atol=3e-5)


def _kept(record, capped) -> np.ndarray:
    """Indices into ``record`` of the Gaussians ``capped`` kept (matched by their unique raw offsets)."""
    order = {float(x): i for i, x in enumerate(record.pose_mlp["raw_offsets"])}
    return np.array([order[float(x)] for x in capped.pose_mlp["raw_offsets"]])


def test_render_time_poses_an_avatar_run(mlp_run, scene, tmp_path):
    """``render --run RUN --time T``: the pose of time T (an interpolated one too), as the model renders it."""
    import imageio.v3 as iio

    from recon.commands.render import render_video
    from recon.run.folder import Run

    out, _ = mlp_run
    model = Run.open(out).load_model()
    cam = Run.open(out).cameras
    shots = {}
    for t in (0.0, 0.5, 1.0):
        path = render_video(out, "fixed", tmp_path / f"t{t}.png", progress=False, time=t)
        shots[t] = iio.imread(path)[..., :3].astype(np.float64)
        with torch.no_grad():
            rgb, _, _ = model.render([cam[0]], None, Run.open(out).background(), t=t)
        expect = (rgb[0].clamp(0, 1).numpy() * 255 + 0.5).astype(np.uint8)
        assert np.abs(shots[t] - expect).max() <= 1
    assert np.abs(shots[0.0] - shots[1.0]).max() > 20 and np.abs(shots[0.5] - shots[1.0]).max() > 5
    frames = render_video(out, "fixed", tmp_path / "frames", progress=False, times="0:1:3")
    third = iio.imread(frames / "frame_00002.png")[..., :3].astype(np.float64)
    assert len(list(frames.iterdir())) == 3 and np.abs(third - shots[1.0]).max() <= 1
    from recon.core.errors import UsageError

    with pytest.raises(UsageError, match="outside"):
        render_video(out, "fixed", tmp_path / "bad.png", progress=False, time=1.5)


def test_splat_data_of_a_time_carries_the_correction(scene):
    """The viewer plays ``to_splat_data(t)``: corrected by the MLP like the model's render, rest pose untouched."""
    model = make_model(scene)
    shake(model)
    plain = make_model(scene, width=0)
    corrected, uncorrected = model.to_splat_data(1.0), plain.to_splat_data(1.0)
    assert np.abs(corrected.means - uncorrected.means).max() > 1e-4
    np.testing.assert_allclose(model.to_splat_data(None).means, plain.to_splat_data(None).means, atol=1e-6)
    with torch.no_grad():
        w = model.world_gaussians(model.vertices_at_time(1.0), scene.avatar.rotations[3])
    np.testing.assert_allclose(corrected.means, w.means.numpy(), atol=1e-5)
