"""`rasterize_surfels`: 2D Gaussian surfels (2DGS), one differentiable call, the sibling of
``rasterizer.rasterize_gaussians`` (same cameras, colours / SH, backgrounds and backend argument).

Pipeline: validate -> ``project_surfels`` (ray-splat transforms, normals, boxes) -> colours (SH) ->
tile binning (``rasterizer.tiles``, the 3D path's) -> surfel compositing -> backgrounds and world
normals. Conventions: rasterizer/CONVENTIONS.md; the surfel section of rasterizer/DESIGN.md.
"""

from __future__ import annotations

import importlib

import torch
from torch import Tensor

from .. import validate as V
from ..api import _per_camera_colors
from ..reference import sh as reference_sh
from ..reference.sh import join_sh
from ..runtime import warn_if_spin_set_too_late
from ..tiles import TILE_SIZE, TileGrid, intersect_tiles
from .composite import composite_surfels_reference
from .projection import project_surfels
from .records import SurfelMeta, SurfelRender, SurfelSplats
from .validate import check_options, check_surfels

NAME = "rasterize_surfels"


def resolve_surfel_backend(backend: str, device: torch.device) -> str:
    """"auto": cuda for CUDA tensors, else cpu; checks that the tensors' device suits the backend."""
    if backend == "auto":
        return "cuda" if device.type == "cuda" else "cpu"
    if backend == "cuda" and device.type != "cuda":
        raise V.RasterizerInputError(
            f"{NAME}: backend='cuda' needs tensors on a CUDA device, got {device}; use backend='cpu' (or 'auto') "
            "for CPU tensors")
    if backend == "cpu" and device.type != "cpu":
        raise V.RasterizerInputError(f"{NAME}: backend='cpu' needs CPU tensors, got {device}; use 'auto' or 'cuda'")
    return backend


def world_normals(normals_cam: Tensor, viewmats: Tensor) -> Tensor:
    """Camera-frame normal images [C, H, W, 3] -> world frame (R_c^T n)."""
    return torch.einsum("cji,chwj->chwi", viewmats[:, :3, :3], normals_cam)


def finish_colour(render: Tensor, alpha: Tensor, backgrounds: Tensor | None) -> Tensor:
    """render + (1 - alpha) background, as the 3D path."""
    if backgrounds is None:
        return render
    return torch.addcmul(render, 1.0 - alpha, backgrounds[:, None, None, :])


def rasterize_surfels(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
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
    backgrounds: Tensor | None = None,
    backend: str = "auto",
    tile_size: int = TILE_SIZE,
    surfel_depth: str = "centre",
    depth_limit: Tensor | None = None,
) -> SurfelRender:
    """Render N 2D Gaussian surfels into C pinhole cameras, differentiably (exact ray-splat intersection).

    Args:
        means [N, 3] world centres; quats [N, 4] (w, x, y, z), any norm: the rotation whose first two
        columns are the surfel's tangents and whose third is its normal; scales [N, 2] activated
        (standard deviations along the tangents); opacities [N] activated; colors [N, D] or [C, N, D],
        or SH coefficients [N, K, 3] (or the pair (sh0 [N, 1, 3], shN [N, K - 1, 3])) with ``sh_degree``;
        viewmats [C, 4, 4] world_to_cam (OpenCV axes); Ks [C, 3, 3] pixels; backgrounds [C, D].
        backend: "auto" (cuda for CUDA tensors, cpu otherwise), "reference" (PyTorch, the
        specification), "cpu" (Numba kernels, hand-written backward), "cuda" (gsplat's
        ``rasterization_2dgs``).
        surfel_depth: the depth z_i composited into depth, median depth and distortion: "centre" (the
        surfel centre's camera z, gsplat's choice; every backend) or "intersection" (the camera z of the
        ray-splat intersection, the 2DGS paper's rasterizer; reference and cpu backends).
        depth_limit [C, H, W] (any float dtype; +inf: no limit; reference and cpu backends): per pixel,
        the camera z of what lies behind (an inserted mesh's first hit); a surfel whose ray-splat
        intersection depth at that pixel (its centre depth where the low-pass fallback gives its
        alpha) is >= the limit contributes nothing there, whatever ``surfel_depth``, and
        ``meta.transmittance`` is the light left for what is behind: composite it as
        ``render + meta.transmittance * colour_behind`` (without ``backgrounds``). No gradient
        reaches depth_limit.
    Returns:
        :class:`SurfelRender` (render, alpha, depth, median_depth, normals, normals_world, distortion,
        meta); see its docstring for shapes and definitions.
    """
    with V.calling(NAME):
        N = check_surfels(means, quats, scales, opacities)
        dt, dev = means.dtype, means.device
        C = V.check_cameras(viewmats, Ks, width, height, dt, dev)
        n_color = V.check_colors(colors, N, C, sh_degree, dt, dev)
        V.check_backgrounds(backgrounds, C, n_color, dt, dev)
        check_options(surfel_depth, backend, tile_size)
        V.check_depth_limit(depth_limit, C, width, height, dev)
        if depth_limit is not None and (backend == "cuda" or (backend == "auto" and dev.type == "cuda")):
            raise V.RasterizerInputError(
                f"{NAME}: `depth_limit` is not supported by the cuda backend (gsplat's 2DGS kernels have no "
                "per-pixel depth limit); use backend='reference' for CUDA tensors (or 'cpu' for CPU tensors)")
        name = resolve_surfel_backend(backend, dev)
        if name == "cpu" and tile_size != TILE_SIZE:
            V._fail("tile_size", f"is {tile_size}; the cpu backend composites {TILE_SIZE}x{TILE_SIZE} tiles")
        if name == "cuda" and surfel_depth != "centre":
            raise V.RasterizerInputError(
                f"{NAME}: surfel_depth={surfel_depth!r} is not supported by the cuda backend (gsplat composites "
                "each surfel's centre depth); pass surfel_depth='centre' or use backend='reference'")
    if name == "cuda":
        cuda = importlib.import_module(f"{__package__}.cuda")
        return cuda.rasterize(means, quats, scales, opacities, join_sh(colors) if sh_degree is not None else colors,
                              viewmats, Ks, width, height, sh_degree=sh_degree, near_plane=near_plane,
                              far_plane=far_plane, backgrounds=backgrounds, tile_size=tile_size)
    project = importlib.import_module(f"{__package__}.cpu_projection").project_surfels_cpu if name == "cpu" \
        else project_surfels
    proj = project(means, quats, scales, viewmats, Ks, width, height, near_plane=near_plane, far_plane=far_plane)
    sh_impl = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.cpu.sh") if name == "cpu" else reference_sh
    colours = _per_camera_colors(colors, means, viewmats, sh_degree, sh_impl, proj.radii)
    means2d = proj.means2d
    for t in (means2d, proj.ray_transforms):  # their .grad after backward: densification statistics
        if t.requires_grad:
            t.retain_grad()
    opac = opacities[None].expand(C, -1)
    splats = SurfelSplats(means2d, proj.ray_transforms, opac, colours, proj.depths, proj.normals, proj.radii)
    grid = TileGrid.for_image(width, height, tile_size)
    if name == "cpu":
        warn_if_spin_set_too_late()
        out = importlib.import_module(f"{__package__}.cpu").composite_surfels_cpu(splats, grid, width, height,
                                                                                   surfel_depth, depth_limit)
    else:
        tiles = intersect_tiles(means2d, proj.radii, proj.depths, grid)
        out = composite_surfels_reference(splats, tiles, grid, width, height, surfel_depth, depth_limit)
    meta = SurfelMeta(radii=proj.radii, means2d=means2d, depths=proj.depths, ray_transforms=proj.ray_transforms,
                      normals=proj.normals, opacities=opac, transmittance=out.transmittance, width=width,
                      height=height, tile_size=tile_size, tiles_x=grid.tiles_x, tiles_y=grid.tiles_y, n_cameras=C)
    return SurfelRender(finish_colour(out.render, out.alpha, backgrounds), out.alpha, out.depth, out.median_depth,
                        out.normals, world_normals(out.normals, viewmats), out.distortion, meta)
