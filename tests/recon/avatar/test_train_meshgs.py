"""--method meshgs: the bound model (rendering per pose, the binding kept by densification), training through
the trainer with checkpoints, resume and the train-pose / unseen-pose evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from recon.avatar.binding import plane_distances
from recon.core.errors import ConfigValueError, UsageError
from recon.data.detect import load_scene
from recon.models import MeshGaussians
from recon.strategy import METHOD_STRATEGIES
from recon.strategy.adc_mesh import MeshADCStrategy, split_bound
from recon.strategy import ops
from recon.training.trainer import TrainConfig, Trainer


@pytest.fixture(scope="module")
def scene(tiny_avatar):
    return load_scene(tiny_avatar)


def make_model(scene, seed=0):
    cfg = TrainConfig(method="meshgs", sh_degree=1)
    return MeshGaussians.initialize(cfg, scene, torch.Generator().manual_seed(seed), log=lambda s: None)


def test_initial_gaussians_lie_on_their_triangles(scene):
    model = make_model(scene)
    assert len(model) == 2 * len(scene.avatar.faces) and METHOD_STRATEGIES["meshgs"]["adc"] is MeshADCStrategy
    for t in (None, 1.0):  # rest pose and an unseen pose
        v = model.vertices_at_time(t)
        tri = model.triangles(v)
        w = model.world_gaussians(v)
        assert plane_distances(tri, model.face_ids, w.means).max() < 1e-5


def test_render_follows_the_pose_and_refuses_times_outside_0_1(scene):
    model = make_model(scene)
    cam = [scene.frames_train[0].camera]
    a, _, _ = model.render(cam, 1, torch.ones(3), t=0.0)
    b, _, _ = model.render(cam, 1, torch.ones(3), t=1.0)
    assert (a - b).abs().max() > 0.05
    with pytest.raises(UsageError, match="pose time 1.5 is outside"):
        model.render(cam, 1, torch.ones(3), t=1.5)
    av = scene.avatar
    c, _, _ = model.render_pose(cam, av.rotations[3], av.translations[3], 1, torch.ones(3))
    torch.testing.assert_close(c, b)


def test_clone_split_prune_keep_every_gaussian_on_its_triangle(scene):
    model = make_model(scene)
    with torch.no_grad():
        model.params["log_scales"].add_(1.0)  # large enough that children land away from the parent
    faces_before = model.face_ids.clone()
    mask = torch.zeros(len(model), dtype=torch.bool)
    mask[::3] = True
    parents = faces_before[mask]
    torch.manual_seed(0)
    n = split_bound(model, mask)
    assert n == int(mask.sum()) and len(model) == len(faces_before) + n
    torch.testing.assert_close(model.face_ids[-2 * n:], parents.repeat(2))  # children keep the parent's triangle
    torch.testing.assert_close(model.face_ids[: len(faces_before) - n], faces_before[~mask])
    added = ops.duplicate(model, torch.arange(len(model)) < 5)
    assert added == 5 and len(model.face_ids) == len(model)
    ops.remove(model, torch.arange(len(model)) % 2 == 0)
    assert len(model.face_ids) == len(model)
    k = torch.exp(model.triangles(model.avatar.rest_vertices).log_sizes[model.face_ids])
    for t in (None, 0.0, 1.0):
        v = model.vertices_at_time(t)
        d = plane_distances(model.triangles(v), model.face_ids, model.world_gaussians(v).means)
        k = torch.exp(model.triangles(v).log_sizes[model.face_ids])
        assert (d <= model.options.max_offset * k + 1e-6).all()


def test_batch_refused():
    with pytest.raises(ConfigValueError, match="--batch 2"):
        Trainer(TrainConfig(method="meshgs", batch=2, progress=False), log=lambda s: None)


def train(data, out, steps, save_every=0):
    cfg = TrainConfig(data=Path(data), out=out, method="meshgs", steps=steps, sh_degree=1, progress=False,
                      save_every=save_every)
    trainer = Trainer(cfg, log=lambda s: None, device="cpu")
    trainer.run()
    return trainer


def test_training_improves_resumes_and_reports_pose_groups(tiny_avatar, tmp_path):
    out = tmp_path / "run"
    first = Trainer(TrainConfig(data=Path(tiny_avatar), out=out, method="meshgs", sh_degree=1, progress=False),
                    log=lambda s: None, device="cpu", writes_outputs=False)
    before = first.evaluate(None)
    train(tiny_avatar, out, steps=120, save_every=60)
    metrics = json.loads((out / "metrics.json").read_text())
    groups = metrics["test"]["groups"]
    assert groups["train_poses"]["num_views"] == 3 * 3 and groups["unseen_poses"]["num_views"] == 3
    assert metrics["test"]["psnr"] > before["psnr"] + 2
    assert groups["unseen_poses"]["psnr"] > before["psnr"] + 2
    # a longer run resumes from the final checkpoint (step 120)
    lines = []
    cfg = TrainConfig(data=Path(tiny_avatar), out=out, method="meshgs", steps=150, sh_degree=1, progress=False,
                      save_every=60)
    resumed = Trainer(cfg, log=lines.append, device="cpu")
    resumed.run()
    assert any("resuming" in s and "from step 120" in s for s in lines), lines
    assert resumed.step == 150 and json.loads((out / "metrics.json").read_text())["steps"] == 150
    # the checkpoint holds the avatar: the model comes back without the dataset
    from recon.run.folder import Run

    model = Run.open(out).load_model()
    assert isinstance(model, MeshGaussians) and model.avatar.unseen.tolist() == [False, False, False, True]


def test_render_animation_of_unseen_poses(tiny_avatar, tmp_path):
    from recon.avatar.skin_file import AvatarInputError, pose_record
    from recon.commands.render import render_video

    out = tmp_path / "run"
    train(tiny_avatar, out, steps=20)
    scene = load_scene(tiny_avatar)
    av = scene.avatar
    clip = tmp_path / "clip.json"
    poses = [pose_record(av.rotations[k], av.translations[k]) for k in (3, 0, 3)]
    clip.write_text(json.dumps({"fps": 12, "poses": poses}))
    frames = render_video(out, "fixed", tmp_path / "frames", progress=False, animation=clip)
    import imageio.v3 as iio

    images = [iio.imread(frames / f"frame_{k:05d}.png") for k in range(3)]
    assert len(list(frames.iterdir())) == 3 and (images[0] == images[2]).all() and (images[0] != images[1]).any()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"poses": [{"joint_rotations": [[1, 0, 0, 0]] * 2}]}))
    with pytest.raises(AvatarInputError, match="2 joint rotations but the skeleton has 3 joints"):
        render_video(out, "fixed", tmp_path / "frames2", progress=False, animation=bad)
    with pytest.raises(UsageError, match="leave --time"):
        render_video(out, "fixed", tmp_path / "frames3", progress=False, animation=clip, time=0.5)


def test_export_avatar_glb_with_a_device_budget(tiny_avatar, tmp_path):
    from recon.commands.export import ExportConfig, run_export
    from recon.export.glb import parse_glb

    from recon.avatar.config import MeshGSConfig

    out = tmp_path / "run"
    cfg = TrainConfig(data=Path(tiny_avatar), out=out, method="meshgs", steps=10, sh_degree=1, progress=False,
                      meshgs=MeshGSConfig(init_per_triangle=3))
    Trainer(cfg, log=lambda s: None, device="cpu").run()
    full = run_export(ExportConfig(input=out, out=tmp_path / "avatar.glb", quiet=True))
    phone = run_export(ExportConfig(input=out, out=tmp_path / "phone.glb", target="phone", quiet=True))
    assert full.splats > phone.splats and phone.dropped_budget == full.splats - phone.splats
    doc, _ = parse_glb(phone.path, phone.path.read_bytes())
    ext = doc["meshes"][0]["primitives"][0]["extensions"]["SPLATFORGE_bound_gaussians"]
    assert ext["count"] == phone.splats and doc["skins"][0]["joints"] == [0, 1, 2]
    assert len(doc["animations"][0]["channels"]) == 3 + 1  # a rotation per joint, the root's translation
    with pytest.raises(UsageError, match="exports as a GLB"):
        run_export(ExportConfig(input=out, out=tmp_path / "avatar.ply", quiet=True))


def test_no_grad_cpu_posing_goes_through_the_fused_kernel_and_matches_pytorch(scene, monkeypatch):
    """Playback / render --animation (no gradient, CPU) bind with the Numba kernel; training (gradients) with
    PyTorch; the renders agree, between captured poses too."""
    import recon.avatar.posing_kernel as kernel

    model = make_model(scene)
    calls = []
    real = kernel.bind_numba
    monkeypatch.setattr(kernel, "bind_numba", lambda *a: calls.append(1) or real(*a))
    cam = [scene.frames_train[0].camera]
    for t in (0.5, 1 / 3):
        reference, _, _ = model.render(cam, 1, torch.ones(3), t=t)  # gradients on: PyTorch binding
        assert not calls and reference.requires_grad
        with torch.no_grad():
            fused, _, _ = model.render(cam, 1, torch.ones(3), t=t)
        assert len(calls) == 1
        calls.clear()
        torch.testing.assert_close(fused, reference.detach(), atol=1e-5, rtol=1e-5)
