"""The `reference` backend: plain PyTorch, differentiated by autograd, any device. The specification."""

from __future__ import annotations

from torch import Tensor

from ..records import Composited, Splats
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


def composite(splats: Splats, width: int, height: int, grid: TileGrid, *, absgrad_acc: Tensor | None = None,
              depth_limit: Tensor | None = None) -> Composited:
    """Compositing step: tile intersection + front-to-back blending (composite_reference).

    absgrad_acc: optional [C*N, 2] buffer for sum over pixels of |d loss / d means2d| (filled in
    backward); depth_limit [C, H, W]: a Gaussian whose depth is not in front of the pixel's limit does
    not contribute there."""
    s = splats
    tiles = intersect_tiles(s.means2d, s.radii, s.depths, grid)
    return Composited(*composite_reference(s.means2d, s.conics, s.opacities, s.colors, tiles, grid, width, height,
                                           absgrad_acc, s.depths, depth_limit))
