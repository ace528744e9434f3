"""The surfels' `cuda` backend: gsplat's ``rasterization_2dgs`` behind ``rasterize_surfels``.

Only ever called with CUDA tensors (``resolve_surfel_backend`` guarantees it; a gsplat CUDA wrapper
called with CPU tensors starts a JIT build that fails without nvcc). gsplat is imported lazily.
gsplat is asked for "RGB+ED" with ``distloss=True`` so that the depth channel exists (its median depth
and distortion read the last composited channel, which is only a depth in the +D modes); the depth
channel is split off. gsplat takes three scales and ignores the third (its kernel builds the surfel
frame with 1 there); a column of ones is appended. Colours [N, D] are broadcast to [C, N, D] (gsplat's
2DGS wrapper, unlike its 3D one, concatenates the depth channel without broadcasting). gsplat returns
world-frame normals; the camera-frame ones are R_c n. Transmittance is 1 - alpha (gsplat has no separate output).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .records import SurfelMeta, SurfelRender

FIELDS_FROM_GSPLAT = {"radii": "radii", "means2d": "means2d", "depths": "depths", "ray_transforms": "ray_transforms",
                      "normals": "normals", "opacities": "opacities", "width": "width", "height": "height",
                      "tile_size": "tile_size", "tiles_x": "tile_width", "tiles_y": "tile_height",
                      "n_cameras": "n_cameras"}


def rasterize(means, quats, scales, opacities, colors, viewmats, Ks, width, height, *, sh_degree, near_plane,
              far_plane, backgrounds, tile_size) -> SurfelRender:
    """Render with ``gsplat.rasterization_2dgs`` (non-packed, so meta tensors are [C, N, ...])."""
    require_cuda(means)
    from gsplat import rasterization_2dgs

    scales3 = torch.cat([scales, torch.ones_like(scales[:, :1])], dim=-1)
    if sh_degree is None and colors.dim() == 2:  # gsplat's 2DGS path appends the depth channel to [C, N, D] only
        colors = colors[None].expand(viewmats.shape[0], -1, -1)
    colours, alpha, normals_world, _, distort, median, meta = rasterization_2dgs(
        means, quats, scales3, opacities, colors, viewmats, Ks, width, height, near_plane=near_plane,
        far_plane=far_plane, sh_degree=sh_degree, packed=False, tile_size=tile_size, backgrounds=backgrounds,
        render_mode="RGB+ED", distloss=True, depth_mode="median")
    if meta["means2d"].requires_grad:
        meta["means2d"].retain_grad()
    meta.setdefault("n_cameras", viewmats.shape[0])
    normals_cam = torch.einsum("cij,chwj->chwi", viewmats[:, :3, :3], normals_world)
    return SurfelRender(colours[..., :-1], alpha, colours[..., -1:], median, normals_cam, normals_world, distort,
                        typed_meta(meta, 1.0 - alpha))


def require_cuda(means: Tensor) -> None:
    """Defensive: never reach a gsplat CUDA wrapper with CPU tensors."""
    if not means.is_cuda:
        raise RuntimeError("rasterizer.surfels.cuda.rasterize called with CPU tensors")


def typed_meta(meta: dict, transmittance: Tensor) -> SurfelMeta:
    """gsplat's meta dict as SurfelMeta (its other entries, e.g. ``gradient_2dgs``, in backend_extras)."""
    used = set(FIELDS_FROM_GSPLAT.values())
    fields = {ours: meta.get(theirs) for ours, theirs in FIELDS_FROM_GSPLAT.items()}
    return SurfelMeta(**fields, transmittance=transmittance,
                      backend_extras={k: v for k, v in meta.items() if k not in used})
