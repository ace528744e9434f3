"""4D runs through the user-facing commands: splats4d.ply written by training, ``export`` (ply4d, a 3D
slice at --time, a sequence folder at --times), ``eval --splats`` of a ply4d file, ``render --time /
--times``; the clear refusals of a 4D model where only 3D fits and the reverse, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from recon.commands.export import ExportConfig, run_export
from recon.commands.render import render_video
from recon.core.errors import OutputError, UsageError
from recon.export import ModelKindError, read_ply4d, read_splats
from recon.export.sequence import read_sequence
from recon.run.folder import Run
from recon.training.trainer import TrainConfig, Trainer


def train(out: Path, method: str) -> Path:
    cfg = TrainConfig(data=Path("procedural-4d"), out=out, method=method, steps=3, sh_degree=1, progress=False,
                      data_factor=4)
    Trainer(cfg, log=lambda s: None, device="cpu").run()
    return out


@pytest.fixture(scope="module")
def run4d(tmp_path_factory) -> Path:
    return train(tmp_path_factory.mktemp("spacetime") / "run4d", "4dgs")


@pytest.fixture(scope="module")
def run3d(tmp_path_factory) -> Path:
    return train(tmp_path_factory.mktemp("spacetime") / "run3d", "3dgs")


def model_of(run: Path):
    return Run.open(run).load_model()


def test_training_writes_the_4d_model(run4d):
    data = read_ply4d(run4d / "splats4d.ply")
    ckpt = Run.open(run4d).checkpoint_model().to_spacetime_data()
    for name in ("means4", "quats_left", "quats_right", "log_scales4", "logit_opacities", "sh"):
        np.testing.assert_array_equal(getattr(data, name), getattr(ckpt, name))
    assert len(read_splats(run4d / "splats.ply")) > 0  # the 3D slice at 0.5 stays, for 3D-only players


def test_export_ply4d_round_trip_and_3d_source_refused(run4d, run3d, tmp_path):
    report = run_export(ExportConfig(input=run4d, out=tmp_path / "m.ply", format="ply4d", sh_degree=0))
    got, want = read_ply4d(tmp_path / "m.ply"), model_of(run4d).to_spacetime_data()
    assert report.format == "ply4d" and report.splats == len(want) and got.sh_degree == 0
    np.testing.assert_array_equal(got.means4, want.means4)
    np.testing.assert_array_equal(got.sh, want.sh[:, :1])
    with pytest.raises(ModelKindError, match="holds 3D Gaussians; --format ply4d stores 4D models"):
        run_export(ExportConfig(input=run3d, out=tmp_path / "x.ply", format="ply4d"))
    with pytest.raises(UsageError, match="ending in .ply"):
        run_export(ExportConfig(input=run4d, out=tmp_path / "x.spz", format="ply4d"))
    assert not (tmp_path / "x.ply").exists() and not (tmp_path / "x.spz").exists()


def test_export_slice_at_time_equals_the_model_slice(run4d, tmp_path):
    run_export(ExportConfig(input=run4d, out=tmp_path / "s.ply", time=0.25, evaluate=False))
    got, want = read_splats(tmp_path / "s.ply"), model_of(run4d).to_splat_data(0.25)
    np.testing.assert_array_equal(got.means, want.means)
    np.testing.assert_array_equal(got.logit_opacities, want.logit_opacities)
    other = model_of(run4d).to_splat_data(0.75)
    assert not np.array_equal(other.means, want.means)  # the slice depends on the time
    # the same from a ply4d file
    run_export(ExportConfig(input=run4d, out=tmp_path / "m.ply", format="ply4d"))
    run_export(ExportConfig(input=tmp_path / "m.ply", out=tmp_path / "s2.ply", time=0.25))
    np.testing.assert_array_equal(read_splats(tmp_path / "s2.ply").means, want.means)


@pytest.mark.parametrize("out", ["a.splat", "a.spz", "a.ply"])
def test_4d_source_without_time_refused_and_nothing_written(run4d, tmp_path, out):
    with pytest.raises(UsageError, match="holds a 4D model.*--time T.*--format ply4d"):
        run_export(ExportConfig(input=run4d, out=tmp_path / out))
    assert list(tmp_path.iterdir()) == []


def test_time_flags_on_a_3d_source_refused(run3d, tmp_path):
    with pytest.raises(UsageError, match="holds 3D Gaussians, which do not change with time"):
        run_export(ExportConfig(input=run3d, out=tmp_path / "a.ply", time=0.5))
    with pytest.raises(UsageError, match="holds 3D Gaussians, which do not change with time"):
        run_export(ExportConfig(input=run3d / "splats.ply", out=tmp_path / "seq", times="0:1:3"))
    with pytest.raises(UsageError, match="outside"):
        run_export(ExportConfig(input=run3d, out=tmp_path / "a.ply", time=-0.5))
    assert list(tmp_path.iterdir()) == []


def test_sequence_export_writes_slices_and_manifest(run4d, tmp_path):
    report = run_export(ExportConfig(input=run4d, out=tmp_path / "seq", times="0:1:3", format="ply", duration=2.0,
                                     quiet=True))
    seq = read_sequence(tmp_path / "seq")
    assert [f.time for f in seq.frames] == [0.0, 1.0, 2.0] and seq.fps == 1.0 and seq.format == "ply"
    model = model_of(run4d)
    for i, t in enumerate((0.0, 0.5, 1.0)):
        np.testing.assert_array_equal(seq.load_frame(i).means, model.to_splat_data(t).means)
    assert report.splats == sum(len(seq.load_frame(i)) for i in range(3))
    assert json.loads((tmp_path / "seq" / "manifest.json").read_text())["version"] == 1


def test_sequence_duration_from_the_flag_the_dataset_or_one_second():
    from types import SimpleNamespace

    from recon.commands.export4d import sequence_duration

    video = SimpleNamespace(dataset_known=True, scene=SimpleNamespace(duration=3.5))
    assert sequence_duration(2.0, video)[0] == 2.0
    assert sequence_duration(None, video) == (3.5, "time span 3.5 s (the dataset's; --duration overrides)")
    synthetic = SimpleNamespace(dataset_known=True, scene=SimpleNamespace(duration=None))
    assert sequence_duration(None, synthetic)[0] == 1.0 and sequence_duration(None, None)[0] == 1.0


def test_ply4d_export_budget_and_duration(run4d, tmp_path):
    from recon.export.ply4d import ply4d_duration

    full = model_of(run4d).to_spacetime_data()
    report = run_export(ExportConfig(input=run4d, out=tmp_path / "b.ply", format="ply4d", max_splats=10,
                                     duration=4.0))
    got = read_ply4d(tmp_path / "b.ply")
    assert len(got) == report.splats == 10 and report.dropped_budget == len(full) - 10
    assert report.importance == "footprint over time"  # the run's dataset gives cameras
    assert got.duration == 4.0 and ply4d_duration(tmp_path / "b.ply") == 4.0
    rows = {tuple(r) for r in full.means4.tolist()}
    assert all(tuple(r) in rows for r in got.means4.tolist())
    # a sequence from the exported file takes its stored duration
    from recon.commands.export4d import sequence_duration

    assert sequence_duration(None, None, tmp_path / "b.ply") == (4.0, "time span 4 s (stored in b.ply; --duration "
                                                                    "overrides)")


def test_sequence_export_replaces_only_a_sequence(run4d, tmp_path):
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("precious")
    with pytest.raises(OutputError, match="holding other files than a sequence"):
        run_export(ExportConfig(input=run4d, out=keep, times="0:1:2", force=True, quiet=True))
    assert (keep / "notes.txt").read_text() == "precious"
    run_export(ExportConfig(input=run4d, out=tmp_path / "seq", times="0:1:2", quiet=True))
    with pytest.raises(FileExistsError):
        run_export(ExportConfig(input=run4d, out=tmp_path / "seq", times="0:1:3", quiet=True))
    run_export(ExportConfig(input=run4d, out=tmp_path / "seq", times="0:1:3", force=True, quiet=True))
    assert len(read_sequence(tmp_path / "seq")) == 3


def test_sequence_export_failing_midway_leaves_nothing(run4d, tmp_path, monkeypatch):
    from recon.commands import export4d

    real, calls = export4d.slice_model, []

    def failing(model, t, path):
        calls.append(t)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(model, t, path)

    monkeypatch.setattr(export4d, "slice_model", failing)
    with pytest.raises(OSError):
        run_export(ExportConfig(input=run4d, out=tmp_path / "seq", times="0:1:3", quiet=True))
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its hidden temporary


def test_eval_reads_a_ply4d_file(run4d, run3d, tmp_path):
    from recon.commands.evaluate import _evaluate

    run_export(ExportConfig(input=run4d, out=tmp_path / "m.ply", format="ply4d"))
    own = _evaluate(run4d, None, None, None, tmp_path / "e1", "cpu")
    bare = _evaluate(None, tmp_path / "m.ply", Path("procedural-4d"), 4, tmp_path / "e2", "cpu")
    assert bare["psnr"] == pytest.approx(own["psnr"], abs=1e-6) and len(bare["per_time"]) == len(own["per_time"])
    with pytest.raises(ModelKindError, match="cannot stand for the 3dgs run"):
        _evaluate(run3d, tmp_path / "m.ply", None, None, tmp_path / "e3", "cpu")


def test_render_one_time_and_a_time_sequence(run4d, tmp_path):
    from PIL import Image

    from recon.data.camera_paths import camera_path

    opened = Run.open(run4d)
    model, bg = opened.load_model(), opened.background()
    cam = camera_path("orbit", opened.cameras, 1)[0]
    render_video(run4d, "orbit", tmp_path / "a.png", progress=False, time=0.3)
    want = (model.render([cam], None, bg, t=0.3)[0][0].detach().clamp(0, 1).numpy() * 255 + 0.5).astype(np.uint8)
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "a.png")), want)

    render_video(run4d, "fixed", tmp_path / "frames", progress=False, times="0:1:3")
    frames = [np.asarray(Image.open(tmp_path / "frames" / f"frame_{i:05d}.png")) for i in range(3)]
    first = opened.cameras[0]
    for f, t in zip(frames, (0.0, 0.5, 1.0)):
        want = (model.render([first], None, bg, t=t)[0][0].detach().clamp(0, 1).numpy() * 255 + 0.5).astype(np.uint8)
        np.testing.assert_array_equal(f, want)
    assert not np.array_equal(frames[0], frames[2])  # a still camera, a moving scene
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "frames"]


def test_render_along_the_dataset_replays_each_view_at_its_time(run4d, tmp_path):
    from PIL import Image

    opened = Run.open(run4d)
    model, bg = opened.load_model(), opened.background()
    render_video(run4d, "dataset", tmp_path / "replay", progress=False)
    frames = opened.scene.frames_train
    assert len(list((tmp_path / "replay").iterdir())) == len(frames)
    for i in (0, len(frames) // 2, len(frames) - 1):
        want = model.render([frames[i].camera], None, bg, t=frames[i].time)[0][0].detach()
        got = np.asarray(Image.open(tmp_path / "replay" / f"frame_{i:05d}.png"))
        np.testing.assert_array_equal(got, (want.clamp(0, 1).numpy() * 255 + 0.5).astype(np.uint8))


def test_render_refusals_write_nothing(run4d, run3d, tmp_path):
    with pytest.raises(UsageError, match="outside"):
        render_video(run4d, "orbit", tmp_path / "a.png", progress=False, time=1.5)
    with pytest.raises(UsageError, match="one PNG holds one frame"):
        render_video(run4d, "orbit", tmp_path / "a.png", progress=False, times="0:1:4")
    with pytest.raises(UsageError, match="3D Gaussians, which do not change with time"):
        render_video(run3d, "orbit", tmp_path / "a.png", progress=False, time=0.5)
    with pytest.raises(OutputError, match="must end in"):
        render_video(run4d, "orbit", tmp_path / "a.gif", progress=False, time=0.5)
    assert list(tmp_path.iterdir()) == []


def test_4d_exports_write_view_sidecars_like_3d_ones(run4d, tmp_path):
    """--format ply4d and each frame of a --times sequence get FILE.cameras.json / FILE.view.json (the run's
    training cameras; a ply4d file's own carried over); --no-view-sidecars writes none."""
    from recon.export.view_sidecar import read_view_sidecar, sidecar_paths

    cams = Run.open(run4d).cameras
    m = tmp_path / "m.ply"
    report = run_export(ExportConfig(input=run4d, out=m, format="ply4d", quiet=True))
    assert any(n.startswith("view sidecars") for n in report.notes), report.notes
    back = read_view_sidecar(m)
    assert len(back.cameras) == len(cams) and np.allclose(back.cameras[0].world_to_cam_numpy(),
                                                          cams[0].world_to_cam_numpy(), atol=1e-9)
    sidecar_paths(tmp_path / "n.ply")[0].write_text("[]")
    with pytest.raises(FileExistsError, match=r"n\.ply\.cameras\.json"):  # refused before any work
        run_export(ExportConfig(input=run4d, out=tmp_path / "n.ply", format="ply4d", quiet=True))
    assert not (tmp_path / "n.ply").exists()
    seq = tmp_path / "seq"
    report = run_export(ExportConfig(input=m, out=seq, times="0:1:2", format="spz", quiet=True))  # carried over
    assert any("view sidecars beside each frame" in n for n in report.notes), report.notes
    for frame in read_sequence(seq).frames:
        side = read_view_sidecar(seq / frame.file)
        assert len(side.cameras) == len(cams) and np.allclose(side.up, back.up)
        assert np.allclose(side.cameras[1].world_to_cam_numpy(), cams[1].world_to_cam_numpy(), atol=1e-6)
    assert sorted(p.name for p in seq.iterdir()) == sorted(
        ["manifest.json"] + [n for f in read_sequence(seq).frames
                             for n in (f.file, f.file + ".cameras.json", f.file + ".view.json")])
    off = tmp_path / "off"
    run_export(ExportConfig(input=run4d, out=off, times="0:1:2", quiet=True, view_sidecars=False))
    assert sorted(p.name for p in off.iterdir()) == ["frame_00000.ply", "frame_00001.ply", "manifest.json"]
    run_export(ExportConfig(input=run4d, out=tmp_path / "o.ply", format="ply4d", quiet=True, view_sidecars=False))
    assert not any(p.exists() for p in sidecar_paths(tmp_path / "o.ply"))
