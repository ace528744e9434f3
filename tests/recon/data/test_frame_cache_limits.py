"""Bounds of the data path (issue 55): the on-disk frame cache is pruned to a size cap, least recently used first,
never the current run's entries; ``--frame-cache off`` keeps nothing for videos either; the default in-memory
budget is capped."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from recon.data import frame_images
from recon.data.frame_cache import (DEFAULT_MAX_BYTES, MAX_BYTES_ENV, TEMPORARY_DIR, FrameCache,
                                    default_frame_cache_dir, max_cache_bytes, video_frame_cache)
from tests.recon.data.test_dynamic_loaders import rendered, write_n3dv  # noqa: F401  (fixture)
from tests.recon.data.test_frame_cache import write_frames


def fake_entries(cache: FrameCache, n: int, size: int, age_s: float) -> list[Path]:
    """``n`` entry files of ``size`` bytes, the k-th last modified ``age_s + n - k`` seconds ago (oldest first)."""
    paths = []
    now = time.time()
    for k in range(n):
        p = cache.folder / f"{k:02x}" / f"old{k}.npy"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * size)
        os.utime(p, (now - age_s - (n - k), now - age_s - (n - k)))
        paths.append(p)
    return paths


def test_prune_removes_the_oldest_entries_until_the_cap_holds(tmp_path):
    cache = FrameCache(tmp_path / "fc")
    paths = fake_entries(cache, 6, 1000, age_s=100)
    (cache.folder / "README.txt").write_text("not an entry")
    assert cache.prune(0) == (0, 0)  # no cap
    assert cache.prune(10_000) == (0, 0)  # fits
    assert cache.prune(3500) == (3, 3000)
    assert [p.exists() for p in paths] == [False] * 3 + [True] * 3
    assert (cache.folder / "README.txt").exists()


def test_claimed_and_new_entries_are_kept(tmp_path):
    frames = write_frames(tmp_path / "src", n=2)
    cache = FrameCache(tmp_path / "fc")
    old = fake_entries(cache, 4, 1000, age_s=100)
    entry = cache.entry_path(frames[0].image_path, "rgba", (frames[0].width, frames[0].height))
    cache.store(frames[0].image_path, "rgba", np.zeros((frames[0].height, frames[0].width, 3), np.uint8))
    os.utime(entry, (time.time() - 1000, time.time() - 1000))  # the oldest of all ...
    start = time.time() - 1.0
    assert cache.claim(frames[0].image_path, "rgba", (frames[0].width, frames[0].height))  # ... until claimed
    assert not cache.claim(frames[1].image_path, "rgba", (frames[1].width, frames[1].height))  # no entry
    removed, _ = cache.prune(1, keep_since=start)
    assert removed == 4 and not any(p.exists() for p in old) and entry.exists()


def test_cap_setting_env_and_default(monkeypatch):
    monkeypatch.delenv(MAX_BYTES_ENV, raising=False)
    assert max_cache_bytes(None) == DEFAULT_MAX_BYTES and max_cache_bytes(123) == 123 and max_cache_bytes(0) == 0
    monkeypatch.setenv(MAX_BYTES_ENV, "5e9")
    assert max_cache_bytes(None) == 5_000_000_000 and max_cache_bytes(7) == 7
    monkeypatch.setenv(MAX_BYTES_ENV, "lots")
    with pytest.raises(ValueError, match=MAX_BYTES_ENV):
        max_cache_bytes(None)


def test_a_run_prunes_other_runs_entries_and_keeps_its_own(tmp_path):
    from recon.training.trainer import TrainConfig, Trainer
    from tests.recon.data.test_panoptic_segmentation import write_tiny_panoptic

    root = write_tiny_panoptic(tmp_path / "pan")
    fc = FrameCache(tmp_path / "fc")
    old = fake_entries(fc, 5, 4000, age_s=3600)
    lines = []
    cfg = TrainConfig(data=root, out=tmp_path / "run", method="4dgs", steps=1, save_every=0, progress=False,
                      frame_cache=str(fc.folder), frame_cache_bytes=1, init_num_random=50)
    trainer = Trainer(cfg, log=lines.append)
    n = len(trainer.scene.frames_train)
    assert not any(p.exists() for p in old)
    assert len(list(fc.folder.rglob("*.npy"))) == n  # the run's own entries stay, over the cap
    assert any("least recently used" in line and "--frame-cache-bytes" in line for line in lines)
    fake_entries(fc, 2, 4000, age_s=3600)
    Trainer(TrainConfig(**{**cfg.__dict__, "frame_cache_bytes": 0}), log=lines.append)  # 0: no cap
    assert len(list(fc.folder.rglob("*.npy"))) == n + 2


def test_frame_cache_off_keeps_no_video_frames(tmp_path, rendered, monkeypatch):  # noqa: F811
    from recon.training.trainer import TrainConfig, load_training_scene

    monkeypatch.setenv("SPLATFORGE_CACHE", str(tmp_path / "user-cache"))
    root = write_n3dv(tmp_path / "n3dv", rendered)
    scene = load_training_scene(TrainConfig(data=root, method="4dgs", frame_cache="off"))
    folder = Path(scene.frames_train[0].frames_dir)
    assert folder.parent == default_frame_cache_dir().parent / TEMPORARY_DIR  # this process's own folder
    assert str(os.getpid()) in folder.name and len(list(folder.rglob("*.npy"))) == len(scene.frames)
    assert not default_frame_cache_dir().exists()  # nothing in the user's cache
    other = video_frame_cache("off")
    assert other.folder != folder and not other.folder.exists()  # created on first write only
    assert video_frame_cache(str(tmp_path / "mine")).folder == tmp_path / "mine"


def test_default_memory_budget_is_capped(monkeypatch):
    monkeypatch.setattr(frame_images, "available_memory_bytes", lambda: 256 << 30)  # a big machine
    assert frame_images.default_cache_bytes() == frame_images.MAX_DEFAULT_CACHE_BYTES == 1 << 30
    monkeypatch.setattr(frame_images, "available_memory_bytes", lambda: 2 << 30)
    assert frame_images.default_cache_bytes() == 512 << 20  # a quarter, below the cap
    monkeypatch.setattr(frame_images, "available_memory_bytes", lambda: None)
    assert frame_images.default_cache_bytes() == 1 << 30
