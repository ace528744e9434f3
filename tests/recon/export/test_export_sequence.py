"""Per-frame splat sequences with a JSON manifest: write, read, atomicity, validation."""

import json

import numpy as np
import pytest

from rasterizer.camera import Camera
from recon.export import SplatFileError
from recon.export.sequence import (MANIFEST_NAME, SequenceWriter, read_sequence,
                                   write_sequence)
from recon.export.splats import random_splats


def frames(n=3, count=20):
    return [random_splats(count, sh_degree=1, seed=i, extent=2.0) for i in range(n)]


@pytest.mark.parametrize("fmt", ["spz", "ply", "splat", "glb"])
def test_round_trip(tmp_path, fmt):
    out = tmp_path / "seq"
    cam = Camera.from_arrays(np.eye(4), np.array([[100.0, 0, 50], [0, 100, 40], [0, 0, 1]]), 100, 80)
    fs = frames()
    manifest = write_sequence(out, fs, fps=24, format=fmt, camera=cam)
    obj = json.loads((out / MANIFEST_NAME).read_text())
    assert obj["version"] == 1 and obj["fps"] == 24 and obj["format"] == fmt
    assert [f["file"] for f in obj["frames"]] == [f"frame_{i:05d}.{fmt}" for i in range(3)]
    assert [f["time"] for f in obj["frames"]] == pytest.approx([0, 1 / 24, 2 / 24])
    assert obj["camera"]["width"] == 100 and len(obj["camera"]["world_to_cam"]) == 4
    r = read_sequence(out)
    assert len(r) == 3 == len(manifest) and r.camera.height == 80
    np.testing.assert_array_equal(r.camera.K_numpy(), cam.K_numpy())  # float64 through JSON, exactly
    for (t, data), src in zip(r, fs):
        assert len(data) == 20
        if fmt in ("ply", "glb"):
            np.testing.assert_allclose(data.means, src.means, atol=1e-6)
    assert read_sequence(out / MANIFEST_NAME).fps == 24
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seq"]  # no temp folders left


def test_incremental_writer_and_explicit_times(tmp_path):
    out = tmp_path / "seq"
    with SequenceWriter(out, fps=10, format="spz") as w:
        for i, f in enumerate(frames(2)):
            w.add(f, time=0.5 * i)
        assert not out.exists()  # nothing visible before the sequence is complete
    r = read_sequence(out)
    assert [f.time for f in r.frames] == [0.0, 0.5] and r.camera is None


def test_failure_leaves_nothing(tmp_path):
    out = tmp_path / "seq"
    with pytest.raises(RuntimeError):
        with SequenceWriter(out, fps=10) as w:
            w.add(frames(1)[0])
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_existing_output_refused_without_force(tmp_path):
    out = tmp_path / "seq"
    write_sequence(out, frames(1), fps=5)
    with pytest.raises(FileExistsError):
        write_sequence(out, frames(2), fps=5)
    assert len(read_sequence(out)) == 1
    write_sequence(out, frames(2), fps=5, force=True)
    assert len(read_sequence(out)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seq"]


def test_empty_and_bad_inputs(tmp_path):
    with pytest.raises(SplatFileError):
        write_sequence(tmp_path / "a", [], fps=5)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError):
        write_sequence(tmp_path / "b", frames(1), fps=0)
    with pytest.raises(ValueError):
        write_sequence(tmp_path / "c", frames(2), fps=5, times=[1.0, 0.5])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("patch, match", [
    ({"version": 2}, "version"),
    ({"fps": -1}, "fps"),
    ({"format": "xyz"}, "format"),
    ({"frames": []}, "no frames"),
    ({"frames": [{"time": 0, "file": "../evil.spz"}]}, "file name"),
    ({"frames": [{"time": 1, "file": "a.spz"}, {"time": 0, "file": "b.spz"}]}, "increasing"),
    ({"camera": {"world_to_cam": [[1]], "K": [[1]], "width": 1, "height": 1}}, "camera"),
])
def test_reader_validates(tmp_path, patch, match):
    out = tmp_path / "seq"
    write_sequence(out, frames(1), fps=5)
    obj = json.loads((out / MANIFEST_NAME).read_text())
    obj.update(patch)
    (out / MANIFEST_NAME).write_text(json.dumps(obj))
    with pytest.raises(SplatFileError, match=match):
        read_sequence(out)


def test_missing_frame_file(tmp_path):
    out = tmp_path / "seq"
    write_sequence(out, frames(2), fps=5)
    (out / "frame_00001.spz").unlink()
    with pytest.raises(FileNotFoundError, match="frame 1"):
        read_sequence(out)
