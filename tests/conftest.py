import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))


def pytest_collection_modifyitems(config, items):
    """Skip CUDA-marked tests cleanly where no GPU is present."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
