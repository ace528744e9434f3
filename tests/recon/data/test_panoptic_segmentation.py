"""Dynamic 3D Gaussians' ``seg/`` images are foreground segmentations of the people, never loss masks.

Regression (issue 55): the Panoptic loader used to hand ``seg/`` to the trainer as nerfstudio-style loss masks
("non-zero = keep"), so the dome and floor were never supervised and the step PSNR counted them as perfect.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from recon.data import load_scene, load_segmentation
from recon.data.frame_images import FrameImages

W, H, CAMS, STEPS = 16, 12, 2, 3
CLASSROOM = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "d3dgs_classroom"


def write_tiny_panoptic(root: Path) -> Path:
    """A Panoptic-layout folder: train_meta.json, ims/<cam>/<k:06d>.jpg (noise) and seg/<cam>/<k:06d>.png
    (a person box in the left quarter); no test_meta.json, no init cloud."""
    rng = np.random.default_rng(0)
    K = [[20.0, 0.0, W / 2 - 0.5], [0.0, 20.0, H / 2 - 0.5], [0.0, 0.0, 1.0]]
    meta = {"w": W, "h": H, "k": [], "w2c": [], "fn": [], "cam_id": []}
    for k in range(STEPS):
        meta["k"].append([K] * CAMS)
        meta["w2c"].append([[[1.0, 0, 0, 0.3 * c], [0, 1, 0, 0], [0, 0, 1, 3.0], [0, 0, 0, 1]] for c in range(CAMS)])
        meta["fn"].append([f"{c}/{k:06d}.jpg" for c in range(CAMS)])
        meta["cam_id"].append(list(range(CAMS)))
        for c in range(CAMS):
            for folder, image in (("ims", Image.fromarray(rng.integers(0, 255, (H, W, 3), dtype=np.uint8))),
                                  ("seg", Image.fromarray(person_mask(), "L"))):
                path = root / folder / str(c) / (f"{k:06d}.jpg" if folder == "ims" else f"{k:06d}.png")
                path.parent.mkdir(parents=True, exist_ok=True)
                image.save(path)
    (root / "train_meta.json").write_text(json.dumps(meta))
    return root


def person_mask() -> np.ndarray:
    """uint8 [H, W]: 255 on the 'person' (left quarter of the frame), 0 elsewhere."""
    m = np.zeros((H, W), np.uint8)
    m[:, : W // 4] = 255
    return m


@pytest.mark.parametrize("factor", [1, 2])
def test_seg_is_a_segmentation_not_a_loss_mask(tmp_path, factor):
    root = write_tiny_panoptic(tmp_path / "pan")
    scene = load_scene(root, data_factor=factor, cache_dir=tmp_path / "cache")
    assert scene.source_format == "panoptic" and len(scene.frames_train) == CAMS * STEPS and not scene.frames_test
    for frame in scene.frames_train:
        assert frame.mask_path is None  # the whole image is supervised
        assert frame.segmentation_path is not None and Path(frame.segmentation_path).is_file()
        seg = load_segmentation(frame)
        assert seg.shape == (frame.height, frame.width)  # downscaled with the image
        assert seg[:, 0].min() == 1.0 and seg[:, -1].max() == 0.0
    images = FrameImages(scene.frames_train)
    assert all(images.mask(i) is None for i in range(len(images)))  # what the trainer's loss sees


@pytest.mark.skipif(not (CLASSROOM / "train_meta.json").is_file(),
                    reason="../shared/data/d3dgs_classroom (the shared real capture) is not on this machine")
def test_shared_classroom_capture_has_segmentations_and_no_loss_masks():
    scene = load_scene(CLASSROOM)  # factor 1: only lists the files (no derived images are written)
    assert scene.source_format == "panoptic" and not scene.frames_test  # SOURCE.txt: no test split
    assert len(scene.frames_train) == 3 * 298
    assert all(f.mask_path is None for f in scene.frames_train)
    assert all(f.segmentation_path is not None and Path(f.segmentation_path).is_file() for f in scene.frames_train)
    frame = scene.frames_train[0]
    seg = load_segmentation(frame)
    assert seg.shape == (360, 640) and 0.0 < seg.mean() < 0.5  # a person: a part of the frame, not all of it
