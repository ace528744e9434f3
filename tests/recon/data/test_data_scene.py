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
    with pytest.raises(MissingImageError, match=r"img_000\.png: image file not found$"):
        load_image(f)
    from recon.data.scene import image_size, read_json_object

    with pytest.raises(MissingImageError, match=r"img_000\.png: image file not found$"):
        image_size(f.image_path)
    with pytest.raises(DataFormatError, match=r"transforms\.json: JSON file not found$"):
        read_json_object(tmp_path / "transforms.json", "a transforms object")
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


def test_cache_root_of_a_read_only_folder_is_elsewhere_even_for_root(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o555)  # r-x: as ../shared's data folders (root may still write there; it must not)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    try:
        root = default_cache_root(data)
    finally:
        data.chmod(0o755)
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
    with pytest.raises(ValueError, match="data.factor"):
        from recon.data.finalize import finalize_frames

        finalize_frames([], tmp_path, "x.json", data_factor=0)


# --- downscaling (--data-factor): range, source checks, cache keyed by content ----------------------


def downscale_dataset(tmp_path: Path, pixels: list[np.ndarray]) -> tuple[Path, list]:
    """``root/images/img_i.png`` holding ``pixels[i]`` (uint8 RGB or uint16 grey) and their 16x12
    cameras, as finalize_frames input."""
    root = tmp_path / "data"
    (root / "images").mkdir(parents=True)
    raw = []
    for frame, arr in zip(frames_for(len(pixels), root / "images"), pixels):
        Image.fromarray(arr).save(frame.image_path)
        raw.append((frame, None))
    return root, raw


def finalize_half(root: Path, raw: list, cache: Path) -> list[Frame]:
    from recon.data.finalize import finalize_frames

    return finalize_frames(raw, root, root / "list.json", data_factor=2, cache_dir=cache)


def test_downscale_keeps_16_bit_range(tmp_path):
    ramp = (np.arange(16 * 12).reshape(12, 16) * 300).astype(np.uint16)  # 0 .. 57,300
    root, raw = downscale_dataset(tmp_path, [ramp])
    assert Image.open(raw[0][0].image_path).mode == "I;16"
    (half,) = finalize_half(root, raw, tmp_path / "cache")
    got = load_image(half)[..., 0]
    want = ramp.astype(np.float64).reshape(6, 2, 8, 2).mean(axis=(1, 3)) / 65535.0
    np.testing.assert_allclose(got, want, atol=1.0 / 65535.0)
    assert got.max() > 0.8  # 8-bit clipping made it 255/255 everywhere above 255/65535


def test_downscale_cache_follows_a_replaced_source(tmp_path):
    grey = np.full((12, 16, 3), 40, np.uint8)
    root, raw = downscale_dataset(tmp_path, [grey])
    cache = tmp_path / "cache"
    (first,) = finalize_half(root, raw, cache)
    assert np.allclose(load_image(first), 40 / 255)
    made = first.image_path.stat().st_mtime_ns
    (again,) = finalize_half(root, raw, cache)
    assert again.image_path == first.image_path and again.image_path.stat().st_mtime_ns == made
    src = raw[0][0].image_path
    before = src.stat()
    Image.fromarray(np.full((12, 16, 3), 200, np.uint8)).save(src)  # same size, new content
    os.utime(src, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    (replaced,) = finalize_half(root, raw, cache)
    assert np.allclose(load_image(replaced), 200 / 255)


def test_downscale_cache_rewritten_behind_its_key_is_remade(tmp_path):
    root, raw = downscale_dataset(tmp_path, [np.full((12, 16, 3), 90, np.uint8)])
    cache = tmp_path / "cache"
    (first,) = finalize_half(root, raw, cache)
    Image.fromarray(np.zeros((6, 8, 3), np.uint8)).save(first.image_path)  # someone overwrote it
    (again,) = finalize_half(root, raw, cache)
    assert np.allclose(load_image(again), 90 / 255)


def test_cache_files_are_written_through_recon_atomic(tmp_path, monkeypatch):
    """Derived images and their keys go through recon.core.atomic: a failed write leaves the old file and no
    temporary; new files get the usual permissions (not mkstemp's 0600)."""
    import recon.core.atomic
    from recon.data.scene import cache_key_path, save_image_atomic, write_cache_key

    src, derived = tmp_path / "src.png", tmp_path / "out" / "d.jpg"
    Image.fromarray(np.full((4, 4, 3), 9, np.uint8)).save(src)
    save_image_atomic(Image.open(src), derived)  # makes the folder; JPEG from the suffix
    write_cache_key(derived, src)
    assert Image.open(derived).format == "JPEG" and cache_key_path(derived).is_file()
    umask = os.umask(0)
    os.umask(umask)
    assert derived.stat().st_mode & 0o777 == 0o666 & ~umask
    assert cache_key_path(derived).stat().st_mode & 0o777 == 0o666 & ~umask
    old_key = cache_key_path(derived).read_bytes()

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(recon.core.atomic.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        save_image_atomic(Image.new("RGB", (4, 4)), derived)
    with pytest.raises(OSError, match="No space left"):
        write_cache_key(derived, src)
    assert Image.open(derived).getpixel((0, 0)) != (0, 0, 0) and cache_key_path(derived).read_bytes() == old_key
    assert sorted(p.name for p in derived.parent.iterdir()) == sorted([derived.name, cache_key_path(derived).name])
    with pytest.raises(ValueError, match="suffix '.xyz'"):
        save_image_atomic(Image.new("RGB", (4, 4)), tmp_path / "a.xyz")


def test_dataset_own_images_n_without_key_is_used(tmp_path):
    root, raw = downscale_dataset(tmp_path, [np.full((12, 16, 3), 90, np.uint8)])
    (root / "images_2").mkdir()
    Image.fromarray(np.full((6, 8, 3), 7, np.uint8)).save(root / "images_2" / "img_000.png")
    (half,) = finalize_half(root, raw, tmp_path / "cache")
    assert half.image_path == root / "images_2" / "img_000.png"


@pytest.mark.parametrize("factor", [1, 2, 4])
def test_source_of_another_size_is_refused_at_every_factor(tmp_path, factor):
    from recon.data.finalize import finalize_frames

    root, raw = downscale_dataset(tmp_path, [np.zeros((12, 24, 3), np.uint8)])  # camera says 16x12
    with pytest.raises(MissingImageError, match=r"img_000\.png is 24x12, its camera expects 16x12 "
                                                r"\(a different aspect ratio"):
        frames = finalize_frames(raw, root, root / "list.json", data_factor=factor, cache_dir=tmp_path / "c")
        load_image(frames[0])


def test_16_bit_mask_keeps_its_range(tmp_path):
    from recon.data.scene import load_mask

    ramp = (np.arange(16 * 12).reshape(12, 16) * 300).astype(np.uint16)
    (frame,) = frames_for(1, tmp_path)
    mask_path = tmp_path / "mask.png"
    Image.fromarray(ramp).save(mask_path)
    frame.mask_path = mask_path
    got = load_mask(frame)
    np.testing.assert_allclose(got, ramp / 65535.0, atol=1e-7)  # convert("L") clipped it: 1.0 above 255


def test_undistorting_16_bit_grey_keeps_its_range(tmp_path):
    from recon.data.scene import Distortion
    from recon.data.undistort import _undistort_file

    ramp = (np.arange(16 * 12).reshape(12, 16) * 300).astype(np.uint16)
    src, dst = tmp_path / "src.png", tmp_path / "dst.png"
    Image.fromarray(ramp).save(src)
    K = np.array([[20.0, 0, 8], [0, 20.0, 6], [0, 0, 1]])
    _undistort_file(src, dst, Distortion("OPENCV", np.zeros(4)), K, K, 16, 12, "image")  # zero coefficients
    out = Image.open(dst)
    assert out.mode == "I;16"
    np.testing.assert_allclose(np.asarray(out, dtype=np.float64), ramp, atol=1.0)


def test_stale_undistortion_cache_is_rebuilt(tmp_path):
    """An undistorted file is reused only while its key matches: a replaced source (same size), a file
    of the right size written there by someone else, or another lens makes it again."""
    from recon.data.finalize import finalize_frames
    from recon.data.scene import Distortion

    root, raw = downscale_dataset(tmp_path, [np.full((12, 16, 3), 40, np.uint8)])
    cache = tmp_path / "cache"

    def undistorted(coeffs=(0.05, 0.0, 0.0, 0.0)) -> Frame:
        (frame,) = finalize_frames([(raw[0][0], Distortion("OPENCV", np.array(coeffs)))], root,
                                   root / "list.json", cache_dir=cache)
        return frame

    first = undistorted()
    assert first.image_path.parent.parent.parent == cache and np.allclose(load_image(first), 40 / 255)
    made = first.image_path.stat().st_ino  # a file made again is a new file (atomic replace)
    assert undistorted().image_path.stat().st_ino == made  # fresh: reused
    src = raw[0][0].image_path
    before = src.stat()
    Image.fromarray(np.full((12, 16, 3), 200, np.uint8)).save(src)  # same size, new content
    os.utime(src, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    assert np.allclose(load_image(undistorted()), 200 / 255)
    Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save(first.image_path)  # the right size, not ours
    assert np.allclose(load_image(undistorted()), 200 / 255)
    lens = first.image_path.stat().st_ino
    again = undistorted((0.1, 0.0, 0.0, 0.0))  # another lens: another picture and camera
    assert again.image_path.stat().st_ino != lens and not torch.equal(again.camera.K, first.camera.K)
    assert undistorted((0.1, 0.0, 0.0, 0.0)).image_path.stat().st_ino == again.image_path.stat().st_ino


def test_16_bit_colour_png_is_read_with_its_range(tmp_path):
    """Pillow decodes 16-bit RGB PNGs to their high byte: 8-bit precision, range kept (never clipped)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    arr = np.zeros((12, 16, 3), np.uint16)
    arr[..., 0], arr[..., 1], arr[..., 2] = 60000, 30000, 1000
    raw = b"".join(b"\x00" + arr[y].astype(">u2").tobytes() for y in range(12))
    (frame,) = frames_for(1, tmp_path)
    frame.image_path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 12, 16, 2, 0, 0, 0))
                                 + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    np.testing.assert_allclose(load_image(frame)[0, 0], np.array([60000, 30000, 1000]) / 65535.0, atol=1 / 255)
