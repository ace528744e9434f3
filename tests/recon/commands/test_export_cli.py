"""`splatforge export`: inputs (run folder, files), formats, budgets, --force, report, PSNR hook."""

from types import SimpleNamespace

import numpy as np
import pytest

from recon.commands.export import ExportConfig, export, run_export
from recon.export import read_splats, write_splats
from rasterizer.camera import Camera
from recon.export.glb import read_any
from recon.export.report import format_report
from recon.export.splats import random_splats
from recon.run.folder import Run


def make_run(tmp_path, n=500, config="data: /nonexistent/dataset\n"):
    run = tmp_path / "run"
    run.mkdir()
    write_splats(run / "splats.ply", random_splats(n, sh_degree=3, extent=2.0))
    (run / "config.yaml").write_text(config)
    return run


@pytest.mark.parametrize("fmt", ["ply", "splat", "spz", "glb"])
def test_file_input_each_format(tmp_path, fmt):
    src = tmp_path / "in.ply"
    write_splats(src, random_splats(200, sh_degree=3, extent=2.0))
    out = tmp_path / f"out.{fmt}"
    report = run_export(ExportConfig(input=src, out=out))
    assert report.format == fmt and report.splats == 200 and report.input_splats == 200
    assert report.bytes == out.stat().st_size and report.bytes_per_splat == report.bytes / 200
    assert len(read_any(out)) == 200
    text = format_report(report)
    assert "bytes / splat" in text and "dropped NaN/Inf" in text


def test_run_folder_budget_and_sh(tmp_path):
    run = make_run(tmp_path)
    out = tmp_path / "m.spz"
    report = run_export(ExportConfig(input=run, out=out, max_splats=100, sh_degree=1))
    r = read_splats(out)
    assert len(r) == 100 and r.sh_degree == 1
    assert report.dropped_budget == 400 and report.importance == "volume"
    assert any("not available" in n for n in report.notes)
    assert report.psnr_before is None and report.psnr_after is None


def test_target_preset(tmp_path):
    src = tmp_path / "in.ply"
    write_splats(src, random_splats(50, sh_degree=3))
    report = run_export(ExportConfig(input=src, out=tmp_path / "q.glb", target="quest3"))
    assert report.sh_degree == 0 and report.splats == 50 and report.target == "quest3"


def test_nan_dropped_and_counted(tmp_path):
    d = random_splats(30, sh_degree=0)
    d.log_scales[4, 0] = np.inf
    d.sh[7, 0, 1] = np.nan
    src = tmp_path / "in.ply"
    from plyfile import PlyData, PlyElement

    from recon.export.ply import splats_to_vertex_array

    PlyData([PlyElement.describe(splats_to_vertex_array(d), "vertex")]).write(str(src))
    report = run_export(ExportConfig(input=src, out=tmp_path / "o.splat"))
    assert report.dropped_nonfinite == 2 and report.splats == 28


def test_existing_output_refused_without_force(tmp_path, capsys):
    src = tmp_path / "in.ply"
    write_splats(src, random_splats(10, sh_degree=0))
    out = tmp_path / "o.spz"
    out.write_bytes(b"keep me")
    with pytest.raises(SystemExit) as exc:
        export(ExportConfig(input=src, out=out, quiet=True))
    assert exc.value.code == 2 and "--force" in capsys.readouterr().err
    assert out.read_bytes() == b"keep me"
    export(ExportConfig(input=src, out=out, force=True, quiet=True))
    assert len(read_splats(out)) == 10


def test_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError):
        run_export(ExportConfig(input=tmp_path / "missing.ply", out=tmp_path / "o.ply"))
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        run_export(ExportConfig(input=tmp_path / "empty_dir", out=tmp_path / "o.ply"))
    src = tmp_path / "in.ply"
    write_splats(src, random_splats(5, sh_degree=0))
    with pytest.raises(ValueError, match="suffix"):
        run_export(ExportConfig(input=src, out=tmp_path / "o.ply", format="spz"))
    with pytest.raises(ValueError, match="unknown splat format"):
        run_export(ExportConfig(input=src, out=tmp_path / "o.xyz"))


def test_camera_footprint_used_for_run_with_cameras(tmp_path, monkeypatch):
    run = make_run(tmp_path, n=50)
    K = np.array([[50.0, 0, 32], [0, 50, 24], [0, 0, 1]])
    cams = [Camera.from_arrays(np.eye(4), K, 64, 48)]
    frames = [SimpleNamespace(name="a", camera=cams[0])]  # the run's dataset: one training view
    monkeypatch.setattr(Run, "scene", property(lambda self: SimpleNamespace(frames_train=frames)))
    report = run_export(ExportConfig(input=run, out=tmp_path / "o.ply", max_splats=10, evaluate=False))
    assert report.importance == "footprint" and report.splats == 10


def test_psnr_before_after_comes_from_the_run(tmp_path, monkeypatch):
    """The PSNR of a run's export is measured beside the run code (recon.run.export_psnr), with the Run."""
    run = make_run(tmp_path, n=20)
    seen = []

    def fake_export_psnr(opened, exported, original=None):
        seen.append((opened.dir, len(original), exported.sh_degree))
        return (23.0, 21.0), ""

    monkeypatch.setattr("recon.run.export_psnr.export_psnr", fake_export_psnr)
    report = run_export(ExportConfig(input=run, out=tmp_path / "o.spz", sh_degree=1))
    assert (report.psnr_before, report.psnr_after) == (23.0, 21.0)
    assert seen == [(run, 20, 1)]


def test_psnr_not_measured_when_the_dataset_is_gone(tmp_path):
    run = make_run(tmp_path, n=20)
    report = run_export(ExportConfig(input=run, out=tmp_path / "o.spz"))
    assert report.psnr_before is None and report.psnr_after is None
    assert any("/nonexistent/dataset" in n and "not there" in n for n in report.notes), report.notes
    assert "n/a" in format_report(report)


def test_export_package_is_a_file_format_layer():
    """recon/export converts records to bytes and back: it never imports the trainer, evaluation or run
    code (not even lazily inside a function)."""
    import ast
    from pathlib import Path

    import recon.export

    upward = ("recon.training.trainer", "recon.training.evaluation", "recon.run.folder", "recon.outputs.files",
              "recon.commands", "recon.models", "recon.data")
    found = []
    for file in Path(recon.export.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                     else [node.args[0].value] if isinstance(node, ast.Call) and getattr(node.func, "attr", "")
                     == "import_module" and node.args and isinstance(node.args[0], ast.Constant) else [])
            found += [f"{file.name}: {n}" for n in names if n == "recon" or n.startswith(upward)]
    assert not found, found


def test_cli_flags(tmp_path, capsys):
    from recon.cli import main

    src = tmp_path / "in.ply"
    write_splats(src, random_splats(40, sh_degree=2))
    out = tmp_path / "o.glb"
    main(["export", str(src), "--out", str(out), "--format", "glb", "--max-splats", "7",
          "--sh-degree", "1"])
    assert "bytes / splat" in capsys.readouterr().out
    r = read_any(out)
    assert len(r) == 7 and r.sh_degree == 1
    with pytest.raises(SystemExit):
        main(["export", str(src), "--out", str(out)])
    main(["export", str(src), "--out", str(out), "--force", "--target", "iphone"])
