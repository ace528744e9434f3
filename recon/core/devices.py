"""`--device auto|cpu|cuda` resolved once, for every command (train, eval, render, image fit)."""

from __future__ import annotations

import torch

from recon.core.errors import DeviceError


def resolve_device(name: str) -> torch.device:
    """"auto": the GPU when CUDA is available, else the CPU; "cuda" without a GPU is a DeviceError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("--device cuda: no CUDA device is available; use --device cpu (or auto)")
    return torch.device(name)
