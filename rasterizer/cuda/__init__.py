"""The `cuda` backend: gsplat's fused CUDA kernels behind our API.

Only ever called with CUDA tensors (``resolve_backend`` guarantees it): calling a gsplat CUDA wrapper
with CPU tensors starts a JIT build that fails on machines without nvcc. gsplat is imported lazily.
Two shapes, chosen by ``PIPELINE``:
- "seam" (default): gsplat's kernels as the pipeline's separate steps (``rasterizer.cuda.seam``:
  ``fully_fused_projection`` -> ``spherical_harmonics`` -> ``Splats`` -> ``isect_tiles`` +
  ``rasterize_to_pixels``), the seam the cpu and reference backends render through;
- "fused": gsplat's ``rasterization`` in one call (:func:`rasterize`), whose meta also carries gsplat's
  own entries (``isect_ids``, ``flatten_ids``, ... in ``meta.backend_extras``).
They render identically (scripts/bench_cuda_seam.py prints the largest difference: 0.0 on an H100); the
seam measured faster there (rasterizer/DESIGN.md has the numbers). Neither has a per-pixel depth limit
(``rasterize_gaussians`` rejects ``depth_limit`` with the cuda backend). The final transmittance is
1 - alpha (gsplat returns no separate transmittance).
"""

from __future__ import annotations

from torch import Tensor

from ..records import RenderMeta, RenderOutput

PIPELINE = "seam"  # or "fused": see the module docstring


def rasterize(means, quats, scales, opacities, colors, viewmats, Ks, width, height, *, sh_degree, near_plane,
              far_plane, eps2d, backgrounds, render_mode, rasterize_mode, covars, absgrad,
              tile_size) -> RenderOutput:
    """Render with ``gsplat.rasterization`` (non-packed mode so meta tensors are [C, N, ...]); gsplat's
    other meta entries go to ``meta.backend_extras`` (``meta["isect_ids"]`` still reads them)."""
    if not means.is_cuda:  # defensive: never reach a gsplat CUDA wrapper with CPU tensors
        raise RuntimeError("rasterizer.cuda.rasterize called with CPU tensors")
    from gsplat import rasterization

    if backgrounds is not None and render_mode in ("RGB+D", "RGB+ED"):
        backgrounds = _pad_depth_background(backgrounds)
    if covars is not None:
        quats = scales = None
    render, alpha, meta = rasterization(
        means, quats, scales, opacities, colors, viewmats, Ks, width, height, near_plane=near_plane,
        far_plane=far_plane, eps2d=eps2d, sh_degree=sh_degree, packed=False, tile_size=tile_size,
        backgrounds=backgrounds if render_mode not in ("D", "ED") else None, render_mode=render_mode,
        rasterize_mode=rasterize_mode, covars=covars, absgrad=absgrad)
    meta.setdefault("n_cameras", viewmats.shape[0])
    if meta["means2d"].requires_grad:  # as the cpu/reference backends: densification reads its gradient
        meta["means2d"].retain_grad()
    if absgrad and hasattr(meta["means2d"], "absgrad") is False:
        meta["means2d"].absgrad = None
    return RenderOutput(render, alpha, typed_meta(meta, 1.0 - alpha))


FIELDS_FROM_GSPLAT = {"radii": "radii", "means2d": "means2d", "depths": "depths", "conics": "conics",
                      "opacities": "opacities", "compensations": "compensations", "width": "width",
                      "height": "height", "tile_size": "tile_size", "tiles_x": "tile_width",
                      "tiles_y": "tile_height", "n_cameras": "n_cameras"}


def typed_meta(meta: dict, transmittance: Tensor) -> RenderMeta:
    """gsplat's meta dict as RenderMeta (its other entries in backend_extras)."""
    used = set(FIELDS_FROM_GSPLAT.values())
    fields = {ours: meta.get(theirs) for ours, theirs in FIELDS_FROM_GSPLAT.items()}
    return RenderMeta(**fields, transmittance=transmittance,
                      backend_extras={k: v for k, v in meta.items() if k not in used})


def _pad_depth_background(backgrounds: Tensor) -> Tensor:
    """gsplat blends backgrounds over every rendered channel; the depth channel gets 0."""
    import torch

    return torch.cat([backgrounds, backgrounds.new_zeros(backgrounds.shape[0], 1)], dim=-1)
