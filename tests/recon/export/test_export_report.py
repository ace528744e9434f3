"""The export report states the SH degree the written file holds (issue 16, item 8)."""

import re

import pytest

from recon.commands.export import ExportConfig, run_export
from recon.export import write_splats
from recon.export.glb import read_any
from recon.export.report import format_report
from recon.export.splats import random_splats


def sh_row(text: str) -> str:
    (line,) = [l for l in text.splitlines() if l.startswith("SH degree")]
    return re.sub(r"^SH degree\s+", "", line)


@pytest.mark.parametrize("fmt,row,stored", [
    ("splat", "0 (colour only: .splat stores no SH; the model had degree 3)", 0),
    ("spz", "3", 3), ("ply", "3", 3), ("glb", "3", 3),
])
def test_report_sh_degree_is_what_the_file_holds(tmp_path, fmt, row, stored):
    src = tmp_path / "in.ply"
    write_splats(src, random_splats(20, sh_degree=3, extent=2.0))
    out = tmp_path / f"out.{fmt}"
    report = run_export(ExportConfig(input=src, out=out))
    assert sh_row(format_report(report)) == row
    assert report.as_dict()["sh_degree"] == stored == read_any(out).sh_degree
    assert report.as_dict()["model_sh_degree"] == 3
