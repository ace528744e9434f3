"""Real spherical harmonics up to degree 3 (plain PyTorch).

Basis ordering is degree-major (l = 0; l = 1: m = -1, 0, 1; ...), the layout of ``sh [N, K, 3]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)
SH_C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
         -0.4570457994644658, 1.445305721320277, -0.5900435899266435)


def num_sh_bases(degree: int) -> int:
    """Number of SH coefficients per channel for a degree."""
    return (degree + 1) ** 2


def sh_basis(degree: int, dirs: Tensor) -> Tensor:
    """SH basis values [..., (degree+1)^2] at unit directions [..., 3]."""
    x, y, z = dirs.unbind(-1)
    out = [torch.full_like(x, SH_C0)]
    if degree >= 1:
        out += [-SH_C1 * y, SH_C1 * z, -SH_C1 * x]
    if degree >= 2:
        xx, yy, zz = x * x, y * y, z * z
        out += [SH_C2[0] * x * y, SH_C2[1] * y * z, SH_C2[2] * (2 * zz - xx - yy),
                SH_C2[3] * x * z, SH_C2[4] * (xx - yy)]
    if degree >= 3:
        out += [SH_C3[0] * y * (3 * xx - yy), SH_C3[1] * x * y * z, SH_C3[2] * y * (4 * zz - xx - yy),
                SH_C3[3] * z * (2 * zz - 3 * xx - 3 * yy), SH_C3[4] * x * (4 * zz - xx - yy),
                SH_C3[5] * z * (xx - yy), SH_C3[6] * x * (xx - 3 * yy)]
    return torch.stack(out, dim=-1)


def eval_sh(degree: int, dirs: Tensor, coeffs: Tensor) -> Tensor:
    """Raw SH value [..., 3] (no +0.5 offset) of coefficients [..., K, 3] at directions [..., 3].

    Directions need not be unit length (normalised here). Only the first (degree+1)^2 coefficients
    are used.
    """
    k = num_sh_bases(degree)
    basis = sh_basis(degree, torch.nn.functional.normalize(dirs, dim=-1))  # [..., k]
    return (basis[..., None] * coeffs[..., :k, :]).sum(dim=-2)


def is_split_sh(colors) -> bool:
    """Whether ``colors`` is SH coefficients split as a (sh0, shN) pair (tuple or list)."""
    return isinstance(colors, (tuple, list))


def split_sh(coeffs: Tensor | tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """(sh0 [N, 1, 3], shN [N, K - 1, 3]) from coefficients [N, K, 3] (views) or from such a pair."""
    if is_split_sh(coeffs):
        sh0, shN = coeffs
        return sh0, shN
    return coeffs[:, :1], coeffs[:, 1:]


def join_sh(coeffs: Tensor | tuple[Tensor, Tensor]) -> Tensor:
    """[N, K, 3] coefficients from [N, K, 3] (unchanged) or a (sh0, shN) pair (concatenated)."""
    if is_split_sh(coeffs):
        return torch.cat(list(coeffs), dim=1)
    return coeffs


def check_radii(radii: Tensor | None, C: int, N: int) -> None:
    """``radii`` is None or int32 [C, N, 2] (the projection's), else ValueError."""
    if radii is not None and (radii.shape != (C, N, 2) or radii.dtype != torch.int32):
        raise ValueError(f"radii must be int32 [C, N, 2] = [{C}, {N}, 2] (the projection's), got "
                         f"{radii.dtype} {list(radii.shape)}")


def sh_to_color(degree: int, means: Tensor, coeffs: Tensor | tuple[Tensor, Tensor], viewmats: Tensor,
                radii: Tensor | None = None) -> Tensor:
    """View-dependent colours [C, N, 3] = max(SH(dir) + 0.5, 0), dir = mean - camera centre.

    means [N, 3] world, coeffs [N, K, 3] or split as (sh0 [N, 1, 3], shN [N, K - 1, 3]) (concatenated
    here), viewmats [C, 4, 4] world_to_cam. radii [C, N, 2] (the projection's, optional): pairs with a
    zero radius are culled, their colour is 0 (and gets no gradient); the cpu backend skips them.
    """
    check_radii(radii, viewmats.shape[0], means.shape[0])
    coeffs = join_sh(coeffs)
    R = viewmats[:, :3, :3]
    t = viewmats[:, :3, 3]
    centers = -(R.transpose(-1, -2) @ t[..., None])[..., 0]  # [C, 3]
    dirs = means[None] - centers[:, None]  # [C, N, 3]
    colors = torch.clamp_min(eval_sh(degree, dirs, coeffs[None].expand(len(viewmats), -1, -1, -1)) + 0.5, 0.0)
    if radii is None:
        return colors
    return torch.where((radii > 0).all(-1, keepdim=True), colors, colors.new_zeros(()))
