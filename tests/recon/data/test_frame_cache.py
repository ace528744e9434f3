"""The on-disk uint8 frame cache (recon.data.frame_cache) under FrameImages (issue 55): a second load reads the
cache instead of decoding; an edited source (size or mtime) is decoded again; a write that fails half-way
leaves no entry; a damaged entry is decoded again, not a crash."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from recon.data import frame_cache as fc
from recon.data.frame_cache import FrameCache, default_frame_cache_dir, resolve_frame_cache
from recon.data.frame_images import FrameImages
from recon.data.scene import Frame, make_camera

W, H = 16, 12


def write_frames(folder: Path, n: int = 3, seed: int = 0, masks: bool = False) -> list[Frame]:
    """``n`` random RGB PNG frames (and masks) of W x H with a dummy camera."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    K = np.array([[10.0, 0, W / 2], [0, 10.0, H / 2], [0, 0, 1]])
    frames = []
    for i in range(n):
        path = folder / f"{i}.png"
        Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8)).save(path)
        mask = None
        if masks:
            mask = folder / f"{i}_mask.png"
            Image.fromarray(rng.integers(0, 2, (H, W), dtype=np.uint8) * 255).save(mask)
        frames.append(Frame(path.name, path, make_camera(np.eye(4), K, W, H), mask))
    return frames


def decoded(frames, cache) -> FrameImages:
    images = FrameImages(frames, cache_bytes=1 << 30, disk_cache=cache)
    for i in range(len(frames)):
        images.load(i)
    return images


def test_second_load_reads_the_cache_and_decodes_nothing(tmp_path):
    frames = write_frames(tmp_path / "src", masks=True)
    cache = FrameCache(tmp_path / "cache")
    first = decoded(frames, cache)
    assert first.decodes == 3 and first.disk_reads == 0 and cache.writes == 6  # 3 images + 3 masks
    second = decoded(frames, cache)
    assert second.decodes == 0 and second.disk_reads == 3
    for i in range(3):
        assert torch.equal(second.load(i), first.load(i))
        assert torch.equal(second.mask_u8(i), first.mask_u8(i))
    assert cache.reads == 6
    assert sorted(p.suffix for p in (tmp_path / "cache").rglob("*") if p.is_file()) == [".npy"] * 6
    off = decoded(frames, None)  # no disk cache: decoded from the files every time
    assert off.decodes == 3 and torch.equal(off.load(1), first.load(1))


def test_an_edited_source_is_decoded_again(tmp_path):
    frames = write_frames(tmp_path / "src")
    cache = FrameCache(tmp_path / "cache")
    decoded(frames, cache)
    # same size, new content, new mtime
    st = frames[0].image_path.stat()
    new = np.full((H, W, 3), 7, dtype=np.uint8)
    Image.fromarray(new).save(frames[0].image_path)
    os.utime(frames[0].image_path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    # other size in bytes, mtime put back to the old one
    st1 = frames[1].image_path.stat()
    Image.fromarray(np.zeros((H, W, 3), dtype=np.uint8)).save(frames[1].image_path)
    os.utime(frames[1].image_path, ns=(st1.st_atime_ns, st1.st_mtime_ns))
    assert frames[1].image_path.stat().st_size != st1.st_size
    again = decoded(frames, cache)
    assert again.decodes == 2 and again.disk_reads == 1
    assert (again.load(0)[..., :3] == 7).all() and (again.load(1)[..., :3] == 0).all()


def test_a_failed_write_leaves_no_entry(tmp_path, monkeypatch):
    frames = write_frames(tmp_path / "src", n=1)
    cache = FrameCache(tmp_path / "cache")

    def half_then_fail(f, arr, allow_pickle=False):
        f.write(b"\x93NUMPY" + b"\0" * 40)  # a partial file under the temporary name
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fc.np, "save", half_then_fail)
    images = decoded(frames, cache)  # the failed write is not an error: the image is still served
    assert images.decodes == 1 and cache.writes == 0
    monkeypatch.undo()
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []  # no entry, no temporary
    assert cache.load(frames[0].image_path, "rgba", (H, W, None)) is None
    assert decoded(frames, cache).decodes == 1 and cache.writes == 1


@pytest.mark.parametrize("damage", ["truncate", "garbage", "other-shape", "empty", "foreign", "flipped", "fifo",
                                    "unsealed"])
def test_a_damaged_entry_is_decoded_again(tmp_path, damage):
    frames = write_frames(tmp_path / "src", n=2)
    cache = FrameCache(tmp_path / "cache")
    good = decoded(frames, cache).load(0).clone()
    entry = cache.entry_path(frames[0].image_path, "rgba", (W, H))
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        entry.write_bytes(b"not a numpy file at all" * 10)
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "foreign":  # frame 1's entry (same shape and dtype) renamed to frame 0's name
        entry.write_bytes(cache.entry_path(frames[1].image_path, "rgba", (W, H)).read_bytes())
    elif damage == "flipped":  # one pixel bit: a valid .npy of the right shape, wrong content
        entry.write_bytes(data[:200] + bytes([data[200] ^ 4]) + data[201:])
    elif damage == "fifo":  # would block np.load forever
        entry.unlink()
        os.mkfifo(entry)
    elif damage == "unsealed":  # an entry without its trailer (written before it existed): decoded once more
        with open(entry, "wb") as f:
            np.save(f, np.zeros((H, W, 3), dtype=np.uint8))
    else:
        with open(entry, "wb") as f:
            np.save(f, np.zeros((H + 1, W, 3), dtype=np.uint8))
    again = decoded(frames, cache)
    assert again.decodes == 1 and again.disk_reads == 1 and torch.equal(again.load(0), good)
    assert decoded(frames, cache).decodes == 0  # the entry was written again


def test_entries_are_keyed_by_output_size(tmp_path):
    frames = write_frames(tmp_path / "src", n=1)
    cache = FrameCache(tmp_path / "cache")
    path = frames[0].image_path
    assert cache.entry_path(path, "rgba", (W, H)) != cache.entry_path(path, "rgba", (W // 2, H // 2))
    assert cache.entry_path(path, "rgba", (W, H)) != cache.entry_path(path, "mask", (W, H))


def test_cache_setting_auto_off_and_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLATFORGE_CACHE", str(tmp_path / "env"))
    assert default_frame_cache_dir() == tmp_path / "env" / "frames"
    assert resolve_frame_cache("auto").folder == tmp_path / "env" / "frames"
    assert resolve_frame_cache(None).folder == tmp_path / "env" / "frames"
    assert resolve_frame_cache("off") is None
    assert resolve_frame_cache(str(tmp_path / "x")).folder == tmp_path / "x"
    monkeypatch.delenv("SPLATFORGE_CACHE")
    assert default_frame_cache_dir() == Path.home() / ".cache" / "splatforge" / "frames"


def test_fill_disk_cache_decodes_each_missing_frame_once(tmp_path):
    frames = write_frames(tmp_path / "src", n=4, masks=True)
    cache = FrameCache(tmp_path / "cache")
    decoded(frames[:1], cache)
    images = FrameImages(frames, disk_cache=cache)
    assert images.fill_disk_cache(progress=False) == 3 and images.cached_bytes == 0  # nothing kept in memory
    assert FrameImages(frames, disk_cache=cache).fill_disk_cache(progress=False) == 0
    again = decoded(frames, cache)
    assert again.decodes == 0 and again.disk_reads == 4 and again.mask_u8(2) is not None
    assert FrameImages(frames).fill_disk_cache() == 0  # no disk cache: nothing to fill


def test_entries_without_the_trailer_or_a_mask_count_as_missing_when_filling(tmp_path):
    """An entry from before the trailer (or cut short) is not claimed: fill_disk_cache decodes it again in its one
    pass (a video's frames would otherwise be decoded one by one at training time); a missing mask entry is
    refilled even when its image entry is there."""
    frames = write_frames(tmp_path / "src", n=3, masks=True)
    cache = FrameCache(tmp_path / "cache")
    decoded(frames, cache)
    image_entry = cache.entry_path(frames[0].image_path, "rgba", (W, H))
    image_entry.write_bytes(image_entry.read_bytes()[:-fc.TRAILER_BYTES])  # as written before the trailer
    cache.entry_path(frames[1].mask_path, "mask", (W, H)).unlink()
    assert not cache.has(frames[0].image_path, "rgba", (W, H))
    assert not cache.claim(frames[0].image_path, "rgba", (W, H))
    assert FrameImages(frames, disk_cache=cache).fill_disk_cache(progress=False) == 2
    assert cache.has(frames[0].image_path, "rgba", (W, H)) and cache.has(frames[1].mask_path, "mask", (W, H))
    again = decoded(frames, cache)
    assert again.decodes == 0 and again.disk_reads == 3


def test_training_fills_the_frame_cache_and_a_second_run_decodes_nothing(tmp_path):
    from recon.training.trainer import TrainConfig, Trainer
    from tests.recon.data.test_panoptic_segmentation import write_tiny_panoptic

    root = write_tiny_panoptic(tmp_path / "pan")
    cfg = TrainConfig(data=root, out=tmp_path / "run", method="4dgs", steps=1, save_every=0, progress=False,
                      frame_cache=str(tmp_path / "fc"), init_num_random=100)
    first = Trainer(cfg, log=lambda *a: None)
    n = len(first.scene.frames_train)
    assert first.images.decodes == n and len(list((tmp_path / "fc").rglob("*.npy"))) == n
    second = Trainer(cfg, log=lambda *a: None)
    for i in range(n):
        second.images.load(i)
    assert second.images.decodes == 0 and second.images.disk_reads == n
    off = Trainer(TrainConfig(**{**cfg.__dict__, "frame_cache": "off"}), log=lambda *a: None)
    assert off.images.disk_cache is None and off.images.decodes == 0  # decoded lazily, from the files
