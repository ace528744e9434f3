"""Files of a training run directory, all written atomically (temporary file + rename).

Layout::

    OUT/config.yaml                 the TrainConfig as plain YAML (reloadable with load_config_dict)
    OUT/checkpoints/ckpt_XXXXX.pt   torch.save'd plain dicts (tensors, numbers, lists), XXXXX = step
    OUT/splats.ply                  final model (3DGS PLY)
    OUT/metrics.json                test metrics and timings
    OUT/history.json                per step: loss, Gaussian count, seconds; per evaluation: test PSNR, SSIM
                                    (recon.run_history.RunHistory)
    OUT/loss.png                    those curves against step (recon.run_plots, matplotlib)
    OUT/renders/test_XXX.png        ground truth | render | error
    OUT/tensorboard/                TensorBoard event files (--logger tensorboard; recon.tensorboard_logger)
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from recon.export import atomic_open, atomic_write_bytes
from recon.run_history import RunHistory

CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"
METRICS_FILE = "metrics.json"
HISTORY_FILE = "history.json"
LOSS_PLOT_FILE = "loss.png"
TENSORBOARD_DIR = "tensorboard"
_CKPT_RE = re.compile(r"^ckpt_(\d+)\.pt$")


# ------------------------------------------------------------------------------------------ config


def _plain(value: Any) -> Any:
    """Dataclass field value -> YAML-safe plain data (Paths become strings)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def config_to_dict(cfg: Any) -> dict:
    """Flat dataclass -> dict of plain values."""
    if not is_dataclass(cfg):
        raise TypeError(f"expected a dataclass config, got {type(cfg).__name__}")
    return {k: _plain(v) for k, v in asdict(cfg).items()}


def write_config(out: Path, cfg: Any) -> Path:
    """Write ``out/config.yaml`` (plain YAML, keys in field order)."""
    path = Path(out) / CONFIG_FILE
    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
    atomic_write_bytes(path, text.encode(), force=True)
    return path


def read_config_dict(path: Path) -> dict:
    """Plain dict from a config.yaml; ValueError naming the file when it is not a YAML mapping."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({e})") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of config fields, got {type(data).__name__}")
    return data


def config_from_dict(cls: type, data: dict) -> Any:
    """Instantiate dataclass ``cls`` from plain data (Path fields converted; unknown keys are an error)."""
    names = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ValueError(f"unknown config field(s) {unknown} for {cls.__name__}")
    kw = {}
    for k, v in data.items():
        ftype = str(names[k].type)
        kw[k] = Path(v) if v is not None and "Path" in ftype else v
    return cls(**kw)


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


def load_latest_checkpoint(out: Path) -> tuple[int, dict] | None:
    """(step, payload) of the newest readable checkpoint, or None when there is none."""
    errors = []
    for step, path in reversed(list_checkpoints(out)):
        try:
            return step, torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001 - a damaged file: fall back to the previous one
            errors.append(f"{path}: {e}")
    if errors:
        raise ValueError("no readable checkpoint: " + "; ".join(errors))
    return None


# ------------------------------------------------------------------------------------------ outputs


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
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e}); delete it or rerun the training") from e
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
