"""rasterizer.kernel_cache: Numba's cache folder is keyed by the kernels' sources, so that a kernel whose
helper in another module changed is compiled again instead of loaded stale."""

import os
import subprocess
import sys
import tempfile
import textwrap
import time
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
            kc.key_numba_cache([{str(tmp_path / "toy")!r}])
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


def test_key_follows_every_python_source(tmp_path):
    """Any .py file counts (a kernel freezes constants of modules that never mention numba)."""
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "k.py").write_text("from numba import njit\n")
    (root / "constants.py").write_text("ALPHA_MAX = 0.99\n")
    (root / "notes.txt").write_text("a\n")
    key = KC.source_key([root])
    (root / "notes.txt").write_text("b\n")
    assert KC.source_key([root]) == key
    (root / "constants.py").write_text("ALPHA_MAX = 0.999\n")
    assert KC.source_key([root]) != key


def test_every_project_kernel_is_cached_in_the_keyed_folder():
    """Every cached Numba kernel of rasterizer/ and recon/ writes under the folder key_numba_cache chose."""
    import importlib
    import pkgutil

    import rasterizer
    import recon

    folder = KC.key_numba_cache()
    assert folder is not None and folder.name == KC.PREFIX + KC.source_key(KC.package_dirs())
    kernels = 0
    for package in (rasterizer, recon):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            path = Path(importlib.util.find_spec(info.name).origin or "")
            if path.suffix != ".py" or "numba" not in path.read_text():
                continue
            module = importlib.import_module(info.name)
            for obj in vars(module).values():
                cache = getattr(obj, "_cache", None)
                if isinstance(obj, numba.core.registry.CPUDispatcher) and getattr(cache, "_cache_path", None):
                    assert Path(cache._cache_path).is_relative_to(folder), (info.name, obj)
                    kernels += 1
    assert kernels > 50


def test_folder_choice_prunes_old_folders_and_survives_no_home(tmp_path, monkeypatch):
    base = tmp_path / "base"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(base))
    monkeypatch.setattr(numba.config, "CACHE_DIR", numba.config.CACHE_DIR)
    monkeypatch.setattr(KC, "_folder", None)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    old = time.time() - 30 * 86400
    made = []
    for i in range(KC.KEEP_FOLDERS + 3):
        (pkg / "k.py").write_text(f"x = {i}\n")
        monkeypatch.setattr(KC, "_folder", None)
        folder = KC.key_numba_cache([pkg])
        assert folder == base / (KC.PREFIX + KC.source_key([pkg])) and folder.is_dir()
        assert numba.config.CACHE_DIR == str(folder)
        assert os.environ["NUMBA_CACHE_DIR"] == str(base), "numba is imported: its environment is left alone"
        made.append(folder)
        os.utime(folder, (old + i, old + i))  # unused for a month, oldest first
    os.utime(made[-1])
    left = {p.name for p in base.iterdir()}
    assert left == {p.name for p in made[-KC.KEEP_FOLDERS:]}, "the newest kept, the old rest removed"
    fresh = base / (KC.PREFIX + "0" * 16)
    fresh.mkdir()  # another checkout's folder, in use: young, so kept
    monkeypatch.setattr(KC, "_folder", None)
    KC.key_numba_cache([pkg])
    assert fresh.is_dir()
    # a child process inherits the keyed folder as NUMBA_CACHE_DIR: its base is that folder's parent
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(made[-1]))
    assert KC.base_candidates()[0] == base
    # no home folder and nothing writable before the temporary folder
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    assert KC.base_candidates()[-1].parent == Path(tempfile.gettempdir())


def test_import_keys_the_environment_and_keeps_the_threading_layer(tmp_path):
    """A fresh process: importing rasterizer (before numba) puts the keyed folder in NUMBA_CACHE_DIR, and
    after a cpu render Numba still runs cpu/launch.py's workqueue layer, without trying another (a
    NUMBA_* variable changed after Numba's import made it re-read them all and drop that setting)."""
    script = textwrap.dedent("""
        import os, sys, warnings
        warnings.simplefilter("error")
        import rasterizer
        import numba, torch
        from rasterizer import rasterize_gaussians
        from rasterizer.kernel_cache import PREFIX
        folder = os.environ["NUMBA_CACHE_DIR"]
        assert os.path.basename(folder).startswith(PREFIX) and numba.config.CACHE_DIR == folder, folder
        n = 50
        g = torch.Generator().manual_seed(0)
        means = torch.rand(n, 3, generator=g) + torch.tensor([0.0, 0.0, 3.0])
        rasterize_gaussians(means, torch.randn(n, 4, generator=g), torch.full((n, 3), 0.05), torch.full((n,), 0.5),
                            torch.rand(n, 3, generator=g), torch.eye(4)[None],
                            torch.tensor([[[40.0, 0, 16], [0, 40.0, 16], [0, 0, 1]]]), 32, 32, backend="cpu")
        print(numba.config.THREADING_LAYER, numba.threading_layer())
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "cache")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["workqueue", "workqueue"], out.stdout
