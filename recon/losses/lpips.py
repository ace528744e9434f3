"""LPIPS (Zhang et al. 2018, "v0.1", AlexNet backbone) in plain PyTorch, from local weight files only.

This is the metric the 3DGS literature reports as "LPIPS (alex)". Nothing is ever downloaded: the two
weight files must already be on disk, else :func:`load_lpips` returns None and evaluation reports
``"lpips": null`` (and says so once).

- backbone: torchvision's ImageNet AlexNet checkpoint ``alexnet-owt-7be5be79.pth`` (state-dict keys
  ``features.{0,3,6,8,10}.{weight,bias}``), as torchvision caches it in ``torch.hub.get_dir()/checkpoints``;
- linear heads: the ``lpips`` package's ``weights/v0.1/alex.pth`` (keys ``lin{0..4}.model.1.weight``,
  shapes [1, C, 1, 1]).

Searched, in order: the folder ``$SPLATFORGE_LPIPS_DIR`` (both files), ``torch.hub.get_dir()/checkpoints``
(both files), and the installed ``lpips`` package (linear heads; found without importing it).

Computation (as ``lpips.LPIPS(net="alex")`` with ``normalize=True``): images in [0, 1] -> [-1, 1] ->
``(x - shift) / scale``; AlexNet ReLU outputs relu1..relu5; each unit-normalised over channels
(eps 1e-10); squared difference; 1x1 linear head; spatial mean; summed over the five layers.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from recon.core.errors import DAMAGED_TORCH_FILE_ERRORS, SplatforgeError

BACKBONE_FILE = "alexnet-owt-7be5be79.pth"
HEADS_FILE = "alex.pth"
ENV_DIR = "SPLATFORGE_LPIPS_DIR"
SHIFT = (-0.030, -0.088, -0.188)
SCALE = (0.458, 0.448, 0.450)
# torchvision AlexNet ``features`` convolutions: (state-dict index, stride, padding); a max-pool (3, 2)
# comes before conv 3 and conv 6. LPIPS taps the ReLU after each convolution.
CONVS = ((0, 4, 2), (3, 1, 2), (6, 1, 1), (8, 1, 1), (10, 1, 1))
CHANNELS = (64, 192, 384, 256, 256)
NOTE = ("LPIPS skipped: its AlexNet weights are not on this machine and nothing is downloaded "
        f"(put {BACKBONE_FILE} and lpips' v0.1/{HEADS_FILE} in ${ENV_DIR}); metrics report lpips: null")


class LPIPSWeightsError(SplatforgeError, ValueError):
    """A weight file exists but is not what LPIPS needs (names the file and the problem)."""


def _lpips_package_heads() -> Path | None:
    """lpips' bundled ``weights/v0.1/alex.pth`` if the package is installed (not imported)."""
    spec = importlib.util.find_spec("lpips")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "weights" / "v0.1" / HEADS_FILE
    return path if path.is_file() else None


def find_weights() -> tuple[Path, Path] | None:
    """(backbone, heads) weight files found locally (see module doc), or None."""
    folders = [Path(os.environ[ENV_DIR])] if os.environ.get(ENV_DIR) else []
    folders.append(Path(torch.hub.get_dir()) / "checkpoints")
    backbone = next((f / BACKBONE_FILE for f in folders if (f / BACKBONE_FILE).is_file()), None)
    heads = next((f / HEADS_FILE for f in folders if (f / HEADS_FILE).is_file()), None) or _lpips_package_heads()
    return (backbone, heads) if backbone is not None and heads is not None else None


@dataclass
class LPIPSWeights:
    """convs[i] = (weight, bias, stride, padding) of AlexNet conv i; heads[i] [1, C_i, 1, 1]."""

    convs: list[tuple[Tensor, Tensor, int, int]]
    heads: list[Tensor]

    def to(self, device) -> "LPIPSWeights":
        return LPIPSWeights([(w.to(device), b.to(device), s, p) for w, b, s, p in self.convs],
                            [h.to(device) for h in self.heads])


def _tensor(state: dict, key: str, shape_c: int, where: Path) -> Tensor:
    if key not in state:
        raise LPIPSWeightsError(f"{where}: missing {key!r} (is this the right LPIPS/AlexNet file?)")
    t = state[key].float()
    if t.shape[0] != shape_c and t.shape[1:2] != (shape_c,):
        raise LPIPSWeightsError(f"{where}: {key} has shape {tuple(t.shape)}, expected {shape_c} channels")
    return t


def load_weights(backbone: Path, heads: Path) -> LPIPSWeights:
    """Read the two files (plain state dicts; loaded with ``weights_only=True``)."""
    try:
        bsd = torch.load(backbone, map_location="cpu", weights_only=True)
        hsd = torch.load(heads, map_location="cpu", weights_only=True)
    except (*DAMAGED_TORCH_FILE_ERRORS, OSError) as err:
        raise LPIPSWeightsError(f"cannot read LPIPS weights ({backbone}, {heads}): {err}") from err
    convs = [(_tensor(bsd, f"features.{i}.weight", c, backbone), _tensor(bsd, f"features.{i}.bias", c, backbone),
              s, p) for (i, s, p), c in zip(CONVS, CHANNELS)]
    head_list = [_tensor(hsd, f"lin{k}.model.1.weight", c, heads) for k, c in enumerate(CHANNELS)]
    for k, (h, c) in enumerate(zip(head_list, CHANNELS)):
        if tuple(h.shape) != (1, c, 1, 1):
            raise LPIPSWeightsError(f"{heads}: lin{k} has shape {tuple(h.shape)}, expected (1, {c}, 1, 1)")
    return LPIPSWeights(convs, head_list)


@lru_cache(maxsize=4)
def _cached(backbone: str, heads: str, device: str) -> LPIPSWeights:
    return load_weights(Path(backbone), Path(heads)).to(device)


def load_lpips(device: torch.device | str = "cpu") -> LPIPSWeights | None:
    """The LPIPS weights on ``device`` if both files are found locally, else None (see :data:`NOTE`)."""
    found = find_weights()
    if found is None:
        return None
    return _cached(str(found[0]), str(found[1]), str(device))


def alexnet_features(x: Tensor, weights: LPIPSWeights) -> list[Tensor]:
    """relu1..relu5 of AlexNet for x [N, 3, H, W] (already shifted/scaled)."""
    feats = []
    for i, (w, b, stride, pad) in enumerate(weights.convs):
        if i in (1, 2):
            x = F.max_pool2d(x, kernel_size=3, stride=2)
        x = F.relu(F.conv2d(x, w, b, stride=stride, padding=pad))
        feats.append(x)
    return feats


def unit_normalize(f: Tensor, eps: float = 1e-10) -> Tensor:
    """Divide each feature vector (channel dim 1) by its L2 norm (+ eps), as lpips.normalize_tensor."""
    return f / (torch.sqrt((f * f).sum(dim=1, keepdim=True)) + eps)


@torch.no_grad()
def lpips_distance(a: Tensor, b: Tensor, weights: LPIPSWeights) -> Tensor:
    """LPIPS per image: a, b [N, H, W, 3] or [H, W, 3] in [0, 1] (channels last) -> [N] (or scalar)."""
    single = a.dim() == 3
    if single:
        a, b = a[None], b[None]
    if a.shape != b.shape or a.shape[-1] != 3:
        raise ValueError(f"lpips: expected two RGB images of one shape, got {tuple(a.shape)}, {tuple(b.shape)}")
    shift = torch.tensor(SHIFT, dtype=torch.float32, device=a.device)[None, :, None, None]
    scale = torch.tensor(SCALE, dtype=torch.float32, device=a.device)[None, :, None, None]

    def prep(img: Tensor) -> Tensor:
        return ((img.float().permute(0, 3, 1, 2) * 2.0 - 1.0) - shift) / scale

    total = a.new_zeros(a.shape[0], dtype=torch.float32)
    for fa, fb, head in zip(alexnet_features(prep(a), weights), alexnet_features(prep(b), weights), weights.heads):
        diff = (unit_normalize(fa) - unit_normalize(fb)) ** 2
        total = total + F.conv2d(diff, head).mean(dim=(1, 2, 3))
    return total[0] if single else total
