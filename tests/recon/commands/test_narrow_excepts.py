"""Errors are caught only where they are meant: a damaged checkpoint falls back to the previous one and
says so; anything else (no permission, a bug inside a parser) propagates instead of being swallowed or
reported as a damaged file. Config ``Path`` fields are recognised by type, not by annotation text."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
import torch

from recon.outputs import files as rf
from recon.export import SplatFileError, random_splats, read_splats, write_splats
from recon.losses.lpips import LPIPSWeightsError, load_weights


def two_checkpoints(out: Path) -> None:
    for step in (1, 2):
        rf.save_checkpoint(out, step, {"step": step}, keep=2)


def test_damaged_checkpoint_falls_back_and_says_so(tmp_path):
    two_checkpoints(tmp_path)
    newest = rf.checkpoint_path(tmp_path, 2)
    newest.write_bytes(newest.read_bytes()[:40])  # truncated
    lines = []
    step, payload = rf.load_latest_checkpoint(tmp_path, log=lines.append)
    assert step == 1 and payload["step"] == 1
    assert len(lines) == 1 and "ckpt_00002.pt: damaged checkpoint" in lines[0]


def test_unreadable_checkpoint_is_not_skipped(tmp_path, monkeypatch):
    two_checkpoints(tmp_path)

    def denied(path, **kw):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(torch, "load", denied)
    with pytest.raises(PermissionError):
        rf.load_latest_checkpoint(tmp_path, log=lambda line: None)


def test_ply_parser_bug_is_not_a_damaged_file(tmp_path, monkeypatch):
    path = tmp_path / "a.ply"
    write_splats(path, random_splats(5, seed=0))
    import recon.export.ply as ply

    def bug(*args, **kw):
        raise TypeError("an internal mistake")

    monkeypatch.setattr(ply.PlyData, "read", bug)
    with pytest.raises(TypeError, match="internal mistake"):
        read_splats(path)


def test_malformed_ply_is_a_splat_file_error(tmp_path):
    path = tmp_path / "a.ply"
    path.write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 2\nproperty float x\nend_header\n" + b"\0" * 8)
    with pytest.raises(SplatFileError):
        read_splats(path)


def test_lpips_weights_damaged_vs_bug(tmp_path, monkeypatch):
    bad = tmp_path / "alex.pth"
    bad.write_bytes(b"not a torch file at all")
    with pytest.raises(LPIPSWeightsError, match="cannot read LPIPS weights"):
        load_weights(bad, bad)

    def bug(*args, **kw):
        raise TypeError("an internal mistake")

    monkeypatch.setattr(torch, "load", bug)
    with pytest.raises(TypeError):
        load_weights(bad, bad)


@dataclass
class Inner:
    folder: Path = Path("x")
    kind: Literal["Path", "other"] = "other"  # the annotation's text holds "Path"; the type is a Literal


@dataclass
class Outer:
    where: Path | None = None
    label: str = "Pathfinder"
    inner: Inner = field(default_factory=Inner)


def test_path_fields_recognised_by_type():
    cfg = rf.config_from_dict(Outer, {"where": "a/b", "label": "Path", "inner": {"folder": "c", "kind": "Path"}})
    assert cfg.where == Path("a/b") and cfg.inner.folder == Path("c")
    assert cfg.label == "Path" and type(cfg.label) is str and cfg.inner.kind == "Path" and type(cfg.inner.kind) is str
    assert rf.config_from_dict(Outer, {"where": None}).where is None
