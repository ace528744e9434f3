"""Run folders: checkpoints never run code, a moved folder or another name for it resumes, config.yaml
paths work from another working directory, one writer at a time (lock with PID and host, a stale lock
taken over), temporaries of a killed write removed. Trainings are tiny (procedural scene, a few steps)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from recon.outputs import files as rf
from recon.cli import main
from recon.core.errors import CheckpointError
from recon.training.trainer import TrainConfig
from recon.training.train_run import train_model
from tests.corpus.bad_flags import CodeRunningPickle

TINY = ["--data", "procedural", "--data-factor", "4", "--init-num-random", "300", "--no-progress"]


def tiny(out, **kw) -> TrainConfig:
    return TrainConfig(out=Path(out), data_factor=4, init_num_random=300, progress=False, **kw)


def train(cfg: TrainConfig) -> list[str]:
    """Train ``cfg``; returns what the run logged."""
    said = []
    train_model(cfg, log=lambda *a: said.append(" ".join(map(str, a))))
    return said




def test_checkpoints_hold_only_tensors_and_plain_data(tmp_path):
    train(tiny(tmp_path / "run", steps=3, save_every=3))
    for _, path in rf.list_checkpoints(tmp_path / "run"):
        payload = torch.load(path, map_location="cpu", weights_only=True)  # raises on any other object
        assert payload["step"] == 3


def test_crafted_checkpoint_is_refused_without_running_code(tmp_path):
    out = tmp_path / "run"
    (out / rf.CHECKPOINT_DIR).mkdir(parents=True)
    torch.save({"step": 5, "model": CodeRunningPickle(tmp_path / "pwned")}, rf.checkpoint_path(out, 5))
    with pytest.raises(CheckpointError, match=r"ckpt_00005\.pt: refusing to load"):
        rf.load_latest_checkpoint(out)
    assert not (tmp_path / "pwned").exists()


def test_damaged_newest_checkpoint_falls_back_to_the_previous(tmp_path):
    out = tmp_path / "run"
    train(tiny(out, steps=4, save_every=2))
    rf.checkpoint_path(out, 4).write_bytes(b"truncated")
    step, payload = rf.load_latest_checkpoint(out, ("step", "model"))
    assert step == 2 and payload["step"] == 2


def test_moved_run_folder_resumes(tmp_path):
    train(tiny(tmp_path / "a", steps=3, save_every=3))
    shutil.move(tmp_path / "a", tmp_path / "b")
    said = train(tiny(tmp_path / "b", steps=4, save_every=4))
    assert any("from step 3" in s for s in said), said
    assert rf.read_config_dict(tmp_path / "b" / rf.CONFIG_FILE)["out"] == str(tmp_path / "b")


def test_relative_and_absolute_names_of_a_run_folder_resume(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    train(tiny("run", steps=3, save_every=3))
    said = train(tiny(tmp_path / "run", steps=4, save_every=4))
    assert any("from step 3" in s for s in said), said


def test_config_paths_work_from_another_working_directory(tmp_path, monkeypatch, capsys):
    from tests.recon.data.test_data_nerfstudio import make_dataset

    make_dataset(tmp_path / "scene")
    monkeypatch.chdir(tmp_path)
    main(["train", "--data", "scene", "--out", "run", "--steps", "2", "--init-num-random", "200", "--no-progress"])
    assert rf.read_config_dict(tmp_path / "run" / rf.CONFIG_FILE)["data"] == str(tmp_path / "scene")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    main(["eval", "--run", str(tmp_path / "run")])
    main(["render", "--run", str(tmp_path / "run"), "--frames", "2", "--out", "v.mp4", "--no-progress"])
    assert (tmp_path / "elsewhere" / "v.mp4").stat().st_size > 0
    # a dataset moved since: render and eval take --data
    shutil.move(tmp_path / "scene", tmp_path / "scene_moved")
    main(["render", "--run", str(tmp_path / "run"), "--data", str(tmp_path / "scene_moved"), "--frames", "2",
          "--out", "w.mp4", "--no-progress"])
    main(["eval", "--run", str(tmp_path / "run"), "--data", str(tmp_path / "scene_moved")])
    assert (tmp_path / "elsewhere" / "w.mp4").stat().st_size > 0
    capsys.readouterr()


def test_render_force_overwrites(tmp_path, capsys):
    out = tmp_path / "run"
    train(tiny(out, steps=2))
    (tmp_path / "v.mp4").write_text("old")
    main(["render", "--run", str(out), "--frames", "2", "--out", str(tmp_path / "v.mp4"), "--no-progress",
          "--force"])
    assert (tmp_path / "v.mp4").read_bytes() != b"old"
    capsys.readouterr()


def test_lock_is_released_after_a_run(tmp_path):
    train(tiny(tmp_path / "run", steps=2))
    assert not (tmp_path / "run" / rf.LOCK_FILE).exists()


# a training that stops for good in its first checkpoint write (half written) until it is killed
PAUSE_IN_CHECKPOINT_WRITE = textwrap.dedent("""
    import os, sys, time
    real_fsync = os.fsync
    def fsync(fd):
        if "/checkpoints/.ckpt_" in os.readlink(f"/proc/self/fd/{fd}"):
            print("writing checkpoint", flush=True)
            time.sleep(300)
        real_fsync(fd)
    os.fsync = fsync
    from recon.cli import main
    main(sys.argv[1:])
""")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to find the file being written")
def test_second_writer_refused_then_killed_writer_leaves_nothing_in_the_way(tmp_path, capsys):
    """A training (subprocess) holds the folder: a second training is refused, naming its PID and host.
    Killed with SIGKILL in the middle of a checkpoint write, it leaves a stale lock and a temporary file;
    the next training takes the lock over, removes the temporary and runs to the end."""
    out = tmp_path / "run"
    args = ["train", *TINY, "--steps", "4", "--save-every", "2", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-c", PAUSE_IN_CHECKPOINT_WRITE, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=os.environ.copy())
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "writing checkpoint" in line:
                break
        assert proc.poll() is None, "".join(seen)
        with pytest.raises(SystemExit) as exc:
            main(args)
        err = capsys.readouterr().err
        assert exc.value.code == 2
        assert f"another training (pid {proc.pid} on {socket.gethostname()}) is writing this run folder" in err, err
        assert len(err.strip().splitlines()) == 1, err
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    temporaries = list((out / rf.CHECKPOINT_DIR).glob(".ckpt_*.tmp"))
    assert temporaries and (out / rf.LOCK_FILE).exists() and not rf.list_checkpoints(out)
    main(args)
    printed = capsys.readouterr().out
    assert f"taking over the lock left by pid {proc.pid}" in printed, printed
    assert all(not p.exists() for p in temporaries) and "left by an interrupted write" in printed, printed
    assert [s for s, _ in rf.list_checkpoints(out)] == [2, 4]
    assert (out / "metrics.json").is_file() and not (out / rf.LOCK_FILE).exists()


def test_file_system_without_locks_still_trains(tmp_path, monkeypatch):
    """flock refused (ENOLCK, as on some network file systems): the run goes on and says so."""
    import errno
    import fcntl

    def flock(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", flock)
    said = train(tiny(tmp_path / "run", steps=2))
    assert any("does not support locks" in s for s in said), said
    assert (tmp_path / "run" / "metrics.json").is_file() and not (tmp_path / "run" / rf.LOCK_FILE).exists()
