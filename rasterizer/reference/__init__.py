"""The `reference` backend: plain PyTorch, differentiated by autograd, any device. The specification."""

from __future__ import annotations

from torch import Tensor

from ..tiles import TileGrid, intersect_tiles
from .composite import composite_reference
from .covariance import covariance_from_quat_scale, quat_to_rotmat
from .projection import Projection, project_gaussians
from .sh import eval_sh, sh_basis, sh_to_color

__all__ = ["project", "composite", "covariance_from_quat_scale", "quat_to_rotmat", "project_gaussians",
           "Projection", "eval_sh", "sh_basis", "sh_to_color"]


def project(means, quats, scales, covars, viewmats, Ks, width, height, *, eps2d, near_plane, far_plane,
            opacities, antialiased) -> Projection:
    """Projection step of the pipeline (covariances built from quats/scales unless given)."""
    if covars is None:
        covars = covariance_from_quat_scale(quats, scales)
    return project_gaussians(means, covars, viewmats, Ks, width, height, eps2d=eps2d, near_plane=near_plane,
                             far_plane=far_plane, opacities=opacities, antialiased=antialiased)


def composite(means2d: Tensor, conics: Tensor, opacities: Tensor, colors: Tensor, radii: Tensor, depths: Tensor,
              width: int, height: int, grid: TileGrid, absgrad_acc: Tensor | None):
    """Compositing step: tile intersection + front-to-back blending. Returns render, alpha."""
    tiles = intersect_tiles(means2d, radii, depths, grid)
    return composite_reference(means2d, conics, opacities, colors, tiles, grid, width, height, absgrad_acc)
