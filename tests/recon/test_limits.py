"""The reader rules of recon/core/limits.py, one by one, and the CLI's one line for a MemoryError."""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np
import pytest

from recon.core import limits
from recon.core.errors import InputFileError


def test_json_depth_ignores_brackets_in_strings_and_escapes():
    assert limits.json_depth(b'{"a": "[[[[", "b": "\\\\\\"[[", "c": [[1]]}') == 3
    assert limits.json_depth(b"[]" * 1000) == 1
    assert limits.json_depth(b"[" * 100_000 + b"]" * 100_000) == 100_000


def test_json_depth_scan_crosses_chunk_boundaries(monkeypatch):
    monkeypatch.setattr(limits, "_SCAN_CHUNK", 7)
    assert limits.json_depth(b"[" * 50 + b"]" * 50 + b"[[]]") == 50


@pytest.mark.parametrize("data, message", [
    (b"[" * 1000 + b"]" * 1000, r"nests 1000 levels deep, more than the 512 allowed"),
    (b'{"a": NaN}', r"holds NaN, which is not a number in JSON"),
    (b'{"a": -Infinity}', r"holds -Infinity"),
    (b'{"a": "\xff"}', r"not UTF-8 text \(byte 7"),
    (b'{"a": ', r"not valid JSON"),
])
def test_load_json_refuses_in_one_line_naming_the_file(tmp_path, data, message):
    path = tmp_path / "bad.json"
    path.write_bytes(data)
    with pytest.raises(InputFileError, match=message) as info:
        limits.load_json(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_load_json_allows_nan_when_asked_and_keeps_values(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({"x": float("nan"), "y": [1, {"z": "[["}]}))
    data = limits.load_json(path, allow_nan=True)
    assert np.isnan(data["x"]) and data["y"] == [1, {"z": "[["}]


def test_load_json_size_ceiling_and_special_files(tmp_path):
    path = tmp_path / "big.json"
    path.write_text("[" + "1," * 100 + "1]")
    with pytest.raises(InputFileError, match=r"203 bytes, more than the 50 a JSON file may have"):
        limits.load_json(path, max_bytes=50)
    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(InputFileError, match=r"not a regular file"):
        limits.load_json(tmp_path / "pipe.json")
    with pytest.raises(InputFileError, match=r"is a folder"):
        limits.load_json(tmp_path)


def test_with_path_keeps_the_callers_error_class(tmp_path):
    class MyError(ValueError):
        pass

    path = tmp_path / "deep.json"
    path.write_bytes(b"[" * 600 + b"]" * 600)
    with pytest.raises(MyError, match=r"deep\.json: .*nests 600"):
        limits.load_json(path, error=limits.with_path(MyError))


def test_image_pixel_limit_is_checked_before_decoding(tmp_path):
    from tests.corpus.bad_files import png_declaring

    path = tmp_path / "big.png"
    path.write_bytes(png_declaring(12000, 12000))  # 1.44e8 pixels: over 2^27, under Pillow's bomb error
    import warnings

    with warnings.catch_warnings():  # Pillow's DecompressionBombWarning is silenced: our own limit speaks
        warnings.simplefilter("error")
        with pytest.raises(InputFileError, match=r"12000x12000 = 144,000,000 pixels"):
            limits.read_image_size(path)
    path.write_bytes(png_declaring(30000, 30000))  # past Pillow's own limit: its error, caught
    with pytest.raises(InputFileError, match=r"too many pixels to decode"):
        limits.open_image(path)


def test_open_image_reads_a_good_image(tmp_path):
    from PIL import Image

    Image.new("RGB", (5, 3), (10, 20, 30)).save(tmp_path / "a.png")
    im = limits.open_image(tmp_path / "a.png")
    assert im.size == (5, 3) and limits.read_image_size(tmp_path / "a.png") == (5, 3)


def test_require_finite_names_field_and_index():
    a = np.zeros((4, 3), np.float32)
    a[2, 1] = np.inf
    with pytest.raises(InputFileError, match=r"f\.ply: scales holds 1 non-finite .* at index \(2, 1\)"):
        limits.require_finite(a, "f.ply", "scales")
    limits.require_finite(np.arange(3), "f.ply", "ints")  # integers are always finite


def test_npy_and_npz_headers_checked_against_bytes_present(tmp_path):
    good = tmp_path / "good.npy"
    np.save(good, np.ones((3, 17)))
    assert limits.check_npy_header(good) == ((3, 17), np.dtype("<f8"))
    short = tmp_path / "short.npy"
    short.write_bytes(good.read_bytes()[:-8])
    with pytest.raises(InputFileError, match=r"declares an array of shape \(3, 17\) \(408 bytes\) but holds 400"):
        limits.check_npy_header(short)
    npz = tmp_path / "a.npz"
    np.savez_compressed(npz, data=np.ones((10, 7)))
    assert limits.check_npz(npz) == {"data": ((10, 7), np.dtype("<f8"))}
    with zipfile.ZipFile(tmp_path / "obj.npz", "w") as zf:
        buf = io.BytesIO()
        np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        zf.writestr("data.npy", buf.getvalue())
    with pytest.raises(InputFileError, match=r"holds Python objects"):
        limits.check_npz(tmp_path / "obj.npz")


def test_memory_guard_turns_memory_error_into_one_line():
    with pytest.raises(InputFileError, match=r"^in\.ply: out of memory while reading it") as caught:
        with limits.memory_guard("in.ply"):
            raise MemoryError("Unable to allocate 8.00 TiB for an array")
    from recon.core.errors import memory_line

    # one message: the guard's and the CLI's lines differ only in how they name the input
    cli_line = memory_line(MemoryError("Unable to allocate 8.00 TiB for an array"), "in.ply")
    assert str(caught.value) == "in.ply: " + cli_line.replace("reading in.ply", "reading it")
    assert "\n" not in cli_line and "8.00 TiB" in cli_line and "more memory" in cli_line


def test_cli_memory_error_is_one_line_naming_the_input(tmp_path, monkeypatch, capsys):
    """A MemoryError escaping any command: exit 2, one line naming the command's input paths."""
    from recon import cli
    from recon.export import write_ply
    from recon.export.splats import random_splats

    src = tmp_path / "m.ply"
    write_ply(src, random_splats(4, sh_degree=0))

    def no_memory(argv):
        raise MemoryError("Unable to allocate 7.28 TiB for an array with shape (1000000000000,)")

    monkeypatch.setattr(cli, "run_subcommand", no_memory)
    with pytest.raises(SystemExit) as exc:
        cli.main(["export", str(src), "--out", str(tmp_path / "o.spz")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("splatforge export: error: out of memory while reading ") and str(src) in err[0]
