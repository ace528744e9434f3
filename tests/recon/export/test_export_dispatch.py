"""read_splats / write_splats dispatch by suffix, empty and NaN models, and (optionally) an
outside reader, @playcanvas/splat-transform, as the judge of our files."""

import os
from pathlib import Path
import shutil
import subprocess

import numpy as np
import pytest

from recon.export import ExportResult, SplatFileError, read_splats, write_splats
from recon.export.splat_format import splat_sort_order
from recon.export.splats import SH_C0, empty_splats, normalized_quats, random_splats, sigmoid


@pytest.mark.parametrize("suffix, degree", [(".ply", 3), (".splat", 0), (".spz", 3), (".PLY", 2)])
def test_dispatch_by_suffix(tmp_path, suffix, degree):
    d = random_splats(30, sh_degree=3)
    path = tmp_path / f"m{suffix}"
    result = write_splats(path, d)
    assert result == ExportResult(path, suffix.lower().lstrip("."), 30, 0)
    r = read_splats(path)
    assert len(r) == 30 and r.sh_degree == (degree if suffix != ".PLY" else 3)


def test_explicit_format_overrides_suffix(tmp_path):
    path = tmp_path / "model.bin"
    write_splats(path, random_splats(5, sh_degree=1), format="spz")
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    with pytest.raises(SplatFileError, match=r"model\.bin.*\.ply, \.splat, \.spz"):
        read_splats(path)


@pytest.mark.parametrize("name", ["model.xyz", "model", "model.ksplat"])
def test_unknown_suffix_names_the_file(tmp_path, name):
    path = tmp_path / name
    with pytest.raises(SplatFileError, match=name.replace(".", r"\.")):
        write_splats(path, random_splats(3, sh_degree=0))
    path.write_bytes(b"x")
    with pytest.raises(SplatFileError, match=name.replace(".", r"\.")):
        read_splats(path)
    with pytest.raises(SplatFileError, match="unknown splat format 'obj'"):
        write_splats(tmp_path / "a.ply", random_splats(3, sh_degree=0), format="obj")


@pytest.mark.parametrize("suffix", [".ply", ".splat", ".spz"])
def test_empty_and_all_nan_models_refused(tmp_path, suffix):
    path = tmp_path / f"m{suffix}"
    with pytest.raises(SplatFileError, match="empty"):
        write_splats(path, empty_splats(sh_degree=1))
    nan = random_splats(4, sh_degree=1).copy()
    nan.means[:] = np.nan
    with pytest.raises(SplatFileError, match="all 4 splats had NaN"):
        write_splats(path, nan)
    assert list(tmp_path.iterdir()) == []


def test_nonfinite_splats_dropped_and_counted(tmp_path):
    d = random_splats(10, sh_degree=2).copy()
    d.logit_opacities[[1, 7]] = np.inf
    result = write_splats(tmp_path / "m.ply", d)
    assert (result.written, result.dropped) == (8, 2)
    assert len(read_splats(tmp_path / "m.ply")) == 8


def test_overwrite_needs_force(tmp_path):
    path = tmp_path / "m.spz"
    write_splats(path, random_splats(5, sh_degree=0, seed=1))
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="--force"):
        write_splats(path, random_splats(5, sh_degree=0, seed=2))
    assert path.read_bytes() == before
    write_splats(path, random_splats(5, sh_degree=0, seed=2), force=True)
    assert path.read_bytes() != before


# --- outside reader (optional: set SPLAT_TRANSFORM or put splat-transform on PATH) --------------

_LOCAL_SPLAT_TRANSFORM = Path(__file__).resolve().parents[3] / "scripts" / "js" / "node_modules" / ".bin" / "splat-transform"
SPLAT_TRANSFORM = (os.environ.get("SPLAT_TRANSFORM") or shutil.which("splat-transform")
                   or (str(_LOCAL_SPLAT_TRANSFORM) if _LOCAL_SPLAT_TRANSFORM.exists() else None))


@pytest.mark.skipif(not SPLAT_TRANSFORM, reason="splat-transform (npm @playcanvas/splat-transform) not found")
@pytest.mark.parametrize("suffix", [".spz", ".splat", ".ply"])
def test_splat_transform_decodes_our_files(tmp_path, suffix):
    d = random_splats(500, sh_degree=3, seed=21)
    src, out = tmp_path / f"ours{suffix}", tmp_path / "theirs.ply"
    write_splats(src, d)
    subprocess.run([SPLAT_TRANSFORM, str(src), str(out)], check=True, capture_output=True, timeout=120)
    r = read_splats(out)  # their PLY: OpenCV axes, raw values
    ref = d.subset(splat_sort_order(d)) if suffix == ".splat" else d
    assert len(r) == len(ref)
    assert np.abs(r.means - ref.means).max() <= 2.5e-4
    assert np.abs(sigmoid(r.logit_opacities) - sigmoid(ref.logit_opacities)).max() <= 1 / 255
    assert (SH_C0 * np.abs(r.sh[:, 0] - ref.sh[:, 0])).max() <= 0.02
    qa, qb = normalized_quats(r.quats), normalized_quats(ref.quats)
    assert np.degrees(2 * np.arccos(np.clip(np.abs((qa * qb).sum(1)), 0, 1))).max() < 2.0
    if suffix == ".spz":
        assert np.abs(r.sh[:, 1:] - ref.sh[:, 1:]).max() <= 8.5 / 128 + 1e-6


@pytest.mark.parametrize("suffix", [".ply", ".splat", ".spz"])
def test_format_writers_refuse_empty_and_nan_models_directly(tmp_path, suffix):
    from recon.export import FORMATS

    _, writer = FORMATS[suffix.lstrip(".")]
    path = tmp_path / f"m{suffix}"
    with pytest.raises(SplatFileError, match="empty"):
        writer(path, empty_splats(sh_degree=0))
    nan = random_splats(3, sh_degree=0).copy()
    nan.quats[1, 0] = np.nan
    with pytest.raises(SplatFileError, match="NaN"):
        writer(path, nan)
    assert list(tmp_path.iterdir()) == []
