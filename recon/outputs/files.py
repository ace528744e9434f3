"""Files of a training run directory, all written atomically (temporary file + rename).

Layout::

    OUT/config.yaml                 the TrainConfig as plain YAML (config_from_dict checks every value);
                                    data and out as absolute paths; the sections lr, adc, mcmc as nested
                                    mappings (missing ones: defaults)
    OUT/checkpoints/ckpt_XXXXX.pt   torch.save'd plain dicts (tensors, numbers, lists), XXXXX = step;
                                    loaded with weights_only=True (a file holding anything else is refused)
    OUT/.lock                       pid and host of the training writing the folder (RunLock)
    OUT/splats.ply                  final model (3DGS PLY; for a 4D method its 3D slice at t = 0.5)
    OUT/splats4d.ply                final 4D model of a 4D method (ply4d, recon/export/PLY4D.md)
    OUT/metrics.json                test metrics and timings
    OUT/history.json                per step: loss, Gaussian count, seconds; per evaluation: test PSNR, SSIM
                                    (recon.outputs.history.RunHistory)
    OUT/loss.png                    those curves against step (recon.outputs.plots, matplotlib)
    OUT/renders/test_XXX.png        ground truth | render | error
    OUT/tensorboard/                TensorBoard event files (--logger tensorboard; recon.training.tensorboard)
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import re
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Sequence, Union, get_args, get_origin, get_type_hints

import numpy as np
import torch
import yaml

from recon.core.errors import (DAMAGED_TORCH_FILE_ERRORS, CheckpointError, ConfigValueError, DamagedFileError,
                          RunLockedError)
from recon.core.atomic import atomic_open, atomic_write_bytes
from recon.core.limits import json_depth, load_json, read_bytes_limited, require_regular_file, with_path
from recon.outputs.history import RunHistory

CONFIG_FILE = "config.yaml"
SPLATS_FILE = "splats.ply"
SPLATS4D_FILE = "splats4d.ply"
RENDERS_DIR = "renders"
EVAL_DIR = "eval"
CHECKPOINT_DIR = "checkpoints"
METRICS_FILE = "metrics.json"
HISTORY_FILE = "history.json"
LOSS_PLOT_FILE = "loss.png"
TENSORBOARD_DIR = "tensorboard"
_CKPT_RE = re.compile(r"^ckpt_(\d+)\.pt$")
_YAML_QUOTED = re.compile(rb"'[^'\n]*'|\"(?:[^\"\\\n]|\\.)*\"|#[^\n]*")  # quoted scalars, comments


# ------------------------------------------------------------------------------------------ config


def _plain(value: Any) -> Any:
    """Dataclass field value -> YAML-safe plain data (Paths become strings; sections stay mappings)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def config_to_dict(cfg: Any) -> dict:
    """Dataclass -> dict of plain values; a field holding a dataclass (a section such as
    ``TrainConfig.adc``) becomes a nested dict."""
    if not is_dataclass(cfg):
        raise TypeError(f"expected a dataclass config, got {type(cfg).__name__}")
    return {k: _plain(v) for k, v in asdict(cfg).items()}


def flatten_config(data: dict, prefix: str = "") -> dict:
    """Nested config mapping -> one level with dotted keys (``{"adc": {"grow_grad2d": x}}`` ->
    ``{"adc.grow_grad2d": x}``), in order."""
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(flatten_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_fields(cfg: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted name, annotated type, value) of every leaf field of dataclass ``cfg``, sections (fields
    whose type is a dataclass) walked into: ``("adc.grow_grad2d", float, 0.0002)``. ConfigValueError when
    a section holds something else than its dataclass."""
    hints = get_type_hints(type(cfg))
    found = []
    for f in fields(cfg):
        name, tp, value = prefix + f.name, hints[f.name], getattr(cfg, f.name)
        if is_section_type(tp):
            if not isinstance(value, tp):
                raise ConfigValueError(f"{name}: {value!r} is not a {tp.__name__} section")
            found += config_fields(value, name + ".")
        else:
            found.append((name, tp, value))
    return found


def is_section_type(tp: Any) -> bool:
    """True for a field type that is itself a config dataclass (a nested section)."""
    return isinstance(tp, type) and is_dataclass(tp)


def write_config(out: Path, cfg: Any) -> Path:
    """Write ``out/config.yaml`` (plain YAML, keys in field order, sections as nested mappings)."""
    path = Path(out) / CONFIG_FILE
    text = CONFIG_HEAD + yaml.safe_dump(config_to_dict(cfg), sort_keys=False) + CONFIG_END
    atomic_write_bytes(path, text.encode(), force=True)
    return path


CONFIG_HEAD = "# splatforge run config (its last line marks the end: a file cut short is refused)\n"
"""The first line of a config.yaml splatforge writes; a file starting with it must hold :data:`CONFIG_END`
(config files written by hand or before the marker existed have no head and are not checked)."""
CONFIG_END = "# end of config\n"


MAX_CONFIG_BYTES = 1 << 20  # a config.yaml is a few kB (a 9 MB block-nested YAML took 80 s to refuse)
MAX_CONFIG_DEPTH = 64  # a config nests two levels (sections); YAML's composer recurses once per level


def read_config_dict(path: Path) -> dict:
    """Plain dict from a config.yaml; ConfigValueError naming the file when it is not a regular file of UTF-8
    YAML (at most :data:`MAX_CONFIG_BYTES`, nesting at most :data:`MAX_CONFIG_DEPTH` deep) holding a mapping."""
    path = Path(path)
    raw = read_bytes_limited(path, MAX_CONFIG_BYTES, "config file", with_path(ConfigValueError))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigValueError(f"{path}: not UTF-8 text (byte {e.start}); it is damaged or not a config.yaml") \
            from None
    depth = json_depth(_YAML_QUOTED.sub(b"", raw))  # flow-style brackets; block nesting is bounded by lines
    if depth > MAX_CONFIG_DEPTH:
        raise ConfigValueError(f"{path}: nests {depth} levels deep, more than the {MAX_CONFIG_DEPTH} a config may; "
                               f"it is damaged or not a config.yaml")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigValueError(f"{path}: not valid YAML ({' '.join(str(e).split())})") from None
    except RecursionError:
        raise ConfigValueError(f"{path}: nests too deeply; it is damaged or not a config.yaml") from None
    if not isinstance(data, dict):
        raise ConfigValueError(f"{path}: expected a mapping of config fields, got {type(data).__name__}")
    if text.startswith(CONFIG_HEAD) and CONFIG_END.strip() not in (line.strip() for line in text.splitlines()):
        raise ConfigValueError(f"{path}: cut short (its last line, '{CONFIG_END.strip()}', is missing): the fields "
                               f"after the cut would silently take their defaults; restore the file or rerun")
    return data


def config_from_dict(cls: type, data: dict, source: str | os.PathLike | None = None) -> Any:
    """Instantiate dataclass ``cls`` from plain data, each value checked against its field's type as the
    CLI checks flags (:func:`check_field_value`); a section field (a dataclass type) takes a nested
    mapping, checked the same way; a missing field or section keeps its default (config files written
    before a field existed still load); unknown keys are an error. ``source`` (the file) starts the
    messages, which name nested fields by dotted keys (``adc.grow_grad2d``)."""
    where = f"{os.fspath(source)}: " if source is not None else ""
    try:
        return _section_from_dict(cls, data, "")
    except ConfigValueError as err:
        raise ConfigValueError(f"{where}{err}") from None


def _section_from_dict(cls: type, data: dict, prefix: str) -> Any:
    """:func:`config_from_dict` for the fields of ``cls`` under dotted ``prefix`` ("" or "adc.")."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(prefix + k for k in set(data) - names)
    if unknown:
        raise ConfigValueError(f"unknown config field(s) {unknown} for {cls.__name__}")
    hints = get_type_hints(cls)
    kw = {}
    for key, value in data.items():
        tp = hints[key]
        if not is_section_type(tp):
            kw[key] = check_field_value(prefix + key, tp, value)
            if isinstance(kw[key], float) and not math.isfinite(kw[key]):  # 1e400 in a file: read as infinity
                raise ConfigValueError(f"{prefix}{key}: {value!r} is not a finite number")
        elif value is None:  # an empty section in YAML (``adc:``): its defaults
            continue
        elif not isinstance(value, dict):
            raise ConfigValueError(f"{prefix}{key}: {value!r} is not a mapping of {tp.__name__} fields")
        else:
            kw[key] = _section_from_dict(tp, value, f"{prefix}{key}.")
    return cls(**kw)


def check_field_value(name: str, tp: Any, value: Any) -> Any:
    """``value`` converted to field type ``tp`` (str -> Path, int -> float), or ConfigValueError naming
    the field, the value and what is allowed. Handles the flat config types: bool, int, float, str,
    Path, Literal[...], X | None; other types pass unchecked."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return check_field_value(name, option, value)
            except ConfigValueError as err:
                errors.append(err)
        raise errors[0] if len(errors) == 1 else ConfigValueError(
            f"{name}: {value!r} is not a valid value (expected {_type_name(tp)})")
    if origin is Literal:
        if value not in args:
            raise ConfigValueError(f"{name}: {value!r} is not one of {', '.join(map(str, args))}")
        return value
    if tp is float and isinstance(value, str):
        value = _yaml_float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
    ok = {bool: lambda v: isinstance(v, bool),
          int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          str: lambda v: isinstance(v, str),
          Path: lambda v: isinstance(v, (str, Path)) and str(v) != ""}.get(tp)
    if ok is None:
        return value
    if not ok(value):
        raise ConfigValueError(f"{name}: {value!r} is not {_type_name(tp)}")
    return float(value) if tp is float else Path(value) if tp is Path else value


def _yaml_float(text: str) -> float | str:
    """``float(text)`` for a number written without a dot (``1e-3``), else ``text`` unchanged."""
    try:
        return float(text) if re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", text.strip()) else text
    except ValueError:
        return text


def _type_name(tp: Any) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", Path: "a path"}
    if get_origin(tp) in (Union, UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a) for a in get_args(tp))
    if get_origin(tp) is Literal:
        return "one of " + ", ".join(map(str, get_args(tp)))
    return names.get(tp, getattr(tp, "__name__", str(tp)))


# ------------------------------------------------------------------------------------------ checkpoints


def checkpoint_path(out: Path, step: int) -> Path:
    return Path(out) / CHECKPOINT_DIR / f"ckpt_{step:05d}.pt"


def list_checkpoints(out: Path) -> list[tuple[int, Path]]:
    """(step, path) of ``out/checkpoints/ckpt_*.pt``, sorted by step."""
    folder = Path(out) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _CKPT_RE.match(p.name))]
    return sorted(found)


def save_checkpoint(out: Path, step: int, payload: dict, keep: int = 2) -> Path:
    """Atomically write ``ckpt_{step}.pt``; then delete all but the newest ``keep`` (>= 1) checkpoints."""
    path = checkpoint_path(out, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, force=True) as f:
        torch.save(payload, f)
    for _, old in list_checkpoints(out)[:-max(1, keep)]:
        old.unlink(missing_ok=True)
    return path


class NotACheckpointError(CheckpointError, ValueError):
    """A checkpoint file is not a torch.save archive at all (random bytes, cut short before its zip
    directory): a damaged file, so :func:`load_latest_checkpoint` falls back to the previous one."""


def load_checkpoint_file(path: Path) -> dict:
    """The payload of one checkpoint, loaded with ``weights_only=True``: tensors and plain Python data
    only, so a crafted file cannot run code. CheckpointError naming the file when it holds anything else
    (nothing of it is executed); other exceptions mean a damaged file."""
    import pickle
    import zipfile

    # a folder, FIFO or device named ckpt_N.pt (a FIFO would block torch.load, /dev/zero never end): damaged
    require_regular_file(path, "checkpoint", lambda p, problem: NotACheckpointError(
        f"{p}: {problem}; not a splatforge checkpoint: remove it and run again"))
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive
        raise NotACheckpointError(f"{path}: not a splatforge checkpoint (it is not the zip archive torch.save "
                                  f"writes: damaged, cut short or another kind of file); delete it and run again")
    damaged = _failing_member(path)  # torch.load does not check the CRC-32s: a flipped bit would load silently
    if damaged is not None:
        raise NotACheckpointError(f"{path}: damaged checkpoint ({damaged}); delete it and run again")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "weights_only" not in str(err) and "Weights only" not in str(err):
            raise  # a damaged file, not a refused one
        raise CheckpointError(
            f"{path}: refusing to load this checkpoint: it holds pickled Python objects other than tensors "
            f"and plain data, which could run code when loaded (splatforge never writes such files); "
            f"delete it if you do not know where it came from, then run again") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: not a splatforge checkpoint (holds a {type(payload).__name__}, "
                              f"not a mapping); delete it and run again")
    return payload


def _failing_member(path: Path) -> str | None:
    """What is wrong with the zip archive of a checkpoint (a member whose bytes fail their CRC-32 or local header,
    a damaged directory), or None when every member reads back intact. Reads the whole file once, 1 MB at a
    time (measured: 0.06 s for a 200 MB checkpoint in the page cache, about 0.3 s per GB)."""
    import zipfile

    from recon.core.limits import ZIP_ERRORS

    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()  # None, or the first member whose CRC does not match
    except (*ZIP_ERRORS, ValueError) as err:  # a local header that disagrees with the directory, ...
        return f"{type(err).__name__}: {' '.join(str(err).split())}"
    return None if bad is None else f"member {bad!r} fails its CRC-32 check"


def _has_entry(payload: dict, key: str) -> bool:
    """Whether ``payload`` holds ``key`` (dotted: ``"rng.torch"`` is key torch of mapping rng)."""
    node = payload
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def check_checkpoint_keys(path: Path, payload: dict, required: Sequence[str]) -> None:
    """CheckpointError naming the file and the missing entries of ``payload`` (``"rng.torch"`` names a
    key of the ``rng`` mapping; ``"history|losses"`` is satisfied by either)."""
    missing = [key for key in required
               if not any(_has_entry(payload, alternative) for alternative in key.split("|"))]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {', '.join(missing)} (not written by this version "
                              f"of splatforge, or edited); delete it to resume from an earlier checkpoint, "
                              f"or use --overwrite to start over")


def load_latest_checkpoint(out: Path, required: Sequence[str] = (), log=None) -> tuple[int, dict] | None:
    """(step, payload) of the newest readable checkpoint, or None when there is none. A damaged file
    (torch.load raises one of :data:`recon.core.errors.DAMAGED_TORCH_FILE_ERRORS`) falls back to the previous
    one, saying so through ``log`` (a callable taking one line; default: stderr); an unsafe one, or one
    lacking the ``required`` keys (:func:`check_checkpoint_keys`), is a CheckpointError; an OSError (no
    permission) propagates."""
    errors = []
    for step, path in reversed(list_checkpoints(out)):
        try:
            payload = load_checkpoint_file(path)
        except CheckpointError as e:
            if not isinstance(e, NotACheckpointError):
                raise
            errors.append(str(e))
            (log or _print_stderr)(f"{path}: damaged checkpoint (not a torch.save archive); trying the previous one")
            continue
        except DAMAGED_TORCH_FILE_ERRORS as e:  # a damaged file: fall back to the previous one
            errors.append(f"{path}: {type(e).__name__}: {e}")
            (log or _print_stderr)(f"{path}: damaged checkpoint ({type(e).__name__}: {e}); trying the previous one")
            continue
        check_checkpoint_keys(path, payload, required)
        return step, payload
    if errors:
        raise CheckpointError("no readable checkpoint: " + "; ".join(errors))
    return None


def _print_stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr)


# ------------------------------------------------------------------------------------------ outputs


# metrics.json fields that readers (eval, compare, block merging) format or compare as numbers
METRIC_INTEGERS = ("num_gaussians", "steps")
METRIC_NUMBERS = ("train_seconds", "seconds_per_step")
TEST_METRIC_NUMBERS = ("psnr", "ssim", "lpips")


def read_metrics(path: Path, hint: str) -> dict:
    """The metrics.json object at ``path``: a JSON object whose ``test`` is an object, and whose known fields
    (:data:`METRIC_INTEGERS`, :data:`METRIC_NUMBERS`, :data:`TEST_METRIC_NUMBERS` at the top or in ``test``) are numbers or
    null (NaN allowed: a diverged run); DamagedFileError naming the file and ending with ``hint`` (what to do)
    otherwise."""
    def damaged(problem: str) -> DamagedFileError:
        return DamagedFileError(f"{path}: {problem}; {hint}")

    data = load_json(path, "metrics", lambda p, problem: damaged(problem), allow_nan=True)
    if not isinstance(data, dict):
        raise damaged(f"holds a JSON {type(data).__name__}, not an object of metrics")
    test = data.get("test")
    if test is not None and not isinstance(test, dict):
        raise damaged(f"'test' is a {type(test).__name__}, not an object of test metrics")
    checks = [(k, data.get(k), (int,)) for k in METRIC_INTEGERS] + \
        [(k, data.get(k), (int, float)) for k in METRIC_NUMBERS + TEST_METRIC_NUMBERS] + \
        [(f"test.{k}", (test or {}).get(k), (int, float)) for k in TEST_METRIC_NUMBERS]
    for key, value, types in checks:
        if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
            raise damaged(f"'{key}' is {value!r:.40}, not {'an integer' if types == (int,) else 'a number'}")
    for key, value in (("ssim", data.get("ssim")), ("test.ssim", (test or {}).get("ssim"))):
        if isinstance(value, float) and not -1.0 <= value <= 1.0 and not math.isnan(value):
            raise damaged(f"'{key}' is {value!r:.40}, outside SSIM's range [-1, 1]")
    return data


def write_json(path: Path, data: dict) -> None:
    atomic_write_bytes(Path(path), (json.dumps(data, indent=2) + "\n").encode(), force=True)


def write_png(path: Path, image: np.ndarray) -> None:
    """Atomically save uint8 [H, W, 3] (or float in [0, 1]) as PNG."""
    from PIL import Image

    if image.dtype != np.uint8:
        image = (np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buf.getvalue(), force=True)


# ------------------------------------------------------------------------------------------ history


def write_history(out: Path, history: RunHistory) -> Path:
    """Atomically write ``out/history.json`` (one line per list: 30k steps stay a few hundred kB)."""
    data = history.to_dict()
    body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items())
    path = Path(out) / HISTORY_FILE
    atomic_write_bytes(path, ("{\n" + body + "\n}\n").encode(), force=True)
    return path


def read_history(out: Path) -> RunHistory | None:
    """``out/history.json`` (None when the run has none: older runs); ValueError naming the file when bad."""
    path = Path(out) / HISTORY_FILE
    if not path.exists() and not path.is_symlink():  # a folder or FIFO there: refused by load_json
        return None
    # NaN is allowed: a diverged training records NaN losses
    data = load_json(path, "history", lambda p, problem: DamagedFileError(
        f"{p}: {problem}; delete it or rerun the training"), allow_nan=True)
    return RunHistory.from_dict(data, str(path))


def finished_history(out: Path, history: RunHistory) -> RunHistory:
    """``out/history.json`` when it continues ``history`` (a checkpoint's): same per-step losses, so the run
    finished at that checkpoint and the file adds the final evaluation, made after the last save. Else
    ``history`` (also when the file is missing or unreadable: the checkpoint is what counts)."""
    try:
        saved = read_history(out)
    except ValueError:
        return history
    return saved if saved is not None and saved.loss == history.loss else history


# ------------------------------------------------------------------------------------------ run folder

LOCK_FILE = ".lock"
# temporaries of recon.export.atomic_open (mkstemp: ".NAME." + 8 random characters + ".tmp")
_TEMP_RE = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


class RunLock:
    """Exclusive write access to a run folder: ``OUT/.lock`` names the holder (``pid``, ``host``) and is
    held with ``fcntl.flock`` while the training runs. The kernel drops the flock when its process dies
    (even by SIGKILL), so a lock file left by a dead process is stale and is taken over (said in
    :attr:`stale`); a live holder makes :meth:`acquire` raise RunLockedError naming it."""

    def __init__(self, out: Path):
        self.path = Path(out) / LOCK_FILE
        self.fd: int | None = None
        self.stale: dict | None = None  # the previous holder when its lock was stale
        self.unsupported = False  # the file system refused flock: no protection from a second writer

    def acquire(self) -> "RunLock":
        import socket

        try:
            import fcntl
        except ImportError:  # not a POSIX system
            fcntl = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if fcntl is None:
                    raise OSError(errno.ENOSYS, "no fcntl module")
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunLockedError(
                    f"{self.path}: another training (pid {holder.get('pid', '?')} on {holder.get('host', '?')}) "
                    f"is writing this run folder; wait for it to finish, or use another --out") from None
            except OSError as err:
                if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    os.close(fd)
                    raise
                self.unsupported = True  # a file system without locks: the lock file only names the holder
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, self.path):  # not unlinked by a holder releasing it meanwhile
                break
            os.close(fd)
        previous = _read_holder(fd)
        self.stale = previous or None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode() + b"\n", 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still held: no one else can be using it
        finally:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> dict:
    """The ``{"pid", "host"}`` written in a lock file ({} when empty or unreadable)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def remove_stale_temporaries(out: Path) -> list[Path]:
    """Delete the temporaries of interrupted atomic writes (``.ckpt_00100.pt.x1y2z3w4.tmp`` and the like)
    in ``out``, ``out/checkpoints`` and ``out/renders``; call only while holding the :class:`RunLock`.
    Returns the removed paths."""
    removed = []
    for folder in (Path(out), Path(out) / CHECKPOINT_DIR, Path(out) / "renders"):
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if _TEMP_RE.match(p.name) and p.is_file():
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed
