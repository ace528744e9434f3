"""The .grbf model file: an image fitted as a Gaussian RBF field (:class:`recon.image.rbf_image.ImageRBF`).

The .gimg container (recon/image/gimg.py, FORMAT.md), with its own magic: ``b"GRBF\\r\\n\\x1a\\n"``, uint16 format
version (1), uint32 JSON header length, the JSON header, then the payload: float32 little-endian arrays, one after
the other, in this order: the grids coarse to fine ([ry + 1, rx + 1, F] each), centres [K, D], log_precision [K, D],
weight [C, K], bias [C] (D = L F). JSON header keys: ``model`` ("gaussian-rbf"), ``width``, ``height``,
``layout``, ``channels``, ``levels`` ([[ry, rx], ...]), ``features``, ``neurons``, ``payload_bytes``, ``source``,
``coordinates``. The file ends after the payload. A model read back renders bit-identically.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from recon.core.atomic import atomic_write_bytes
from recon.core.errors import DamagedFileError
from recon.core.limits import parse_json, require_finite, require_regular_file, with_path

from .gimg import PREAMBLE, read_preamble
from .model import CHANNEL_LAYOUTS
from .rbf_image import ImageRBF

MAGIC = b"GRBF\r\n\x1a\n"
FORMAT_VERSION = 1
SUFFIX = ".grbf"
MODEL = "gaussian-rbf"
COORDINATES = "normalised [-1, 1], x right, y down; grids over u = (x + 1) / 2 in [0, 1], row-major [y, x, feature]"
MAX_SIDE = 1 << 16  # cells per grid side a reader accepts
REDO = "write it again with `splatforge image fit --model rbf`"


class GrbfError(DamagedFileError):
    """A .grbf file cannot be read: not one, cut short, damaged, or from a newer splatforge."""


def _shapes(levels: list, features: int, neurons: int, channels: int) -> list[tuple[int, ...]]:
    d = len(levels) * features
    return [(ry + 1, rx + 1, features) for ry, rx in levels] + [(neurons, d), (neurons, d), (channels, neurons),
                                                                  (channels,)]


def encode_grbf(model: ImageRBF) -> bytes:
    """The bytes of a .grbf file holding ``model`` (float32)."""
    arrays = [t.detach().cpu().contiguous().to(torch.float32).numpy().astype("<f4") for t in model.tensors()]
    payload = b"".join(a.tobytes() for a in arrays)
    header = {"model": MODEL, "width": model.width, "height": model.height, "layout": model.layout,
              "channels": model.channels, "levels": [[g.shape[0] - 1, g.shape[1] - 1] for g in model.grids],
              "features": int(model.grids[0].shape[2]), "neurons": model.neurons, "payload_bytes": len(payload),
              "source": dict(model.source), "coordinates": COORDINATES}
    text = json.dumps(header, sort_keys=True).encode("utf-8")
    return PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(text)) + text + payload


def write_grbf(path: str | Path, model: ImageRBF, force: bool = False) -> int:
    """Write ``model`` to ``path`` atomically; returns the file size in bytes."""
    data = encode_grbf(model)
    atomic_write_bytes(path, data, force=force)
    return len(data)


def read_grbf(path: str | Path) -> ImageRBF:
    """The model in the .grbf file ``path``; :class:`GrbfError` naming the file and the problem."""
    path = Path(path)
    if path.is_dir():
        raise GrbfError(f"{path}: is a folder; give a .grbf file written by `splatforge image fit --model rbf`")
    if path.exists():
        require_regular_file(path, ".grbf file", with_path(GrbfError))
    return decode_grbf(path.read_bytes(), str(path))


def _check_header(header: dict, name: str) -> tuple[list, int, int, int]:
    """(levels, features, neurons, channels) of a header, checked; GrbfError otherwise."""
    try:
        levels = [(int(ry), int(rx)) for ry, rx in header["levels"]]
        features, neurons, channels = int(header["features"]), int(header["neurons"]), int(header["channels"])
        width, height, layout = int(header["width"]), int(header["height"]), header["layout"]
        int(header["payload_bytes"])
    except (KeyError, TypeError, ValueError) as err:
        raise GrbfError(f"{name}: damaged header ({type(err).__name__}: {err}); {REDO}") from None
    if header.get("model") != MODEL:
        raise GrbfError(f"{name}: header model {header.get('model')!r}, expected {MODEL!r}; {REDO}")
    if not levels or any(not (1 <= r <= MAX_SIDE) for lv in levels for r in lv):
        raise GrbfError(f"{name}: grid levels {header['levels']!r} out of range (1..{MAX_SIDE} cells a side); {REDO}")
    if not (1 <= features <= 1024 and 1 <= neurons <= 1 << 16 and width >= 1 and height >= 1):
        raise GrbfError(f"{name}: features {features}, neurons {neurons}, size {width}x{height} out of range; {REDO}")
    if CHANNEL_LAYOUTS.get(channels) != layout:
        raise GrbfError(f"{name}: layout {layout!r} does not match {channels} channels; {REDO}")
    return levels, features, neurons, channels


def decode_grbf(data: bytes, name: str = "<bytes>") -> ImageRBF:
    """The model in .grbf bytes (``name`` is used in error messages)."""
    start = read_preamble(data, name, MAGIC, ".grbf", FORMAT_VERSION, GrbfError, REDO)
    header = parse_json(data[PREAMBLE.size:start], name, "header",
                        lambda p, problem: GrbfError(f"{p}: damaged header ({problem}); {REDO}"))
    if not isinstance(header, dict):
        raise GrbfError(f"{name}: damaged header (not a JSON object); {REDO}")
    levels, features, neurons, channels = _check_header(header, name)
    shapes = _shapes(levels, features, neurons, channels)
    needed = 4 * sum(int(np.prod(s)) for s in shapes)
    if int(header["payload_bytes"]) != needed:
        raise GrbfError(f"{name}: the header says {header['payload_bytes']} payload bytes, its arrays need {needed}; "
                        f"{REDO}")
    end = start + needed
    if len(data) != end:
        what = "truncated" if len(data) < end else f"{len(data) - end} unexpected bytes after the arrays"
        raise GrbfError(f"{name}: {what} ({len(data)} bytes, the header says {end}); {REDO}")
    arrays, offset = [], start
    for shape in shapes:
        count = int(np.prod(shape))
        a = np.frombuffer(data, dtype="<f4", count=count, offset=offset).reshape(shape)
        require_finite(a, name, f"payload array of shape {shape}", with_path(GrbfError))
        arrays.append(torch.from_numpy(a.astype(np.float32)))
        offset += 4 * count
    L = len(levels)
    return ImageRBF(tuple(arrays[:L]), arrays[L], arrays[L + 1], arrays[L + 2], arrays[L + 3], int(header["width"]),
                    int(header["height"]), header["layout"], dict(header.get("source") or {}))
