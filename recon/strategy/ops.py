"""Operations that change Gaussians while keeping the optimizer state aligned.

All go through :meth:`recon.models.gaussians.GaussianModel.update_params` (hence
:func:`recon.models.gaussians.resize_optimizer_state`). Masks are boolean ``[N]``; index tensors int64.
New Gaussians start with zero Adam moments (as 3DGS / gsplat).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rasterizer.reference.covariance import quat_to_rotmat
from recon.models.gaussians import GaussianModel

SPLIT_SCALE_DIVISOR = 1.6  # 3DGS: children of a split get scales / (0.8 * 2)


def _zeros_like_rows(v: Tensor, n: int) -> Tensor:
    return v.new_zeros((n,) + tuple(v.shape[1:]))


def duplicate(model: GaussianModel, mask: Tensor) -> int:
    """Clone the Gaussians in ``mask`` (appended at the end, same parameters). Returns the count added."""
    idx = mask.nonzero().squeeze(1)
    n = int(idx.numel())
    if n:
        model.update_params(lambda name, p: torch.cat([p, p[idx]]),
                            lambda name, key, v: torch.cat([v, _zeros_like_rows(v, n)]))
    return n


def split(model: GaussianModel, mask: Tensor) -> int:
    """Replace each Gaussian in ``mask`` by 2 children sampled from it, with scales / 1.6.

    Child means: mean + R diag(scale) z, z ~ N(0, I) from torch's global RNG, over as many axes as the
    model has scales (3; surfels: 2, the tangents, so children stay in the surfel's plane); other
    parameters copied. The parents are removed, children appended at the end. Returns the number of
    parents split.
    """
    idx = mask.nonzero().squeeze(1)
    n = int(idx.numel())
    if n == 0:
        return 0
    rest = (~mask).nonzero().squeeze(1)
    p = model.params
    scales = torch.exp(p["log_scales"].detach()[idx])
    k = scales.shape[1]
    R = quat_to_rotmat(p["quats"].detach()[idx])[:, :, :k]  # the first k axes (k = 3: all of R)
    z = torch.randn(2, n, k, device=scales.device)
    offsets = torch.einsum("nij,nj,bnj->bni", R, scales, z)
    children = {
        "means": (p["means"].detach()[idx][None] + offsets).reshape(-1, 3),
        "log_scales": torch.log(scales / SPLIT_SCALE_DIVISOR).repeat(2, 1),
    }
    return replace_with_children(model, idx, rest, children)


def replace_with_children(model, idx: Tensor, rest: Tensor, children: dict[str, Tensor]) -> int:
    """Remove the parents ``idx`` ([n] int64) and append 2 children each: the parameters named in ``children``
    ([2n, ...], first children then second children) take those values, every other parameter is the parent's,
    repeated. ``rest`` ([N - n] int64): the Gaussians kept. Children's Adam moments are zero. Returns n.

    The one tail of every split (3D, surfels, 4D, mesh-bound): each computes only its children's values."""
    n = int(idx.numel())

    def fn_param(name: str, t: Tensor) -> Tensor:
        new = children.get(name)
        if new is None:
            new = t[idx].repeat((2,) + (1,) * (t.dim() - 1))
        return torch.cat([t[rest], new])

    model.update_params(fn_param, lambda name, key, v: torch.cat([v[rest], _zeros_like_rows(v, 2 * n)]))
    return n


def remove(model: GaussianModel, mask: Tensor) -> int:
    """Delete the Gaussians in ``mask``. Returns the count removed."""
    n = int(mask.sum())
    if n:
        keep = (~mask).nonzero().squeeze(1)
        model.update_params(lambda name, p: p[keep], lambda name, key, v: v[keep])
    return n


def reset_opacity(model: GaussianModel, value: float) -> None:
    """Clamp opacities to at most ``value`` and zero their Adam moments (3DGS opacity reset)."""
    cap = math.log(value / (1.0 - value))
    model.update_params(lambda name, p: p.clamp(max=cap), lambda name, key, v: torch.zeros_like(v),
                        names=("logit_opacities",))
