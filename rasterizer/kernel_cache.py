"""Numba's on-disk cache of the cpu kernels, in a folder named for their sources.

Every kernel is ``@njit(cache=True)``. Numba checks a cached kernel against its own source file only: a
kernel whose inlined helper in another module changed (``binning.count_or_fill_tiles`` calls
``chords.band_columns``) loads its stale machine code and computes the old thing, silently. That is what
a ``git pull`` or an edit of a helper module does to an editable install. So the cache folder is keyed by
a hash of every source file of the kernel packages that mentions numba: any change to one of them gives
a fresh folder, and every kernel compiles once again (on first use) against the sources it now has.

The folder is ``$NUMBA_CACHE_DIR/splatforge-<key>``, or ``$XDG_CACHE_HOME/splatforge/numba/splatforge-<key>``
(``~/.cache/...``) when NUMBA_CACHE_DIR is not set. Of the keyed folders beside it the newest
:data:`KEEP_FOLDERS` are kept and older ones removed. A package that holds kernels calls
:func:`key_numba_cache` with its folder before it defines any (``rasterizer`` and ``recon`` do, in their
``__init__``): kernels defined afterwards are cached under the key of every package given so far.
Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numba

PREFIX = "splatforge-"
KEEP_FOLDERS = 4  # keyed folders kept side by side (other checkouts, recent versions)

_roots: list[Path] = []
_base: Path | None = None


def source_key(roots: list[Path]) -> str:
    """sha1 (16 hex digits) over the relative paths and bytes of the ``*.py`` files under ``roots`` that
    mention numba, in sorted order."""
    digest = hashlib.sha1()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            data = path.read_bytes()
            if b"numba" in data:
                digest.update(f"{root.name}/{path.relative_to(root).as_posix()}\0".encode())
                digest.update(data)
    return digest.hexdigest()[:16]


def cache_base() -> Path:
    """Where keyed folders go: NUMBA_CACHE_DIR as the process started (numba read it into its config),
    else the user's cache folder."""
    if numba.config.CACHE_DIR and not Path(numba.config.CACHE_DIR).name.startswith(PREFIX):
        return Path(numba.config.CACHE_DIR)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "splatforge" / "numba"


def prune(base: Path, current: Path, keep: int = KEEP_FOLDERS) -> None:
    """Remove the keyed folders in ``base`` beyond the ``keep`` most recently used (``current`` stays)."""
    folders = sorted((p for p in base.glob(PREFIX + "*") if p.is_dir() and p != current),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for old in folders[max(keep - 1, 0):]:
        shutil.rmtree(old, ignore_errors=True)


def key_numba_cache(package_dir: str | os.PathLike) -> Path | None:
    """Add ``package_dir`` to the kernel packages and point Numba's cache at the folder of their key
    (``numba.config.CACHE_DIR``, read when a kernel is defined). Returns the folder, or None where it
    cannot be written (then Numba's own default places apply)."""
    global _base
    root = Path(package_dir).resolve()
    if root not in _roots:
        _roots.append(root)
    if _base is None:
        _base = cache_base()
    folder = _base / (PREFIX + source_key(_roots))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.utime(folder)
        prune(_base, folder)
    except OSError:
        return None
    numba.config.CACHE_DIR = str(folder)
    return folder
