"""`splatforge train --method neus` on dynamic data (issue 50): frame by frame through the one trainer
(recon/training/frame_sequence.py). A 3-frame procedural-4d sequence trains, writes 3 meshes and their manifest
and per-frame metrics; each later frame starts from the previous frame's final field; an interrupted sequence
resumes inside the frame it stopped in and ends where the uninterrupted run did."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

from recon.data.procedural_4d import procedural_4d_scene
from recon.nerf.config import NeusConfig
from recon.training import frame_sequence as fs
from recon.training.trainer import TrainingHook
from tests.recon.nerf.test_neus_train import tiny
from tests.recon.tiny_runs import quiet

STEPS, FRAME_STEPS = 6, 4


@pytest.fixture(scope="module")
def scene():
    return procedural_4d_scene(width=24, height=24, n_train=3, n_times=3, test_time_stride=1)


def sequence_config(out):
    cfg = tiny(out, STEPS, save_every=2, data="procedural-4d")
    return dataclasses.replace(cfg, neus=dataclasses.replace(cfg.neus, frame_steps=FRAME_STEPS,
                                                             frame_mesh_resolution=24))


def final_checkpoint(out, k: int) -> dict:
    """Frame ``k``'s checkpoint at its last step."""
    steps = STEPS if k == 0 else FRAME_STEPS
    return torch.load(fs.frame_folder(out, k) / "checkpoints" / f"ckpt_{steps:05d}.pt", weights_only=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, scene):
    """(cfg, the sequence's metrics, the starting parameters each frame's trainer saw, the log lines)."""
    cfg = sequence_config(tmp_path_factory.mktemp("neusseq") / "run")
    starts, lines = [], []

    class Record(TrainingHook):
        def on_train_start(self, trainer):
            starts.append({n: p.detach().clone() for n, p in trainer.model.params.items()})

    return cfg, fs.FrameSequence(cfg, scene, log=lines.append, hooks=[Record()]).run(), starts, lines


def test_three_frames_three_meshes(trained):
    import trimesh

    cfg, metrics, _, _ = trained
    manifest = json.loads((cfg.out / "meshes" / "manifest.json").read_text())
    assert [f["file"] for f in manifest["frames"]] == [f"frame_{k:05d}.ply" for k in range(3)]
    assert [f["time"] for f in manifest["frames"]] == [0.0, 0.5, 1.0] == manifest["sequence_times"]
    for k in range(3):
        mesh = trimesh.load(cfg.out / "meshes" / f"frame_{k:05d}.ply", process=False)
        assert len(mesh.faces) > 50
    assert [f["steps"] for f in metrics["frames"]] == [STEPS, FRAME_STEPS, FRAME_STEPS]
    assert metrics["steps"] == STEPS + 2 * FRAME_STEPS
    # test camera at times 0.5 and 1 (test_time_stride 1 starts at step 1): frame 0 has none
    assert [f["num_views"] for f in metrics["frames"]] == [0, 1, 1]
    assert metrics["frames"][0]["psnr"] is None and metrics["test"]["psnr"] == pytest.approx(
        (metrics["frames"][1]["psnr"] + metrics["frames"][2]["psnr"]) / 2)
    assert json.loads((cfg.out / "metrics.json").read_text())["frames"] == metrics["frames"]


def test_one_loss_plot_for_the_whole_sequence(trained):
    """RUN/loss.png is drawn once, from the frames' history.json one after the other; a frame draws none."""
    from recon.outputs import files as rf

    cfg, _, _, _ = trained
    assert (cfg.out / "loss.png").stat().st_size > 1000
    histories = [rf.read_history(fs.frame_folder(cfg.out, k)) for k in range(3)]
    assert not any((fs.frame_folder(cfg.out, k) / "loss.png").exists() for k in range(3))
    joined = fs.sequence_history(histories)
    assert joined.loss == histories[0].loss + histories[1].loss + histories[2].loss
    assert joined.num_steps == STEPS + 2 * FRAME_STEPS
    assert joined.eval_step == [STEPS, STEPS + FRAME_STEPS, STEPS + 2 * FRAME_STEPS]  # each frame's final one


def test_the_sequence_plot_names_what_neus_counts(trained, monkeypatch, tmp_path):
    """The count panel of a NeuS sequence's loss.png is titled with the model's COUNT_NAME (occupied grid cells),
    not "Gaussians"."""
    import recon.outputs.plots as plots

    cfg, _, _, _ = trained
    titles = []
    drawn = plots.plot_run

    def recording(*args, **kwargs):
        fig = drawn(*args, **kwargs)
        titles.extend(ax.get_title() for ax in fig.axes)
        return fig

    monkeypatch.setattr(plots, "plot_run", recording)
    seq = fs.FrameSequence.__new__(fs.FrameSequence)  # the finished sequence's folder, its plot drawn again
    seq.cfg, seq.out, seq.times, seq.log = cfg, cfg.out, [0.0] * 3, print
    seq.write_plot()
    assert "occupied grid cells" in titles and "Gaussians" not in titles


def test_each_frame_starts_from_the_previous_one(trained):
    from recon.models import NeusModel

    cfg, _, starts, _ = trained
    assert len(starts) == 3
    for k in (1, 2):
        previous = final_checkpoint(cfg.out, k - 1)
        for name, p in starts[k].items():
            assert torch.equal(p, previous["model"]["field"][name]), (k, name)
    final = NeusModel.from_state_dict(final_checkpoint(cfg.out, 2)["model"])
    assert final.level_offset == STEPS + FRAME_STEPS  # progressive levels count the earlier frames' steps
    # later frames train at the full rate from their first step (no learning-rate warm-up); frame 0 warms up
    assert final.cfg.lr_warmup_steps == 0 and cfg.nerf.lr_warmup_steps > 0
    assert final_checkpoint(cfg.out, 0)["model"]["config"]["lr_warmup_steps"] == cfg.nerf.lr_warmup_steps


def test_resume_continues_in_the_frame_it_stopped_at(trained, scene, tmp_path):
    """Frame 2 interrupted after its checkpoint at step 2 (its final checkpoint, metrics and mesh gone): a rerun
    skips frames 0 and 1, resumes frame 2 at step 2 and ends with the uninterrupted run's field."""
    cfg, _, _, _ = trained
    out = tmp_path / "run"
    shutil.copytree(cfg.out, out)
    frame2 = fs.frame_folder(out, 2)
    (frame2 / "checkpoints" / f"ckpt_{FRAME_STEPS:05d}.pt").unlink()
    (frame2 / "metrics.json").unlink()
    (out / "meshes" / "frame_00002.ply").unlink()
    lines = []
    again = dataclasses.replace(cfg, out=out)
    metrics = fs.FrameSequence(again, scene, log=lines.append).run()
    trained_lines = [ln for ln in lines if "steps" in ln and ln.startswith("frame ") and "test PSNR" not in ln]
    assert len(trained_lines) == 1 and trained_lines[0].startswith("frame 3/3"), lines
    assert any(ln.startswith("resuming") and "frame_00002" in ln and "step 2" in ln for ln in lines), lines
    assert (out / "meshes" / "frame_00002.ply").is_file()
    resumed, original = final_checkpoint(out, 2)["model"]["field"], final_checkpoint(cfg.out, 2)["model"]["field"]
    for name in original:
        assert torch.equal(resumed[name], original[name]), name
    assert [f["steps"] for f in metrics["frames"]] == [STEPS, FRAME_STEPS, FRAME_STEPS]


def test_a_frame_begun_with_a_warm_up_resumes_with_it(tmp_path):
    """Frames begun before later frames dropped the learning-rate warm-up keep the one in their config.yaml (the
    resume check would refuse the run otherwise); new frames get none; frame 0 keeps the run's."""
    from recon.outputs import files as rf

    cfg = tiny(tmp_path / "run", STEPS)
    cfg = dataclasses.replace(cfg, neus=dataclasses.replace(cfg.neus, frame_steps=FRAME_STEPS))
    assert cfg.nerf.lr_warmup_steps > 0
    assert fs.frame_config(cfg, 0).nerf.lr_warmup_steps == cfg.nerf.lr_warmup_steps
    assert fs.frame_config(cfg, 1).nerf.lr_warmup_steps == 0
    old = dataclasses.replace(cfg, out=fs.frame_folder(cfg.out, 1), steps=FRAME_STEPS)
    old.out.mkdir(parents=True)
    rf.write_config(old.out, old)  # as a frame began by the older code wrote it
    assert fs.frame_config(cfg, 1).nerf.lr_warmup_steps == cfg.nerf.lr_warmup_steps
    assert fs.frame_config(cfg, 2).nerf.lr_warmup_steps == 0


def test_frames_and_test_views_by_time(scene):
    times = fs.frame_times(scene)
    assert times == [0.0, 0.5, 1.0]
    assert fs.trains_frame_by_frame("neus", scene) and not fs.trains_frame_by_frame("nerf", scene)
    one = dataclasses.replace(scene, frames_train=[f for f in scene.frames_train if f.time == 0.5])
    assert not fs.trains_frame_by_frame("neus", one)  # a single time: a static run
    # D-NeRF's test times lie between the training times: each goes to the nearest frame
    assert fs.nearest_time(0.2, times) == 0.0 and fs.nearest_time(0.3, times) == 0.5
    assert fs.nearest_time(0.25, times) == 0.0  # a tie: the earlier
    sub = fs.frame_scene(scene, 0.5, times)
    assert {f.time for f in sub.frames_train} == {0.5} and len(sub.frames_train) == 3
    assert [f.time for f in sub.frames_test] == [0.5]


def test_train_model_dispatches_dynamic_neus(monkeypatch, scene, tmp_path):
    """train_model on dynamic data with --method neus runs the frame sequence (the scene loaded once)."""
    from recon.training import train_run as tr

    seen = []
    monkeypatch.setattr(tr, "load_training_scene", lambda cfg: scene)
    monkeypatch.setattr(fs.FrameSequence, "run", lambda self: seen.append(self.times) or {"ok": True})
    assert tr.train_model(sequence_config(tmp_path / "run"), log=quiet) == {"ok": True}
    assert seen == [[0.0, 0.5, 1.0]]


def test_frame_steps_is_checked():
    from recon.core.errors import ConfigValueError
    from recon.training.trainer import validate_config

    cfg = tiny("unused", 1)
    with pytest.raises(ConfigValueError, match="--neus.frame-steps"):
        validate_config(dataclasses.replace(cfg, neus=NeusConfig(frame_steps=0)))


# ------------------------------------------------------------------------ eval and view of the sequence folder


@pytest.fixture
def loads_scene(monkeypatch, scene):
    """RUN/config.yaml names procedural-4d (30 times at 96 px): opening the run gives the tiny scene trained."""
    from recon.run import folder

    monkeypatch.setattr(folder, "load_training_scene", lambda cfg: scene)


def test_eval_of_the_sequence_folder_scores_each_frame_on_its_views(trained, loads_scene, tmp_path):
    """`splatforge eval RUN`: each frame's model on its own test views (the trainer's final evaluation, same
    numbers), their mean; frame 0 has no test view (a line without scores)."""
    from recon.commands.evaluate import evaluate

    cfg, metrics, _, _ = trained
    evaluate(run=cfg.out, out=tmp_path / "eval", device="cpu")
    saved = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    frames = saved["frames"]
    assert [f["frame"] for f in frames] == [0, 1, 2] and [f["num_views"] for f in frames] == [0, 1, 1]
    assert frames[0]["psnr"] is None
    for k in (1, 2):
        assert frames[k]["psnr"] == pytest.approx(metrics["frames"][k]["psnr"], abs=1e-4), k
        assert (tmp_path / "eval" / f"frame_{k:05d}" / "renders" / "test_000.png").is_file()
    assert saved["test"]["psnr"] == pytest.approx((frames[1]["psnr"] + frames[2]["psnr"]) / 2)
    assert saved["test"]["num_views"] == 2 and saved["test"]["num_frames"] == 2


def test_eval_of_a_sequence_with_a_frame_missing(trained, loads_scene, tmp_path):
    """A frame without a checkpoint: one line naming it, ``missing`` in the file, the mean over the others."""
    from recon.commands.evaluate_sequence import evaluate_sequence

    cfg, _, _, _ = trained
    out = tmp_path / "run"
    shutil.copytree(cfg.out, out)
    shutil.rmtree(fs.frame_folder(out, 2) / "checkpoints")
    lines = []
    summary = evaluate_sequence(out, out=tmp_path / "eval", device="cpu", log=lines.append)
    missing = [ln for ln in lines if "no checkpoint" in ln]
    assert len(missing) == 1 and missing[0].startswith("frame 2 ") and "frame_00002" in missing[0], lines
    frames = json.loads((tmp_path / "eval" / "metrics.json").read_text())["frames"]
    assert frames[2] == {"frame": 2, "time": 1.0, "psnr": None, "ssim": None, "lpips": None, "num_views": 0,
                         "missing": True}
    assert summary["psnr"] == pytest.approx(frames[1]["psnr"]) and summary["num_frames"] == 1


def test_view_of_the_sequence_folder_shows_the_frame_nearest_the_slider(trained, loads_scene, tmp_path):
    """`splatforge view RUN`: a dynamic scene whose time slider shows the nearest frame's baked Gaussians (no
    frame wrote splats.ply: each is baked from the frame's final checkpoint)."""
    pytest.importorskip("viser")
    from recon.models import NeusModel
    from viewer.commands import ViewConfig, build_viewer
    from viewer.frame_sequence import FrameSequenceScene

    cfg, _, _, _ = trained
    assert not any((fs.frame_folder(cfg.out, k) / "splats.ply").exists() for k in range(3))  # not asked for
    baked = [NeusModel.from_state_dict(final_checkpoint(cfg.out, k)["model"]).to_splat_data().means
             for k in range(3)]
    assert not np.array_equal(baked[0], baked[2])
    v = build_viewer(ViewConfig(path=cfg.out, port=0, output=tmp_path / "out", cameras=False), verbose=False)
    assert isinstance(v.scene, FrameSequenceScene) and v.scene.dynamic and len(v.scene.frames) == 3
    v.start()
    try:
        assert "time" in v.gui and v.gui["time"].label == "frame time"
        np.testing.assert_array_equal(v.scene.splats.means, baked[0])
        for t, k in ((0.3, 1), (0.74, 1), (0.76, 2), (0.0, 0)):
            v.gui["time"].value = t  # what the browser's slider does
            assert v.scene.frame == k, t
            np.testing.assert_array_equal(v.scene.splats.means, baked[k])
    finally:
        v.stop()


def test_view_of_one_frame_folder_bakes_its_checkpoint(trained, loads_scene):
    """`splatforge view RUN/frames/frame_00001` (no splats.ply written): the frame's final checkpoint baked; a frame
    folder without a checkpoint is one line naming it."""
    from recon.models import NeusModel
    from viewer.scene import ViewerInputError, load_scene

    cfg, _, _, _ = trained
    frame = fs.frame_folder(cfg.out, 1)
    scene = load_scene(frame, cameras=False)
    baked = NeusModel.from_state_dict(final_checkpoint(cfg.out, 1)["model"]).to_splat_data().means
    np.testing.assert_array_equal(scene.splats.means, baked)
    assert scene.run_dir == frame
    empty = cfg.out / "frames" / "frame_00009"
    empty.mkdir()
    try:
        with pytest.raises(ViewerInputError, match="frame_00009"):
            load_scene(empty, cameras=False)
    finally:
        empty.rmdir()


def test_view_of_a_sequence_whose_dataset_is_gone(trained, tmp_path):
    """`splatforge view RUN` takes the frames' times from RUN/meshes/manifest.json: it opens and moves through
    the frames when RUN's config.yaml names a dataset folder that is not there (nothing loads it)."""
    from recon.run.sequence import SequenceRun
    from viewer.frame_sequence import load_frame_sequence_scene

    cfg, _, _, _ = trained
    out = tmp_path / "run"
    shutil.copytree(cfg.out, out)
    config = out / "config.yaml"
    config.write_text(config.read_text().replace("data: procedural-4d", f"data: {tmp_path / 'gone'}"))
    with pytest.raises(FileNotFoundError, match="gone"):
        SequenceRun.open(out).scene  # the dataset really is unreachable
    scene = load_frame_sequence_scene(out, verbose=False)
    assert [t for t, _ in scene.frames] == [0.0, 0.5, 1.0]
    scene.set_time(0.9)
    assert scene.frame == 2 and len(scene.splats.means) > 0


def test_sequence_times_fall_back_to_the_dataset_and_a_damaged_manifest_is_named(trained, loads_scene, tmp_path):
    """A manifest without ``sequence_times`` (written before it existed): the times come from the dataset; times
    that are not increasing numbers: DamagedFileError naming the manifest."""
    from recon.core.errors import DamagedFileError
    from recon.run.sequence import SequenceRun

    cfg, _, _, _ = trained
    out = tmp_path / "run"
    shutil.copytree(cfg.out, out)
    path = out / "meshes" / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["sequence_times"]
    path.write_text(json.dumps(manifest))
    seq = SequenceRun.open(out)
    assert seq.times == [0.0, 0.5, 1.0] and seq.run._scene is not None  # loaded to learn them
    path.write_text(json.dumps({**manifest, "sequence_times": [0.0, 1.0, 0.5]}))
    with pytest.raises(DamagedFileError, match="manifest.json: sequence_times"):
        SequenceRun.open(out).times


def test_viewer_keeps_only_the_last_few_baked_frames(monkeypatch):
    """FrameSequenceScene keeps the BAKED_FRAMES most recently shown frames: moving through a long sequence
    holds no more; a kept frame is not baked again, a dropped one is."""
    from viewer import frame_sequence as vfs

    baked = []

    def bake(folder):
        baked.append(folder)
        return f"splats of {folder}"

    monkeypatch.setattr(vfs, "frame_splats", bake)
    n = 3 * vfs.BAKED_FRAMES
    frames = [(k / (n - 1), f"frame_{k}") for k in range(n)]
    scene = vfs.FrameSequenceScene(bake("frame_0"), "run", "run", dynamic=True, frames=frames)
    scene.keep(0, scene.splats)
    for t, folder in frames:
        scene.set_time(t)
        assert scene.splats == f"splats of {folder}" and len(scene._baked) <= vfs.BAKED_FRAMES
    assert baked == [f for _, f in frames]  # each baked once (frame 0 when the scene opened)
    last = list(range(n - vfs.BAKED_FRAMES, n))
    assert list(scene._baked) == last
    scene.set_time(frames[last[0]][0])  # still kept: not baked again, now the most recent
    assert len(baked) == n and list(scene._baked) == last[1:] + last[:1]
    scene.set_time(0.0)  # dropped long ago: baked again
    assert baked[-1] == "frame_0" and len(baked) == n + 1 and len(scene._baked) == vfs.BAKED_FRAMES
