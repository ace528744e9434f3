"""The `cpu` backend: Numba kernels, multithreaded, with hand-written backward passes.

- projection (quats/scales or covariances -> screen-space means, conics, depths, radii): one fused
  kernel each way (``projection.py``);
- tile binning with exact ellipse-tile culling, front-to-back compositing and its backward
  (``kernels.py``, ``composite.py``).
- view-dependent SH colours: one kernel each way (``sh.py``).
"""

from __future__ import annotations

from .composite import composite_cpu as composite  # noqa: F401
from .projection import project  # noqa: F401
from .sh import sh_to_color  # noqa: F401
