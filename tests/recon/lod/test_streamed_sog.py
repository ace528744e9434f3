"""PlayCanvas' Streamed SOG from an LOD export (recon/lod/streamed_sog.py)."""

import json
import shutil
import subprocess

import numpy as np
import pytest

from recon.export import read_splats
from recon.lod import streamed_sog
from recon.lod.export_lod import write_lod
from recon.lod.hierarchy import build_hierarchy
from recon.lod.streamed_sog import StreamedSogError, check_lod_meta, find_splat_transform, write_streamed_sog

from .scenes import small_model

TOOL = find_splat_transform()
needs_tool = pytest.mark.skipif(TOOL is None, reason="splat-transform not installed (bash scripts/install_outside_"
                                                     "readers.sh, or $SPLATFORGE_SPLAT_TRANSFORM)")


def _fake_sog(folder, counts, tree_counts=None):
    folder.mkdir(parents=True)
    files = []
    for level in range(len(counts)):
        (folder / f"{level}_0").mkdir()
        (folder / f"{level}_0" / "meta.json").write_text("{}")
        files.append(f"{level}_0/meta.json")
    tree_counts = tree_counts or counts
    tree = {"bound": {"min": [0, 0, 0], "max": [1, 1, 1]},
            "lods": {str(lv): {"file": lv, "offset": 0, "count": c} for lv, c in enumerate(tree_counts)}}
    meta = {"version": 1, "count": sum(counts), "counts": counts, "lodLevels": len(counts), "filenames": files,
            "tree": tree}
    (folder / "lod-meta.json").write_text(json.dumps(meta))


def test_lod_meta_is_checked_against_our_levels(tmp_path):
    _fake_sog(tmp_path / "a", [100, 20, 1])
    assert check_lod_meta(tmp_path / "a", [100, 20, 1])["lodLevels"] == 3
    with pytest.raises(StreamedSogError, match="counts"):
        check_lod_meta(tmp_path / "a", [100, 21, 1])
    _fake_sog(tmp_path / "b", [100, 20, 1], tree_counts=[100, 19, 1])
    with pytest.raises(StreamedSogError, match="tree's entries"):
        check_lod_meta(tmp_path / "b", [100, 20, 1])
    (tmp_path / "a" / "1_0" / "meta.json").unlink()
    with pytest.raises(StreamedSogError, match="not inside the folder"):
        check_lod_meta(tmp_path / "a", [100, 20, 1])
    for bad in ({"x": {"file": 0, "count": 1}}, {"0": [1, 2]}, {"0": {"file": "0", "count": 1}}, {"0": {"file": 0}},
                ["not", "an", "object"]):  # damaged tree entries: one line, never a traceback
        _fake_sog(tmp_path / "d", [1])
        meta = json.loads((tmp_path / "d" / "lod-meta.json").read_text())
        meta["tree"]["lods"] = bad
        (tmp_path / "d" / "lod-meta.json").write_text(json.dumps(meta))
        with pytest.raises(StreamedSogError, match="tree"):
            check_lod_meta(tmp_path / "d", [1])
        shutil.rmtree(tmp_path / "d")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "lod-meta.json").write_text("{not json")
    with pytest.raises(StreamedSogError, match="lod-meta.json"):
        check_lod_meta(tmp_path / "c", [1])


def test_missing_tool_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setattr(streamed_sog, "find_splat_transform", lambda: None)
    with pytest.raises(StreamedSogError, match="splat-transform .*install_outside_readers"):
        write_streamed_sog(tmp_path / "lod", tmp_path / "sog")


@needs_tool
def test_streamed_sog_written_by_splat_transform_reads_back(tmp_path):
    data = small_model(300, seed=2, extent=4.0, sh_degree=0)
    h = build_hierarchy(data, depth=5)
    manifest = write_lod(h, tmp_path / "lod", view_budget=100, progress=False)
    counts = [lv.count for lv in manifest.levels]
    meta = write_streamed_sog(tmp_path / "lod", tmp_path / "sog")
    assert meta["counts"] == counts
    # each chunk decodes (splat-transform reads its own SOG back), the levels' Gaussians all there
    total = 0
    for i, name in enumerate(meta["filenames"]):
        out = tmp_path / f"chunk{i}.ply"
        proc = subprocess.run([str(TOOL), "-q", "-w", "-g", "cpu", str(tmp_path / "sog" / name), str(out)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        back = read_splats(out)
        total += len(back)
        lo, hi = data.means.min(axis=0) - 0.5, data.means.max(axis=0) + 0.5
        assert ((back.means >= lo) & (back.means <= hi)).all()
    assert total == sum(counts)
    with pytest.raises(FileExistsError):
        write_streamed_sog(tmp_path / "lod", tmp_path / "sog")
