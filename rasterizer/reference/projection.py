"""EWA projection of 3D Gaussians to screen space (plain PyTorch, the specification).

Frames: world -> camera by ``viewmats`` (world_to_cam, OpenCV axes) -> pixels by ``Ks``.
Numerics follow ``../shared/docs/FIELD_NOTES.md`` section 1 (as gsplat): the projection Jacobian is
evaluated with x/z, y/z clamped to 1.3x the half field of view, eps2d is added to the 2D covariance,
conics are (a, b, c) with sigma = 0.5 (a dx^2 + c dy^2) + b dx dy.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

ALPHA_THRESHOLD = 1.0 / 255.0
MAX_EXTEND = 3.33  # screen radius in standard deviations


class Projection(NamedTuple):
    """Screen-space Gaussians for C cameras and N Gaussians.

    means2d [C, N, 2] pixels; conics [C, N, 3] (a, b, c) of the inverse 2D covariance; depths [C, N]
    camera-space z; radii [C, N, 2] int32 half-extent in pixels (0 = culled); compensations [C, N]
    (anti-aliasing opacity factor sqrt(det(S - eps I) / det(S)), ones in classic mode). Culled pairs
    have means2d, conics, depths (and antialiased compensations) 0, with no gradient (zero_culled).
    """

    means2d: Tensor
    conics: Tensor
    depths: Tensor
    radii: Tensor
    compensations: Tensor


def world_to_cam(means: Tensor, covars: Tensor, viewmats: Tensor) -> tuple[Tensor, Tensor]:
    """Transform means [N, 3] and covariances [N, 3, 3] into C cameras ([C, N, 3], [C, N, 3, 3])."""
    R = viewmats[:, None, :3, :3]  # [C, 1, 3, 3]
    t = viewmats[:, None, :3, 3]  # [C, 1, 3]
    means_c = (R @ means[None, :, :, None])[..., 0] + t
    covars_c = R @ covars[None] @ R.transpose(-1, -2)
    return means_c, covars_c


def pinhole_jacobian(means_c: Tensor, Ks: Tensor, width: int, height: int) -> Tensor:
    """Jacobian [C, N, 2, 3] of the pinhole projection at camera-space means [C, N, 3].

    x/z and y/z are clamped to 1.3x the half field of view so that Gaussians far outside the image do
    not get huge screen covariances.
    """
    fx, fy = Ks[:, 0, 0, None], Ks[:, 1, 1, None]  # [C, 1]
    cx, cy = Ks[:, 0, 2, None], Ks[:, 1, 2, None]
    tx, ty, tz = means_c.unbind(-1)
    lim_x_pos = (width - cx) / fx + 0.3 * (0.5 * width / fx)
    lim_x_neg = cx / fx + 0.3 * (0.5 * width / fx)
    lim_y_pos = (height - cy) / fy + 0.3 * (0.5 * height / fy)
    lim_y_neg = cy / fy + 0.3 * (0.5 * height / fy)
    tx = tz * torch.clamp(tx / tz, min=-lim_x_neg, max=lim_x_pos)
    ty = tz * torch.clamp(ty / tz, min=-lim_y_neg, max=lim_y_pos)
    zero = torch.zeros_like(tz)
    J = torch.stack([fx / tz, zero, -fx * tx / (tz * tz), zero, fy / tz, -fy * ty / (tz * tz)], dim=-1)
    return J.reshape(tz.shape + (2, 3))


def pinhole_means2d(means_c: Tensor, Ks: Tensor) -> Tensor:
    """Pixel coordinates [C, N, 2] of camera-space means [C, N, 3] (no clamping)."""
    uvw = (Ks[:, None, :2, :3] @ means_c[..., None])[..., 0]  # [C, N, 2]
    return uvw / means_c[..., 2:3]


def add_blur_and_invert(covars2d: Tensor, eps2d: float) -> tuple[Tensor, Tensor, Tensor]:
    """Add eps2d * I to 2D covariances [C, N, 2, 2]; return (blurred covariances, conics [C, N, 3],
    compensations [C, N]). The conic of a degenerate covariance is computed with det clamped at 1e-10."""
    det_orig = covars2d[..., 0, 0] * covars2d[..., 1, 1] - covars2d[..., 0, 1] * covars2d[..., 1, 0]
    blurred = covars2d + eps2d * torch.eye(2, dtype=covars2d.dtype, device=covars2d.device)
    det = blurred[..., 0, 0] * blurred[..., 1, 1] - blurred[..., 0, 1] * blurred[..., 1, 0]
    det = det.clamp(min=1e-10)
    conics = torch.stack(
        [blurred[..., 1, 1] / det, -0.5 * (blurred[..., 0, 1] + blurred[..., 1, 0]) / det, blurred[..., 0, 0] / det],
        dim=-1,
    )
    compensations = torch.sqrt(torch.clamp(det_orig / det, min=0.0))
    return blurred, conics, compensations


def screen_radii(covars2d: Tensor, opacities: Tensor | None) -> Tensor:
    """Per-axis screen radius [C, N, 2] (float, before culling) of blurred 2D covariances.

    radius = ceil(extend * sqrt(diagonal)) with extend = 3.33, or, when ``opacities`` [C, N] are given,
    the opacity-aware min(3.33, sqrt(2 ln(255 opacity))): every pixel where alpha >= 1/255 lies inside.
    Gaussians whose opacity is below 1/255 get radius 0.
    """
    sx = torch.sqrt(covars2d[..., 0, 0])
    sy = torch.sqrt(covars2d[..., 1, 1])
    if opacities is None:
        extend = torch.full_like(sx, MAX_EXTEND)
    else:
        ratio = (opacities / ALPHA_THRESHOLD).clamp(min=1.0)
        extend = torch.clamp(torch.sqrt(2.0 * torch.log(ratio)), max=MAX_EXTEND)
        extend = torch.where(opacities < ALPHA_THRESHOLD, torch.zeros_like(extend), extend)
    return torch.stack([torch.ceil(extend * sx), torch.ceil(extend * sy)], dim=-1)


def cull_radii(radius: Tensor, means2d: Tensor, depths: Tensor, width: int, height: int,
               near_plane: float, far_plane: float) -> Tensor:
    """Zero the radius [C, N, 2] of Gaussians outside the depth range or entirely off-image; int32."""
    valid = (depths > near_plane) & (depths < far_plane)
    inside = (
        (means2d[..., 0] + radius[..., 0] > 0)
        & (means2d[..., 0] - radius[..., 0] < width)
        & (means2d[..., 1] + radius[..., 1] > 0)
        & (means2d[..., 1] - radius[..., 1] < height)
    )
    keep = valid & inside & (radius > 0).all(dim=-1)
    return torch.where(keep[..., None], radius, torch.zeros_like(radius)).to(torch.int32)


def project_gaussians(
    means: Tensor,
    covars: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    *,
    eps2d: float = 0.3,
    near_plane: float = 0.01,
    far_plane: float = 1e10,
    opacities: Tensor | None = None,
    antialiased: bool = False,
) -> Projection:
    """Project N world-space Gaussians into C pinhole cameras.

    Args:
        means: [N, 3] world; covars: [N, 3, 3] world; viewmats: [C, 4, 4] world_to_cam; Ks: [C, 3, 3].
        opacities: [N] activated opacities for the opacity-aware radius (None: fixed 3.33 sigma).
        antialiased: the radius uses opacity x compensation (what is composited in that mode).
    Returns:
        Projection (see its docstring). Gradients flow to means and covars through the visible pairs'
        means2d, conics, depths (and compensations).
    """
    means_c, covars_c = world_to_cam(means, covars, viewmats)
    J = pinhole_jacobian(means_c, Ks, width, height)
    covars2d = J @ covars_c @ J.transpose(-1, -2)
    means2d = pinhole_means2d(means_c, Ks)
    blurred, conics, compensations = add_blur_and_invert(covars2d, eps2d)
    depths = means_c[..., 2]
    if not antialiased:
        compensations = torch.ones_like(compensations)
    radius_opacity = None
    if opacities is not None:
        radius_opacity = opacities[None].detach() * compensations.detach()
    with torch.no_grad():
        radius = screen_radii(blurred.detach(), radius_opacity)
        radii = cull_radii(radius, means2d.detach(), depths.detach(), width, height, near_plane, far_plane)
    means2d, conics, depths, compensations = zero_culled(radii, means2d, conics, depths, compensations, antialiased)
    return Projection(means2d, conics, depths, radii, compensations)


def zero_culled(radii: Tensor, means2d: Tensor, conics: Tensor, depths: Tensor, compensations: Tensor,
                antialiased: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Culled pairs (a zero radius) get means2d, conics, depths and, in antialiased mode, compensations
    0, and no gradient (as gsplat's CUDA projection, which skips them): nothing downstream reads them,
    and the cpu backend then never computes them."""
    visible = (radii > 0).all(-1)  # [C, N]; cull_radii zeroes both radii or neither
    zero = lambda t: torch.where(visible.view(visible.shape + (1,) * (t.dim() - 2)), t, 0.0)  # noqa: E731
    return zero(means2d), zero(conics), zero(depths), zero(compensations) if antialiased else compensations
