"""A corpus of bad command lines and hostile run folders: each must end in one line on stderr naming the
flag or file and what to do, with the stated exit status and no traceback (tests/corpus/test_bad_flags.py).

A case builds its argv in a fresh tmp folder (setting up files there first when it needs them), may
simulate an operating-system failure with ``patch`` (read-only file system, full disk: running as root,
chmod cannot make a folder unwritable), and may check the folder afterwards with ``after`` (nothing
overwritten, no temporary left, no code run).
"""

from __future__ import annotations

import errno
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
import yaml

from recon.outputs import files as rf
from recon.export import SplatData, random_splats, write_splats
from recon.training.trainer import TrainConfig
from recon.training.train_run import train_model

READ_ONLY = "read_only_place"  # folders whose name holds this act as if on a read-only file system
# small, fast training flags (procedural scene at a quarter of its size, few random Gaussians)
TINY = ["--data", "procedural", "--data-factor", "4", "--init-num-random", "300", "--no-progress"]


@dataclass(frozen=True)
class BadFlagCase:
    name: str
    argv: Callable[[Path], list]
    """builds the command line (without the program name) in the tmp folder given"""
    status: int
    """expected exit status"""
    message: str
    """regex the one line on stderr must match"""
    patch: Callable[[pytest.MonkeyPatch], None] | None = None
    """simulates an operating-system failure for the call"""
    after: Callable[[Path], None] | None = None
    """checks on the tmp folder after the call"""


# ------------------------------------------------------------------------------------------ set-ups


def as_saved(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with ``out`` absolute, as training writes it to config.yaml."""
    return replace(cfg, out=Path(cfg.out).resolve())


def a_file(tmp: Path) -> Path:
    path = tmp / "file"
    path.write_text("not a folder")
    return path


def a_folder(tmp: Path, name: str) -> Path:
    (tmp / name).mkdir()
    return tmp / name


def splat_file(tmp: Path, data: SplatData | None = None) -> Path:
    path = tmp / "model.ply"
    write_splats(path, data if data is not None else random_splats(200, sh_degree=1, extent=1.0), force=True)
    return path


def run_folder(tmp: Path, data: str = "procedural") -> Path:
    """A finished-looking run folder without training: config.yaml (procedural scene) and splats.ply."""
    run = tmp / "run"
    run.mkdir()
    rf.write_config(run, as_saved(TrainConfig(data=Path(data), out=run, data_factor=4)))
    write_splats(run / "splats.ply", random_splats(300, sh_degree=1, extent=0.8), force=True)
    return run


def ply4d_file(tmp: Path, name: str = "model4d.ply") -> Path:
    """A random 4D model (ply4d, 200 Gaussians in front of the procedural scenes' cameras)."""
    from recon.export import write_ply4d
    from recon.core.spacetime_data import SpaceTimeData

    rng = np.random.default_rng(0)
    n = 200
    path = tmp / name
    write_ply4d(path, SpaceTimeData(np.c_[rng.uniform(-0.5, 0.5, (n, 3)), rng.uniform(0, 1, (n, 1))],
                                    np.log(rng.uniform(0.02, 0.3, (n, 4))), rng.normal(size=(n, 4)),
                                    rng.normal(size=(n, 4)), rng.normal(size=n), rng.normal(size=(n, 4, 3))))
    return path


def run4d_folder(tmp: Path) -> Path:
    """A finished-looking 4dgs run folder without training: config.yaml (procedural-4d) and splats4d.ply."""
    run = tmp / "run4d"
    run.mkdir()
    rf.write_config(run, as_saved(TrainConfig(data=Path("procedural-4d"), out=run, data_factor=4, method="4dgs")))
    ply4d_file(run, rf.SPLATS4D_FILE)
    return run


def tiny_config(out: Path, **kw) -> TrainConfig:
    """The TrainConfig that ``train *TINY --out OUT`` gives (plus ``kw``)."""
    return TrainConfig(out=out, data_factor=4, init_num_random=300, progress=False, **kw)


def trained_run(tmp: Path, steps: int) -> Path:
    out = tmp / "run"
    train_model(tiny_config(out, steps=steps, save_every=steps), log=lambda *a: None)
    return out


def config_file(tmp: Path, **fields) -> Path:
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump({"data": "procedural", "out": str(tmp / "run"), **fields}))
    return path


class CodeRunningPickle:
    """Unpickling this runs code (creates the file ``marker``): what a crafted checkpoint would do."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def folder_with_checkpoint(tmp: Path, payload) -> Path:
    """A run folder of the tiny config holding only checkpoints/ckpt_00002.pt = ``payload``."""
    out = tmp / "run"
    out.mkdir()
    rf.write_config(out, as_saved(tiny_config(out, steps=4)))
    (out / rf.CHECKPOINT_DIR).mkdir()
    torch.save(payload, rf.checkpoint_path(out, 2))
    return out


def nonfinite_splats(tmp: Path) -> Path:
    data = random_splats(50, sh_degree=0, extent=1.0)
    data.means[:] = np.nan
    # written raw: write_splats / write_ply drop or refuse non-finite splats
    from recon.export.ply import write_ply_stream

    path = tmp / "nan.ply"
    with open(path, "wb") as f:
        write_ply_stream(f, data)
    return path


# ------------------------------------------------------------------------------------------ patches


def read_only_file_system(monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating files in a folder whose path holds READ_ONLY fails with EROFS."""
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kw):
        if dir is not None and READ_ONLY in str(dir):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.path.join(str(dir), "x"))
        return real(*args, dir=dir, **kw)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def disk_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every flush of a finished file to disk fails with ENOSPC (as a full disk reports it)."""
    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)


# ------------------------------------------------------------------------------------------ checks


def no_temporaries(tmp: Path) -> None:
    left = [p for p in tmp.rglob("*") if p.name.endswith(".tmp")]
    assert not left, left


def marker_absent(tmp: Path) -> None:
    assert not (tmp / "pwned").exists(), "loading the checkpoint ran code"


def unchanged(name: str, text: str) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        assert (tmp / name).read_text() == text

    return check


def absent(name: str) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        assert not (tmp / name).exists(), f"{name} was written"

    return check


def saved_steps(expected: int) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        assert rf.read_config_dict(tmp / "run" / rf.CONFIG_FILE)["steps"] == expected

    return check


def _existing_video(tmp: Path) -> list:
    run = run_folder(tmp)
    (tmp / "video.mp4").write_text("an earlier video")
    return ["render", "--run", run, "--out", tmp / "video.mp4", "--frames", 2, "--no-progress"]


def _other_config_no_checkpoints(tmp: Path) -> list:
    out = tmp / "run"
    out.mkdir()
    rf.write_config(out, as_saved(tiny_config(out, steps=4, seed=7)))
    (out / "metrics.json").write_text("finished run")
    return ["train", *TINY, "--steps", 4, "--out", out]


def _changed_hyper_parameter(tmp: Path) -> list:
    out = tmp / "run"
    out.mkdir()
    rf.write_config(out, as_saved(tiny_config(out, steps=4)))
    return ["train", *TINY, "--steps", 4, "--out", out, "--adc.grow-grad2d", "0.0003"]


def image_model(tmp: Path, cut: int | None = None, version: int | None = None) -> Path:
    """A tiny .gimg model (`splatforge image`), optionally cut to ``cut`` bytes or stamped with ``version``."""
    import struct

    from recon.image.gimg import encode_gimg
    from recon.image.model import ImageGaussians

    g = torch.Generator().manual_seed(0)
    model = ImageGaussians(torch.rand(20, 2, generator=g) * 2 - 1, torch.full((20, 3), 0.1), torch.rand(20, 3), 16, 12)
    data = bytearray(encode_gimg(model))
    if version is not None:
        struct.pack_into("<H", data, 8, version)
    path = tmp / "m.gimg"
    path.write_bytes(bytes(data[:cut]))
    return path


def text_file(tmp: Path, name: str) -> Path:
    path = tmp / name
    path.write_text("not pixels\n")
    return path


def procedural_blocks(tmp: Path) -> Path:
    """blocks.json of the procedural scene at full size (TINY trains it at data factor 4: another dataset)."""
    from recon.distributed.partition import PartitionConfig, partition_scene, write_partition
    from recon.training.trainer import load_training_scene

    scene = load_training_scene(TrainConfig(data=Path("procedural")))
    path = tmp / "blocks.json"
    write_partition(partition_scene(scene, PartitionConfig(blocks_xy="1x1"), "procedural"), path, scene, plot=False)
    return path


# ------------------------------------------------------------------------------------------ cases

CASES = [
    # the command line itself
    BadFlagCase("typo-subcommand", lambda t: ["trian", "--data", "procedural"], 2,
                r"unknown command 'trian'; did you mean 'train'\?"),
    BadFlagCase("unknown-subcommand", lambda t: ["xyzzy"], 2, r"unknown command 'xyzzy'; the commands are .*train"),
    # train: flags and config files
    BadFlagCase("train-sh-degree-negative", lambda t: ["train", *TINY, "--sh-degree", -1, "--out", t / "run"], 2,
                r"^splatforge train: error: --sh-degree -1: must be 0\.\.3$"),
    BadFlagCase("train-steps-negative", lambda t: ["train", *TINY, "--steps", -3, "--out", t / "run"], 2,
                r"--steps -3: must be >= 0"),
    BadFlagCase("train-viewer-port-out-of-range", lambda t: ["train", *TINY, "--viewer-port", 70000, "--out", t / "r"],
                2, r"--viewer-port 70000: must be 0\.\.65535"),
    BadFlagCase("config-strategy-bogus",
                lambda t: ["train", "--config", config_file(t, strategy="bogus"), "--steps", 2], 2,
                r"--config .*config\.yaml: strategy: 'bogus' is not one of adc, mcmc"),
    BadFlagCase("config-steps-not-a-number",
                lambda t: ["train", "--config", config_file(t, steps="abc")], 2,
                r"--config .*config\.yaml: steps: 'abc' is not an integer"),
    BadFlagCase("config-background-wrong-type",
                lambda t: ["train", "--config", config_file(t, background=3)], 2,
                r"background: 3 is not one of auto, white, black, random"),
    BadFlagCase("config-antialiased-not-bool",
                lambda t: ["train", "--config", config_file(t, antialiased="yes")], 2,
                r"antialiased: 'yes' is not true or false"),
    BadFlagCase("config-section-value",
                lambda t: ["train", "--config", config_file(t, adc={"grow_grad2d": "abc"})], 2,
                r"--config .*config\.yaml: adc\.grow_grad2d: 'abc' is not a number"),
    BadFlagCase("config-section-unknown-field",
                lambda t: ["train", "--config", config_file(t, mcmc={"bogus": 1})], 2,
                r"unknown config field\(s\) \['mcmc\.bogus'\] for MCMCConfig"),
    BadFlagCase("train-section-range",
                lambda t: ["train", *TINY, "--adc.refine-every", 0, "--out", t / "run"], 2,
                r"--adc\.refine-every 0: must be >= 1"),
    BadFlagCase("train-lr-negative",
                lambda t: ["train", *TINY, "--lr.means=-1", "--out", t / "run"], 2,
                r"--lr\.means -1\.0: must be >= 0"),
    # train: the run folder
    BadFlagCase("train-out-under-a-file",
                lambda t: ["train", *TINY, "--out", a_file(t) / "run"], 2,
                r"--out .*file/run: cannot write there \(Not a directory\)"),
    BadFlagCase("train-out-is-a-file",
                lambda t: ["train", *TINY, "--out", a_file(t)], 2,
                r"--out .*file: exists and is not a folder"),
    BadFlagCase("train-out-read-only", lambda t: ["train", *TINY, "--out", t / READ_ONLY / "run"], 2,
                r"--out .*: cannot write there \(Read-only file system\); the file system is read-only",
                patch=read_only_file_system),
    BadFlagCase("train-disk-full", lambda t: ["train", *TINY, "--steps", 2, "--out", t / "run"], 2,
                r"run/config\.yaml: No space left on device \(the disk is full: free some space",
                patch=disk_full, after=no_temporaries),
    BadFlagCase("train-steps-below-checkpoint",
                lambda t: ["train", *TINY, "--steps", 2, "--out", trained_run(t, 4)], 2,
                r"--steps 2: .*run already holds this run at step 4; give --steps 4 or more",
                after=saved_steps(4)),
    BadFlagCase("train-other-run-without-checkpoints", _other_config_no_checkpoints, 2,
                r"config\.yaml: this run directory holds a run with a different configuration \(seed: saved 7, now 0\)",
                after=unchanged("run/metrics.json", "finished run")),
    BadFlagCase("train-changed-hyper-parameter", _changed_hyper_parameter, 2,
                r"config\.yaml: this run directory holds a run with a different configuration "
                r"\(adc\.grow_grad2d: saved 0\.0002, now 0\.0003\)"),
    BadFlagCase("train-checkpoint-runs-code",
                lambda t: ["train", *TINY, "--steps", 4, "--out",
                           folder_with_checkpoint(t, {"step": 2, "x": CodeRunningPickle(t / "pwned")})], 2,
                r"ckpt_00002\.pt: refusing to load this checkpoint: it holds pickled Python objects",
                after=marker_absent),
    BadFlagCase("train-checkpoint-lacks-keys",
                lambda t: ["train", *TINY, "--steps", 4, "--out", folder_with_checkpoint(t, {"step": 2, "model": {}})],
                2, r"ckpt_00002\.pt: checkpoint lacks strategy_state, rng\.torch, rng\.view, history\|losses, train_seconds"),
    BadFlagCase("train-checkpoint-not-a-mapping",
                lambda t: ["train", *TINY, "--steps", 4, "--out", folder_with_checkpoint(t, [1, 2, 3])], 2,
                r"ckpt_00002\.pt: not a splatforge checkpoint \(holds a list"),
    # eval
    BadFlagCase("eval-out-under-a-file",
                lambda t: ["eval", "--splats", splat_file(t), "--data", "procedural", "--out", t / "model.ply" / "ev"],
                2, r"--out .*model\.ply/ev: (cannot write there|exists and is not a folder)"),
    BadFlagCase("eval-out-read-only",
                lambda t: ["eval", "--splats", splat_file(t), "--data", "procedural", "--out", t / READ_ONLY], 2,
                r"--out .*: cannot write there \(Read-only file system\)", patch=read_only_file_system),
    BadFlagCase("eval-run-dataset-gone", lambda t: ["eval", "--run", run_folder(t, data=str(t / "moved_dataset"))],
                2, r"moved_dataset: the dataset named in .*config\.yaml is not there; give its folder with --data"),
    # render
    BadFlagCase("render-frames-zero",
                lambda t: ["render", "--run", run_folder(t), "--frames", 0, "--out", t / "v.mp4"], 2,
                r"--frames 0: must be >= 1", after=absent("v.mp4")),
    BadFlagCase("render-fps-negative",
                lambda t: ["render", "--run", run_folder(t), "--fps", -5, "--out", t / "v.mp4"], 2,
                r"--fps -5: must be > 0", after=absent("v.mp4")),
    BadFlagCase("render-out-exists", _existing_video, 2, r"--out .*video\.mp4: already exists; pass --force",
                after=unchanged("video.mp4", "an earlier video")),
    BadFlagCase("render-out-gif",
                lambda t: ["render", "--run", run_folder(t), "--out", t / "frame.gif"], 2,
                r"--out .*frame\.gif: must end in \.mp4 or \.png"),
    BadFlagCase("render-out-is-a-folder",
                lambda t: ["render", "--run", run_folder(t), "--out", t], 2,
                r"--out .*: is a folder holding other files than frame_NNNNN\.png"),
    BadFlagCase("render-out-read-only",
                lambda t: ["render", "--run", run_folder(t), "--out", t / READ_ONLY / "v.mp4"], 2,
                r"cannot write there \(Read-only file system\)", patch=read_only_file_system),
    BadFlagCase("render-dataset-gone",
                lambda t: ["render", "--run", run_folder(t, data=str(t / "moved_dataset")), "--out", t / "v.mp4"], 2,
                r"the dataset named in .*config\.yaml is not there; give its folder with --data"),
    # export (its errors exit with status 2, like every command)
    BadFlagCase("export-out-read-only",
                lambda t: ["export", splat_file(t), "--out", t / READ_ONLY / "m.spz"], 2,
                r"^splatforge export: error: --out .*: cannot write there \(Read-only file system\)",
                patch=read_only_file_system),
    BadFlagCase("export-disk-full", lambda t: ["export", splat_file(t), "--out", t / "m.spz"], 2,
                r"m\.spz: No space left on device \(the disk is full", patch=disk_full, after=no_temporaries),
    BadFlagCase("export-out-is-a-folder", lambda t: ["export", splat_file(t), "--out", a_folder(t, "dir.spz")], 2,
                r"--out .*dir\.spz: is a folder; give a file path"),
    BadFlagCase("export-sh-degree-negative",
                lambda t: ["export", splat_file(t), "--out", t / "m.spz", "--sh-degree", -1], 2,
                r"--sh-degree must be 0\.\.3"),
    # 4D models where only 3D fits, and the reverse (nothing written)
    BadFlagCase("export-4d-run-without-time", lambda t: ["export", run4d_folder(t), "--out", t / "m.splat"], 2,
                r"run4d: holds a 4D model \(4D Gaussians\), which a 3D \.splat file cannot store; give --time T",
                after=absent("m.splat")),
    BadFlagCase("export-4d-file-to-spz-without-time", lambda t: ["export", ply4d_file(t), "--out", t / "m.spz"], 2,
                r"model4d\.ply: holds a 4D model .*--format ply4d", after=absent("m.spz")),
    BadFlagCase("export-time-on-a-3d-file", lambda t: ["export", splat_file(t), "--out", t / "s.ply", "--time", 0.5],
                2, r"--time / --times: .*model\.ply holds 3D Gaussians, which do not change with time",
                after=absent("s.ply")),
    BadFlagCase("export-ply4d-of-a-3d-run", lambda t: ["export", run_folder(t), "--out", t / "m4.ply", "--format",
                                                       "ply4d"], 2,
                r"splats\.ply: holds 3D Gaussians; --format ply4d stores 4D models", after=absent("m4.ply")),
    BadFlagCase("export-time-outside", lambda t: ["export", ply4d_file(t), "--out", t / "s.ply", "--time", 1.5], 2,
                r"--time 1\.5: outside \[0, 1\]", after=absent("s.ply")),
    BadFlagCase("export-times-malformed", lambda t: ["export", ply4d_file(t), "--out", t / "seq", "--times", "0:1"],
                2, r"--times '0:1': expected START:END:COUNT", after=absent("seq")),
    BadFlagCase("eval-4d-file-for-a-3d-run", lambda t: ["eval", "--run", run_folder(t), "--splats", ply4d_file(t)],
                2, r"model4d\.ply: a 4D Gaussian \(ply4d\) file cannot stand for the 3dgs run"),
    BadFlagCase("render-time-outside", lambda t: ["render", "--run", run4d_folder(t), "--time", 2, "--out",
                                                  t / "a.png"], 2, r"--time 2\.0: outside \[0, 1\]",
                after=absent("a.png")),
    BadFlagCase("render-time-on-a-3d-run", lambda t: ["render", "--run", run_folder(t), "--time", 0.5, "--out",
                                                      t / "a.png", "--no-progress"], 2,
                r"--time / --times: the model holds 3D Gaussians", after=absent("a.png")),
    BadFlagCase("view-time-outside", lambda t: ["view", ply4d_file(t), "--time", 1.5, "--exit-after", 0], 2,
                r"--time 1\.5: outside \[0, 1\]"),
    BadFlagCase("view-time-on-a-3d-file", lambda t: ["view", splat_file(t), "--time", 0.5, "--exit-after", 0], 2,
                r"--time / --play: .*model\.ply holds 3D Gaussians"),
    # image (images as 2D Gaussians)
    BadFlagCase("image-fit-not-an-image",
                lambda t: ["image", "fit", text_file(t, "a.png"), "--out", t / "a.gimg", "--steps", 1], 2,
                r"a\.png: not an image file"),
    BadFlagCase("image-fit-out-read-only",
                lambda t: ["image", "fit", text_file(t, "a.png"), "--out", t / READ_ONLY / "a.gimg"], 2,
                r"cannot write there \(Read-only file system\)", patch=read_only_file_system),
    BadFlagCase("image-render-scale-zero", lambda t: ["image", "render", image_model(t), "--scale", 0, "--out",
                                                      t / "r.png"], 2, r"--scale 0\.0: must be a positive number"),
    BadFlagCase("image-render-scale-negative", lambda t: ["image", "render", image_model(t), "--scale", -2, "--out",
                                                          t / "r.png"], 2, r"--scale -2\.0: must be a positive number"),
    BadFlagCase("image-render-too-large",
                lambda t: ["image", "render", image_model(t), "--size", "200000x200000", "--out", t / "r.png"], 2,
                r"200000x200000 x 3 channels needs about .* GiB .* over the --max-memory-gb 1 limit"),
    BadFlagCase("image-gimg-truncated",
                lambda t: ["image", "render", image_model(t, cut=100), "--out", t / "r.png"], 2,
                r"m\.gimg: truncated"),
    BadFlagCase("image-gimg-future-version",
                lambda t: ["image", "render", image_model(t, version=9), "--out", t / "r.png"], 2,
                r"m\.gimg: \.gimg format version 9 was written by a newer splatforge; this splatforge reads format "
                r"version 1"),
    # view
    BadFlagCase("view-port-out-of-range", lambda t: ["view", splat_file(t), "--port", 70000, "--exit-after", 1], 2,
                r"--port 70000: must be 0\.\.65535"),
    BadFlagCase("view-host-unresolvable",
                lambda t: ["view", splat_file(t), "--host", "no-such-host.invalid", "--exit-after", 1], 2,
                r"--host no-such-host\.invalid: cannot resolve this name"),
    BadFlagCase("view-host-unresolvable-strict",
                lambda t: ["view", splat_file(t), "--host", "no-such-host.invalid", "--strict-port", "--exit-after", 1],
                2, r"--host no-such-host\.invalid: cannot resolve this name"),
    BadFlagCase("view-all-splats-nonfinite", lambda t: ["view", nonfinite_splats(t), "--exit-after", 1], 2,
                r"nan\.ply: all 50 splats hold NaN/Inf values; there is nothing to show"),
    # block training (recon/distributed): partition flags, blocks files, launcher flags (refused before torchrun)
    BadFlagCase("partition-blocks-xy-malformed",
                lambda t: ["partition", "--data", "procedural", "--blocks-xy", "3by2", "--out", t / "b.json"], 2,
                r"^splatforge partition: error: --blocks-xy 3by2: write AxB, e\.g\. 3x2$"),
    BadFlagCase("partition-too-few-images",
                lambda t: ["partition", "--data", "procedural", "--blocks-xy", "1x1", "--min-images-per-block", 1000,
                           "--out", t / "b.json"], 2,
                r"block 0 has 40 images \(at least 1000 needed: --min-images-per-block\)", after=absent("b.json")),
    BadFlagCase("train-blocks-missing-file",
                lambda t: ["train", *TINY, "--blocks", t / "nope.json", "--out", t / "run", "--workers", 2], 2,
                r"--blocks .*nope\.json: no such file; make one with `splatforge partition"),
    BadFlagCase("train-blocks-other-dataset",
                lambda t: ["train", *TINY, "--blocks", procedural_blocks(t), "--out", t / "run"], 2,
                r"blocks\.json: this partition was made from another dataset"),
    BadFlagCase("train-blocks-workers-zero", lambda t: ["train", *TINY, "--blocks", "auto", "--workers", 0], 2,
                r"--workers 0: must be >= 1"),
    BadFlagCase("train-blocks-finetune-negative",
                lambda t: ["train", *TINY, "--blocks", "auto", "--finetune-steps", -1, "--out", t / "run"], 2,
                r"--finetune-steps -1: must be >= 0"),
]
