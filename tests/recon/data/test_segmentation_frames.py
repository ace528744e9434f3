"""Foreground segmentations (Panoptic ``seg/``) as data of FrameImages beside the loss masks (issue 55): with
``--spacetime.seg-weight`` they are decoded once with their image (LRU, on-disk frame cache, prefetch), a damaged
file is refused when the run loads its data (its header without a frame cache, then decoded only when drawn), and
training reads no ``seg/`` file again."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from recon.data import frame_images, load_scene, load_segmentation
from recon.data.frame_cache import FrameCache
from recon.data.frame_images import FrameImages
from recon.data.scene import MissingImageError
from recon.losses.spacetime import SpaceTimeConfig
from recon.training.trainer import TrainConfig, Trainer
from tests.recon.data.test_panoptic_segmentation import write_tiny_panoptic


@pytest.fixture
def seg_reads(monkeypatch):
    """How many times a segmentation file was decoded (the reader of FrameImages' "seg" channel, counted)."""
    calls = []
    attr, reader = frame_images.CHANNELS["seg"]

    def counted(frame):
        calls.append(frame.segmentation_path)
        return reader(frame)

    monkeypatch.setitem(frame_images.CHANNELS, "seg", (attr, counted))
    return calls


def test_segmentations_are_decoded_once_with_their_image(tmp_path, seg_reads):
    scene = load_scene(write_tiny_panoptic(tmp_path / "pan"))
    frames = scene.frames_train
    cache = FrameCache(tmp_path / "fc")
    images = FrameImages(frames, disk_cache=cache, segmentations=True)
    assert images.fill_disk_cache(progress=False) == len(frames) and len(seg_reads) == len(frames)
    images.prefetch([1])
    images.load(1)  # waits for the prefetch: the segmentation came with it, from the disk cache
    assert ("seg", 1) in images._lru and len(seg_reads) == len(frames)
    for i, f in enumerate(frames):
        assert torch.equal(images.segmentation(i), torch.as_tensor(load_segmentation(f)))
    assert images.segmentation(1) is not None and images.channel_u8(1, "seg") is images.channel_u8(1, "seg")
    assert len(seg_reads) == len(frames)  # all from the disk cache, none decoded again
    again = FrameImages(frames, disk_cache=cache, segmentations=True)
    assert again.fill_disk_cache(progress=False) == 0 and len(seg_reads) == len(frames)
    images.close()

    plain = FrameImages(frames, disk_cache=FrameCache(tmp_path / "fc2"))  # not asked for: never decoded
    plain.fill_disk_cache(progress=False)
    plain.load(0)
    assert ("seg", 0) not in plain._lru and len(seg_reads) == len(frames)


def seg_config(root, tmp_path, frame_cache: str, steps: int = 2) -> TrainConfig:
    """A short 4dgs run on ``root`` with the segmentation target on; ``frame_cache`` "off" or a cache folder."""
    return TrainConfig(data=root, out=tmp_path / "run", method="4dgs", steps=steps, save_every=0, progress=False,
                       init_num_random=50, spacetime=SpaceTimeConfig(seg_weight=0.5),
                       frame_cache=frame_cache if frame_cache == "off" else str(tmp_path / "fc"))


@pytest.mark.parametrize("frame_cache", ["auto", "off"])
def test_a_segmentation_of_the_wrong_size_is_refused_when_the_data_loads(tmp_path, frame_cache):
    root = write_tiny_panoptic(tmp_path / "pan")
    bad = root / "seg" / "1" / "000002.png"
    Image.open(bad).resize((5, 4)).save(bad)  # its header says so: refused before any decode, cache or not
    cfg = seg_config(root, tmp_path, frame_cache)
    with pytest.raises(MissingImageError, match="000002.png.*segmentation|segmentation.*000002.png"):
        Trainer(cfg, log=lambda *a: None)  # before any step


def test_a_damaged_segmentation_is_refused_when_the_data_loads_into_the_frame_cache(tmp_path):
    root = write_tiny_panoptic(tmp_path / "pan")
    bad = root / "seg" / "1" / "000002.png"
    data = bad.read_bytes()
    bad.write_bytes(data[:data.index(b"IDAT") + 8])  # cut short in its pixel data: the header is whole
    cfg = seg_config(root, tmp_path, "auto")
    with pytest.raises(MissingImageError, match="000002.png"):
        Trainer(cfg, log=lambda *a: None)  # decoded into the frame cache before any step
    Trainer(TrainConfig(**{**cfg.__dict__, "spacetime": SpaceTimeConfig()}), log=lambda *a: None)  # unused: fine
    off = Trainer(TrainConfig(**{**cfg.__dict__, "frame_cache": "off"}), log=lambda *a: None)  # header only
    i = next(i for i, f in enumerate(off.scene.frames_train) if f.segmentation_path.name == "000002.png"
             and f.segmentation_path.parent.name == "1")
    with pytest.raises(MissingImageError, match="000002.png"):
        off.images.segmentation(i)  # refused, naming the file, when training draws it


def test_without_a_frame_cache_segmentations_are_decoded_only_when_drawn(tmp_path, seg_reads):
    root = write_tiny_panoptic(tmp_path / "pan")
    trainer = Trainer(seg_config(root, tmp_path, "off", steps=3), log=lambda *a: None)
    assert seg_reads == []  # loading checked their headers only
    drawn = set()
    for step in range(3):
        picks, _, _, meta = trainer.render_views(step)
        drawn |= {i for i, _ in picks}
        assert len(meta["segmentations"]) == len(picks)
    upcoming = set(trainer.next_views())  # prefetched with their images while the last step rendered
    trainer.images.close()
    used = drawn | upcoming
    assert 0 < len(used) < len(trainer.scene.frames_train)
    # each drawn (or prefetched) view's segmentation decoded once, no other
    assert sorted(map(str, seg_reads)) == sorted(str(trainer.scene.frames_train[i].segmentation_path) for i in used)


def test_training_reads_the_targets_from_the_frame_images_not_seg_files(tmp_path, seg_reads):
    root = write_tiny_panoptic(tmp_path / "pan")
    cfg = TrainConfig(data=root, out=tmp_path / "run", method="4dgs", steps=3, save_every=0, progress=False,
                      init_num_random=50, spacetime=SpaceTimeConfig(seg_weight=0.5), frame_cache=str(tmp_path / "fc"))
    trainer = Trainer(cfg, log=lambda *a: None)
    assert len(seg_reads) == len(trainer.scene.frames_train)  # decoded once, when the data was loaded
    expected = {i: load_segmentation(f) for i, f in enumerate(trainer.scene.frames_train)}
    picks, _, _, meta = trainer.render_views(0)
    assert len(meta["segmentations"]) == len(picks)
    for (i, _), target in zip(picks, meta["segmentations"]):
        np.testing.assert_array_equal(target.numpy(), expected[i])
    assert "segmentation" in trainer.model.loss_terms(meta, 0, cfg)
    trainer.run()  # every step's targets from memory or the disk cache: no PNG decoded again
    assert len(seg_reads) == len(trainer.scene.frames_train)
    plain = Trainer(TrainConfig(**{**cfg.__dict__, "spacetime": SpaceTimeConfig(), "out": tmp_path / "r2"}),
                    log=lambda *a: None)
    assert "segmentations" not in plain.render_views(0)[3]
