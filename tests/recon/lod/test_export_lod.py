"""LOD export (recon/lod/export_lod.py, recon/lod/manifest.py): round trips, the manifest read back exactly, and
clear errors for damaged exports; the `splatforge export --format lod` command."""

import json
import os

import numpy as np
import pytest

from recon.core.splat_data import sigmoid
from recon.export import write_splats
from recon.lod.export_lod import LodExport, choose_levels, write_lod
from recon.lod.hierarchy import build_hierarchy
from recon.lod.manifest import LodManifestError, read_manifest

from .scenes import small_model


@pytest.fixture(scope="module")
def tree():
    return build_hierarchy(small_model(3000, seed=11, extent=2.0, sh_degree=2), depth=10)


@pytest.fixture
def export(tree, tmp_path):
    out = tmp_path / "lod"
    manifest = write_lod(tree, out, view_budget=1000, chunk_size=400, progress=False)
    return tree, out, manifest


def test_manifest_reads_back_exactly(export):
    _, out, manifest = export
    assert read_manifest(out) == manifest
    assert LodExport(out).manifest == manifest
    assert len(manifest.levels) >= 3 and manifest.levels[0].count == 3000 and manifest.levels[-1].count == 1
    assert [lv.count for lv in manifest.levels] == sorted((lv.count for lv in manifest.levels), reverse=True)
    assert manifest.levels[0].error == 0.0 and manifest.levels[1].error > 0.0
    assert manifest.octree.chunk_depth >= 1 and len(manifest.chunks) > len(manifest.levels)
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_chunks_round_trip(export):
    """Every chunk reads back as its nodes' Gaussians (within SPZ's quantisation); level 0 is the model."""
    h, out, manifest = export
    from recon.lod.export_lod import plan_chunks

    lod = LodExport(out)
    lod.check_files()
    planned = plan_chunks(h, choose_levels(h), manifest.octree.chunk_depth)
    for level, (depth, nodes) in enumerate(choose_levels(h)):
        assert manifest.levels[level].octree_depth == depth
        got = lod.read_level(level)
        order = np.concatenate([c.nodes for c in planned if c.level == level])  # chunk by chunk
        assert sorted(order.tolist()) == sorted(nodes.tolist())
        want = h.nodes.subset(order)
        assert len(got) == len(want)
        a = b = slice(None)
        np.testing.assert_allclose(got.means[a], want.means[b], atol=2.0 ** -12)
        np.testing.assert_allclose(sigmoid(got.logit_opacities[a]), sigmoid(want.logit_opacities[b]), atol=0.5 / 255 + 1e-6)
        np.testing.assert_allclose(got.log_scales[a], want.log_scales[b], atol=1 / 32 + 1e-6)
        np.testing.assert_allclose(got.sh[a][:, 0], want.sh[b][:, 0], atol=0.5 / (0.15 * 255) + 1e-5)
    for i, c in enumerate(manifest.chunks):  # bounds hold the chunk's Gaussians; children add up to the parent
        data = lod.read_chunk(i)
        assert (data.means >= np.array(c.bounds.min) - 1e-3).all() and (data.means <= np.array(c.bounds.max) + 1e-3).all()
    children = manifest.children()
    for i, c in enumerate(manifest.chunks):
        if c.level > 0:
            kids = children[i]
            assert kids and all(manifest.chunks[k].level == c.level - 1 for k in kids)


def test_chunk_children_replace_their_parent_exactly(export):
    """The leaves below a chunk's Gaussians are the leaves below its children's."""
    h, out, manifest = export
    from recon.lod.export_lod import plan_chunks

    planned = plan_chunks(h, choose_levels(h), manifest.octree.chunk_depth)
    assert [c.count for c in manifest.chunks] == [len(p.nodes) for p in planned]

    def leaves_below(nodes):
        out, todo = set(), list(nodes)
        while todo:
            n = todo.pop()
            if n < h.num_leaves:
                out.add(int(n))
            else:
                todo.extend(h.children[h.child_start[n - h.num_leaves]:h.child_start[n - h.num_leaves + 1]])
        return out

    children = manifest.children()
    for i in range(0, len(planned), 7):
        if planned[i].level == 0:
            continue
        below = set().union(*(leaves_below(planned[k].nodes) for k in children[i]))
        assert below == leaves_below(planned[i].nodes)


def test_existing_output_and_failed_export(tree, tmp_path):
    out = tmp_path / "lod"
    write_lod(tree, out, view_budget=10, progress=False)
    with pytest.raises(FileExistsError, match="--force"):
        write_lod(tree, out, view_budget=10, progress=False)
    m = write_lod(tree, out, view_budget=20, progress=False, force=True, sh_degree=0)
    assert read_manifest(out).view_budget == 20 and m.sh_degree == 0
    assert LodExport(out).read_chunk(0).sh_degree == 0
    far = build_hierarchy(small_model(50, extent=5000.0), depth=4)  # positions beyond SPZ's 24-bit range
    with pytest.raises(Exception, match="SPZ range"):
        write_lod(far, tmp_path / "far", view_budget=10, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lod"]  # nothing half-written


def _edit_manifest(out, edit):
    path = out / "manifest.json"
    raw = json.loads(path.read_text())
    edit(raw)
    path.write_text(json.dumps(raw))


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.pop("chunks"), "has no 'chunks'"),
    (lambda m: m.update(version=7), "version 7"),
    (lambda m: m.update(format="other"), "'format'"),
    (lambda m: m["chunks"][0].update(count=-3), r"chunks\[0\]: 'count' is -3"),
    (lambda m: m["chunks"][0].update(file="../../etc/passwd"), r"chunks\[0\]: 'file'"),
    (lambda m: m["chunks"][0].update(parent=10 ** 6), r"chunks\[0\]: 'parent'"),
    (lambda m: m["levels"][1].update(count=5), r"levels\[1\]: says"),
    (lambda m: m["chunks"][2]["bounds"].update(min=[0, 0, "x"]), r"chunks\[2\].bounds.min"),
])
def test_corrupt_manifest_is_one_clear_error(export, edit, message):
    _, out, _ = export
    _edit_manifest(out, edit)
    with pytest.raises(LodManifestError, match=message) as err:
        LodExport(out)
    assert "manifest.json" in str(err.value) and "\n" not in str(err.value)


def test_truncated_manifest_and_missing_or_damaged_chunk(export):
    _, out, manifest = export
    lod = LodExport(out)
    victim = out / manifest.chunks[3].file
    victim.unlink()
    with pytest.raises(LodManifestError, match="missing chunk 3"):
        lod.read_chunk(3)
    with pytest.raises(LodManifestError, match="missing chunk 3"):
        lod.check_files()
    (out / manifest.chunks[4].file).write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(LodManifestError, match="chunk 4 cannot be read"):
        lod.read_chunk(4)
    text = (out / "manifest.json").read_bytes()
    (out / "manifest.json").write_bytes(text[: len(text) // 2])
    with pytest.raises(LodManifestError, match="not valid JSON"):
        LodExport(out)
    os.remove(out / "manifest.json")
    with pytest.raises(LodManifestError, match="not an LOD export"):
        LodExport(out)


def test_export_command_writes_lod(tmp_path, capsys):
    from recon.commands.export import ExportConfig, export

    model = tmp_path / "model.ply"
    write_splats(model, small_model(800, seed=3, sh_degree=3))
    out = tmp_path / "lod"
    report = export(ExportConfig(input=model, out=out, format="lod", target="quest3", quiet=True))
    m = read_manifest(out)
    assert m.sh_degree == 0 and m.view_budget == 1_000_000 and m.target == "quest3" and m.leaves == 800
    assert report.format == "lod" and report.splats == sum(c.count for c in m.chunks)
    with pytest.raises(SystemExit) as exit_:
        export(ExportConfig(input=model, out=out, format="lod", quiet=True))
    assert exit_.value.code == 2 and "--force" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        export(ExportConfig(input=model, out=tmp_path / "x.spz", format="lod", quiet=True))
    assert "writes a folder" in capsys.readouterr().err


def test_export_command_from_a_run_folder(tmp_path):
    from recon.commands.export import ExportConfig, run_export
    from recon.core.errors import UsageError
    from tests.recon.tiny_runs import tiny_run

    run = tiny_run(tmp_path)
    report = run_export(ExportConfig(input=run, out=tmp_path / "lod", format="lod", target="phone", quiet=True,
                                     lod_opacity="mass", lod_distill_steps=0))
    m = read_manifest(tmp_path / "lod")
    assert m.opacity_rule == "mass"
    assert m.leaves == 400 and m.sh_degree == 0 and m.view_budget == 1_500_000  # the run's model has SH 0
    assert report.input_splats == 400
    with pytest.raises(UsageError, match="--time"):
        run_export(ExportConfig(input=run, out=tmp_path / "lod2", format="lod", time=0.5, quiet=True))


def test_export_command_finetunes_levels_and_checks_lod_flags(tmp_path, monkeypatch):
    from recon.commands import export_lod as command
    from recon.commands.export import ExportConfig, run_export
    from recon.core.errors import UsageError
    from tests.recon.tiny_runs import tiny_run

    run = tiny_run(tmp_path)
    report = run_export(ExportConfig(input=run, out=tmp_path / "lod", format="lod", quiet=True, lod_finetune_steps=3,
                                     lod_distill_steps=0))
    assert any("fine-tuned levels" in note and "dB" in note for note in report.notes)
    assert read_manifest(tmp_path / "lod").leaves == 400
    model = tmp_path / "model.ply"
    write_splats(model, small_model(50))
    with pytest.raises(UsageError, match="run folder"):
        run_export(ExportConfig(input=model, out=tmp_path / "lod2", format="lod", quiet=True, lod_finetune_steps=3))
    with pytest.raises(UsageError, match="--lod-finetune-steps -1"):
        run_export(ExportConfig(input=run, out=tmp_path / "lod2", format="lod", quiet=True, lod_finetune_steps=-1))
    monkeypatch.setattr(command, "find_splat_transform", lambda: None)
    with pytest.raises(UsageError, match="splat-transform"):
        run_export(ExportConfig(input=model, out=tmp_path / "lod3", format="lod", quiet=True, lod_web="streamed-sog"))
    assert not (tmp_path / "lod2").exists() and not (tmp_path / "lod3").exists()


def test_export_command_distills_the_budgeted_cuts(tmp_path):
    """--lod-distill-steps N (a run folder): the merged Gaussians the budgeted cuts use are tuned before they
    are written (the coarser levels change, level 0, the model, does not); a model file has no cameras and is
    written as built, with a note; a negative count is refused."""
    from recon.commands.export import ExportConfig, run_export
    from recon.commands.export_lod import distill_budget
    from recon.core.errors import UsageError
    from tests.recon.tiny_runs import tiny_run

    run = tiny_run(tmp_path)
    assert distill_budget(400, 1_500_000) == 40 and distill_budget(400, 25) == 25
    plain = run_export(ExportConfig(input=run, out=tmp_path / "plain", format="lod", quiet=True, lod_distill_steps=0))
    tuned = run_export(ExportConfig(input=run, out=tmp_path / "tuned", format="lod", quiet=True, lod_distill_steps=12))
    assert not any("distilled" in note for note in plain.notes)
    note = next(note for note in tuned.notes if note.startswith("distilled"))
    assert "of 40 Gaussians" in note and "12 steps" in note and "not better" not in note
    a, b = LodExport(tmp_path / "plain"), LodExport(tmp_path / "tuned")
    assert [lv.count for lv in a.manifest.levels] == [lv.count for lv in b.manifest.levels]
    np.testing.assert_array_equal(a.read_level(0).means, b.read_level(0).means)
    changed = [lv for lv in range(1, len(a.manifest.levels))
               if not np.array_equal(a.read_level(lv).sh, b.read_level(lv).sh)]
    assert changed, "no merged level changed"
    model = tmp_path / "model.ply"
    write_splats(model, small_model(60))
    report = run_export(ExportConfig(input=model, out=tmp_path / "file", format="lod", quiet=True))
    assert any(note.startswith("not distilled: a model file") for note in report.notes)
    with pytest.raises(UsageError, match="--lod-distill-steps -1"):
        run_export(ExportConfig(input=run, out=tmp_path / "bad", format="lod", quiet=True, lod_distill_steps=-1))
    assert not (tmp_path / "bad").exists()


def test_export_of_a_run_whose_dataset_is_damaged_is_written_undistilled(tmp_path):
    """A LOD export never needed the dataset before distillation: a run whose dataset folder is there but cannot be
    read (a damaged transforms.json) is still exported, as built, with the reader's message in a note."""
    from recon.commands.export import ExportConfig, run_export
    from recon.outputs import files as rf
    from recon.training.trainer import TrainConfig
    from tests.recon.tiny_runs import tiny_run

    run = tiny_run(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "transforms.json").write_text("{ not json")
    rf.write_config(run, TrainConfig(out=run, data=broken, data_factor=4, progress=False))
    report = run_export(ExportConfig(input=run, out=tmp_path / "lod", format="lod", quiet=True, lod_distill_steps=5))
    assert read_manifest(tmp_path / "lod").leaves == 400
    note = next(note for note in report.notes if note.startswith("not distilled"))
    assert "transforms.json" in note


def test_export_takes_the_merge_spread(tmp_path, monkeypatch):
    """--lod-spread reaches the hierarchy (default: the merge module's DEFAULT_SPREAD; 1: the moment-matched
    merges of exports before it); a spread outside (0, 1] is one UsageError naming the flag."""
    import math

    from recon.commands import export_lod as command
    from recon.commands.export import ExportConfig, run_export
    from recon.core.errors import UsageError
    from recon.lod.merge import DEFAULT_SPREAD

    model = tmp_path / "model.ply"
    write_splats(model, small_model(200, seed=5))
    seen, build = [], command.build_hierarchy
    monkeypatch.setattr(command, "build_hierarchy", lambda *a, **k: seen.append(k["spread"]) or build(*a, **k))
    run_export(ExportConfig(input=model, out=tmp_path / "a", format="lod", quiet=True))
    run_export(ExportConfig(input=model, out=tmp_path / "b", format="lod", quiet=True, lod_spread=1.0))
    assert seen == [DEFAULT_SPREAD, 1.0] and ExportConfig(input="x", out="y").lod_spread == DEFAULT_SPREAD
    for bad in (0.0, 1.5, math.nan):
        with pytest.raises(UsageError, match="--lod-spread"):
            run_export(ExportConfig(input=model, out=tmp_path / "c", format="lod", quiet=True, lod_spread=bad))
    assert not (tmp_path / "c").exists()
