"""Runs sharing a frame cache (issue 55): a live run's hold keeps its entries from other runs' pruning, a killed
run's hold is stale; ``--frame-cache off``'s per-process folder of a killed run is removed by the next run; a
Trainer given a scene loaded before it started claims its video frames."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from recon.core.live_holds import Hold, live_holds, oldest_live_since
from recon.data.frame_cache import HOLDS_DIR, FrameCache, temporary_frame_cache
from tests.recon.data.test_dynamic_loaders import rendered, write_n3dv  # noqa: F401  (fixture)
from tests.recon.data.test_frame_cache_limits import fake_entries

REPO = Path(__file__).resolve().parents[3]


# loads recon/core/live_holds.py alone (standard library only): a child starts in a fraction of a second,
# not the seconds that importing recon (torch) takes on a loaded machine
LIVE_HOLDS = f"""
import importlib.util
spec = importlib.util.spec_from_file_location("live_holds", {str(REPO / "recon" / "core" / "live_holds.py")!r})
live_holds = importlib.util.module_from_spec(spec)
spec.loader.exec_module(live_holds)
Hold = live_holds.Hold
"""


def child(code: str) -> subprocess.Popen:
    """A Python process running ``code`` (which prints one line when ready, then waits for stdin to close)."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line, "the child process died before it was ready"
    proc.ready = line
    return proc


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_holds_are_live_while_their_process_runs_and_stale_after_a_kill(tmp_path):
    with Hold(tmp_path / "h", since=123.0) as mine:
        proc = child(LIVE_HOLDS + f"""
import sys
h = Hold({str(tmp_path / 'h')!r}, since=50.0).acquire()
print(h.name, flush=True)
sys.stdin.read()
""")
        try:
            assert {r["name"] for r in live_holds(tmp_path / "h")} == {mine.name, proc.ready}
            assert oldest_live_since(tmp_path / "h") == 50.0
        finally:
            kill(proc)  # SIGKILL: no clean-up ran, the kernel dropped its flock
        assert (tmp_path / "h" / f"{proc.ready}.hold").exists()
        assert [r["name"] for r in live_holds(tmp_path / "h")] == [mine.name]
        assert not (tmp_path / "h" / f"{proc.ready}.hold").exists()  # the stale file is removed
        assert oldest_live_since(tmp_path / "h") == 123.0
    assert live_holds(tmp_path / "h") == [] and oldest_live_since(tmp_path / "h") is None


def test_pruning_keeps_the_entries_of_another_live_run(tmp_path):
    """Two processes on one cache: the other run started (held the cache) and claimed its entries before this
    one started; this run's pruning, far over the cap, removes old entries but not those, until that run dies."""
    cache = FrameCache(tmp_path / "fc")
    old = fake_entries(cache, 3, 1000, age_s=3600)
    theirs = []
    for k in range(3):
        p = cache.folder / "aa" / f"theirs{k}.npy"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"y" * 1000)
        theirs.append(p)
    proc = child(LIVE_HOLDS + f"""
import os, sys, time
hold = Hold({str(cache.folder / HOLDS_DIR)!r}, time.time()).acquire()  # FrameCache.hold of a run starting
for p in {[str(p) for p in theirs]!r}:
    os.utime(p)  # claimed: used by this run
print("ready", flush=True)
sys.stdin.read()
""")
    try:
        time.sleep(1.1)
        mine = cache.hold(time.time())  # this run starts later than the other's claims ...
        assert cache.prune(1, keep_since=mine.since) == (3, 3000)  # ... its pruning keeps them (the other is live)
        assert not any(p.exists() for p in old) and all(p.exists() for p in theirs)
    finally:
        kill(proc)
    assert cache.prune(1, keep_since=mine.since) == (3, 3000)  # its hold is stale now: its entries are fair game
    assert not any(p.exists() for p in theirs)
    assert [r["name"] for r in live_holds(cache.folder / HOLDS_DIR)] == [mine.name]
    assert all(p.suffix == ".hold" or p.name == "prune.lock" for p in (cache.folder / HOLDS_DIR).iterdir())
    mine.release()


def test_frame_cache_off_folders_of_killed_runs_are_removed(tmp_path):
    parent = tmp_path / "frames-temporary"
    proc = child(f"""
        import sys
        from recon.data.frame_cache import temporary_frame_cache
        cache = temporary_frame_cache({str(parent)!r})
        (cache.folder / "ab").mkdir(parents=True)
        (cache.folder / "ab" / "frame.npy").write_bytes(b"z" * 100)
        print(cache.folder, flush=True)
        sys.stdin.read()
    """)
    killed = Path(proc.ready)
    kill(proc)  # no exit handler ran
    assert (killed / "ab" / "frame.npy").exists()
    live = temporary_frame_cache(parent)  # a run still going (this process)
    (live.folder / "ab").mkdir(parents=True)
    assert not killed.exists()  # left by the killed run: removed at the next start
    assert killed.parent == parent and str(os.getpid()) not in killed.name
    mine = temporary_frame_cache(parent)  # another start: the live run's folder stays
    assert live.folder.exists() and mine.folder.parent == parent and not mine.folder.exists()  # made on first write
    proc = child(f"""
        import sys
        from recon.data.frame_cache import temporary_frame_cache
        cache = temporary_frame_cache({str(parent)!r})
        (cache.folder / "ab").mkdir(parents=True)
        print(cache.folder, flush=True)
        sys.stdin.read()
    """)
    proc.stdin.close()
    proc.wait(timeout=60)
    assert not Path(proc.ready).exists()  # a normal exit removes its own folder


def test_a_trainer_given_a_loaded_scene_claims_its_video_frames(tmp_path, rendered):  # noqa: F811
    """A block worker loads its scene before the Trainer starts: the Trainer claims the scene's video frames,
    so its own pruning (cap 1 byte) keeps them and removes only other entries."""
    from recon.training.trainer import TrainConfig, Trainer, load_training_scene

    root = write_n3dv(tmp_path / "n3dv", rendered)
    cfg = TrainConfig(data=root, out=tmp_path / "run", method="4dgs", steps=1, save_every=0, progress=False,
                      init_num_random=30, frame_cache=str(tmp_path / "fc"), frame_cache_bytes=1)
    scene = load_training_scene(cfg)
    frames = list(FrameCache(tmp_path / "fc").folder.rglob("*.npy"))
    assert len(frames) == len(scene.frames)
    past = time.time() - 3600
    for p in frames:  # loaded long before the trainer started
        os.utime(p, (past, past))
    old = fake_entries(FrameCache(tmp_path / "fc"), 2, 1000, age_s=7200)
    trainer = Trainer(cfg, scene=scene, log=lambda *a: None)
    assert not any(p.exists() for p in old)
    entries = [FrameCache(f.frames_dir).entry_path(f.image_path, f"frame{f.video_frame}", (f.width, f.height))
               for f in trainer.scene.frames]  # training and test views (evaluated at the end)
    assert all(p.exists() for p in entries)
    assert trainer.cache_hold is not None and trainer.cache_hold.since <= time.time()


def test_frame_cache_off_falls_back_to_the_temporary_directory(tmp_path, monkeypatch):
    """A cache root that cannot be written (here a file) sends --frame-cache off's folder to $TMPDIR instead."""
    import tempfile

    (tmp_path / "not-a-folder").write_text("x")
    monkeypatch.setenv("SPLATFORGE_CACHE", str(tmp_path / "not-a-folder"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    cache = temporary_frame_cache()
    assert cache.folder.parent == tmp_path / "tmp" / "splatforge-frames-temporary"
    assert [r["name"] for r in live_holds(cache.folder.parent)] == [cache.folder.name]
