"""The `cpu` backend: Numba kernels, multithreaded, with hand-written backward passes.

- projection (quats/scales or covariances -> screen-space means, conics, depths, radii): one fused
  kernel each way (``projection.py``);
- tile binning with exact ellipse-tile culling (``binning.py``), front-to-back compositing and its
  backward (``compositing.py``), both behind one autograd function (``composite.py``);
- view-dependent SH colours: one kernel each way (``sh.py``).

Public for code that launches its own Numba parallel kernels in the same process (``recon.losses.ssim``):
:data:`KERNEL_LOCK` (``launch.py``), which every parallel launch must hold, because Numba's workqueue
threading layer, selected on import here, is not re-entrant (a viewer renders from another thread).
"""

from __future__ import annotations

from .composite import composite_cpu as composite  # noqa: F401
from .launch import KERNEL_LOCK  # noqa: F401
from .projection import project  # noqa: F401
from .sh import sh_to_color  # noqa: F401

__all__ = ["composite", "project", "sh_to_color", "KERNEL_LOCK"]
