"""The viewer's crop box: an axis-aligned box in world units (the model's OpenCV world) outside which Gaussians
are left out, both of what the browser draws and of the "render" button's image (as the min-opacity filter).

``--crop x0,y0,z0,x1,y1,z1`` on ``splatforge view`` starts with it on; the "Display" folder's "crop box"
checkbox turns it on and off, and its "crop min" / "crop max" fields move it. A Gaussian is kept when its
centre lies inside the box (faces included).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CropBox:
    """Axis-aligned box: ``lo`` [3] <= ``hi`` [3], finite (ValueError otherwise, one line)."""

    lo: tuple[float, float, float]
    hi: tuple[float, float, float]

    def __post_init__(self) -> None:
        lo, hi = np.asarray(self.lo, float), np.asarray(self.hi, float)
        if lo.shape != (3,) or hi.shape != (3,) or not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            raise ValueError(f"crop box {self.text()}: give six finite numbers x0,y0,z0,x1,y1,z1")
        for axis, a, b in zip("xyz", lo, hi):
            if a > b:
                raise ValueError(f"crop box {self.text()}: min {axis} {a:g} > max {axis} {b:g}; give "
                                 f"x0,y0,z0,x1,y1,z1 with each min <= its max")
        object.__setattr__(self, "lo", tuple(float(v) for v in lo))
        object.__setattr__(self, "hi", tuple(float(v) for v in hi))

    def text(self) -> str:
        """"x0,y0,z0,x1,y1,z1", as ``--crop`` takes it."""
        return ",".join(f"{float(v):g}" for v in (*np.ravel(self.lo), *np.ravel(self.hi)))

    def contains(self, points: np.ndarray) -> np.ndarray:
        """bool [N]: which of the [N, 3] ``points`` lie inside the box (faces included)."""
        p = np.asarray(points, np.float64)
        return np.all((p >= np.asarray(self.lo)) & (p <= np.asarray(self.hi)), axis=1)

    @property
    def centre(self) -> np.ndarray:
        return 0.5 * (np.asarray(self.lo) + np.asarray(self.hi))

    @property
    def size(self) -> np.ndarray:
        return np.asarray(self.hi) - np.asarray(self.lo)


def parse_crop(text: str) -> CropBox:
    """The :class:`CropBox` of ``--crop x0,y0,z0,x1,y1,z1``; ValueError naming ``--crop`` for anything else
    (not six numbers, a min above its max)."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 6:
        raise ValueError(f"--crop {text}: give six numbers x0,y0,z0,x1,y1,z1 (the box's min and max corners in "
                         f"world units; write --crop=-1,-1,-1,1,1,1 for a negative first number)")
    try:
        return CropBox(tuple(values[:3]), tuple(values[3:]))
    except ValueError as err:
        raise ValueError(f"--crop {text}: {str(err).split(': ', 1)[1]}") from None


def crop_keep(means: np.ndarray, crop: CropBox | None) -> np.ndarray | None:
    """bool [N] of the Gaussians (centres ``means`` [N, 3]) inside ``crop``; None when there is no crop."""
    return None if crop is None else crop.contains(means)


def starting_box(means: np.ndarray) -> CropBox:
    """The crop box the GUI offers before one is set: the 1..99 percentile box of the centres, padded by 5%
    of its size (stray far-away splats fall outside it)."""
    if len(means) == 0:
        return CropBox((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0))
    lo, hi = np.percentile(np.asarray(means, np.float64), [1.0, 99.0], axis=0)
    pad = 0.05 * (hi - lo) + 1e-6
    return CropBox(tuple(lo - pad), tuple(hi + pad))
