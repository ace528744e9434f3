"""User-facing errors: one base class, one way to print them.

:class:`SplatforgeError` is the base of errors that mean "the input or the situation is wrong, and the
message says what to do" (a run folder held by another training, an unsafe checkpoint, a bad config
value, a damaged dataset). The CLI prints those as one line ``splatforge <command>: error: <message>``
(:func:`fail`), and so an ``OSError`` naming its file (:func:`is_user_error`); :func:`describe` turns an
``OSError`` into a sentence naming the file and what to do. Anything else escaping a command is a bug:
:func:`report_bug` prints its traceback and asks to report it. Subclasses that a library user might
catch as ``ValueError`` (bad values, bad files) are ``ValueError`` too.
"""

from __future__ import annotations

import errno
import os
import pickle
import struct
import sys
import traceback


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


class UsageError(SplatforgeError, ValueError):
    """A command was given flags or arguments that do not go together or are out of range."""


class DamagedFileError(SplatforgeError, ValueError):
    """A file splatforge wrote earlier (history.json, metrics.json) cannot be read back."""


class InputFileError(SplatforgeError, ValueError):
    """An input file breaks a reader rule (recon/core/limits.py): too big, too deep, not finite, not a
    regular file. The message is ``"<path>: <problem>"``."""

    def __init__(self, path, problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class DeviceError(SplatforgeError, RuntimeError):
    """The asked-for compute device is not available (``--device cuda`` without CUDA)."""


# errors a command catches and hands to fail(); fail() itself tells a user error (one line) from a bug
# (traceback): an OSError counts as a user error only when it names a file or carries only splatforge's
# own message (no errno), see is_user_error
USER_ERRORS = (SplatforgeError, OSError)

# what torch.load raises for a damaged (truncated, overwritten, empty) file: the zip reader's RuntimeError,
# EOFError, and the unpickler's KeyError / ValueError / IndexError / struct.error / UnpicklingError on
# garbage bytes; an OSError (no permission) is not damage and is not in the list
DAMAGED_TORCH_FILE_ERRORS = (RuntimeError, EOFError, KeyError, ValueError, IndexError, struct.error,
                             pickle.UnpicklingError)

BUG_HINT = "this is a bug in splatforge: please report it with the command and the traceback"

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


def is_user_error(err: BaseException) -> bool:
    """True for errors the user can act on from a one-line message: a :class:`SplatforgeError`, an
    ``OSError`` naming its file (``PermissionError: /runs/x/config.yaml``), or an ``OSError`` raised by
    splatforge with a message only (``FileNotFoundError("--config x.yaml: no such file")``: no errno).
    An OSError with an errno but no file (a socket failure deep in a library) is not."""
    if isinstance(err, SplatforgeError):
        return True
    return isinstance(err, OSError) and (err.filename is not None or err.errno is None)


def memory_problem(err: MemoryError, what: str = "the input") -> str:
    """The one message for a MemoryError (numpy's ``_ArrayMemoryError`` is one) while reading ``what``: an
    input declared more data than fits. Used by :func:`memory_line` (the CLI) and
    :func:`recon.core.limits.memory_guard` (readers)."""
    detail = f" ({err})" if str(err) else ""
    return " ".join(f"out of memory while reading {what}{detail}; the input declares more data than this machine "
                    f"can hold: check that it is not damaged, or use a machine with more memory".split())


TORCH_CPU_OOM = "DefaultCPUAllocator: can't allocate memory"
"""What torch's CPU allocator says (in a RuntimeError, not a MemoryError) when an allocation fails."""


def out_of_memory(err: BaseException) -> MemoryError | None:
    """``err`` as a MemoryError when it is one, or torch's CPU allocator failing (a RuntimeError naming
    :data:`TORCH_CPU_OOM`: an input too large for the memory left, found inside a torch operation); else None."""
    if isinstance(err, MemoryError):
        return err
    if isinstance(err, RuntimeError) and TORCH_CPU_OOM in str(err):
        detail = str(err).split(TORCH_CPU_OOM, 1)[1].split(". Error code")[0].lstrip(": ")
        return MemoryError(" ".join(detail.split()))
    return None


def memory_line(err: MemoryError, inputs: str | None = None) -> str:
    """One line for a MemoryError escaping a command: :func:`memory_problem` naming ``inputs`` when known (the
    command's input arguments)."""
    return memory_problem(err, inputs if inputs else "the input")


def fail(command: str, err: BaseException, status: int = 2, inputs: str | None = None) -> None:
    """Print ``splatforge <command>: error: <describe(err)>`` to stderr and exit with ``status`` for a user
    error (:func:`is_user_error`); a MemoryError (or torch's CPU allocator failing: :func:`out_of_memory`) is
    such an error too (:func:`memory_line`, naming ``inputs``); anything else is a bug: :func:`report_bug`."""
    memory = out_of_memory(err)
    if memory is not None:
        print(f"splatforge {command}: error: {memory_line(memory, inputs)}", file=sys.stderr)
        raise SystemExit(status)
    if not is_user_error(err):
        report_bug(command, err)
    print(f"splatforge {command}: error: {describe(err)}", file=sys.stderr)
    raise SystemExit(status)


def report_bug(command: str, err: BaseException) -> None:
    """Print ``err``'s traceback, then ``splatforge <command>: error: <BUG_HINT>``, to stderr and exit with
    status 1."""
    traceback.print_exception(err, file=sys.stderr)
    prefix = f"splatforge {command}" if command else "splatforge"
    print(f"{prefix}: error: {BUG_HINT}", file=sys.stderr)
    raise SystemExit(1)
