"""GSASR's Gaussian layout (ICCV 2025, github.com/ChrisDud0257/GSASR) -> :func:`rasterize_image_gaussians`.

GSASR's CUDA renderer ``gaussiansplatting_render(sigmas, coords, colors, image_size, dmax)`` takes, for N
Gaussians and an output of h x w pixels with c channels (read from its kernel ``_gs_render_cuda`` and its
Python wrapper ``gs_cuda_dmax/gswrapper.py``):

- ``coords`` [N, 2]: (x, y) in [-1, 1] with *corner-aligned* pixel centres: pixel column j of w sits at
  x_j = 2 j / (w - 1) - 1 (the first centre at -1, the last at +1), row i at y_i = 2 i / (h - 1) - 1;
- ``sigmas`` [N, 3]: (sigma_x, sigma_y, rho): standard deviations along x and y in those same units and the
  correlation coefficient, i.e. Sigma = [[sx^2, rho sx sy], [rho sx sy, sy^2]];
- ``colors`` [N, c]: added as they are (no opacity, no normalisation):
  img[i, j] = sum_n colors_n exp(-1 / (2 (1 - rho^2)) (dx^2 / sx^2 - 2 rho dx dy / (sx sy) + dy^2 / sy^2))
  with dx = x_j - x_n, dy = y_i - y_n, over the Gaussians with |dx| <= dmax and |dy| <= dmax;
- ``dmax``: the window ("rasterization ratio", 0 < dmax <= 1 in its inference scripts; 0.1 by default,
  0.05 suggested for small scale factors), a square of half width dmax in the same units.

Mapping to splatforge's frame (rasterizer/image/geometry.py: pixel centres at (2 j + 1) / w - 1): the
same pixel j is at x' = x (w - 1) / w, so with a = (w - 1) / w, b = (h - 1) / h: means' = (a x, b y),
covars' = (a^2 sx^2, a b rho sx sy, b^2 sy^2), and the window w' = dmax a in splatforge's normalised units
(|dx'| <= w' is |dx| <= dmax). The conversion depends on the output size because GSASR's frame is
corner-aligned. When w != h the window can be matched on one axis only: :func:`from_gsasr` uses
dmax max(a, b), which admits, on the other axis, extra pixels whose centres lie at most
dmax |a - b| max(w, h) / 2 pixels (0.05 px for 1000 x 500 at dmax 0.1) outside GSASR's window.

Not confirmed from the sources available here: how GSASR's network turns its features into sigmas and
coords (activations, offsets from the low-resolution pixel grid, scaling by the upsampling factor), since
its ``utils/gaussian_splatting.py`` is not in the stored repository (only compiled bytecode). The mapping
above is of the renderer's inputs, which is what a trained predictor hands to the renderer.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rasterizer.image import ImageInputError


def gsasr_covariances(sigmas: Tensor) -> Tensor:
    """(sigma_x, sigma_y, rho) [N, 3] -> (sxx, sxy, syy) [N, 3] in GSASR's units."""
    sx, sy, rho = sigmas.unbind(-1)
    return torch.stack([sx * sx, rho * sx * sy, sy * sy], dim=-1)


def from_gsasr(sigmas: Tensor, coords: Tensor, colors: Tensor, dmax: float | None, *, width: int,
               height: int) -> dict:
    """Keyword arguments of :func:`rasterizer.image.rasterize_image_gaussians` (means, colors, width,
    height, covars, window, mode "sum") that render GSASR's Gaussians as GSASR's renderer does at
    width x height (see the module docstring). dmax None: no fixed window (the 3-sigma ellipse)."""
    if sigmas.dim() != 2 or sigmas.shape[1] != 3:
        raise ImageInputError(f"from_gsasr: `sigmas` must be [N, 3] (sigma_x, sigma_y, rho), got {tuple(sigmas.shape)}")
    if coords.shape != (sigmas.shape[0], 2):
        raise ImageInputError(f"from_gsasr: `coords` must be [N, 2] with N = {sigmas.shape[0]}, got {tuple(coords.shape)}")
    if width < 2 or height < 2:
        raise ImageInputError(f"from_gsasr: GSASR's corner-aligned frame needs width and height >= 2, got "
                              f"{width}x{height}")
    if dmax is not None and not dmax > 0:
        raise ImageInputError(f"from_gsasr: `dmax` must be > 0 (GSASR uses 0 < dmax <= 1) or None, got {dmax!r}")
    a, b = (width - 1) / width, (height - 1) / height
    scale = coords.new_tensor([a, b])
    covars = gsasr_covariances(sigmas) * sigmas.new_tensor([a * a, a * b, b * b])
    window = None if dmax is None else float(dmax) * max(a, b)
    return {"means": coords * scale, "colors": colors, "width": width, "height": height, "covars": covars,
            "window": window, "mode": "sum"}
