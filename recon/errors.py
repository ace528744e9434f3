"""User-facing errors: one base class, one way to print them.

:class:`SplatforgeError` is the base of errors that mean "the input or the situation is wrong, and the
message says what to do" (a run folder held by another training, an unsafe checkpoint, a bad config
value). The CLI prints such errors, and the older ``ValueError`` / ``OSError`` based ones listed in
:data:`USER_ERRORS`, as one line ``splatforge <command>: error: <message>`` (:func:`fail`);
:func:`describe` turns an ``OSError`` into a sentence naming the file and what to do.
"""

from __future__ import annotations

import errno
import os
import sys


class SplatforgeError(Exception):
    """An error the user can act on; its message names the file or flag, what is wrong and what to do."""


class RunFolderError(SplatforgeError):
    """A training run folder cannot be used as asked (held by another training, other run, fewer steps)."""


class RunLockedError(RunFolderError):
    """Another live process is writing the run folder."""


class CheckpointError(SplatforgeError):
    """A checkpoint file cannot be used (unsafe to load, or missing entries)."""


class OutputError(SplatforgeError):
    """An output path cannot be written (a folder, an existing file without --force, no permission)."""


class ConfigValueError(SplatforgeError, ValueError):
    """A config field (from a file or a flag) has a value of the wrong type or outside its choices."""


# errors reported as one line without a traceback (OSError covers FileNotFoundError, FileExistsError,
# PermissionError, a full disk, a read-only file system)
USER_ERRORS = (SplatforgeError, ValueError, OSError)

_OS_HINTS = {
    errno.EACCES: "check its permissions or choose another location",
    errno.EPERM: "check its permissions or choose another location",
    errno.EROFS: "the file system is read-only: choose another location",
    errno.ENOSPC: "the disk is full: free some space and run the command again",
    errno.EDQUOT: "the disk quota is exceeded: free some space and run the command again",
    errno.ENOTDIR: "a part of the path is a file, not a folder: choose another location",
    errno.EISDIR: "it is a folder: give a file path",
}


def os_hint(err: OSError) -> str | None:
    """What to do about an OSError's errno (no permission, read-only, disk full, ...), or None."""
    return _OS_HINTS.get(err.errno)


def describe(err: BaseException) -> str:
    """One line for ``err``: the message of a user error; for an OSError the file, the system's reason
    and what to do (``/runs/x/config.yaml: Permission denied (check its permissions ...)``)."""
    if isinstance(err, OSError) and err.strerror and not isinstance(err, (FileNotFoundError, FileExistsError)):
        name = err.filename if err.filename is not None else None
        hint = os_hint(err)
        head = f"{os.fsdecode(name)}: {err.strerror}" if name is not None else err.strerror
        return head + (f" ({hint})" if hint else "")
    if isinstance(err, OSError) and err.strerror and err.filename is not None:
        return f"{os.fsdecode(err.filename)}: {err.strerror}"
    text = str(err) or type(err).__name__
    return " ".join(text.split())  # one line, even for messages that wrap


def fail(command: str, err: BaseException, status: int = 2) -> None:
    """Print ``splatforge <command>: error: <describe(err)>`` to stderr and exit with ``status``."""
    print(f"splatforge {command}: error: {describe(err)}", file=sys.stderr)
    raise SystemExit(status)
