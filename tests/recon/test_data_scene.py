"""Scene model helpers: splits, scene extent, image loading errors, cache folders, format detection."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from recon.data import DataFormatError, Frame, MissingImageError, detect_format, load_image, load_scene, orbit_cameras
from recon.data.scene import (
    composite,
    default_cache_root,
    downscaled_relpath,
    nerfpp_norm,
    scale_intrinsics,
    split_every_nth,
)


def frames_for(n: int = 10, tmp: Path | None = None) -> list[Frame]:
    cams = orbit_cameras(n, 2.0, 16, 12, math.radians(60), elevation=0.0)
    return [Frame(f"img_{i:03d}.png", (tmp or Path(".")) / f"img_{i:03d}.png", c) for i, c in enumerate(cams)]


def test_split_every_8th_sorted_by_name():
    frames = frames_for(17)[::-1]  # unsorted input
    train, test = split_every_nth(frames, 8)
    assert [f.name for f in test] == ["img_000.png", "img_008.png", "img_016.png"]
    assert len(train) == 14 and [f.name for f in train] == sorted(f.name for f in train)


def test_nerfpp_norm_on_a_circle():
    center, radius = nerfpp_norm(frames_for(12))
    np.testing.assert_allclose(center, 0.0, atol=1e-6)
    assert radius == pytest.approx(2.2, rel=1e-5)


def test_composite_rgba():
    rgba = np.array([[[1.0, 0.0, 0.0, 0.25]]], dtype=np.float32)
    np.testing.assert_allclose(composite(rgba, (1, 1, 1))[0, 0], [1.0, 0.75, 0.75])
    np.testing.assert_allclose(composite(rgba, (0, 0, 0))[0, 0], [0.25, 0.0, 0.0])


def test_scale_intrinsics():
    K = torch.tensor([[100.0, 0, 50], [0, 90, 40], [0, 0, 1]])
    np.testing.assert_allclose(scale_intrinsics(K, 0.5, 0.5).numpy(), [[50, 0, 25], [0, 45, 20], [0, 0, 1]])


def test_load_image_errors_name_file(tmp_path):
    f = frames_for(1, tmp_path)[0]
    with pytest.raises(MissingImageError, match=r"img_000\.png"):
        load_image(f)
    Image.fromarray(np.zeros((5, 5, 3), np.uint8)).save(f.image_path)
    with pytest.raises(MissingImageError, match=r"img_000\.png is 5x5.*16x12"):
        load_image(f)
    Image.fromarray(np.full((12, 16, 3), 255, np.uint8)).save(f.image_path)
    img = load_image(f)
    assert img.shape == (12, 16, 3) and img.dtype == np.float32 and img.max() == 1.0


def test_cache_root_falls_back_when_not_writable(tmp_path, monkeypatch):
    assert default_cache_root(tmp_path) == tmp_path.resolve()
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = default_cache_root(tmp_path / "data")
    assert root.parent == tmp_path / "home" / ".cache" / "splatforge" and root.name.startswith("data-")


def test_downscaled_relpath():
    assert downscaled_relpath(Path("images/a/b.jpg"), 2) == Path("images_2/a/b.jpg")
    assert downscaled_relpath(Path("b.jpg"), 4) == Path("downscaled_4/b.jpg")


def test_detect_unknown_format_is_clear(tmp_path):
    (tmp_path / "random.txt").write_text("hi")
    with pytest.raises(DataFormatError, match=r"unknown dataset format.*transforms"):
        detect_format(tmp_path)
    with pytest.raises(DataFormatError, match="not found"):
        load_scene(tmp_path / "nope")


def test_bad_data_factor(tmp_path):
    with pytest.raises(ValueError, match="data_factor"):
        from recon.data.scene import finalize_frames

        finalize_frames([], tmp_path, "x.json", data_factor=0)
