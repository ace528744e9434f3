"""Every import points down (issue 46): the layer table of recon/DESIGN.md, read from the file, checked
against every module of rasterizer/, recon/ and viewer/ by scripts/import_layers.py (ast: module-level and
function-level imports alike, relative imports resolved). A package may import its own modules and
packages of lower layers only; the checker is shown to fail on planted upward imports.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import recon

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "recon" / "DESIGN.md"
_spec = importlib.util.spec_from_file_location("import_layers", ROOT / "scripts" / "import_layers.py")
layers_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layers_script)


def forbidden(paths: list[Path], names: tuple[str, ...]) -> dict[str, list[str]]:
    """{file: the modules of ``names`` it imports} (a module counts with its submodules)."""
    bad = {}
    for path in paths:
        hits = sorted(m for m in layers_script.imported_modules(path, ROOT)
                      if any(m == f or m.startswith(f + ".") for f in names))
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    return bad


def python_files(*parts: str) -> list[Path]:
    target = ROOT.joinpath(*parts)
    return [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))


def test_table_names_every_package():
    layers = layers_script.read_layers(DESIGN)
    packages = {f"recon.{p.name}" for p in (ROOT / "recon").iterdir() if (p / "__init__.py").is_file()}
    assert packages | {"recon.cli", "rasterizer", "viewer"} == set(layers)
    assert layers["rasterizer"] == 0 and layers["recon.cli"] == max(layers.values())


def test_every_import_points_down():
    bad = layers_script.upward_imports(ROOT)
    assert not bad, "imports that do not point down:\n" + "\n".join(bad)


def test_the_script_prints_the_graph_and_no_circles():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "import_layers.py")], capture_output=True,
                         text=True, check=True).stdout
    report = json.loads(out)
    assert report["upward"] == [] and report["circles"] == []
    arrows = {(a, b) for a, b, _ in report["arrows"]}
    assert ("recon.training", "recon.models") in arrows and ("recon.models", "recon.strategy") not in arrows
    assert all(report["layers"][a] > report["layers"][b] for a, b in arrows)


def test_each_package_docstring_names_its_layer():
    for pkg, layer in layers_script.read_layers(DESIGN).items():
        if not pkg.startswith("recon.") or pkg == "recon.cli":
            continue
        init = ROOT / pkg.replace(".", "/") / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        found = re.search(r"[Ll]ayer (\d+)", doc)
        assert found and int(found[1]) == layer, f"{init.relative_to(ROOT)}: docstring should say 'Layer {layer}'"


def test_every_recon_module_imports():
    names = [m.name for m in pkgutil.walk_packages(recon.__path__, "recon.")]
    assert "recon.core.splat_data" in names and "recon.data.undistort" in names
    for name in names:
        importlib.import_module(name)


def test_models_never_import_export():
    assert not forbidden(python_files("recon", "models"), ("recon.export",))


def test_scene_is_the_bottom_of_recon_data():
    scene = python_files("recon", "data", "scene.py")
    others = [layers_script.module_name(p, ROOT) for p in python_files("recon", "data")
              if p.name not in ("scene.py", "__init__.py")]
    assert not forbidden(scene, tuple(others))
    assert not forbidden(python_files("recon", "data", "undistort.py"),
                         ("recon.data.colmap", "recon.data.finalize", "recon.data.nerfstudio", "recon.data.blender"))


def test_records_and_atomic_writes_import_nothing_of_recon():
    assert not forbidden(python_files("recon", "core", "splat_data.py") + python_files("recon", "core", "atomic.py"),
                         ("recon", "viewer"))


def plant(tmp_path: Path, file: str, text: str) -> None:
    path = tmp_path / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def tree_copy(tmp_path):
    """A copy of the code and recon/DESIGN.md, for planting imports."""
    for top in layers_script.CODE_DIRS:
        for path in (ROOT / top).rglob("*.py"):
            plant(tmp_path, str(path.relative_to(ROOT)), path.read_text())
    plant(tmp_path, "recon/DESIGN.md", DESIGN.read_text())
    return tmp_path


@pytest.mark.parametrize("file, text, needle", [
    ("recon/core/x.py", "def f():\n    from recon.training.trainer import Trainer\n", "recon.training.trainer"),
    ("recon/models/x.py", "from ..strategy import adc\n", "recon.strategy"),
    ("recon/export/x.py", "import recon.outputs.files\n", "recon.outputs.files"),  # same layer, other package
    ("rasterizer/x.py", "import viewer\n", "viewer"),
])
def test_a_planted_upward_import_fails(tree_copy, file, text, needle):
    """The checker sees relative, absolute, function-level and same-layer imports; the script exits 1."""
    assert layers_script.upward_imports(tree_copy) == []
    plant(tree_copy, file, text)
    bad = layers_script.upward_imports(tree_copy)
    assert len(bad) == 1 and bad[0].startswith(file) and needle in bad[0], bad
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "import_layers.py"), "--root", str(tree_copy)],
                         capture_output=True, text=True)
    assert run.returncode == 1 and json.loads(run.stdout)["upward"] == bad


def test_a_package_missing_from_the_table_fails(tmp_path):
    plant(tmp_path, "recon/DESIGN.md", DESIGN.read_text())
    plant(tmp_path, "recon/newthing/__init__.py", "")
    plant(tmp_path, "recon/core/__init__.py", "")
    assert layers_script.upward_imports(tmp_path) == [
        "recon/newthing/__init__.py: not in the layer table of recon/DESIGN.md"]
