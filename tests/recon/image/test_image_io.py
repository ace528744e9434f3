"""Image files for `splatforge image`: how each kind is read (16-bit, grey, RGBA, palette), clear errors for
files that are no images, and PNG writing (8- and 16-bit, atomic)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from recon.core.errors import UsageError
from recon.image import png16
from recon.image.io import ImageFileError, encode_png, read_image, write_png


def rgb_array(h=6, w=7, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_not_an_image_names_the_file(tmp_path):
    path = tmp_path / "notes.png"
    path.write_text("this is text, not pixels\n")
    with pytest.raises(ImageFileError, match=r"notes\.png: not an image file") as err:
        read_image(path)
    assert isinstance(err.value, UsageError)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jpg"
    path.write_bytes(b"")
    with pytest.raises(ImageFileError, match=r"empty\.jpg: the file is empty"):
        read_image(path)


def test_truncated_png(tmp_path):
    path = tmp_path / "cut.png"
    Image.fromarray(rgb_array(40, 40)).save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageFileError, match=r"cut\.png: .*(cut short|damaged)"):
        read_image(path)


def test_missing_file_is_a_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_image(tmp_path / "nope.png")


def test_rgb_8bit(tmp_path):
    a = rgb_array()
    Image.fromarray(a).save(tmp_path / "c.png")
    img = read_image(tmp_path / "c.png")
    assert img.layout == "RGB" and img.pixels.dtype == torch.float32 and img.pixels.shape == (6, 7, 3)
    assert torch.equal(img.pixels, torch.from_numpy(a.astype(np.float32) / 255.0))
    assert img.source["bit_depth"] == 8 and img.source["name"] == "c.png"


def test_grey_is_one_channel(tmp_path):
    a = rgb_array()[..., 0]
    Image.fromarray(a, "L").save(tmp_path / "g.png")
    img = read_image(tmp_path / "g.png")
    assert img.layout == "L" and img.pixels.shape == (6, 7, 1)
    assert torch.equal(img.pixels[..., 0], torch.from_numpy(a.astype(np.float32) / 255.0))
    assert "1 channel" in img.source["note"]


def test_rgba_alpha_is_a_fitted_channel(tmp_path):
    a = np.random.default_rng(1).integers(0, 256, (5, 4, 4), dtype=np.uint8)
    Image.fromarray(a, "RGBA").save(tmp_path / "t.png")
    img = read_image(tmp_path / "t.png")
    assert img.layout == "RGBA" and img.pixels.shape == (5, 4, 4)
    assert torch.equal(img.pixels, torch.from_numpy(a.astype(np.float32) / 255.0))  # not premultiplied


def test_palette_becomes_rgb(tmp_path):
    a = rgb_array()
    Image.fromarray(a).convert("P", palette=Image.Palette.ADAPTIVE, colors=8).save(tmp_path / "p.png")
    expected = np.asarray(Image.open(tmp_path / "p.png").convert("RGB")).astype(np.float32) / 255.0
    img = read_image(tmp_path / "p.png")
    assert img.layout == "RGB" and img.source["mode"] == "P" and "converted to RGB" in img.source["note"]
    assert torch.equal(img.pixels, torch.from_numpy(expected))


@pytest.mark.parametrize("channels, layout", [(3, "RGB"), (4, "RGBA"), (1, "L")])
def test_16bit_png_scaled_by_65535_and_kept_as_float(tmp_path, channels, layout):
    a = np.random.default_rng(2).integers(0, 65536, (5, 6, channels), dtype=np.uint16)
    (tmp_path / "d.png").write_bytes(png16.encode_png16(a))
    img = read_image(tmp_path / "d.png")
    assert img.layout == layout and img.bit_depth == 16 and "65535" in img.source["note"]
    assert torch.equal(img.pixels, torch.from_numpy(a.astype(np.float32) / 65535.0))  # not rounded to 8 bits


def test_16bit_grey_saved_by_pillow(tmp_path):
    a = np.random.default_rng(3).integers(0, 65536, (4, 5), dtype=np.uint16)
    Image.fromarray(a).save(tmp_path / "g16.png")  # Pillow writes a 16-bit grey PNG
    img = read_image(tmp_path / "g16.png")
    assert img.layout == "L" and img.bit_depth == 16
    assert torch.allclose(img.pixels[..., 0], torch.from_numpy(a.astype(np.float32) / 65535.0), atol=0, rtol=0)


def test_png16_unfilters_pillow_written_files(tmp_path):
    """png16's decoder against Pillow's encoder (which uses adaptive filters: Sub, Up, Average, Paeth)."""
    rng = np.random.default_rng(4)
    smooth = (np.cumsum(rng.integers(0, 900, (30, 40)), axis=1) % 65536).astype(np.uint16)
    Image.fromarray(smooth).save(tmp_path / "s.png", optimize=True)
    assert np.array_equal(png16.read_png16((tmp_path / "s.png").read_bytes())[..., 0], smooth)


def test_damaged_16bit_png(tmp_path):
    data = png16.encode_png16(np.zeros((8, 8, 3), np.uint16))
    (tmp_path / "bad.png").write_bytes(data[:40])
    with pytest.raises(ImageFileError, match=r"bad\.png: cannot read this 16-bit PNG"):
        read_image(tmp_path / "bad.png")


def test_float_image_refused(tmp_path):
    Image.fromarray(np.ones((3, 3), np.float32), "F").save(tmp_path / "f.tif")
    with pytest.raises(ImageFileError, match="floating-point"):
        read_image(tmp_path / "f.tif")


@pytest.mark.parametrize("layout, channels", [("L", 1), ("RGB", 3), ("RGBA", 4)])
@pytest.mark.parametrize("bits", [8, 16])
def test_write_png_round_trip(tmp_path, layout, channels, bits):
    pixels = torch.rand(5, 7, channels, generator=torch.Generator().manual_seed(5))
    path = write_png(tmp_path / "o.png", pixels, layout, bits)
    back = read_image(path)
    assert back.layout == layout and back.bit_depth == bits
    assert float((back.pixels - pixels).abs().max()) <= 0.5 / (2**bits - 1) + 1e-7


def test_write_png_clamps_and_refuses_overwrite(tmp_path):
    pixels = torch.tensor([[[-0.5, 0.5, 1.5]]])
    write_png(tmp_path / "o.png", pixels, "RGB")
    assert np.asarray(Image.open(tmp_path / "o.png")).tolist() == [[[0, 128, 255]]]
    with pytest.raises(FileExistsError):
        write_png(tmp_path / "o.png", pixels, "RGB")
    with pytest.raises(ValueError):
        encode_png(pixels, "L")
