#!/usr/bin/env python
"""The import layers of splatforge's code, checked and printed as JSON (issue 46).

    python scripts/import_layers.py [--root DIR]

Reads the layer table of ``recon/DESIGN.md`` (the rows between ``<!-- layers: begin -->`` and
``<!-- layers: end -->``: ``| N | `package`, ... | ... |``) and every module of rasterizer/, recon/ and
viewer/ with ast (module-level and function-level imports alike, relative imports resolved). A package
may import its own modules and packages of lower layers only. Prints::

    {"layers": {"recon.core": 1, ...},
     "arrows": [["recon.training", "recon.models", 12], ...],   # package -> package it imports, modules
     "upward": ["recon/x.py: imports ... from ..., layer n", ...],
     "circles": [["recon.a", "recon.b"], ...]}                    # packages that import each other

and exits 1 when ``upward`` or ``circles`` is not empty. ``tests/recon/test_layers.py`` runs the same
checks.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("rasterizer", "recon", "viewer")
BEGIN, END = "<!-- layers: begin -->", "<!-- layers: end -->"


def read_layers(design: Path) -> dict[str, int]:
    """{package: layer} from the table between the layer markers of ``design`` (recon/DESIGN.md)."""
    text = design.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{design}: no layer table (the markers {BEGIN} and {END})")
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    layers = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            for name in re.findall(r"`([\w.]+)`", cells[1]):
                layers[name] = int(cells[0])
    return layers


def module_name(path: Path, root: Path) -> str:
    """``recon/data/scene.py`` -> ``recon.data.scene``; a package's ``__init__.py`` -> the package."""
    rel = path.relative_to(root).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imported_modules(path: Path, root: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (``from a import b`` counts as a and a.b),
    relative imports resolved, imports inside functions included."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
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


def package_of(module: str, layers: dict[str, int]) -> str | None:
    """The longest table entry that ``module`` is or lies in; None outside the table."""
    best = None
    for pkg in layers:
        if (module == pkg or module.startswith(pkg + ".")) and (best is None or len(pkg) > len(best)):
            best = pkg
    return best


def code_files(root: Path) -> list[Path]:
    return [p for top in CODE_DIRS for p in sorted((root / top).rglob("*.py"))]


def package_arrows(root: Path, layers: dict[str, int]) -> dict[tuple[str, str], list[str]]:
    """{(package, package it imports): ['module -> imported module', ...]} over the code of ``root``."""
    arrows: dict[tuple[str, str], list[str]] = {}
    for path in code_files(root):
        mod = module_name(path, root)
        own = package_of(mod, layers)
        seen = set()
        for target in sorted(imported_modules(path, root), key=len):
            to = package_of(target, layers) if target.split(".")[0] in CODE_DIRS else None
            if own is None or to is None or to == own or to in seen:
                continue
            seen.add(to)
            arrows.setdefault((own, to), []).append(f"{mod} -> {target}")
    return arrows


def upward_imports(root: Path = ROOT, layers: dict[str, int] | None = None) -> list[str]:
    """'file: imports M (package, layer m) from package, layer n' for every import of a module of another
    package on the same or a higher layer, one line per file and package; a code file outside the table
    is a line too."""
    layers = read_layers(root / "recon" / "DESIGN.md") if layers is None else layers
    bad = []
    for path in code_files(root):
        mod = module_name(path, root)
        own = package_of(mod, layers)
        if own is None:
            if mod != "recon":  # the package root imports only rasterizer
                bad.append(f"{path.relative_to(root)}: not in the layer table of recon/DESIGN.md")
            continue
        seen = set()
        for target in sorted(imported_modules(path, root), key=len):
            to = package_of(target, layers) if target.split(".")[0] in CODE_DIRS else None
            if to is None or to == own or to in seen or layers[to] < layers[own]:
                continue
            seen.add(to)
            bad.append(f"{path.relative_to(root)}: imports {target} ({to}, layer {layers[to]}) "
                       f"from {own}, layer {layers[own]}")
    return bad


def circles(arrows: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """Pairs of packages that import each other."""
    return sorted([a, b] for a, b in arrows if a < b and (b, a) in arrows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="the repository root (default: this checkout)")
    args = ap.parse_args(argv)
    layers = read_layers(args.root / "recon" / "DESIGN.md")
    arrows = package_arrows(args.root, layers)
    report = {"layers": layers,
              "arrows": [[a, b, len(v)] for (a, b), v in sorted(arrows.items(), key=lambda kv: (-layers[kv[0][0]], kv[0]))],
              "upward": upward_imports(args.root, layers),
              "circles": circles(arrows)}
    print(json.dumps(report, indent=1))
    return 1 if report["upward"] or report["circles"] else 0


if __name__ == "__main__":
    sys.exit(main())
