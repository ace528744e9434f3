"""On-disk cache of decoded, downscaled frames: one uint8 ``.npy`` file per frame, reused across runs.

A decoded training image (uint8 [H, W, 4] RGBA, uint8 [H, W] loss mask, or a video frame) is stored under a
name hashed from what decides its content: the source file's resolved path, size in bytes and ``mtime_ns``,
which part of it (``rgba``, ``mask``, ``frame<k>`` of a video) and the output size (the run's
``--data-factor``). An edited or replaced source therefore maps to another name: its old entry is never read
again. Entries are written with :func:`recon.core.atomic.atomic_open` (a temporary file renamed into place),
so a crash never leaves a partial file under an entry's name. Each entry ends with a trailer
(:data:`TRAILER_MAGIC` and a BLAKE2b digest of the entry's key and its ``.npy`` bytes), so an entry that is damaged
anyway (truncated, bits flipped, not a ``.npy``, another shape or dtype) or foreign (another frame's entry copied
or renamed under this name), or that is not a regular file, or larger than its frame can be, reads as missing:
the caller decodes the source again and rewrites it. Entries written before the trailer existed read as
missing too, once.

Where: ``--frame-cache DIR``; "auto" (the default) is ``$SPLATFORGE_CACHE/frames`` when that variable is set,
else ``~/.cache/splatforge/frames``; "off" keeps nothing across runs: image frames are decoded from their files
every time they are not in memory, and video frames (which cannot be read one by one cheaply) are decoded into
a temporary folder of this process, ``frames-temporary/<host>-<pid>-<hex>`` beside the default cache folder (not
``$TMPDIR``: often memory-backed, and an N3DV scene is 25 GB of frames), removed when the process exits; one
left by a killed process (its hold, below, is stale) is removed by the next run that makes one
(:func:`video_frame_cache`).

Size cap: after a run has filled the cache, :meth:`FrameCache.prune` removes the least recently used entries
(oldest modification time first; a run marks the entries it uses with :meth:`FrameCache.claim`, so they are
never its own victims) until the folder holds at most ``--frame-cache-bytes`` (default
``$SPLATFORGE_FRAME_CACHE_BYTES``, else :data:`DEFAULT_MAX_BYTES`; 0: no cap). A capture larger than the cap on
its own still caches all its frames for the run (they are this run's); the next run's pruning removes them
first when they are then the oldest.

Runs sharing a cache: each run holds it while it trains (:meth:`FrameCache.hold`: a flock-held file in
``.holds/``, released by the kernel when the process dies, :mod:`recon.core.live_holds`) from before it loads
its scene, and claims every entry it uses after that. Pruning never removes an entry modified since the oldest
live hold began, so no run removes another live run's frames; prunings of several runs take turns (a lock
file in ``.holds/``).
"""

from __future__ import annotations

import atexit
import hashlib
import io
import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np

from recon.core.atomic import atomic_open, atomic_write_bytes
from recon.core.live_holds import Hold, live_holds, oldest_live_since

CACHE_ENV = "SPLATFORGE_CACHE"
MAX_BYTES_ENV = "SPLATFORGE_FRAME_CACHE_BYTES"
DEFAULT_MAX_BYTES = 32 << 30  # 32 GiB: one N3DV scene at full size (24.6 GB) and change
OFF = "off"
AUTO = "auto"
ENTRY_SUFFIXES = (".npy", ".json")  # what prune() may remove (never the folder's other files)
HOLDS_DIR = ".holds"  # the live runs' holds on a cache folder (recon.core.live_holds) and the pruning lock
PRUNE_LOCK = "prune.lock"
TEMPORARY_DIR = "frames-temporary"  # beside the default cache folder: --frame-cache off's per-process folders


def default_frame_cache_dir() -> Path:
    """``$SPLATFORGE_CACHE/frames``, else ``~/.cache/splatforge/frames``."""
    base = os.environ.get(CACHE_ENV)
    return (Path(base) if base else Path.home() / ".cache" / "splatforge") / "frames"


def resolve_frame_cache(setting: str | os.PathLike | None) -> "FrameCache | None":
    """The cache named by a ``--frame-cache`` value: "auto" / None = :func:`default_frame_cache_dir`, "off" =
    None (no disk cache), else that folder."""
    if setting is None or str(setting) == AUTO:
        return FrameCache(default_frame_cache_dir())
    if str(setting) == OFF:
        return None
    return FrameCache(Path(setting))


def video_frame_cache(setting: str | os.PathLike | None) -> "FrameCache":
    """The cache video frames are decoded into: :func:`resolve_frame_cache` of ``setting``; for "off" a new
    folder of this process (:func:`temporary_frame_cache`), so nothing is kept across runs."""
    cache = resolve_frame_cache(setting)
    return cache if cache is not None else temporary_frame_cache()


def temporary_frame_cache(parent: Path | None = None) -> "FrameCache":
    """A new frame cache folder of this process, ``parent/<name>`` (default ``parent``: ``frames-temporary``
    beside :func:`default_frame_cache_dir`, else, when that cannot be written, under the system's temporary
    directory; the folder is created on first write), removed when the process exits. It is named after a hold
    this process keeps in ``parent`` (:class:`recon.core.live_holds.Hold`) for as long as it lives: folders
    left by killed processes (no live hold of their name) are removed first."""
    import tempfile

    parents = [Path(parent)] if parent is not None else [default_frame_cache_dir().parent / TEMPORARY_DIR,
                                                          Path(tempfile.gettempdir()) / f"splatforge-{TEMPORARY_DIR}"]
    for place in parents:
        remove_stale_temporaries(place)
        try:
            hold = Hold(place).acquire()  # before the folder exists: never taken for a stale one
        except OSError:  # not writable: the next place (frames are then decoded again when read)
            continue
        atexit.register(_remove_temporary, place / hold.name, hold)
        return FrameCache(place / hold.name)
    return FrameCache(parents[-1] / f"unwritable-{os.getpid()}")  # store() fails quietly: nothing kept


def _remove_temporary(folder: Path, hold: Hold) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    hold.release()


def remove_stale_temporaries(parent: Path) -> list[Path]:
    """Remove the folders of ``parent`` whose hold is not live (their process was killed); returns them."""
    try:
        folders = [Path(e.path) for e in os.scandir(parent) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    live = {r["name"] for r in live_holds(parent)}
    stale = [f for f in folders if f.name not in live]
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    return stale


def max_cache_bytes(setting: int | None) -> int:
    """The frame cache's size cap in bytes: ``setting`` (``--frame-cache-bytes``) when given, else
    ``$SPLATFORGE_FRAME_CACHE_BYTES``, else :data:`DEFAULT_MAX_BYTES`; 0 means no cap. ValueError naming the
    variable when it is not a non-negative integer."""
    if setting is not None:
        return int(setting)
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        value = int(float(text))
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"${MAX_BYTES_ENV}={text!r}: must be a number of bytes >= 0 (0: no cap)")
    return value


def source_stamp(path: Path) -> dict:
    """What identifies a source file's content cheaply: resolved path, size in bytes, ``mtime_ns``."""
    st = Path(path).stat()
    return {"source": str(Path(path).resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


TRAILER_MAGIC = b"SFCACHE1"
DIGEST_BYTES = 16
TRAILER_BYTES = len(TRAILER_MAGIC) + DIGEST_BYTES
NPY_HEADER_MAX = 4096  # np.save's header for a 3-d uint8 array is 128 bytes


def _seal(key: bytes, payload: bytes) -> bytes:
    """The digest that ties an entry's ``.npy`` bytes to its key (another frame's entry does not verify)."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    h.update(len(key).to_bytes(8, "little"))
    h.update(key)
    h.update(payload)
    return h.digest()


def _sealed_payload(path: Path, key: bytes, most: int) -> bytes | None:
    """The ``.npy`` bytes of the entry file ``path`` when it is a regular file of at most ``most`` bytes whose
    trailer verifies against ``key``; else None (missing, a FIFO or device, too large, damaged or foreign)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode) or not TRAILER_BYTES < st.st_size <= most:
        return None
    with open(path, "rb") as f:
        data = f.read(most + 1)
    payload, magic, digest = data[:-TRAILER_BYTES], data[-TRAILER_BYTES:-DIGEST_BYTES], data[-DIGEST_BYTES:]
    if magic != TRAILER_MAGIC or _seal(key, payload) != digest:
        return None
    return payload


def _has_trailer(path: Path) -> bool:
    """Whether the regular file ``path`` ends with :data:`TRAILER_MAGIC` before its digest (a cheap check: the
    digest itself is verified by :meth:`FrameCache.load`). Entries from before the trailer, or cut short, fail,
    so the callers that count missing entries decode them again in one pass instead of frame by frame."""
    try:
        st = os.stat(path)  # before opening: opening a FIFO would wait for a writer
        if not stat.S_ISREG(st.st_mode) or st.st_size <= TRAILER_BYTES:
            return False
        with open(path, "rb") as f:
            f.seek(-TRAILER_BYTES, os.SEEK_END)
            return f.read(len(TRAILER_MAGIC)) == TRAILER_MAGIC
    except OSError:
        return False


class FrameCache:
    """A folder of decoded frames (module docstring). Thread- and process-safe: entries appear whole."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.reads = 0  # entries read back (hits)
        self.writes = 0  # entries written

    def __repr__(self) -> str:
        return f"FrameCache({str(self.folder)!r})"

    def entry_key(self, source: Path, part: str, size: tuple[int, int]) -> bytes:
        """What names (and is sealed into) the entry of ``part`` of ``source`` at ``size`` (width, height): the
        source's stamp (:func:`source_stamp`), the part and the size, as JSON bytes. OSError when the source is
        missing."""
        key = {**source_stamp(source), "part": part, "size": [int(size[0]), int(size[1])]}
        return json.dumps(key, sort_keys=True).encode()

    def entry_path(self, source: Path, part: str, size: tuple[int, int]) -> Path:
        """The file of ``part`` of ``source`` at ``size`` (width, height); its name hashes :meth:`entry_key`, so
        it changes when the source does. OSError when the source is missing."""
        digest = hashlib.sha1(self.entry_key(source, part, size)).hexdigest()
        return self.folder / digest[:2] / f"{digest}.npy"

    def load(self, source: Path, part: str, shape: tuple) -> np.ndarray | None:
        """The uint8 array of shape ``shape`` cached for ``part`` of ``source``, or None when there is none
        or it is damaged or foreign (module docstring; then the caller decodes the source and :meth:`store` s
        it again). A last dimension of None in ``shape`` accepts 3 or 4 (RGB or RGBA)."""
        try:
            size = (shape[1], shape[0])
            key, path = self.entry_key(source, part, size), self.entry_path(source, part, size)
            most = NPY_HEADER_MAX + int(np.prod([4 if d is None else d for d in shape])) + TRAILER_BYTES
            payload = _sealed_payload(path, key, most)
            if payload is None:
                return None
            arr = np.load(io.BytesIO(payload), allow_pickle=False)
        except (OSError, ValueError, EOFError):  # no entry, a missing source, or a damaged file
            return None
        want = tuple(shape)
        fits = arr.dtype == np.uint8 and arr.ndim == len(want) and all(
            a == w if w is not None else a in (3, 4) for a, w in zip(arr.shape, want))
        if not fits:
            return None
        self.reads += 1
        return arr

    def has(self, source: Path, part: str, size: tuple[int, int]) -> bool:
        """Whether an entry file exists and ends with the trailer (its digest is checked by :meth:`load`)."""
        try:
            return _has_trailer(self.entry_path(source, part, size))
        except OSError:
            return False

    def claim(self, source: Path, part: str, size: tuple[int, int]) -> bool:
        """:meth:`has`, and mark an existing entry as used now (its modification time), so that :meth:`prune`
        removes it last. A run claims the entries it will read before pruning."""
        try:
            path = self.entry_path(source, part, size)
            if not _has_trailer(path):  # an entry from before the trailer, or cut short: decode it again
                return False
            os.utime(path)
            return True
        except OSError:
            return False

    def entries(self) -> list[tuple[float, int, Path]]:
        """(modification time, bytes, path) of every entry file (``.npy`` / ``.json`` in the two-level folders)."""
        found = []
        try:
            subdirs = [d for d in os.scandir(self.folder)
                       if d.is_dir(follow_symlinks=False) and not d.name.startswith(".")]
        except OSError:
            return []
        for sub in subdirs:
            try:
                for e in os.scandir(sub.path):
                    if e.name.endswith(ENTRY_SUFFIXES) and e.is_file(follow_symlinks=False):
                        st = e.stat(follow_symlinks=False)
                        found.append((st.st_mtime, st.st_size, Path(e.path)))
            except OSError:
                continue
        return found

    def hold(self, since: float) -> Hold | None:
        """Hold this cache for a run that started at ``since`` (a ``time.time()``): until the hold is released
        (or its process dies), no :meth:`prune` removes an entry modified since then. None when the folder
        cannot be written (then nothing is cached either)."""
        try:
            return Hold(self.folder / HOLDS_DIR, since).acquire()
        except OSError:
            return None

    def prune(self, max_bytes: int, keep_since: float | None = None) -> tuple[int, int]:
        """Remove entries, least recently used (oldest modification time) first, until the folder's entries take
        at most ``max_bytes`` (0: no cap, nothing removed). Entries modified at or after ``keep_since`` (a
        ``time.time()``: the current run's, written or :meth:`claim` ed since it started) or since the oldest
        live :meth:`hold` began (other runs') are never removed; one pruning at a time. Returns (entries
        removed, bytes freed); files that vanish meanwhile are skipped."""
        if max_bytes <= 0:
            return 0, 0
        lock = self._prune_lock()
        try:
            return self._prune(max_bytes, keep_since)
        finally:
            if lock is not None:
                os.close(lock)

    def _prune_lock(self) -> int | None:
        """An open file descriptor holding the pruning lock (waits for another run's pruning to end), or None
        when the lock cannot be made (a read-only folder: nothing to prune there anyway, or no flock)."""
        try:
            import fcntl

            (self.folder / HOLDS_DIR).mkdir(parents=True, exist_ok=True)
            fd = os.open(self.folder / HOLDS_DIR / PRUNE_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except (ImportError, OSError):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # no flock on this file system: prune without taking turns
        return fd

    def _prune(self, max_bytes: int, keep_since: float | None) -> tuple[int, int]:
        """:meth:`prune`'s work, under its lock."""
        held = oldest_live_since(self.folder / HOLDS_DIR)
        bounds = [b for b in (keep_since, held) if b is not None]
        keep_since = min(bounds) - 1.0 if bounds else None  # 1 s: file systems with coarse modification times
        entries = sorted(self.entries())
        total = sum(size for _, size, _ in entries)
        removed = freed = 0
        for mtime, size, path in entries:
            if total <= max_bytes or (keep_since is not None and mtime >= keep_since):
                break
            try:
                path.unlink()
            except OSError:
                continue
            total -= size
            removed, freed = removed + 1, freed + size
        return removed, freed

    def store(self, source: Path, part: str, array: np.ndarray) -> None:
        """Write ``array`` (uint8 [H, W, ...]) as ``part`` of ``source`` atomically. A cache that cannot be
        written (read-only, disk full) is not an error: the frame is simply decoded again next time."""
        array = np.ascontiguousarray(array, dtype=np.uint8)
        try:
            size = (array.shape[1], array.shape[0])
            key, path = self.entry_key(source, part, size), self.entry_path(source, part, size)
            buf = io.BytesIO()
            np.save(buf, array, allow_pickle=False)
            payload = buf.getvalue()
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_open(path, force=True) as f:
                f.write(payload + TRAILER_MAGIC + _seal(key, payload))
        except OSError:
            return
        self.writes += 1

    def load_json(self, source: Path, part: str) -> dict | None:
        """A small JSON record cached for ``source`` (e.g. a video's frame count), or None."""
        try:
            path = self.entry_path(source, part, (0, 0)).with_suffix(".json")
            data = json.loads(path.read_text())
            os.utime(path)  # used now: pruned last (see claim)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def store_json(self, source: Path, part: str, record: dict) -> None:
        """Write a small JSON record for ``source`` atomically (failures ignored, as :meth:`store`)."""
        try:
            path = self.entry_path(source, part, (0, 0)).with_suffix(".json")
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, json.dumps(record).encode(), force=True)
        except OSError:
            return
