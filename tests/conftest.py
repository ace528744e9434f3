import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))
# the on-disk frame cache (recon.data.frame_cache) of every run in the tests, CLI children included: a fresh
# folder, never the user's ~/.cache/splatforge/frames
os.environ["SPLATFORGE_CACHE"] = tempfile.mkdtemp(prefix="splatforge-test-cache-")

import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)
import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Skip CUDA-marked tests cleanly where no GPU is present."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
