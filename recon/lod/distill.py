"""Self-distillation of budgeted cuts: the merged nodes that a budget's cuts use, tuned jointly (docs/lod.md).

Fine-tuning level by level (recon/lod/finetune.py) tunes each merged node inside a picture made of one octree
depth; but a budgeted cut (recon/lod/cut.py) mixes depths: leaves and fine merges where the view needs them,
coarse merges elsewhere, side by side. This tunes the merged nodes where they are used:

1. **cuts**: for each training camera (at most ``cameras``, evenly spread), the cut at ``budget`` nodes with
   the cut ``metric``; the trainable nodes are the merged (interior) nodes of any of these cuts, the cuts'
   leaves (the model) stay fixed;
2. **targets**: the full model rendered from each camera (at most ``max_side`` pixels a side; no gradient):
   self-distillation, so no image of any held-out view is ever used;
3. **steps**: Adam (``lr_scale`` x the 3DGS paper's learning rates, means x the model's extent) on the
   trainable nodes' parameters, one camera a step in turn, the 3DGS loss (0.8 L1 + 0.2 (1 - SSIM)) of that
   camera's cut rendered through ``rasterize_gaussians`` against its target; a node shared by several cuts is
   one set of parameters; a step moves only the nodes of that camera's cut (:func:`visible_step`);
4. written back when the mean PSNR of the cuts against the targets went up; then the bounding spheres of the
   tuned nodes and of their ancestors are recomputed (:func:`recon.lod.finetune.refresh_radius`), so the cut
   stays exact.

The cut of a camera is chosen once, before the steps (from the merged nodes as built); a later cut of the
tuned hierarchy for a nearby view selects nearly the same nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rasterizer import Camera
from recon.losses.image import photometric_loss, psnr

from .cut import select_cut
from .flat import DEFAULT_METRIC
from .finetune import PARAMS, _joined, _optimizer, _tensors, render_splats, spread, write_back
from .hierarchy import Hierarchy


@dataclass
class DistillConfig:
    """Options of :func:`distill_cuts`."""

    steps: int = 480
    """Adam steps in all (one camera a step)"""
    metric: str = DEFAULT_METRIC
    """the cut metric (recon/lod/flat.py) whose cuts are tuned (the cut's default, ``error``)"""
    cameras: int = 24
    """at most this many training cameras (evenly spread over the given ones)"""
    max_side: int = 256
    """renders at most this many pixels a side (longer side)"""
    lr_scale: float = 0.2
    """x the 3DGS learning rates (colmap_bird, 10 % cuts: 0.2 x with 480 steps raised the cuts from 29.1 to
    32.6 dB against the full renders; 0.5 x with 240 steps, when every node moved each step, lowered them)"""
    background: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass
class DistillResult:
    """What :func:`distill_cuts` did: cameras, budget, merged nodes tuned, mean cut size, mean PSNR of the cuts
    against the full model's renders before and after, whether the tuned nodes were kept."""

    cameras: int
    budget: int
    tuned: int
    cut_gaussians: float
    psnr_before: float
    psnr_after: float
    kept: bool


def render_camera(camera: Camera, max_side: int) -> Camera:
    """``camera`` scaled down so its longer side is at most ``max_side`` pixels (itself when it is)."""
    scale = max_side / max(camera.width, camera.height)
    return camera.scaled(scale) if scale < 1.0 else camera


def cut_parts(h: Hierarchy, cut: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(leaf ids, merged node ids) of the cut ``cut`` [n] node ids."""
    cut = np.asarray(cut)
    merged = cut >= h.num_leaves
    return cut[~merged], cut[merged]


def visible_step(opt: torch.optim.Optimizer, params: dict[str, torch.Tensor], index: torch.Tensor) -> None:
    """``opt.step()`` that moves only the rows ``index`` of each tensor of ``params`` (the nodes of this
    step's cut): Adam's momentum would otherwise keep moving the nodes this view does not hold."""
    hidden = torch.ones(len(params["means"]), dtype=torch.bool)
    hidden[index] = False
    with torch.no_grad():
        kept = {k: v[hidden].clone() for k, v in params.items()}
    opt.step()
    with torch.no_grad():
        for k, v in params.items():
            v[hidden] = kept[k]


def distill_cuts(h: Hierarchy, cameras: list[Camera], budget: int, config: DistillConfig | None = None,
                 progress=None) -> DistillResult:
    """Tune in place the merged nodes of ``h`` that the cuts at ``budget`` nodes from ``cameras`` use (module
    docstring); ``progress``: optional callable(step, steps)."""
    config = config or DistillConfig()
    if not cameras:
        raise ValueError("distilling the cuts needs at least one camera")
    if config.steps < 1:
        raise ValueError(f"distillation steps {config.steps}: must be >= 1")
    if budget < 1:
        raise ValueError(f"distillation budget {budget}: must be >= 1 Gaussian")
    cams = spread(cameras, config.cameras)
    background = torch.tensor(config.background, dtype=torch.float32)
    sh_degree, aa = h.nodes.sh_degree, h.nodes.antialiased
    leaves = h.nodes.subset(np.arange(h.num_leaves))
    full = _tensors(leaves)
    extent = float(np.linalg.norm(leaves.means.max(axis=0) - leaves.means.min(axis=0))) or 1.0
    parts = [cut_parts(h, select_cut(h, c, budget=budget, metric=config.metric)) for c in cams]
    own_ids = np.unique(np.concatenate([m for _, m in parts]))
    views = []  # (render camera, target, fixed leaves' tensors, index of the cut's merged nodes in own_ids)
    with torch.no_grad():
        for cam, (leaf_ids, merged_ids) in zip(cams, parts):
            rc = render_camera(cam, config.max_side)
            target = render_splats(full, rc, sh_degree, aa, background).clamp(0, 1)
            views.append((rc, target, _tensors(h.nodes.subset(leaf_ids)),
                          torch.from_numpy(np.searchsorted(own_ids, merged_ids))))
    start = _tensors(h.nodes.subset(own_ids))
    own = {k: start[k].clone().requires_grad_(True) for k in PARAMS if k != "sh"}
    own["sh0"] = start["sh"][:, :1].clone().requires_grad_(True)
    own["shN"] = start["sh"][:, 1:].clone().requires_grad_(True)

    def cut_params(fixed: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
        return _joined(fixed, {k: v[index] for k, v in own.items()})

    def mean_psnr() -> float:
        with torch.no_grad():
            return float(np.mean([psnr(render_splats(cut_params(f, i), c, sh_degree, aa, background).clamp(0, 1), t)
                                  for c, t, f, i in views]))

    before = mean_psnr()
    if len(own_ids) and np.isfinite(before):  # inf: every cut already renders as the full model (nothing to tune)
        opt = _optimizer(own, extent, config.lr_scale)
        for step in range(config.steps):
            cam, target, fixed, index = views[step % len(views)]
            loss = photometric_loss(render_splats(cut_params(fixed, index), cam, sh_degree, aa, background), target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            visible_step(opt, own, index)
            if progress is not None:
                progress(step + 1, config.steps)
    after = mean_psnr()
    kept = bool(len(own_ids)) and after > before
    if kept:
        write_back(h, own_ids, own)
    return DistillResult(len(cams), int(budget), len(own_ids), float(np.mean([len(a) + len(b) for a, b in parts])),
                         before, after, kept)
