"""One hostile case per fuzzed format through the real command a user would run on it (``recon.cli.main``
in-process): exit status 2 and exactly one line on stderr that names the file (or the folder holding it), no
traceback. The cases are the fuzz script's own (scripts/fuzz_readers.py): the ``empty`` variant (0 bytes), which
every reader must refuse, and for a few formats a cut or a special entry. Files that live in a folder are put
into a copy of their template folder (tests/corpus/fuzz_formats.py: ``in_folder``) and the folder is given to
the command."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable

import pytest

from recon.cli import main

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fuzz_readers.py"


def _fuzz():
    spec = importlib.util.spec_from_file_location("fuzz_readers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_template(tmp: Path) -> Path:
    """A copy of the fuzz formats' finished run (config.yaml on the procedural dataset, checkpoint, splats.ply)."""
    import shutil

    from tests.corpus.fuzz_formats import _template
    from tests.corpus.fuzz_formats_viewer import build_finished_run

    run = tmp / "run"
    shutil.copytree(_template("finished-run", build_finished_run), run)
    return run


def _box(tmp: Path) -> Path:
    import trimesh

    path = tmp / "box.obj"
    trimesh.creation.box().export(path)
    return path


def _insert(run: Path, tmp: Path, asset: Path | None = None, keyframes: Path | None = None) -> list:
    """``insert`` of one mesh into ``run``'s training view 0 (the keyframes, the mesh and the proxy cache are read
    before anything is rendered)."""
    return ["insert", "--run", run, "--asset", asset or _box(tmp), *(["--asset-path", keyframes] if keyframes else []),
            "--camera", "0", "--out", tmp / "x.png"]


def _export(target: Path, tmp: Path) -> list:
    return ["export", target, "--out", tmp / "out.ply"]


def _train(target: Path, tmp: Path) -> list:
    return ["train", "--data", target, "--steps", "1", "--out", tmp / "trained"]


def _resume(run: Path) -> list:
    """``train`` of the fuzz template's run (procedural data, 10 steps done) extended to 11 steps: it resumes from the
    run's newest checkpoint, reading it first."""
    return ["train", "--data", "procedural", "--out", run, "--steps", "11", "--no-progress"]


Argv = Callable[[Path, Path], list]
# format -> (variant, command line for the case's file or folder); the variants are all_cases names
CLI_CASES: dict[str, tuple[str, Argv]] = {
    "ply": ("empty", _export),
    "spz": ("truncate-40", _export),
    "splat": ("empty", _export),
    "glb": ("truncate-20", _export),
    "ply4d": ("empty", _export),
    "gimg": ("empty", lambda t, tmp: ["image", "render", t, "--out", tmp / "out.png"]),
    "png": ("truncate-33", lambda t, tmp: ["image", "fit", t, "--out", tmp / "out.gimg"]),
    "camera-path": ("empty", lambda t, tmp: ["render", "--run", _run_template(tmp), "--path", t,
                                             "--out", tmp / "v.mp4"]),
    "transforms": ("empty", _train),
    "colmap-cameras.bin": ("empty", _train),
    "colmap-images.txt": ("empty", _train),
    "dnerf-transforms": ("empty", _train),
    "panoptic-meta": ("empty", _train),
    "n3dv-poses": ("empty", _train),
    "checkpoint": ("empty", _export),  # a finished run: export reads splats.ply; CLI_VARIANTS reach the checkpoint
    "config-yaml": ("truncate-100", lambda t, tmp: ["eval", "--run", t]),
    "history-json": ("empty", lambda t, tmp: ["compare", t]),
    "metrics-json": ("folder", lambda t, tmp: ["compare", t]),
    "mesh-obj-sdf": ("empty", lambda t, tmp: ["sdf", "fit", t, "--out", tmp / "field.pt"]),
    "view-ply": ("empty", lambda t, tmp: ["view", t]),
    "view-spz": ("empty", lambda t, tmp: ["view", t]),
    "view-splat": ("empty", lambda t, tmp: ["view", t]),
    "view-ply4d": ("truncate-200", lambda t, tmp: ["view", t]),
    "view-lod-manifest": ("empty", lambda t, tmp: ["view", t]),
    "view-lod-chunk": ("empty", lambda t, tmp: ["view", t]),
    "view-run-splats": ("empty", lambda t, tmp: ["view", t]),
    "render-splats": ("empty", lambda t, tmp: ["render", "--run", _run_template(tmp), "--splats", t,
                                               "--out", tmp / "v.mp4"]),
    "keyframes": ("empty", lambda t, tmp: _insert(_run_template(tmp), tmp, keyframes=t)),
    "mesh-glb": ("truncate-20", lambda t, tmp: _insert(_run_template(tmp), tmp, asset=t)),
    "mesh-obj": ("empty", lambda t, tmp: _insert(_run_template(tmp), tmp, asset=t)),
    "nerfstudio-mask": ("empty", _train),
    "panoptic-seg": ("empty", lambda t, tmp: [*_train(t, tmp), "--data-factor", "2"]),  # read when downscaled
    "downscale-image": ("empty", lambda t, tmp: [*_train(t, tmp), "--data-factor", "2"]),  # the dataset's images_2


    "panoptic-npz": ("empty", _train),
}
# more hostile variants of the files a run or dataset folder holds, each through the command a user would run on
# that folder (the checkpoint: `train --out RUN` resumes from its newest checkpoint, while `export` / `eval` / `view`
# of a 3dgs run read splats.ply and never reach it; init_pt_cld.npz: `train --data`)
# (variants, command line, the file's name the line must hold: the reader reached, not an earlier check)
CLI_VARIANTS: dict[str, tuple[tuple[str, ...], Argv, str]] = {
    "checkpoint": (("empty", "truncate-100", "zeros-1mb", "folder", "dev-zero"), lambda t, tmp: _resume(t),
                   "ckpt_00010.pt"),
    "panoptic-npz": (("truncate-100", "zeros-1mb", "folder", "dev-zero"), _train, "init_pt_cld.npz"),
}


@pytest.fixture(scope="module")
def fuzz():
    return _fuzz()


@pytest.mark.parametrize("fmt", sorted(CLI_CASES))
def test_hostile_case_exits_2_with_one_line_naming_the_file(fmt, fuzz, tmp_path, capsys):
    variant, argv = CLI_CASES[fmt]
    _exits_2_naming_the_file(fuzz, fmt, variant, argv, tmp_path, capsys)


@pytest.mark.parametrize("fmt, variant", [(f, v) for f, (vs, _, _) in sorted(CLI_VARIANTS.items()) for v in vs])
def test_more_hostile_run_and_dataset_files_through_the_cli(fmt, variant, fuzz, tmp_path, capsys):
    _, argv, name = CLI_VARIANTS[fmt]
    line = _exits_2_naming_the_file(fuzz, fmt, variant, argv, tmp_path, capsys, log_lines=True)
    assert name in line, line


def _exits_2_naming_the_file(fuzz, fmt: str, variant: str, argv: Argv, tmp_path: Path, capsys,
                             log_lines: bool = False) -> str:
    """The error line. ``log_lines``: the command may log before it (resuming: "damaged checkpoint ...; trying the
    previous one"), but the last line is the one error line and nothing is a traceback."""
    good, read, suffix = fuzz.readers()[fmt]
    good_bytes = good()
    data = good_bytes[:int(variant.split("-")[1])] if variant.startswith("truncate-") else \
        dict(fuzz.all_cases(good_bytes))[variant]
    case = fuzz.write_case(tmp_path, suffix, variant, data)
    target = read.place(case) if hasattr(read, "place") else case  # a folder format: its folder
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv(target, tmp_path)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    if log_lines:
        lines = lines[-1:]
        assert ": error: " in lines[0], err
    assert len(lines) == 1, err
    assert exc.value.code == 2, (exc.value.code, lines[0])
    assert case.name in lines[0] or target.name in lines[0] or str(target) in lines[0], lines[0]
    return lines[0]


def test_every_cli_case_is_a_fuzz_format(fuzz):
    formats = fuzz.readers()
    cases = [(f, v) for f, (v, _) in CLI_CASES.items()] + [(f, v) for f, (vs, _, _) in CLI_VARIANTS.items() for v in vs]
    for fmt, variant in cases:
        assert fmt in formats, fmt
        assert variant in ("empty", "zeros-1mb", "folder", "fifo", "dev-zero") or variant.startswith("truncate-"), \
            variant


def test_a_folder_in_place_of_the_proxy_cache_is_one_line(tmp_path, capsys):
    """RUN/hybrid/proxy.ply is a cache: a damaged one is made again (tests/recon/hybrid), but a folder there could
    not be written over, so ``insert`` says so, naming it, before spending minutes building the proxy."""
    run = _run_template(tmp_path)
    (run / "hybrid" / "proxy.ply").mkdir(parents=True)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in _insert(run, tmp_path)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert exc.value.code == 2 and str(run / "hybrid" / "proxy.ply") in lines[0], (exc.value.code, lines)


def test_torch_running_out_of_cpu_memory_is_one_line(capsys):
    """torch's CPU allocator fails with a RuntimeError, not a MemoryError (the outside corpus: `image fit` of a
    12000x8000 PNG under a 1.5 GB address-space cap printed a traceback and "this is a bug")."""
    from recon.core.errors import fail

    err = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                       "you tried to allocate 384000000 bytes. Error code 12 (Cannot allocate memory)")
    with pytest.raises(SystemExit) as exc:
        fail("image", err, inputs="big.png")
    lines = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(lines) == 1, lines
    assert "out of memory while reading big.png (you tried to allocate 384000000 bytes)" in lines[0], lines[0]


def test_an_image_over_pillows_warning_but_under_our_limit_prints_no_warning(tmp_path):
    """Pillow warns (DecompressionBombWarning, two stderr lines) above 89M pixels; splatforge's own limit is
    134M (recon.core.limits.MAX_IMAGE_PIXELS), so a 9500x9500 image is read without that noise."""
    import struct
    import warnings
    import zlib

    from recon.core.limits import read_image_size

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    path = tmp_path / "big.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 9500, 9500, 8, 0, 0, 0, 0))
                     + chunk(b"IEND", b""))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_image_size(path) == (9500, 9500)


@pytest.mark.parametrize("rows, code", [([0], 0), ([0, 1, 2, 3], 2)])
def test_export_time_of_a_ply4d_with_nan_means(rows, code, tmp_path, capsys):
    """ply4d readers leave non-finite Gaussians to their callers (like 3D splat files); ``export --time`` built
    its model with them and the 4D slicer's input check was reported as a bug (the outside corpus). Now they
    are dropped, and a file with nothing finite is one line naming it."""
    import numpy as np

    from tests.corpus.bad_files import ply4d_edited

    path = ply4d_edited(lambda v: v["x"].__setitem__(rows, np.nan))(tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["export", str(path), "--time", "0.5", "--out", str(tmp_path / "out.ply")])
        raise SystemExit(0)
    err = capsys.readouterr().err
    assert exc.value.code == code and "Traceback" not in err, err
    if code:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "model4d.ply: all 4 4D Gaussians hold NaN" in lines[0], lines
    else:
        assert (tmp_path / "out.ply").is_file()
