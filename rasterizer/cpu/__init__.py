"""The `cpu` backend: Numba kernels, multithreaded, with hand-written backward passes.

Projection and SH colours currently use the reference PyTorch code (vectorised over Gaussians);
tile binning and compositing, the expensive part, are fused Numba kernels.
"""

from __future__ import annotations

from ..reference import project  # noqa: F401  (per-Gaussian step; see module docstring)
from .composite import composite_cpu as composite  # noqa: F401
