"""The field's space: world positions -> the unit cube [0, 1]^3 the hash grid and the occupancy grid use.

Two kinds (:class:`FieldSpace`):

- **box** (Blender-style bounded scenes): ``u = (x - lo) / size``, the box ``[lo, lo + size]`` (world
  units, per axis); rays are marched only inside the box and see the background behind it.
- **contracted** (unbounded captures, mip-NeRF 360's contraction with the L-infinity norm as nerfacto's
  hash-grid field): ``y = (x - centre) / radius``, ``m = max_i |y_i|``, ``c(y) = y`` for m <= 1 and
  ``(2 - 1 / m) y / m`` beyond, so all of space lands in [-2, 2]^3 (cubes stay cubes, which suits grids);
  ``u = (c(y) + 2) / 4``. ``lo`` holds the centre and ``size`` the radius (three times).

The same arithmetic, in the same order, is in the Numba ray marcher (:mod:`recon.nerf.marching`), so the
reference and the kernel pick the same occupancy cells.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class FieldSpace:
    """World -> unit-cube map. ``contracted`` False: the box ``[lo, lo + size]``; True: contraction around
    centre ``lo`` with radius ``size[0]`` (see the module docstring). ``lo`` / ``size``: 3 floats."""

    contracted: bool
    lo: tuple[float, float, float]
    size: tuple[float, float, float]

    def __post_init__(self):
        if len(self.lo) != 3 or len(self.size) != 3 or not all(s > 0 for s in self.size):
            raise ValueError(f"FieldSpace: lo and size are 3 numbers, sizes > 0; got {self.lo}, {self.size}")

    @staticmethod
    def box(lo, hi) -> "FieldSpace":
        lo = tuple(float(v) for v in lo)
        return FieldSpace(False, lo, tuple(float(h) - l for h, l in zip(hi, lo)))

    @staticmethod
    def unbounded(centre, radius: float) -> "FieldSpace":
        return FieldSpace(True, tuple(float(v) for v in centre), (float(radius),) * 3)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo [3], size [3]) float64 numpy arrays for the kernels."""
        return np.asarray(self.lo, dtype=np.float64), np.asarray(self.size, dtype=np.float64)

    def to_dict(self) -> dict:
        return {"contracted": self.contracted, "lo": list(self.lo), "size": list(self.size)}

    @staticmethod
    def from_dict(d: dict) -> "FieldSpace":
        return FieldSpace(bool(d["contracted"]), tuple(float(v) for v in d["lo"]), tuple(float(v) for v in d["size"]))

    @property
    def diagonal(self) -> float:
        """Length of the marched region's diagonal in world units (box: the box's; contracted: the inner
        cube's, 2 radius sqrt 3)."""
        return float(np.linalg.norm(np.asarray(self.size) * (2.0 if self.contracted else 1.0)))


def contract(y: Tensor) -> Tensor:
    """[..., 3] the L-infinity scene contraction of normalised positions ``y`` (into [-2, 2]^3)."""
    m = y.abs().amax(dim=-1, keepdim=True)
    safe = m.clamp(min=1.0)
    return torch.where(m <= 1.0, y, (2.0 - 1.0 / safe) * (y / safe))


def to_unit(x: Tensor, space: FieldSpace) -> Tensor:
    """[..., 3] world positions ``x`` -> [..., 3] unit-cube coordinates (not clamped: outside the box they
    leave [0, 1]; contracted ones are inside by construction)."""
    lo = torch.tensor(space.lo, dtype=x.dtype, device=x.device)
    size = torch.tensor(space.size, dtype=x.dtype, device=x.device)
    y = (x - lo) / size
    if not space.contracted:
        return y
    return (contract(y) + 2.0) / 4.0
