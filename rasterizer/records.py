"""The typed records of the pipeline seam (see rasterizer/DESIGN.md).

- :class:`Splats`: what a front-end's projection hands to a backend's ``composite`` (screen space).
- :class:`Composited`: what ``composite`` returns.
- :class:`RenderOutput` and :class:`RenderMeta`: what :func:`rasterizer.rasterize_gaussians` returns.

``RenderOutput`` is a named tuple, so ``render, alpha, meta = rasterize_gaussians(...)`` and
``rasterize_gaussians(...)[0]`` keep working; ``RenderMeta`` answers ``meta["radii"]``, ``meta.get``,
``"radii" in meta`` and ``meta.keys()`` like the dict it replaces. New code reads attributes
(``out.render``, ``out.meta.radii``, ``out.meta.transmittance``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple

from torch import Tensor


@dataclass(frozen=True)
class Splats:
    """Screen-space splats of N primitives in C cameras: the record ``project`` hands to ``composite``.

    means2d [C, N, 2] pixel coordinates of the centres (pixel centres at +0.5); conics [C, N, 3]
    (a, b, c), the inverse 2D covariance, alpha = opacity exp(-(0.5 (a dx^2 + c dy^2) + b dx dy));
    opacities [C, N] as composited (antialiased mode: times the compensation); colors [C, N, D] the
    channels to composite (colour and/or depth); depths [C, N] camera-space z of the means: the key of
    the front-to-back sort and what ``depth_limit`` is compared with; radii [C, N, 2] int32 screen
    half-extents in pixels, 0 for culled pairs (never composited). All but radii share one dtype and
    device.
    """

    means2d: Tensor
    conics: Tensor
    opacities: Tensor
    colors: Tensor
    depths: Tensor
    radii: Tensor

    @property
    def n_cameras(self) -> int:
        return self.depths.shape[0]

    @property
    def n_splats(self) -> int:
        return self.depths.shape[1]


@dataclass(frozen=True)
class Composited:
    """What a backend's ``composite`` returns: render [C, H, W, D], alpha [C, H, W, 1] and the final
    transmittance [C, H, W, 1] (the product of (1 - alpha_i) over the blended splats; 1 - alpha up to
    rounding). All three are differentiable."""

    render: Tensor
    alpha: Tensor
    transmittance: Tensor


@dataclass
class RenderMeta:
    """Per-render metadata of :func:`rasterizer.rasterize_gaussians` (C cameras, N Gaussians).

    radii [C, N, 2] int32 (0 = culled); means2d [C, N, 2] (after backward its ``.grad`` holds
    d loss / d means2d: densification reads it); depths [C, N] camera-space z; conics [C, N, 3];
    opacities [C, N] as composited; compensations [C, N] (antialiasing factor, ones in classic mode;
    None from the cuda backend in classic mode); transmittance [C, H, W, 1], differentiable: the light
    that passes all blended Gaussians, which is what a mesh or NeRF behind them receives
    (render + transmittance * colour_behind); width, height, tile_size, tiles_x, tiles_y, n_cameras.
    ``backend_extras`` holds what a backend adds (the cuda backend: the rest of gsplat's meta dict).
    """

    radii: Tensor
    means2d: Tensor
    depths: Tensor
    conics: Tensor
    opacities: Tensor
    compensations: Tensor | None
    transmittance: Tensor
    width: int
    height: int
    tile_size: int
    tiles_x: int
    tiles_y: int
    n_cameras: int
    backend_extras: dict[str, Any] = field(default_factory=dict)

    @property
    def absgrad(self) -> Tensor | None:
        """sum over pixels of |d loss / d means2d| [C, N, 2] (renders with ``absgrad=True``; filled
        during backward), else None."""
        return getattr(self.means2d, "absgrad", None)

    # dict-style access for existing callers (meta["radii"], meta.get("width"), "conics" in meta)
    def keys(self) -> list[str]:
        names = [f.name for f in dataclasses.fields(self) if f.name != "backend_extras"]
        return names + [k for k in self.backend_extras if k not in names]

    def __getitem__(self, key: str) -> Any:
        if key != "backend_extras" and key in self.__dataclass_fields__:
            return getattr(self, key)
        if key in self.backend_extras:
            return self.backend_extras[key]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())


class RenderOutput(NamedTuple):
    """What :func:`rasterizer.rasterize_gaussians` returns: render [C, H, W, D'], alpha [C, H, W, 1] and
    :class:`RenderMeta`. A named tuple: ``render, alpha, meta = rasterize_gaussians(...)`` works."""

    render: Tensor
    alpha: Tensor
    meta: RenderMeta
