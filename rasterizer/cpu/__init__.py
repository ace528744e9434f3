"""The `cpu` backend: Numba kernels, multithreaded, with hand-written backward passes.

- projection (quats/scales or covariances -> screen-space means, conics, depths, radii): one fused
  kernel each way (``projection.py``);
- tile binning with exact ellipse-tile culling, front-to-back compositing and its backward
  (``kernels.py``, ``composite.py``).
SH colours use the reference PyTorch code (vectorised, a small share of the time).
"""

from __future__ import annotations

from .composite import composite_cpu as composite  # noqa: F401
from .projection import project  # noqa: F401
