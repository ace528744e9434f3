"""Draw a model's extra outputs (:meth:`recon.models.base.SceneModel.extra_outputs`) as 8-bit images.

Kinds (the output's name):

- ``"depth"`` [H, W, 1] camera z, 0 where nothing is seen: grey levels, near = white, far = dark, each
  image stretched between its 1st and 99th percentile of seen depths; nothing seen = black.
- ``"normals"`` [H, W, 3] unit normals (any frame), 0 where nothing is seen: RGB = 0.5 + 0.5 n (the
  usual normal-map colours; nothing seen = mid grey).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

DEPTH_PERCENTILES = (1.0, 99.0)
NEAR_LEVEL, FAR_LEVEL = 1.0, 0.15  # grey levels of the nearest / farthest seen depth


def draw_depth(depth: Tensor) -> np.ndarray:
    """uint8 [H, W, 3] of a depth image [H, W, 1] (see the module docstring)."""
    z = depth.detach().float().cpu()[..., 0]
    seen = z > 0
    out = torch.zeros_like(z)
    if bool(seen.any()):
        lo, hi = np.percentile(z[seen].numpy(), DEPTH_PERCENTILES)
        t = ((z - float(lo)) / max(float(hi - lo), 1e-12)).clamp(0, 1)
        out = torch.where(seen, NEAR_LEVEL + (FAR_LEVEL - NEAR_LEVEL) * t, out)
    return (out[..., None].expand(*z.shape, 3).numpy() * 255.0 + 0.5).astype(np.uint8)


def draw_normals(normals: Tensor) -> np.ndarray:
    """uint8 [H, W, 3] of a unit-normal image [H, W, 3]: 0.5 + 0.5 n."""
    n = normals.detach().float().cpu().clamp(-1, 1)
    return ((0.5 + 0.5 * n).numpy() * 255.0 + 0.5).astype(np.uint8)


DRAWERS = {"depth": draw_depth, "normals": draw_normals}


def draw_output(kind: str, image: Tensor) -> np.ndarray:
    """uint8 [H, W, 3] picture of one extra output of kind ``kind`` (a key of :data:`DRAWERS`)."""
    try:
        drawer = DRAWERS[kind]
    except KeyError:
        raise ValueError(f"no drawing for a model output named {kind!r} (known: {', '.join(DRAWERS)})") from None
    return drawer(image)
