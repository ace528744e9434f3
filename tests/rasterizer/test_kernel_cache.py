"""rasterizer.kernel_cache: Numba's cache folder is keyed by the kernels' sources, so that a kernel whose
helper in another module changed is compiled again instead of loaded stale."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numba

from rasterizer import kernel_cache as KC

KERNEL_CACHE_FILE = Path(KC.__file__)


def _write_helper(pkg: Path, value: int) -> None:
    (pkg / "helper.py").write_text(textwrap.dedent(f"""
        from numba import njit

        @njit(cache=True, inline="always")
        def value():
            return {value}
    """))


def _write_toy(pkg: Path) -> None:
    """A package whose cached kernel inlines a helper from another module (as binning uses chords)."""
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    _write_helper(pkg, 1)
    (pkg / "kernel.py").write_text(textwrap.dedent("""
        from numba import njit

        from .helper import value

        @njit(cache=True)
        def kernel():
            return value() * 10
    """))


def _run_toy(tmp_path: Path, cache: Path, keyed: bool) -> int:
    """kernel() in a fresh process with NUMBA_CACHE_DIR=cache, its cache keyed by kernel_cache or not."""
    script = textwrap.dedent(f"""
        import importlib.util, sys
        sys.path.insert(0, {str(tmp_path)!r})
        if {keyed}:
            spec = importlib.util.spec_from_file_location("kernel_cache", {str(KERNEL_CACHE_FILE)!r})
            kc = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(kc)
            kc.key_numba_cache({str(tmp_path / "toy")!r})
        from toy.kernel import kernel
        print(kernel())
    """)
    env = {"NUMBA_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def test_a_changed_helper_is_compiled_again_not_loaded_stale(tmp_path):
    pkg = tmp_path / "toy"
    _write_toy(pkg)
    assert _run_toy(tmp_path, tmp_path / "plain", keyed=False) == 10
    assert _run_toy(tmp_path, tmp_path / "keyed", keyed=True) == 10
    _write_helper(pkg, 2)  # only the helper's module changes (a git pull, an edit)
    assert _run_toy(tmp_path, tmp_path / "plain", keyed=False) == 10, "Numba's own cache should load it stale"
    assert _run_toy(tmp_path, tmp_path / "keyed", keyed=True) == 20


def test_key_follows_numba_sources_only(tmp_path):
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "k.py").write_text("from numba import njit\n")
    (root / "plain.py").write_text("x = 1\n")
    key = KC.source_key([root])
    (root / "plain.py").write_text("x = 2\n")
    assert KC.source_key([root]) == key  # no numba in it: not part of the key
    (root / "k.py").write_text("from numba import njit  # edited\n")
    assert KC.source_key([root]) != key


def test_key_numba_cache_sets_the_folder_and_prunes_old_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "base"))
    monkeypatch.setattr(KC, "_roots", [])
    monkeypatch.setattr(KC, "_base", None)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "k.py").write_text("import numba\n")
    folders = []
    for i in range(KC.KEEP_FOLDERS + 2):
        (pkg / "k.py").write_text(f"import numba  # version {i}\n")
        monkeypatch.setattr(KC, "_roots", [])
        folder = KC.key_numba_cache(pkg)
        assert folder == tmp_path / "base" / (KC.PREFIX + KC.source_key([pkg.resolve()]))
        assert numba.config.CACHE_DIR == str(folder) and folder.is_dir()
        folders.append(folder)
        os.utime(folder, (i + 1e9, i + 1e9))  # distinct ages, oldest first
    left = sorted(p.name for p in (tmp_path / "base").iterdir())
    assert len(left) == KC.KEEP_FOLDERS and folders[-1].name in left and folders[0].name not in left
    # a second package joins the key: a new folder under the same base
    other = tmp_path / "other"
    other.mkdir()
    (other / "m.py").write_text("from numba import njit\n")
    both = KC.key_numba_cache(other)
    assert both != folders[-1] and both.parent == tmp_path / "base"
