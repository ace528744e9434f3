"""The .gimg model file: exact float32 round trip, quantised within the documented error, clear errors for
truncated, foreign and future-version files; the codec's bits per pixel."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch

from recon.core.errors import DamagedFileError
from recon.image import codec, gimg
from recon.image.gimg import GimgError, decode_gimg, encode_gimg, read_gimg, write_gimg
from recon.image.model import ImageGaussians


def random_model(n=300, channels=3, width=40, height=30, seed=0) -> ImageGaussians:
    g = torch.Generator().manual_seed(seed)
    means = torch.rand(n, 2, generator=g) * 2 - 1
    px = torch.rand(n, 3, generator=g) * torch.tensor([2.0, 1.0, 2.0]) + torch.tensor([0.5, -0.5, 0.5])
    cholesky = px * torch.tensor([2 / width, 2 / height, 2 / height])
    colors = torch.rand(n, channels, generator=g) * 0.6 - 0.1
    layout = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    return ImageGaussians(means, cholesky, colors, width, height, layout, {"name": "x.png", "bit_depth": 8},
                          pixel_variance=1 / 12)


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_float32_round_trip_is_exact(tmp_path, channels):
    model = random_model(channels=channels)
    size = write_gimg(tmp_path / "m.gimg", model)
    back = read_gimg(tmp_path / "m.gimg")
    assert size == (tmp_path / "m.gimg").stat().st_size
    for name in ("means", "cholesky", "colors"):
        assert torch.equal(getattr(back, name), getattr(model, name)), name
    assert (back.width, back.height, back.layout, back.source) == (40, 30, model.layout, model.source)
    assert back.pixel_variance == model.pixel_variance
    assert torch.equal(back.render(backend="cpu"), model.render(backend="cpu"))


def test_quantized_within_documented_error(tmp_path):
    model = random_model(n=2000)
    write_gimg(tmp_path / "q.gimg", model, "quantized")
    back = read_gimg(tmp_path / "q.gimg")
    data = (tmp_path / "q.gimg").read_bytes()
    header, _ = gimg.read_header(data, "q")
    assert header["encoding"] == "quantized" and header["compression"] == "zstd"
    # means: float16 (relative error 2^-11, at most 2^-11 in [-1, 1])
    assert float((back.means - model.means).abs().max()) <= 2.0**-11
    for name in ("cholesky", "colors"):
        spec = header["quantization"][name]
        bound = torch.from_numpy(codec.quantization_error_bound(spec)).float()
        err = (getattr(back, name) - getattr(model, name)).abs().amax(dim=0)
        assert torch.all(err <= bound * (1 + 1e-5) + 1e-7), (name, err, bound)
        assert torch.all(err > bound * 0.5)  # really quantised (the bound is nearly reached with 2000 values)
    # a quantised file is much smaller than the float32 one
    assert len(data) < 0.45 * len(encode_gimg(model))


def test_bits_per_pixel_and_bpp_choice():
    model = random_model(n=500)
    data = encode_gimg(model)
    assert codec.bits_per_pixel(len(data), 40, 30) == pytest.approx(len(data) * 8 / 1200)
    assert gimg.file_bits_per_pixel(len(data), model) == pytest.approx(len(data) * 8 / 1200)
    assert codec.nominal_bits_per_gaussian("float32", 3) == 256
    assert codec.nominal_bits_per_gaussian("quantized", 3) == 80
    n = codec.gaussians_for_bpp(2.0, 500, 500, "quantized", 3)
    assert n == 6250 and n * 80 <= 2.0 * 500 * 500 < (n + 1) * 80
    # the float32 payload is exactly the nominal size
    header, start = gimg.read_header(data, "m")
    assert (len(data) - start) * 8 == 500 * codec.nominal_bits_per_gaussian("float32", 3)


def test_truncated_file(tmp_path):
    data = encode_gimg(random_model(n=50))
    _, start = gimg.read_header(data, "m")
    for cut in (5, 12, start - 3, start + 10, len(data) - 1):
        (tmp_path / "t.gimg").write_bytes(data[:cut])
        with pytest.raises(GimgError, match=r"t\.gimg: truncated") as err:
            read_gimg(tmp_path / "t.gimg")
        assert isinstance(err.value, DamagedFileError)


def test_truncated_quantized_payload():
    data = encode_gimg(random_model(n=50), "quantized")
    with pytest.raises(GimgError, match="truncated"):
        decode_gimg(data[:-7], "q.gimg")


def test_future_version_says_which_version_is_read(tmp_path):
    data = bytearray(encode_gimg(random_model(n=10)))
    struct.pack_into("<H", data, 8, gimg.FORMAT_VERSION + 1)
    (tmp_path / "f.gimg").write_bytes(bytes(data))
    with pytest.raises(GimgError, match=rf"version {gimg.FORMAT_VERSION + 1} was written by a newer splatforge; "
                                        rf"this splatforge reads format version {gimg.FORMAT_VERSION}"):
        read_gimg(tmp_path / "f.gimg")


def test_not_a_gimg_file(tmp_path):
    (tmp_path / "x.gimg").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    with pytest.raises(GimgError, match=r"x\.gimg: not a \.gimg file"):
        read_gimg(tmp_path / "x.gimg")
    (tmp_path / "e.gimg").write_bytes(b"")
    with pytest.raises(GimgError, match="not a .gimg file"):
        read_gimg(tmp_path / "e.gimg")


def test_damaged_header_and_trailing_bytes():
    data = encode_gimg(random_model(n=10))
    _, start = gimg.read_header(data, "m")
    broken = data[:14] + b"{" * (start - 14) + data[start:]
    with pytest.raises(GimgError, match="damaged header"):
        decode_gimg(broken, "d.gimg")
    with pytest.raises(GimgError, match="unexpected bytes"):
        decode_gimg(data + b"\0", "d.gimg")


def test_header_is_documented_json():
    data = encode_gimg(random_model(n=7, channels=4))
    assert data[:8] == gimg.MAGIC
    magic, version, length = struct.unpack_from("<8sHI", data)
    header = json.loads(data[14:14 + length])
    assert version == 1 and header["n"] == 7 and header["channels"] == 4 and header["layout"] == "RGBA"
    assert header["encoding"] == "float32" and header["payload_bytes"] == 7 * 9 * 4
    floats = np.frombuffer(data[14 + length:], "<f4")
    assert np.array_equal(floats[:14].reshape(7, 2), random_model(n=7, channels=4).means.numpy())
