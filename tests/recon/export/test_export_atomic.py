"""Atomic writes: no partial files on failure, no silent overwrites."""

import os
import stat

import pytest

from recon.export import write_splats
from recon.export import ply as ply_module
from recon.export.atomic import atomic_open, atomic_write_bytes
from recon.export.splats import random_splats


def test_writes_and_refuses_overwrite_without_force(tmp_path):
    path = tmp_path / "out.bin"
    atomic_write_bytes(path, b"first")
    assert path.read_bytes() == b"first"
    with pytest.raises(FileExistsError, match="--force") as e:
        atomic_write_bytes(path, b"second")
    assert "out.bin" in str(e.value)
    assert path.read_bytes() == b"first"
    atomic_write_bytes(path, b"second", force=True)
    assert path.read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_failure_leaves_no_file(tmp_path):
    path = tmp_path / "out.bin"
    with pytest.raises(RuntimeError):
        with atomic_open(path) as f:
            f.write(b"partial data")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_previous_file_when_forced(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_open(path, force=True) as f:
            f.write(b"new but unfinished")
            raise KeyboardInterrupt
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_permissions_follow_umask(tmp_path):
    path = tmp_path / "out.bin"
    atomic_write_bytes(path, b"x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_failing_writer_leaves_no_partial_export(tmp_path, monkeypatch):
    def broken(f, data, normals=True):
        f.write(b"ply\nformat binary_little_endian 1.0\n")
        raise OSError("disk full")

    monkeypatch.setattr(ply_module, "write_ply_stream", broken)
    path = tmp_path / "model.ply"
    with pytest.raises(OSError, match="disk full"):
        write_splats(path, random_splats(10, sh_degree=1))
    assert list(tmp_path.iterdir()) == []


def test_missing_directory_raises_and_creates_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        atomic_write_bytes(tmp_path / "no" / "such" / "dir.bin", b"x")
    assert list(tmp_path.iterdir()) == []
