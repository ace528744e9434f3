"""A block's trainer decodes only its block's frames (issue 55): the worker loads the whole scene's metadata
(cameras, names: no pixels), cuts the block out (recon.distributed.partition.block_scene), and the block's
Trainer decodes and caches (recon.data.frame_cache) its training images only."""

from __future__ import annotations

from pathlib import Path

from recon.data import frame_images
from recon.distributed.partition import Partition, block_scene
from recon.training.trainer import TrainConfig, Trainer, load_training_scene


def test_a_block_trainer_decodes_only_its_block_frames(tiny_city, tiny_blocks, tmp_path, monkeypatch):
    decoded: list[Path] = []
    real = frame_images.frame_rgba

    def spy(frame):
        decoded.append(Path(frame.image_path))
        return real(frame)

    monkeypatch.setattr(frame_images, "frame_rgba", spy)
    cfg = TrainConfig(data=tiny_city, out=tmp_path / "run", steps=1, progress=False, save_every=0,
                      frame_cache=str(tmp_path / "fc"))
    scene = load_training_scene(cfg)
    assert decoded == []  # loading the scene decodes nothing
    part = Partition.read(tiny_blocks)
    block = part.blocks[0]
    sub = block_scene(part, scene, block)
    assert 0 < len(sub.frames_train) < len(scene.frames_train)
    trainer = Trainer(cfg, scene=sub, log=lambda *a: None)
    block_files = {Path(f.image_path) for f in sub.frames_train}
    assert set(decoded) == block_files and len(decoded) == len(block_files)  # each once, nothing else
    assert len(list((tmp_path / "fc").rglob("*.npy"))) == len(block_files)
    trainer.run()  # a step and the block's own test views: still nothing outside the block
    assert set(decoded) <= block_files | {Path(f.image_path) for f in sub.frames_test}
