"""Holds that live processes keep on a shared folder, and that their death releases (even by SIGKILL).

A hold is a small file ``<folder>/<name>.hold`` (``name``: ``<host>-<pid>-<hex>``) holding JSON ``{"pid", "host", "since"}``
(``since``: a ``time.time()`` the holder chose, e.g. when its run started), locked with ``fcntl.flock`` by
its holder for as long as it holds it. The kernel drops the flock when the holder's process dies, so
:func:`live_holds` can tell the live holds (their flock is taken) from stale ones (it takes the flock itself:
the file is then removed). The file is written under a temporary name, locked, then renamed into place, so a
reader never sees an unlocked hold of a live process. On file systems without flock, a hold counts as live
while its pid runs on this host (holds of other hosts: live).

Used by the on-disk frame cache (:mod:`recon.data.frame_cache`): a run holds the cache while it trains, and
pruning keeps every entry used since the oldest live hold's ``since``.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # not a POSIX system: holds only name their holder
    fcntl = None

SUFFIX = ".hold"
NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (a process of another user counts)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError, OSError):
        return False
    return True


def _try_flock(fd: int) -> bool | None:
    """Take an exclusive flock on ``fd`` without waiting: True when taken, False when another open file
    holds it, None when this file system (or system) has no flock."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno in NO_FLOCK:
            return None
        raise
    return True


class Hold:
    """This process's hold on ``folder`` (module docstring), taken by :meth:`acquire`, dropped by
    :meth:`release` (or when the object is collected, or the process ends)."""

    def __init__(self, folder: str | os.PathLike, since: float | None = None):
        self.folder = Path(folder)
        self.name = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(4).hex()}"  # unique to this hold
        self.since = time.time() if since is None else float(since)
        self.path: Path | None = None
        self.fd: int | None = None

    def acquire(self) -> "Hold":
        """Write and lock the hold file; OSError when the folder cannot be written."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp, path = self.folder / f".{self.name}.tmp", self.folder / f"{self.name}{SUFFIX}"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _try_flock(fd)  # before the rename: no reader ever sees the hold unlocked
            record = {"pid": os.getpid(), "host": socket.gethostname(), "since": self.since}
            os.write(fd, json.dumps(record).encode())
            os.replace(tmp, path)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        self.fd, self.path = fd, path
        return self

    def release(self) -> None:
        """Remove the hold file (while still locked) and drop the lock; nothing when not held."""
        fd, self.fd = self.fd, None
        if fd is None:
            return
        try:
            if self.path is not None:
                self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def __enter__(self) -> "Hold":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # at interpreter exit, module globals may be gone: the kernel drops the lock anyway
            pass


def _read_record(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _is_live(path: Path) -> dict | None:
    """The record of the hold file ``path`` when its holder is alive, else None (a stale file is removed)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None  # released meanwhile
    try:
        record = _read_record(fd)
        taken = _try_flock(fd)
        if taken is None:  # no flock here: the pid decides
            alive = record.get("host") != socket.gethostname() or pid_alive(record.get("pid", -1))
        else:
            alive = not taken
        if not alive:
            path.unlink(missing_ok=True)  # ours now (flocked), or its pid is gone
            return None
        return {**record, "name": path.name[: -len(SUFFIX)]}
    finally:
        os.close(fd)


def live_holds(folder: str | os.PathLike) -> list[dict]:
    """Records ``{"pid", "host", "since", "name"}`` of the live holds on ``folder`` (this process's own included);
    stale hold files (their holder died) are removed on the way."""
    try:
        names = [e.path for e in os.scandir(folder) if e.name.endswith(SUFFIX) and not e.name.startswith(".")]
    except OSError:
        return []
    return [r for r in (_is_live(Path(p)) for p in names) if r is not None]


def oldest_live_since(folder: str | os.PathLike) -> float | None:
    """The smallest ``since`` of the live holds on ``folder`` (None when there is none)."""
    starts = []
    for r in live_holds(folder):
        try:
            starts.append(float(r["since"]))
        except (KeyError, TypeError, ValueError):
            starts.append(0.0)  # a hold that says nothing usable: keep every entry
    return min(starts) if starts else None
