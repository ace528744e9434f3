"""All-or-nothing file writes.

Output goes to a temporary file in the destination directory (same filesystem), which is renamed
over the destination only after everything was written and flushed. On any error the temporary
file is removed, so a failed export never leaves a partial file behind. An existing destination is
refused unless ``force`` is set.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator


def refuse_overwrite(path: str | os.PathLike, force: bool) -> None:
    """Raise ``FileExistsError`` if ``path`` exists and ``force`` is false."""
    if not force and os.path.lexists(path):
        raise FileExistsError(f"{os.fspath(path)} already exists; pass --force to overwrite it")


def _default_mode() -> int:
    """Permission bits a plain ``open(path, 'w')`` would give (0o666 minus the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _publish(tmp: str, path: Path, force: bool) -> None:
    """Move the finished temporary file onto ``path``.

    Without ``force`` a hard link gives an exclusive create (no race with another writer); where
    links are unsupported we fall back to a re-check plus rename.
    """
    if force:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        refuse_overwrite(path, force=False)
        raise
    except OSError:
        refuse_overwrite(path, force=False)
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def publish_finished(tmp: str | os.PathLike, path: str | os.PathLike, force: bool) -> None:
    """Give a finished temporary file (written by another library, e.g. a video encoder, into a ``mkstemp``
    name beside ``path``) the permissions a plain ``open`` would, and move it onto ``path`` (refusing an
    existing ``path`` unless ``force``)."""
    os.chmod(tmp, _default_mode())  # mkstemp creates 0600
    _publish(os.fspath(tmp), Path(path), force)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, force: bool = False) -> Iterator[BinaryIO]:
    """Context manager yielding a binary file object; its contents appear at ``path`` on success.

    Raises ``FileExistsError`` (before writing anything) when ``path`` exists and ``force`` is
    false. If the body raises, nothing is created and the destination is untouched.
    """
    path = Path(path)
    refuse_overwrite(path, force)
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _default_mode())
        _publish(tmp, path, force)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.filename is None and err.errno is not None:
            # a failed write (a full disk) names no file: name the destination
            raise OSError(err.errno, err.strerror, os.fspath(path)) from err
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes, force: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path, force=force) as f:
        f.write(data)
