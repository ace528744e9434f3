"""``scripts/fuzz_readers.py --replay DIR``: the reader each corpus file is sent to (explicit prefix, known
names, extension and first bytes), and a replay of a small generated corpus printing the fuzz table."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.corpus.replay_formats import choose_format

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fuzz_readers.py"


@pytest.fixture(scope="module")
def fuzz():
    spec = importlib.util.spec_from_file_location("fuzz_readers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_file_goes_to_the_reader_its_name_extension_or_bytes_choose(fuzz, tmp_path):
    known = set(fuzz.readers())
    files = {
        "ply4d__odd-name.bin": b"anything",  # an explicit prefix wins
        "config.yaml": b"steps: 1\n",
        "cameras.bin": b"\0" * 8,
        "ckpt_00100.pt": b"PK",
        "a.ply": fuzz.good_ply(),
        "b.ply": fuzz.good_ply4d(),
        "c.ply": b"ply\nformat ascii 1.0\nelement vertex 0\nproperty float x\nend_header\n",
        "d.glb": fuzz.good_glb(),
        "e.json": fuzz.good_keyframes(),
        "f.json": fuzz.good_camera_path(),
        "g.spz": b"",
        "notes.txt": b"not a format",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    chosen = {name: choose_format(tmp_path / name, known) for name in files}
    assert chosen == {"ply4d__odd-name.bin": "ply4d", "config.yaml": "config-yaml", "cameras.bin": "colmap-cameras.bin",
                      "ckpt_00100.pt": "checkpoint", "a.ply": "ply", "b.ply": "ply4d", "c.ply": "mesh-ply",
                      "d.glb": "glb", "e.json": "keyframes", "f.json": "camera-path", "g.spz": "spz",
                      "notes.txt": None}
    assert set(chosen.values()) - {None} <= known


def test_replay_of_a_small_corpus_prints_the_table(fuzz, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    (corpus / "splats").mkdir(parents=True)
    good = fuzz.good_ply()
    (corpus / "splats" / "good.ply").write_bytes(good)
    (corpus / "splats" / "cut.ply").write_bytes(good[: len(good) // 2])
    (corpus / "ply__zeros.bin").write_bytes(bytes(4096))
    (corpus / "readme.txt").write_bytes(b"how these were found")
    rc = fuzz.main(["--replay", str(corpus), "--timeout", "300"])
    out = json.loads(capsys.readouterr().out)
    assert out["unplaced"] == ["readme.txt"]
    (row,) = out["formats"]
    assert row["format"] == "ply" and row["cases"] == 3 and row["loads"] == 1 and row["clear_errors"] == 2
    assert row["good_file_loads"] is None and row["wrong"] == row["tracebacks"] == row["crashes"] == 0
    assert rc == 0


def test_replay_of_a_missing_folder_is_one_line(fuzz, tmp_path, capsys):
    assert fuzz.main(["--replay", str(tmp_path / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err
