"""Floater removal (recon/run/floaters.py): Gaussians whose blending weight stays below the threshold in every
training view go (outside every frustum, hidden behind an opaque wall, too faint); the visible ones stay."""

import math
from pathlib import Path

import numpy as np
import pytest

from rasterizer.camera import Camera
from recon.core.splat_data import SplatData
from recon.run.floaters import max_blend_weights, remove_floaters


def cameras():
    """Three 32 x 32 cameras near the origin looking down +z (OpenCV)."""
    K = np.array([[30.0, 0, 16], [0, 30.0, 16], [0, 0, 1]])
    out = []
    for dx in (-0.2, 0.0, 0.2):
        w2c = np.eye(4)
        w2c[0, 3] = -dx
        out.append(Camera.from_arrays(w2c, K, 32, 32))
    return out


def gaussians(means, scale, opacity):
    n = len(means)
    logit = math.log(opacity / (1 - opacity))
    return dict(means=np.asarray(means, np.float32), quats=np.tile([1.0, 0, 0, 0], (n, 1)).astype(np.float32),
                log_scales=np.full((n, 3), math.log(scale), np.float32),
                logit_opacities=np.full(n, logit, np.float32), sh=np.full((n, 1, 3), 0.5, np.float32))


def planted_scene():
    """(SplatData, groups: name -> index array): a visible front layer and an opaque wall, with invisible
    Gaussians planted behind the wall, behind the cameras and too faint to matter."""
    rng = np.random.default_rng(0)
    g = np.linspace(-2.0, 2.0, 16)
    wall = np.array([[x, y, 3.0] for x in g for y in g])
    parts = {
        "front": gaussians(rng.uniform([-0.8, -0.8, 1.8], [0.8, 0.8, 2.2], (20, 3)), 0.06, 0.7),
        "wall": gaussians(wall, 0.2, 0.99),
        "behind_wall": gaussians(rng.uniform([-0.8, -0.8, 5.0], [0.8, 0.8, 6.0], (30, 3)), 0.08, 0.9),
        "behind_cameras": gaussians(rng.uniform([-1, -1, -3.0], [1, 1, -1.0], (30, 3)), 0.1, 0.9),
        "faint": gaussians(rng.uniform([-0.8, -0.8, 1.5], [0.8, 0.8, 2.5], (30, 3)), 0.06, 0.01),
    }
    groups, start = {}, 0
    for name, p in parts.items():
        groups[name] = np.arange(start, start + len(p["means"]))
        start += len(p["means"])
    cat = {k: np.concatenate([p[k] for p in parts.values()]) for k in parts["front"]}
    return SplatData(**cat), groups


def test_planted_invisible_gaussians_go_visible_stay():
    data, groups = planted_scene()
    weight = max_blend_weights(data, cameras())
    result = remove_floaters(data, cameras(), threshold=0.05)
    keep = weight >= 0.05
    for name in ("behind_wall", "behind_cameras", "faint"):
        assert not keep[groups[name]].any(), f"{name}: kept {keep[groups[name]].sum()} (weights {weight[groups[name]].max():.3f})"
    assert keep[groups["front"]].all(), f"front: weights {np.sort(weight[groups['front']])[:3]}"
    seen = groups["wall"][np.abs(data.means[groups["wall"], :2]).max(1) < 1.2]  # the wall inside every frustum
    assert keep[seen].mean() > 0.9
    assert result.removed == int((~keep).sum()) and len(result.kept) == int(keep.sum())
    assert "removed" in result.note() and "0.05" in result.note()
    # the front layer's peak weight is about its opacity (nothing in front of it)
    assert np.all(weight[groups["front"]] > 0.4) and np.all(weight[groups["front"]] <= 0.7 + 1e-6)


def test_bad_threshold_and_no_cameras_are_one_line():
    data, _ = planted_scene()
    with pytest.raises(ValueError, match="--floater-threshold"):
        remove_floaters(data, cameras(), threshold=1.5)
    with pytest.raises(ValueError, match="training cameras"):
        remove_floaters(data, [], threshold=0.05)


def test_export_of_a_file_refuses_remove_floaters(tmp_path):
    from recon.commands.export import ExportConfig, run_export
    from recon.core.errors import UsageError
    from recon.export import write_splats

    data, _ = planted_scene()
    src = tmp_path / "in.ply"
    write_splats(src, data)
    with pytest.raises(UsageError, match="--remove-floaters"):
        run_export(ExportConfig(input=src, out=tmp_path / "out.ply", remove_floaters=True, quiet=True))
    assert not (tmp_path / "out.ply").exists()


# ------------------------------------------------------------------------ splatforge train --remove-floaters


def floater_cfg(out, **kw):
    """A tiny procedural training run: 60 steps at data factor 4 (about 3 s; threshold 0.02 removed 276 of
    2,769 Gaussians at +0.003 dB)."""
    from recon.training.trainer import TrainConfig

    base = dict(out=out, steps=60, data_factor=4, save_every=0, progress=False, remove_floaters=True,
                floater_threshold=0.02, device="cpu")
    base.update(kw)
    return TrainConfig(**base)


def test_train_remove_floaters_cleans_splats_and_keeps_the_checkpoint(tmp_path, capsys):
    import json

    from recon.commands.train import train
    from recon.export import read_splats
    from recon.outputs import files as rf

    out = tmp_path / "run"
    train(floater_cfg(out))
    log = capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())
    f = metrics["floaters"]
    assert f["removed"] > 0 and f["kept"] > f["removed"] and f["threshold"] == 0.02, f
    assert f["kept"] + f["removed"] == metrics["num_gaussians"]
    assert len(read_splats(out / "splats.ply")) == f["kept"]
    assert f["psnr_before"] == pytest.approx(metrics["test"]["psnr"], abs=0.05)  # the model as trained
    assert f["psnr_after"] is not None and f["psnr_after"] > f["psnr_before"] - 0.5
    step, payload = rf.load_latest_checkpoint(out)
    assert step == 60 and f["uncleaned_checkpoint"] == f"checkpoints/{rf.checkpoint_path(out, 60).name}"
    assert len(payload["model"]["params"]["means"]) == metrics["num_gaussians"]  # nothing lost
    assert "floaters: removed" in log and "dB before" in log and "after floater removal" in log
    assert not list(out.rglob(".*.tmp"))
    # the same command again resumes at the end and cleans the trained model again: the same result
    train(floater_cfg(out))
    again = json.loads((out / "metrics.json").read_text())["floaters"]
    assert again["kept"] == f["kept"] and again["removed"] == f["removed"]


def test_train_remove_floaters_bad_threshold_and_4d_are_one_line(tmp_path, capsys):
    from recon.commands.train import train

    for cfg, what in ((floater_cfg(tmp_path / "a", floater_threshold=1.5), "--floater-threshold 1.5"),
                      (floater_cfg(tmp_path / "b", method="4dgs", data=Path("procedural-4d")), "--remove-floaters")):
        with pytest.raises(SystemExit):
            train(cfg)
        err = capsys.readouterr().err.strip()
        assert what in err and len(err.splitlines()) == 1, err
        assert not (cfg.out / "splats.ply").exists()


def test_train_remove_floaters_shows_the_cleaned_model_in_the_live_viewer(tmp_path, monkeypatch, capsys):
    import json

    import recon.commands.train as train_cmd
    from viewer.training import TrainingViewer

    shown, handed, cleaned = [], [], []

    class Recording(TrainingViewer):
        def show_splats(self, data):
            handed.append(data)
            super().show_splats(data)

        def stop(self):  # what the viewer shows when training (and cleaning) is over
            if self.viewer is not None:
                shown.append(len(self.viewer.scene.splats))
            super().stop()

    def recording_clean_run(cfg, metrics, log=print):
        metrics, kept = clean_run(cfg, metrics, log)
        cleaned.append(kept)
        return metrics, kept

    from recon.commands.train_floaters import clean_run

    monkeypatch.setattr(train_cmd, "make_viewer_hook",
                        lambda cfg, log=print: Recording(every=1000, port=0, verbose=False))
    monkeypatch.setattr("recon.commands.train_floaters.clean_run", recording_clean_run)
    out = tmp_path / "run"
    train_cmd.train(floater_cfg(out, viewer=True, viewer_port=0, viewer_keep_open=False))
    kept = json.loads((out / "metrics.json").read_text())["floaters"]["kept"]
    assert shown == [kept]
    assert len(handed) == 1 and handed[0] is cleaned[0]  # the cleaned model in memory, not reread from disk
