"""Numba's on-disk cache of the cpu kernels, in a folder named for the sources they are built from.

Every kernel is ``@njit(cache=True)``. Numba checks a cached kernel against its own source file only: a
kernel whose inlined helper in another module changed (``binning.count_or_fill_tiles`` calls
``chords.band_columns``), or whose frozen global constant did (``EXTENT_SIGMAS`` of
``surfels/projection.py`` in ``surfels/cpu_projection.py``), loads its stale machine code and computes
the old thing, silently. That is what a ``git pull`` or an edit does to an editable install. So the cache
folder is keyed by a hash of every ``*.py`` file of the kernel packages (:data:`KERNEL_PACKAGES`, the
folders of that name beside this package): any change gives a fresh folder, where every kernel compiles
again on first use against the sources it now has.

The folder is ``<base>/splatforge-<key>``; base is ``$NUMBA_CACHE_DIR`` as the process found it, else
``$XDG_CACHE_HOME/splatforge/numba`` (``~/.cache/...``), else the temporary folder; the first writable one.
The chosen folder goes into ``NUMBA_CACHE_DIR`` when Numba is not imported yet (the usual case: the
``splatforge`` command imports ``rasterizer`` first), so that Numba and child processes (distributed
workers) read it from there; a child that finds a keyed folder there takes its parent as base. Once
Numba is imported only its config is set (:func:`point_numba_at`). Keyed folders not used for
:data:`PRUNE_AFTER_DAYS` are removed, the :data:`KEEP_FOLDERS` newest kept whatever their age.
:func:`key_numba_cache` runs when ``rasterizer`` is imported, before any kernel is defined (``recon``
imports ``rasterizer`` first). Nothing here imports torch or Numba.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

PREFIX = "splatforge-"
KERNEL_PACKAGES = ("rasterizer", "recon")  # packages holding Numba kernels, hashed for the key
KEEP_FOLDERS = 3  # keyed folders kept whatever their age (other checkouts, recent versions)
PRUNE_AFTER_DAYS = 7  # other keyed folders unused this long are removed

_folder: Path | None = None


def package_dirs() -> list[Path]:
    """The folders of KERNEL_PACKAGES beside this package (those that exist)."""
    here = Path(__file__).resolve().parent.parent
    return [here / name for name in KERNEL_PACKAGES if (here / name).is_dir()]


def source_key(roots: list[Path]) -> str:
    """sha1 (16 hex digits) over the relative paths and bytes of every ``*.py`` file under ``roots``, in
    sorted order."""
    digest = hashlib.sha1()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{root.name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def base_candidates() -> list[Path]:
    """Where keyed folders may go, in order of preference (see the module docstring)."""
    found = []
    env = os.environ.get("NUMBA_CACHE_DIR")
    if env:
        path = Path(env)
        found.append(path.parent if path.name.startswith(PREFIX) else path)
    try:
        found.append(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "splatforge" / "numba")
    except RuntimeError:  # no home folder (HOME unset, no passwd entry)
        pass
    found.append(Path(tempfile.gettempdir()) / f"splatforge-numba-{os.getuid() if hasattr(os, 'getuid') else 0}")
    return found


def prune(base: Path, current: Path, keep: int = KEEP_FOLDERS, after_days: float = PRUNE_AFTER_DAYS) -> None:
    """Remove the keyed folders in ``base`` other than ``current`` and the ``keep`` - 1 most recently used
    that were not used for ``after_days``; folders that vanish meanwhile (another process) are skipped."""
    aged = []
    for path in base.glob(PREFIX + "*"):
        try:
            if path != current and path.is_dir():
                aged.append((path.stat().st_mtime, path))
        except OSError:
            continue
    aged.sort(reverse=True)
    cutoff = time.time() - after_days * 86400
    for mtime, path in aged[max(keep - 1, 0):]:
        if mtime < cutoff:
            shutil.rmtree(path, ignore_errors=True)


def point_numba_at(folder: Path) -> None:
    """Numba's cache folder. Before Numba is imported: ``NUMBA_CACHE_DIR``, which it reads on import (and
    child processes inherit). After: ``numba.config.CACHE_DIR`` only, the environment left alone, because
    Numba re-reads every NUMBA_* variable at the next compile once one of them changed, which would undo
    the settings made in code since its import (``cpu/launch.py``'s threading layer: the CI run of stop 42
    warned of Numba trying TBB)."""
    if "numba" in sys.modules:
        import numba

        numba.config.CACHE_DIR = str(folder)
    else:
        os.environ["NUMBA_CACHE_DIR"] = str(folder)


def key_numba_cache(roots: list[Path] | None = None) -> Path | None:
    """Point Numba's cache (point_numba_at) at the keyed folder of the sources under ``roots`` (default:
    the kernel packages, package_dirs), in the first writable base;
    returns it (computed once per process), or None with a warning when no base can be written (Numba's
    own places apply then)."""
    global _folder
    if _folder is not None:
        return _folder
    name = PREFIX + source_key(package_dirs() if roots is None else [Path(r) for r in roots])
    for base in base_candidates():
        folder = base / name
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=folder).close()  # writable, as Numba checks it
            os.utime(folder)
        except OSError:
            continue
        prune(base, folder)
        _folder = folder
        point_numba_at(folder)
        return folder
    warnings.warn(f"splatforge: no folder for Numba's kernel cache could be written (tried "
                  f"{', '.join(str(b) for b in base_candidates())}); set NUMBA_CACHE_DIR to a writable folder",
                  RuntimeWarning, stacklevel=2)
    return None
