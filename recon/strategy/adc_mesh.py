"""Adaptive density control for Gaussians bound to triangles (method "meshgs"): 3DGS's schedule and
thresholds; every Gaussian keeps its triangle.

The statistics, thresholds and pruning are :class:`recon.strategy.adc.ADCStrategy`'s (sizes are the rest
pose's world scales, :attr:`recon.models.meshgs.MeshGaussians.scales`). Clones copy the parent, triangle
included (``ops.duplicate`` goes through the model's ``update_params``, which carries ``face_ids``). A split
draws two children from the parent's Gaussian in the rest pose (mean + R S z, z ~ N(0, I); only the
parents are posed) and binds them back to the **parent's triangle** (:func:`recon.avatar.binding.unbind`): the
foot point's barycentric coordinates, clamped into the triangle, and the normal offset, clamped inside the
model's bound; local scales / 1.6, rotation copied.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from recon.avatar.binding import WorldGaussians, bind, unbind
from recon.avatar.quaternions import to_rotmat
from recon.strategy import ops
from recon.strategy.adc import ADCStrategy

MIN_BARY = 1e-4  # children's barycentric coordinates are clamped to at least this, then renormalised
OFFSET_MARGIN = 0.999  # children's offsets stay below this fraction of max_offset (atanh stays finite)


def split_bound(model, mask: Tensor) -> int:
    """Replace each Gaussian in ``mask`` by 2 children on the same triangle (module docstring); Adam moments
    of the children zero; children appended, parents removed. Returns the number of parents split."""
    idx = mask.nonzero().squeeze(1)
    n = int(idx.numel())
    if n == 0:
        return 0
    rest = (~mask).nonzero().squeeze(1)
    p = model.params
    with torch.no_grad():
        tri = model.triangles(model.avatar.rest_vertices.to(model.device))
        faces = model.face_ids[idx]
        local, _ = model.local_gaussians()  # the rest pose: no pose correction
        world = bind(tri, faces, *(v[idx] for v in local))  # only the parents are posed
        scales = torch.exp(world.log_scales)
        R = to_rotmat(world.quats)
        z = torch.randn(2, n, 3, device=scales.device)
        means = (world.means[None] + torch.einsum("nij,nj,bnj->bni", R, scales, z)).reshape(-1, 3)
        faces2 = faces.repeat(2)
        quats2, log_scales2 = world.quats.repeat(2, 1), world.log_scales.repeat(2, 1)
        bary, offset, _, _ = unbind(tri, faces2, WorldGaussians(means, quats2, log_scales2))
        bary = bary.clamp(min=MIN_BARY)
        bary = bary / bary.sum(1, keepdim=True)
        limit = OFFSET_MARGIN * model.options.max_offset
        raw_offset = torch.atanh(offset.clamp(-limit, limit) / model.options.max_offset)
    children = {"bary_logits": torch.log(bary), "offsets": raw_offset,
                "log_scales": (p["log_scales"].detach()[idx] - torch.log(torch.tensor(ops.SPLIT_SCALE_DIVISOR))).repeat(2, 1)}
    return ops.replace_with_children(model, idx, rest, children)


@dataclass
class MeshADCStrategy(ADCStrategy):
    """:class:`ADCStrategy` for :class:`recon.models.meshgs.MeshGaussians` (see the module docstring)."""

    def regularization(self, model) -> Tensor:
        """ADC adds no loss term."""
        return model.params["offsets"].new_zeros(())

    def split(self, model, mask: Tensor) -> int:
        return split_bound(model, mask)
