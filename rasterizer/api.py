"""`rasterize_gaussians`: one differentiable call, several backends.

Argument-compatible with gsplat's ``rasterization`` for what they share. Conventions: see
rasterizer/CONVENTIONS.md (OpenCV cameras, world_to_cam viewmats, wxyz quaternions, pixel centres at +0.5).
"""

from __future__ import annotations

import importlib

import torch
from torch import Tensor

from . import validate as V
from .records import RenderMeta, RenderOutput, Splats
from .reference.sh import join_sh, sh_to_color
from .runtime import warn_if_spin_set_too_late
from .tiles import TILE_SIZE, TileGrid


def resolve_backend(backend: str, device: torch.device) -> str:
    """Map "auto" to "cuda" for CUDA tensors and "cpu" otherwise; check device compatibility."""
    V.check_choice("backend", backend, V.BACKENDS)
    if backend == "auto":
        return "cuda" if device.type == "cuda" else "cpu"
    if backend == "cuda" and device.type != "cuda":
        raise V.RasterizerInputError(
            "rasterize_gaussians: backend='cuda' needs tensors on a CUDA device, got "
            f"{device}; use backend='cpu' (or 'auto') for CPU tensors")
    if backend == "cpu" and device.type != "cpu":
        raise V.RasterizerInputError(
            f"rasterize_gaussians: backend='cpu' needs CPU tensors, got {device}; use 'auto' or 'cuda'")
    return backend


def _backend_module(name: str):
    return importlib.import_module(f"{__package__}.{name}")


def _per_camera_colors(colors: Tensor, means: Tensor, viewmats: Tensor, sh_degree: int | None, impl,
                       radii: Tensor) -> Tensor:
    """Colours [C, N, D]: evaluated SH (view-dependent; the backend's ``sh_to_color``, whose signature is
    the reference's; culled pairs (zero radii) are 0, never composited) or the given colours broadcast
    over cameras."""
    C = viewmats.shape[0]
    if sh_degree is not None:
        return getattr(impl, "sh_to_color", sh_to_color)(sh_degree, means, colors, viewmats, radii)
    return colors if colors.dim() == 3 else colors[None].expand(C, -1, -1)


def _render_channels(colors: Tensor, depths: Tensor, render_mode: str) -> Tensor:
    """Stack what is composited: colour channels and/or the depth channel -> [C, N, D']."""
    if render_mode in ("D", "ED"):
        return depths[..., None]
    if render_mode in ("RGB+D", "RGB+ED"):
        return torch.cat([colors, depths[..., None]], dim=-1)
    return colors


def _finish(render: Tensor, alpha: Tensor, render_mode: str, backgrounds: Tensor | None, n_color: int) -> Tensor:
    """Expected depth (depth / alpha) and background blending (colour channels only)."""
    if render_mode.endswith("ED"):
        depth = render[..., -1:] / alpha.clamp(min=1e-10)
        render = torch.cat([render[..., :-1], depth], dim=-1)
    if backgrounds is not None and render_mode != "D" and render_mode != "ED":
        colour = torch.addcmul(render[..., :n_color], 1.0 - alpha, backgrounds[:, None, None, :])
        render = colour if render.shape[-1] == n_color else torch.cat([colour, render[..., n_color:]], dim=-1)
    return render


def _empty_render(means, opacities, colors, viewmats, width, height, render_mode, backgrounds, n_color,
                  tile_size) -> RenderOutput:
    """N = 0: background (or zeros), zero alpha, transmittance 1, empty meta; still connected to the
    inputs' graph."""
    C = viewmats.shape[0]
    D = {"D": 1, "ED": 1, "RGB+D": n_color + 1, "RGB+ED": n_color + 1}.get(render_mode, n_color)
    zero = (means.sum() + opacities.sum() + join_sh(colors).sum()) * 0.0
    render = means.new_zeros(C, height, width, D) + zero
    alpha = means.new_zeros(C, height, width, 1) + zero
    transmittance = means.new_ones(C, height, width, 1) + zero
    render = _finish(render, alpha, render_mode, backgrounds, n_color)
    grid = TileGrid.for_image(width, height, tile_size)
    meta = RenderMeta(radii=means.new_zeros(C, 0, 2, dtype=torch.int32), means2d=means.new_zeros(C, 0, 2),
                      depths=means.new_zeros(C, 0), conics=means.new_zeros(C, 0, 3), opacities=means.new_zeros(C, 0),
                      compensations=means.new_zeros(C, 0), transmittance=transmittance, width=width, height=height,
                      tile_size=tile_size, tiles_x=grid.tiles_x, tiles_y=grid.tiles_y, n_cameras=C)
    return RenderOutput(render, alpha, meta)


def rasterize_gaussians(
    means: Tensor,
    quats: Tensor | None,
    scales: Tensor | None,
    opacities: Tensor,
    colors: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    *,
    sh_degree: int | None = None,
    near_plane: float = 0.01,
    far_plane: float = 1e10,
    eps2d: float = 0.3,
    backgrounds: Tensor | None = None,
    render_mode: str = "RGB",
    rasterize_mode: str = "classic",
    covars: Tensor | None = None,
    backend: str = "auto",
    absgrad: bool = False,
    tile_size: int = TILE_SIZE,
    depth_limit: Tensor | None = None,
) -> RenderOutput:
    """Render N 3D Gaussians into C pinhole cameras, differentiably.

    Args:
        means [N, 3] world; quats [N, 4] (w, x, y, z), not necessarily normalised; scales [N, 3]
        activated; opacities [N] activated; colors [N, D] or [C, N, D], or SH coefficients [N, K, 3]
        when ``sh_degree`` is set (or split as a pair (sh0 [N, 1, 3], shN [N, K - 1, 3]), the layout
        trainers keep: the cpu backend then reads them without a concatenation each call);
        viewmats [C, 4, 4] world_to_cam (OpenCV axes); Ks [C, 3, 3] pixels.
        covars [N, 3, 3] replaces quats/scales when given. backgrounds [C, D] (colour channels).
        render_mode: "RGB", "D" (accumulated depth), "ED" (expected depth), "RGB+D", "RGB+ED".
        rasterize_mode: "classic" or "antialiased" (opacity x sqrt(det(S - eps I) / det S)).
        backend: "auto" (cuda for CUDA tensors, cpu otherwise), "reference", "cpu", "cuda".
        absgrad: also accumulate sum over pixels of |d loss / d means2d| into ``meta.absgrad`` (the same
        tensor as ``meta.means2d.absgrad``).
        depth_limit [C, H, W] (any float dtype; +inf: no limit): per pixel, the depth of what lies
        behind the Gaussians (an inserted mesh's depth buffer, a NeRF's termination depth). A Gaussian
        whose depth (camera-space z of its mean, the key the front-to-back sort uses; compared as
        float32) is >= the pixel's limit does not contribute to that pixel, and
        ``meta.transmittance`` is the light left for what is behind: composite it as
        ``render + meta.transmittance * colour_behind``. No gradient reaches depth_limit. reference
        and cpu backends; the cuda backend raises RasterizerInputError.
    Returns:
        :class:`RenderOutput` (render [C, H, W, D'], alpha [C, H, W, 1], meta :class:`RenderMeta`), a
        named tuple: ``render, alpha, meta = rasterize_gaussians(...)``. meta holds radii [C, N, 2]
        int32, means2d [C, N, 2] (its ``.grad`` holds d loss / d means2d after backward), depths
        [C, N], conics [C, N, 3], opacities [C, N] (as composited), transmittance [C, H, W, 1] (final
        transmittance, differentiable, before backgrounds), width, height, tile_size, n_cameras;
        ``meta["radii"]`` still works, attributes (``meta.radii``) are the way forward.
    """
    N = V.check_gaussians(means, quats, scales, opacities, covars)
    dt, dev = means.dtype, means.device
    C = V.check_cameras(viewmats, Ks, width, height, dt, dev)
    n_color = V.check_colors(colors, N, C, sh_degree, dt, dev)
    V.check_choice("render_mode", render_mode, V.RENDER_MODES)
    V.check_choice("rasterize_mode", rasterize_mode, V.RASTERIZE_MODES)
    V.check_backgrounds(backgrounds, C, n_color, dt, dev)
    V.check_depth_limit(depth_limit, C, width, height, dev)
    name = resolve_backend(backend, dev)
    if N == 0:
        return _empty_render(means, opacities, colors, viewmats, width, height, render_mode, backgrounds, n_color,
                             tile_size)
    if name == "cuda":
        if depth_limit is not None:
            raise V.RasterizerInputError(
                "rasterize_gaussians: `depth_limit` is not supported by the cuda backend (gsplat's kernels have "
                "no per-pixel depth limit); render with backend='reference' (any device, slow) or move the "
                "tensors to the CPU for backend='cpu'")
        cuda = _backend_module("cuda")
        if cuda.PIPELINE == "fused":
            colors = join_sh(colors) if sh_degree is not None else colors
            return cuda.rasterize(
                means, quats, scales, opacities, colors, viewmats, Ks, width, height, sh_degree=sh_degree,
                near_plane=near_plane, far_plane=far_plane, eps2d=eps2d, backgrounds=backgrounds,
                render_mode=render_mode, rasterize_mode=rasterize_mode, covars=covars, absgrad=absgrad,
                tile_size=tile_size)
    if name == "cpu":
        warn_if_spin_set_too_late()
    return rasterize_through_seam(
        _backend_module("cuda.seam" if name == "cuda" else name), means, quats, scales, opacities, colors, viewmats, Ks, width, height,
        sh_degree=sh_degree, near_plane=near_plane, far_plane=far_plane, eps2d=eps2d, backgrounds=backgrounds,
        render_mode=render_mode, rasterize_mode=rasterize_mode, covars=covars, absgrad=absgrad,
        tile_size=tile_size, depth_limit=depth_limit, n_color=n_color)


def rasterize_through_seam(impl, means, quats, scales, opacities, colors, viewmats, Ks, width, height, *,
                           sh_degree, near_plane, far_plane, eps2d, backgrounds, render_mode, rasterize_mode,
                           covars, absgrad, tile_size, depth_limit, n_color) -> RenderOutput:
    """The pipeline as separate steps of a backend module ``impl``: ``project`` -> colours (``sh_to_color``)
    -> :class:`Splats` -> ``composite``. Arguments as :func:`rasterize_gaussians`, already validated
    (N > 0; n_color: the colour channel count that check_colors returned). The reference and cpu backends
    render this way; ``rasterizer.cuda.seam`` offers gsplat's kernels as the same steps (measured against
    the fused cuda call by scripts/bench_cuda_seam.py)."""
    C, N = viewmats.shape[0], means.shape[0]
    antialiased = rasterize_mode == "antialiased"
    proj = impl.project(means, quats, scales, covars, viewmats, Ks, width, height, eps2d=eps2d,
                        near_plane=near_plane, far_plane=far_plane, opacities=opacities, antialiased=antialiased)
    opac = opacities[None] * proj.compensations if antialiased else opacities[None].expand(C, -1)
    channels = _render_channels(_per_camera_colors(colors, means, viewmats, sh_degree, impl, proj.radii),
                                proj.depths, render_mode)
    means2d = proj.means2d
    if means2d.requires_grad:
        means2d.retain_grad()
    absgrad_acc = means2d.new_zeros(C * N, 2) if absgrad else None
    if absgrad:
        means2d.absgrad = absgrad_acc.view(C, N, 2)  # meta.absgrad reads it (as gsplat's attribute)
    grid = TileGrid.for_image(width, height, tile_size)
    splats = Splats(means2d, proj.conics, opac, channels, proj.depths, proj.radii)
    out = impl.composite(splats, width, height, grid, absgrad_acc=absgrad_acc, depth_limit=depth_limit)
    render = _finish(out.render, out.alpha, render_mode, backgrounds, n_color)
    meta = RenderMeta(radii=proj.radii, means2d=means2d, depths=proj.depths, conics=proj.conics, opacities=opac,
                      compensations=proj.compensations, transmittance=out.transmittance, width=width, height=height,
                      tile_size=tile_size, tiles_x=grid.tiles_x, tiles_y=grid.tiles_y, n_cameras=C)
    return RenderOutput(render, out.alpha, meta)
