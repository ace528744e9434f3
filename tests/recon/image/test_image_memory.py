"""`image fit` and `image render` size their memory from the file's header before decoding (issue 52: a 96-megapixel
PNG of a few MB reached 1.47 GB in `image fit`; a .gimg of a million Gaussians reached 1 GB in `image render`):
over --max-memory-gb is one line naming the file, the estimate and the option, and nothing is decoded. PNG
samples are converted a block of rows at a time (the same values as one whole-image conversion)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recon.cli import main
from recon.core.errors import UsageError
from recon.image.fit_memory import fit_memory_bytes


def _run(argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
        raise SystemExit(0)
    return exc.value.code, capsys.readouterr().err


def _flat_png(path, width, height, mode="RGB"):
    from PIL import Image

    Image.new(mode, (width, height)).save(path)  # a few kB: flat colour compresses to almost nothing
    return path


def _never(*args, **kwargs):
    raise AssertionError("decoded: the memory check must come first")


def test_fit_of_an_image_too_large_for_the_memory_limit_is_refused_before_decoding(tmp_path, capsys, monkeypatch):
    path = _flat_png(tmp_path / "wide.png", 4000, 3000)
    monkeypatch.setattr("recon.image.io.read_image", _never)
    code, err = _run(["image", "fit", path, "--out", tmp_path / "m.gimg", "--steps", 1, "--gaussians", 100,
                      "--max-memory-gb", 1], capsys)
    lines = err.strip().splitlines()
    need = fit_memory_bytes(4000, 3000, 3, 100) / 2**30
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"wide.png: fitting this 4000x3000 image (3 channels, 100 Gaussians) needs about {need:.1f} GiB" in lines[0]
    assert "--max-memory-gb 1 limit" in lines[0] and not (tmp_path / "m.gimg").exists()


GIB = 2**30


@pytest.mark.parametrize("available_gib, fits", [(64, True), (4.6, True), (3.5, False), (None, False)])
def test_the_default_limit_follows_the_available_memory(available_gib, fits, tmp_path, capsys, monkeypatch):
    """No --max-memory-gb: 80% of the memory available (at most 16 GiB) plus the program's own; a 12-megapixel
    photo (4000x3000 RGB, 25,000 Gaussians: about 3.6 GiB with the program) fits where that much is free and is
    refused, naming the default and the option, where it is not (2 GiB assumed when it cannot be read)."""
    from recon.image.fit_memory import FIT_PROCESS_BYTES, default_fit_max_memory_gb

    available = None if available_gib is None else int(available_gib * GIB)
    monkeypatch.setattr("recon.data.frame_images.available_memory_bytes", lambda: available)
    assert default_fit_max_memory_gb() == pytest.approx(
        (FIT_PROCESS_BYTES + min(int((available or 2.5 * GIB) * 0.8), 16 * GIB)) / GIB)
    path = _flat_png(tmp_path / "photo.png", 4000, 3000)
    decoded = []

    def reached(p):
        decoded.append(p)
        raise UsageError("past the memory check")

    monkeypatch.setattr("recon.image.io.read_image", reached)
    code, err = _run(["image", "fit", path, "--out", tmp_path / "m.gimg", "--steps", 1], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    if fits:  # past the memory check: the (patched) decode is reached
        assert decoded == [path] and "past the memory check" in err
    else:
        assert not decoded and "photo.png: fitting this 4000x3000 image (3 channels, 25,000 Gaussians) needs about" \
            in err and "over the default limit of" in err and "raise --max-memory-gb to at least" in err, err


def test_a_96_megapixel_png_is_refused_by_default_on_any_machine(tmp_path, capsys, monkeypatch):
    """The outside corpus's 12000x8000 flat PNG (300 kB): 24 GiB estimated, over the default's 16 GiB cap even with
    a terabyte available."""
    monkeypatch.setattr("recon.data.frame_images.available_memory_bytes", lambda: 1 << 40)
    path = _flat_png(tmp_path / "huge.png", 12000, 8000)
    monkeypatch.setattr("recon.image.io.read_image", _never)
    code, err = _run(["image", "fit", path, "--out", tmp_path / "m.gimg"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "huge.png: fitting this 12000x8000 image" in err, err
    assert "over the default limit of 16.6 GiB" in err, err


def test_a_folder_of_images_is_checked_image_by_image_from_the_headers(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    _flat_png(folder / "a.png", 16, 16)
    _flat_png(folder / "b.png", 3000, 3000, "L")  # grey: 1 channel
    monkeypatch.setattr("recon.image.io.read_image", _never)
    code, err = _run(["image", "fit", folder, "--out", tmp_path / "out", "--gaussians", 10,
                      "--max-memory-gb", 1], capsys)  # a.png: the program's 0.62 GiB; b.png 0.74 GiB more
    assert code == 2 and "b.png: fitting this 3000x3000 image (1 channels, 10 Gaussians)" in err, err
    assert "--max-memory-gb 1 limit" in err


def test_a_raised_limit_lets_the_same_image_through(tmp_path, capsys):
    path = _flat_png(tmp_path / "small.png", 24, 16)
    code, err = _run(["image", "fit", path, "--out", tmp_path / "m.gimg", "--steps", 1, "--gaussians", 10,
                      "--no-progress", "--max-memory-gb", 0.7], capsys)  # over the program's 0.62 GiB
    assert code == 0 and (tmp_path / "m.gimg").is_file(), err
    code, err = _run(["image", "fit", path, "--out", tmp_path / "n.gimg", "--max-memory-gb", 0], capsys)
    assert code == 2 and "--max-memory-gb 0.0: must be > 0" in err


def _gimg(path, n, width, height):
    from recon.image.gimg import encode_gimg
    from recon.image.model import ImageGaussians

    means = torch.zeros(n, 2)
    chol = torch.tensor([2.0 / width, 0.0, 2.0 / height]).repeat(n, 1)
    model = ImageGaussians(means, chol, torch.full((n, 3), 0.001), width, height, "RGB", {}, 1 / 12)
    path.write_bytes(encode_gimg(model, "quantized"))  # identical Gaussians: zstd makes them a few kB
    return path


def test_render_of_a_model_with_too_many_gaussians_is_refused_from_its_header(tmp_path, capsys, monkeypatch):
    from recon.image.resample import RENDER_BYTES_PER_GAUSSIAN

    path = _gimg(tmp_path / "many.gimg", 2_000_000, 1000, 1000)
    assert path.stat().st_size < 100_000
    monkeypatch.setattr("recon.image.codec.decode_arrays", _never)
    code, err = _run(["image", "render", path, "--out", tmp_path / "r.png"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "many.gimg (fitted at 1000x1000): 1000x1000 x 3 channels needs about" in lines[0]
    assert f"2,000,000 Gaussians x {RENDER_BYTES_PER_GAUSSIAN} bytes" in lines[0] and "--max-memory-gb 1 limit" in lines[0]


def test_render_of_a_small_model_at_its_size_still_works(tmp_path, capsys):
    path = _gimg(tmp_path / "few.gimg", 20, 40, 30)
    code, err = _run(["image", "render", path, "--out", tmp_path / "r.png"], capsys)
    assert code == 0 and (tmp_path / "r.png").is_file(), err


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_png_samples_by_blocks_of_rows_equal_the_whole_image_conversion(dtype, monkeypatch):
    from recon.image import io

    pixels = torch.rand(37, 23, 3, generator=torch.Generator().manual_seed(1)) * 1.4 - 0.2  # some outside [0, 1]
    top = float(np.iinfo(dtype).max)
    whole = np.rint(pixels.to(torch.float64).clamp(0.0, 1.0).numpy() * top).astype(dtype)
    monkeypatch.setattr(io, "SAMPLE_ROWS_VALUES", 5 * 23 * 3)  # blocks of 5 rows: 8 blocks, the last short
    assert np.array_equal(io.png_samples(pixels, dtype), whole)


@pytest.mark.parametrize("mode,transparent", [("P", False), ("P", True), ("LA", False), ("L", False), ("RGB", False),
                                               ("RGBA", False), ("1", False)])
def test_header_channels_are_the_decoded_channels(tmp_path, mode, transparent):
    """The channel count read from the header (sizing the fit) is the one the decoded image has (a palette image is
    RGB unless it has a transparent entry)."""
    from PIL import Image

    from recon.image.io import read_image, read_image_header

    image = Image.new(mode, (5, 4))
    kwargs = {"transparency": 0} if transparent else {}
    image.save(tmp_path / "x.png", **kwargs)
    assert read_image_header(tmp_path / "x.png")[2] == read_image(tmp_path / "x.png").pixels.shape[2]
