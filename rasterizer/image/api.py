"""`rasterize_image_gaussians`: images as 2D Gaussians (GaussianImage, Image-GS, GSASR), one differentiable call.

No camera and no projection: Gaussians live in normalised image coordinates ([-1, 1], x right, y down; see
geometry.py), so one model renders at any output size; the cost of a render grows with the pixel count, not
with the scale factor, because each Gaussian is evaluated only inside its window (the 3-sigma ellipse, or
GSASR's fixed window).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from .. import validate as V
from ..records import Splats
from ..tiles import TILE_SIZE, TileGrid
from . import geometry as G
from .reference import sum_composite_reference

MODES = ("sum", "alpha")


class ImageInputError(V.RasterizerInputError):
    """An argument of rasterize_image_gaussians is malformed."""


@dataclass(frozen=True)
class ImageRenderMeta:
    """What the render used, in output pixels: means2d [N, 2], covars (sxx, sxy, syy) [N, 3] (after the
    prefilter), conics [N, 3], extents [N, 2] (window half extents), width, height."""

    means2d: Tensor
    covars: Tensor
    conics: Tensor
    extents: Tensor
    width: int
    height: int


class ImageRender(NamedTuple):
    """render [H, W, D]; alpha [H, W, 1] in "alpha" mode (1 - final transmittance), None in "sum" mode; meta."""

    render: Tensor
    alpha: Tensor | None
    meta: ImageRenderMeta


class _as_image_errors:
    """Re-raise the shared checks' RasterizerInputError as ImageInputError (a subclass: callers may catch either)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if kind is not None and kind is V.RasterizerInputError:
            raise ImageInputError(str(err)) from None
        return False


def _fail(name: str, problem: str) -> None:
    raise ImageInputError(f"rasterize_image_gaussians: `{name}` {problem}")


def _check(means, colors, cholesky, covars, opacities, depths, width, height, mode, window, prefilter_variance,
           backgrounds, finite=True) -> None:
    """Every argument check; ``finite=False`` leaves the NaN/Inf test of means, colors, cholesky / covars and
    opacities to the caller (the cpu no-grad path counts them in its geometry pass)."""
    V.check_tensor("means", means, (None, 2), finite=finite)
    N, dt, dev = means.shape[0], means.dtype, means.device
    V.check_tensor("colors", colors, (N, None), dt, dev, finite=finite)
    if (cholesky is None) == (covars is None):
        _fail("cholesky", "and `covars`: pass exactly one of them")
    if cholesky is not None:
        V.check_tensor("cholesky", cholesky, (N, 3), dt, dev, finite=finite)
    elif covars.dim() == 3:
        V.check_tensor("covars", covars, (N, 2, 2), dt, dev, finite=finite)
    else:
        V.check_tensor("covars", covars, (N, 3), dt, dev, finite=finite)
    if opacities is not None:
        V.check_tensor("opacities", opacities, (N,), dt, dev, finite=finite)
    if mode not in MODES:
        _fail("mode", f"is {mode!r}; expected one of {MODES}")
    if mode == "alpha":
        if depths is None:
            _fail("depths", "is required in 'alpha' mode: the front-to-back sort key [N] (smaller is nearer)")
        V.check_tensor("depths", depths, (N,), dt, dev)
    if backgrounds is not None:
        if mode != "alpha":
            _fail("backgrounds", "only applies in 'alpha' mode (a sum has no transmittance to show it through)")
        V.check_tensor("backgrounds", backgrounds, (colors.shape[1],), dt, dev)
    for name, size in (("width", width), ("height", height)):
        if not isinstance(size, int) or size <= 0:
            _fail(name, f"must be a positive int, got {size!r}")
    if window is not None and not window > 0:
        _fail("window", f"must be None (3-sigma ellipse) or > 0 (normalised half width), got {window!r}")
    if not prefilter_variance >= 0:
        _fail("prefilter_variance", f"must be >= 0 (pixels^2), got {prefilter_variance!r}")


def _backend(name: str, device: torch.device) -> str:
    V.check_choice("backend", name, V.BACKENDS)
    if name == "auto":
        return "cuda" if device.type == "cuda" else "cpu"
    if name == "cpu" and device.type != "cpu":
        _fail("backend", f"'cpu' needs CPU tensors, got {device}; use 'auto'")
    if name == "cuda" and device.type != "cuda":
        _fail("backend", f"'cuda' needs CUDA tensors, got {device}; use 'auto' or 'cpu'")
    return name


def rasterize_image_gaussians(
    means: Tensor,
    colors: Tensor,
    width: int,
    height: int,
    *,
    cholesky: Tensor | None = None,
    covars: Tensor | None = None,
    opacities: Tensor | None = None,
    mode: str = "sum",
    depths: Tensor | None = None,
    window: float | None = None,
    prefilter_variance: float = 0.0,
    backgrounds: Tensor | None = None,
    backend: str = "auto",
) -> ImageRender:
    """Render N 2D Gaussians into a height x width image, differentiably.

    Args:
        means [N, 2] normalised image coordinates ([-1, 1], x right, y down, pixel centres at (2i+1)/W - 1);
        colors [N, D], any channel count D; cholesky [N, 3] (l11, l21, l22), Sigma = L L^T with
        L = [[l11, 0], [l21, l22]], or covars [N, 3] (sxx, sxy, syy) or [N, 2, 2], in normalised units
        (exactly one of the two); opacities [N] (optional: GaussianImage merges opacity into colour).
        mode: "sum" (GaussianImage: render = sum_n opacity_n colour_n G_n, unordered, no transmittance) or
        "alpha" (front to back by ``depths`` [N], smaller first, 3DGS blending: alpha = min(0.999, o G),
        skipped below 1/255, transmittance carried; Image-GS style; ``backgrounds`` [D] shows through).
        window: None, the 3-sigma ellipse; a float w > 0, GSASR's fixed window |dx| <= w W / 2,
        |dy| <= w H / 2 (w in normalised units; GSASR's ``dmax``). In "alpha" mode the 3-sigma box and
        the 1/255 cut-off of 3DGS decide (window must be None).
        prefilter_variance: pixels^2 of an isotropic low-pass added to every Gaussian with its integral
        kept (anti-aliasing when rendering below the fitted size; 0 = exact).
        backend: "auto", "reference", "cpu", "cuda" (sum mode: the reference on the GPU; alpha mode:
        gsplat's rasterize_to_pixels).
    Returns:
        :class:`ImageRender` (render [H, W, D], alpha [H, W, 1] or None, meta).
    """
    args = (means, colors, cholesky, covars, opacities, depths, width, height, mode, window, prefilter_variance,
            backgrounds)
    fast = _no_grad_cpu_sum(backend, mode, means, colors, cholesky, covars, opacities)
    with V.calling("rasterize_image_gaussians"), _as_image_errors():
        _check(*args, finite=not fast)
        name = _backend(backend, means.device)
    if fast:
        done = _sum_no_grad_cpu(means, colors, cholesky, covars, opacities, width, height, window, prefilter_variance)
        if done is not None:
            return done
        with V.calling("rasterize_image_gaussians"), _as_image_errors():
            _check(*args)  # a NaN/Inf input: the full check names it
    if mode == "alpha" and window is not None:
        _fail("window", "must be None in 'alpha' mode (3DGS blending uses the 3-sigma box and the 1/255 cut-off)")
    cov = G.cholesky_to_covars(cholesky) if cholesky is not None else (
        G.covars_from_matrices(covars) if covars.dim() == 3 else covars)
    means_px = G.means_to_pixels(means, width, height)
    cov_px, colors = G.prefilter(G.covars_to_pixels(cov, width, height), colors, prefilter_variance)
    conics = G.conics_of(cov_px)
    extents = G.window_extents(cov_px, window, width, height)
    meta = ImageRenderMeta(means_px, cov_px, conics, extents, width, height)
    if mode == "sum":
        weighted = colors if opacities is None else colors * opacities[:, None]
        return ImageRender(_sum(name, means_px, conics, weighted, extents, width, height, window is None), None, meta)
    ones = means.new_ones(means.shape[0]) if opacities is None else opacities
    render, alpha = _alpha(name, means_px, conics, ones, colors, depths, extents, width, height)
    if backgrounds is not None:
        render = torch.addcmul(render, 1.0 - alpha, backgrounds)
    return ImageRender(render, alpha, meta)


def _no_grad_cpu_sum(backend, mode, means, colors, cholesky, covars, opacities) -> bool:
    """Whether the render can take the cpu backend's no-grad path (:func:`_sum_no_grad_cpu`): sum mode, the cpu
    backend, float32/64 CPU tensors, at least one Gaussian, and no gradient asked for. Anything unusual (a
    non-tensor, another dtype) says no, so the full checks report it."""
    given = [t for t in (means, colors, cholesky, covars, opacities) if t is not None]
    if mode != "sum" or backend not in ("auto", "cpu") or not all(isinstance(t, Tensor) for t in given):
        return False
    if means.device.type != "cpu" or means.dtype not in (torch.float32, torch.float64) or means.dim() != 2:
        return False
    return means.shape[0] > 0 and not (torch.is_grad_enabled() and any(t.requires_grad for t in given))


def _sum_no_grad_cpu(means, colors, cholesky, covars, opacities, width, height, window,
                     prefilter_variance) -> ImageRender | None:
    """The sum-mode render without autograd: the front end in two Numba passes (cpu/image_geometry.py, the same
    float ops as geometry.py), the tile lists and the forward kernel. None if an input holds NaN/Inf (the
    caller's full check then says where). Arguments already checked (but for finiteness)."""
    from ..cpu import image_geometry as CG
    from ..cpu import image_sum as CS

    if cholesky is None and covars.dim() == 3:
        covars = G.covars_from_matrices(covars)
    shape = cholesky if cholesky is not None else covars
    arrays = [t.detach().contiguous().numpy() for t in (means, shape, colors)]
    opac = opacities.detach().contiguous().numpy() if opacities is not None else np.empty(0, arrays[0].dtype)
    consts = CG.geometry_consts(width, height, prefilter_variance, window, arrays[0].dtype)
    prepared = CG.prepare(arrays[0], arrays[1], cholesky is not None, arrays[2], opac, consts,
                          prefilter_variance > 0.0, window is None, width, height, CS.binning_chunks(len(arrays[0])))
    if prepared is None:
        return None
    means_px, covars_px, conics, colors_px, extents, boxes, counts = prepared
    if int(counts.sum()) <= CS.MAX_TILE_ENTRIES:
        offsets, ids = CS.tile_lists(boxes, counts, -(-width // CS.TS))
        out = CS.forward_render(means_px, conics, colors_px, boxes, offsets, ids, width, height, window is None)
    else:
        out = _forward_in_chunks(means_px, conics, colors_px, boxes, width, height, window is None)
    meta = ImageRenderMeta(*(torch.from_numpy(a) for a in (means_px, covars_px, conics, extents)), width, height)
    return ImageRender(torch.from_numpy(out), None, meta)


def _forward_in_chunks(means_px, conics, colors_px, boxes, width, height, ellipse) -> np.ndarray:
    """The forward render of Gaussians whose tile lists would hold more than cpu/image_sum.MAX_TILE_ENTRIES
    entries: contiguous chunks of at most that many (image_sum.entry_chunks), each binned and rendered alone,
    summed into one image (memory: two images and one chunk's lists, each chunk's freed before the next is
    binned; the sum per pixel is added in another order than one pass's, so the values differ in the last bits)."""
    from ..cpu import image_sum as CS

    out = None
    tiles_x, tiles_y = -(-width // CS.TS), -(-height // CS.TS)
    for lo, hi in CS.entry_chunks(CS.box_entries(boxes), CS.MAX_TILE_ENTRIES):
        offsets, ids = CS.bin_boxes(boxes[lo:hi], tiles_x, tiles_y, CS.binning_chunks(hi - lo))
        part = CS.forward_render(means_px[lo:hi], conics[lo:hi], colors_px[lo:hi], boxes[lo:hi], offsets, ids,
                                 width, height, ellipse)
        del offsets, ids  # not held while the next chunk's lists are made (two chunks' lists at once before)
        out = part if out is None else np.add(out, part, out=out)
        del part
    return out


def _sum(name, means_px, conics, colors, extents, width, height, ellipse) -> Tensor:
    if means_px.shape[0] == 0:
        return colors.new_zeros(height, width, colors.shape[1]) + colors.sum() * 0.0
    if name == "cpu":
        from ..cpu.image_sum import sum_composite_cpu

        return sum_composite_cpu(means_px, conics, colors, extents, width, height, ellipse)
    return sum_composite_reference(means_px, conics, colors, extents, width, height, ellipse)


def _alpha(name, means_px, conics, opacities, colors, depths, extents, width, height) -> tuple[Tensor, Tensor]:
    """Front-to-back compositing through the 3D path's composite step (one 'camera')."""
    radii = torch.ceil(extents).to(torch.int32).clamp(min=1)
    if name == "cuda":
        return _alpha_gsplat(means_px, conics, opacities, colors, depths, radii, width, height)
    impl = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.{name}")
    splats = Splats(means_px[None], conics[None], opacities[None], colors[None], depths[None], radii[None])
    out = impl.composite(splats, width, height, TileGrid.for_image(width, height, TILE_SIZE))
    return out.render[0], out.alpha[0]


def _alpha_gsplat(means_px, conics, opacities, colors, depths, radii, width, height) -> tuple[Tensor, Tensor]:
    """gsplat's tile intersection and rasterize_to_pixels (CUDA tensors only: never reached with CPU tensors)."""
    from gsplat import isect_offset_encode, isect_tiles, rasterize_to_pixels

    grid = TileGrid.for_image(width, height, TILE_SIZE)
    _, isect_ids, flatten_ids = isect_tiles(means_px[None], radii[None], depths[None], TILE_SIZE, grid.tiles_x,
                                            grid.tiles_y)
    offsets = isect_offset_encode(isect_ids, 1, grid.tiles_x, grid.tiles_y)
    render, alpha = rasterize_to_pixels(means_px[None], conics[None], colors[None], opacities[None], width, height,
                                        TILE_SIZE, offsets, flatten_ids)
    return render[0], alpha[0]
