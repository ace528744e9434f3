"""Layers that only point down (issue 15, item 3): every recon module imports, and, read with ast
(module-level and function-level imports alike), the lower layers never import the upper ones.

    rasterizer                 (never recon or viewer)
    recon.splat_data, recon.atomic, recon.errors        format-neutral records and helpers
    recon.data.scene -> recon.data.undistort -> recon.data.finalize -> loaders (colmap, nerfstudio, ...)
    recon.models                (never recon.export)
    recon.export                (never the trainer, evaluation, run files or the run)
    recon.trainer, recon.run_files, recon.commands, viewer
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import recon

ROOT = Path(__file__).resolve().parents[2]

# recon/export/report.py's run-based PSNR report is being moved out of recon/export by a parallel
# change of the same issue; until that lands it still imports the trainer lazily.


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (``from a import b`` counts as a and a.b),
    relative imports resolved, imports inside functions included."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def python_files(*parts: str) -> list[Path]:
    target = ROOT.joinpath(*parts)
    return [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))


def offending(paths: list[Path], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    """{file: forbidden modules it imports} (a module counts with its submodules)."""
    bad = {}
    for path in paths:
        hits = sorted(m for m in imported_modules(path)
                      if any(m == f or m.startswith(f + ".") for f in forbidden))
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    return bad


def check(paths: list[Path], forbidden: tuple[str, ...]) -> None:
    bad = offending(paths, forbidden)
    assert not bad, f"imports pointing up: {bad}"


def test_every_recon_module_imports():
    names = [m.name for m in pkgutil.walk_packages(recon.__path__, "recon.")]
    assert "recon.splat_data" in names and "recon.data.undistort" in names
    for name in names:
        importlib.import_module(name)


@pytest.mark.parametrize("path", python_files("recon", "export"), ids=lambda p: p.name)
def test_export_never_imports_training_or_runs(path):
    rel = str(path.relative_to(ROOT))
    check([path], ("recon.trainer", "recon.evaluation", "recon.run_files", "recon.run"))


def test_models_and_run_files_never_import_export():
    check(python_files("recon", "models") + python_files("recon", "run_files.py"), ("recon.export",))


def test_scene_is_the_bottom_of_recon_data():
    scene = python_files("recon", "data", "scene.py")
    check(scene, ("recon.data.colmap",))
    others = [module_name(p) for p in python_files("recon", "data") if p.name not in ("scene.py", "__init__.py")]
    check(scene, tuple(others))
    check(python_files("recon", "data", "undistort.py"),
          ("recon.data.colmap", "recon.data.finalize", "recon.data.nerfstudio", "recon.data.blender"))


def test_format_neutral_modules_import_no_upper_layer():
    check(python_files("recon", "splat_data.py") + python_files("recon", "atomic.py"),
          ("recon.export", "recon.models", "recon.data", "recon.trainer", "recon.run_files", "viewer"))


def test_rasterizer_never_imports_recon_or_viewer():
    check(python_files("rasterizer"), ("recon", "viewer"))


def test_checker_sees_upward_imports(tmp_path, monkeypatch):
    """The ast reader finds relative, absolute and function-level imports (so the checks above can fail)."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    fake = tmp_path / "recon" / "export" / "x.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("from ..run_files import write_json\n\ndef f():\n    import recon.trainer\n")
    assert offending([fake], ("recon.trainer", "recon.run_files")) == {
        "recon/export/x.py": ["recon.run_files", "recon.run_files.write_json", "recon.trainer"]}
    assert offending([fake], ("recon.run",)) == {}  # recon.run is not a prefix of recon.run_files
