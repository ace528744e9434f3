"""Fine-tuning the merged levels of an LOD hierarchy against renders of the full model (docs/lod.md).

A merged Gaussian matches its children's first two moments but not their picture: one Gaussian of opacity
<= 1 cannot carry the light of overlapping opaque children (recon/lod/merge.py). Hierarchical 3DGS and
Octree-GS fix this by optimising the coarse levels against renders; this does the same, briefly.

Each interior node is tuned once, at the level where it first appears: the octree depth d of its cell
(:meth:`Hierarchy.level_cut`: the nodes of depth >= d whose parent is shallower). Levels go from fine to
coarse, so the finer nodes a level also holds are already tuned and stay fixed; the leaves (the model) never
change. For level d:

1. **its distance**: the level is seen where its merged Gaussians project to about ``pixels`` pixels (default
   inf: the cameras' own scale), so each camera renders at the image scale ``min(1, pixels z / (f r_d))``
   (r_d the median bounding radius of the
   level's own nodes, z the median camera depth of the model's centres in that view, f the focal length;
   at most ``max_side`` pixels a side, at least 16): moving away and rendering smaller are the same for a
   pinhole;
2. **targets**: the full model rendered at that scale (no gradient);
3. **steps**: Adam (``lr_scale`` x the 3DGS paper's learning rates, means x the model's extent) on the level's
   own nodes' parameters, the 3DGS loss (0.8 L1 + 0.2 (1 - SSIM), recon/losses/image.py) of the level's render through
   the same rasterizer (``rasterize_gaussians``), one camera per step in turn;
4. written back into the hierarchy when the level's PSNR against the targets went up (else the level is left
   as merged: levels that already match, the finest ones, only pick up the optimiser's noise), with the
   bounding spheres of the tuned nodes recomputed (still holding their children's spheres), so the cut
   (recon/lod/cut.py) stays valid.

:func:`finetune_levels` returns, per level, the mean PSNR of the level against the full model's renders
before and after.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rasterizer import Camera, rasterize_gaussians
from recon.core.learning_rates import LearningRates
from recon.core.splat_data import SplatData
from recon.losses.image import photometric_loss, psnr

from .hierarchy import Hierarchy, bounding_radius, leaf_radius

PARAMS = ("means", "quats", "log_scales", "logit_opacities", "sh")
MIN_SIDE = 16


@dataclass
class FinetuneConfig:
    """Options of :func:`finetune_levels`."""

    steps: int = 50
    """Adam steps per level"""
    pixels: float = float("inf")
    """a level is tuned at the image scale where its median merged Gaussian's bounding radius is this many pixels
    (at most the cameras' own scale; inf, the default: every level at the cameras' scale, which is where a
    budgeted cut shows them from those cameras: on colmap_bird tuning at 2 px made the 10 % cut 2.1 dB worse)"""
    max_side: int = 256
    """renders are at most this many pixels a side (longer side)"""
    cameras: int = 8
    """at most this many cameras (evenly spread over the given ones)"""
    lr_scale: float = 0.2
    """x the 3DGS learning rates (Adam moves every parameter by about its rate each step, wanted or not: at 1x,
    40 steps took colmap_bird's finest levels from 62 to 48 dB)"""
    background: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass
class LevelTuning:
    """What one level's fine-tuning did: octree depth, own (tuned) nodes, Gaussians rendered, image scale (the
    median over cameras), PSNR against the full model's renders before and after, whether it was kept."""

    depth: int
    tuned: int
    gaussians: int
    scale: float
    psnr_before: float
    psnr_after: float
    kept: bool


def render_splats(params: dict[str, torch.Tensor], camera: Camera, sh_degree: int, antialiased: bool,
                  background: torch.Tensor) -> torch.Tensor:
    """[H, W, 3] render of raw parameters (SplatData's: log-scales, logit opacities, wxyz quaternions)."""
    out = rasterize_gaussians(
        params["means"], params["quats"], torch.exp(params["log_scales"]), torch.sigmoid(params["logit_opacities"]),
        params["sh"], camera.world_to_cam[None].float(), camera.K[None].float(), camera.width, camera.height,
        sh_degree=sh_degree, backgrounds=background[None], rasterize_mode="antialiased" if antialiased else "classic")
    return out.render[0]


def median_depth(means: np.ndarray, camera: Camera) -> float:
    """Median camera depth of the centres [N, 3] in front of ``camera`` (1 when none is)."""
    W = camera.world_to_cam_numpy()
    z = means.astype(np.float64) @ W[2, :3] + W[2, 3]
    z = z[z > 1e-6]
    return float(np.median(z)) if len(z) else 1.0


def level_camera(camera: Camera, radius: float, depth: float, pixels: float, max_side: int) -> Camera:
    """``camera`` rescaled so a sphere of ``radius`` at ``depth`` spans about ``pixels`` pixels (step 1)."""
    focal = float(max(camera.K_numpy()[0, 0], camera.K_numpy()[1, 1]))
    scale = min(1.0, pixels * depth / max(focal * radius, 1e-12), max_side / max(camera.width, camera.height))
    scale = max(scale, MIN_SIDE / min(camera.width, camera.height))
    return camera.scaled(scale) if scale < 1.0 else camera


def spread(cameras: list[Camera], count: int) -> list[Camera]:
    """At most ``count`` of ``cameras``, evenly spaced."""
    if len(cameras) <= count:
        return list(cameras)
    return [cameras[int(i)] for i in np.linspace(0, len(cameras) - 1, count).round()]


def _tensors(data: SplatData) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(getattr(data, k), dtype=np.float32)) for k in PARAMS}


def _optimizer(params: dict[str, torch.Tensor], extent: float, lr_scale: float) -> torch.optim.Adam:
    """Adam over the trainable parameters (SH band 0 and the rest split into their own tensors)."""
    rates = LearningRates()  # the 3DGS paper's, as the trainer's; means x the model's extent
    groups = [{"params": [params[k]], "lr": lr_scale * getattr(rates, k) * (extent if k == "means" else 1.0)}
              for k in ("means", "quats", "log_scales", "logit_opacities", "sh0")]
    if params["shN"].shape[1] > 0:
        groups += [{"params": [params["shN"]], "lr": lr_scale * rates.shN}]
    return torch.optim.Adam(groups, eps=rates.eps)


def _joined(fixed: dict[str, torch.Tensor], own: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The level's Gaussians: the fixed ones, then the trainable ones (SH put back together)."""
    sh = torch.cat([own["sh0"], own["shN"]], dim=1)
    return {k: torch.cat([fixed[k], sh if k == "sh" else own[k]]) for k in PARAMS}


def tune_level(h: Hierarchy, depth: int, targets: list[tuple[Camera, torch.Tensor]], steps: int,
               background: torch.Tensor, extent: float, lr_scale: float = 1.0) -> tuple[np.ndarray, float, float]:
    """Steps 3-4 for the level at octree ``depth``: (own node ids, PSNR before, PSNR after); when after >
    before, the nodes' parameters in ``h.nodes`` are replaced by the tuned ones."""
    cut = h.level_cut(depth)
    mine = (cut >= h.num_leaves) & (h.depth[cut] == depth)
    own_ids, fixed_ids = cut[mine], cut[~mine]
    fixed = _tensors(h.nodes.subset(fixed_ids))
    start = _tensors(h.nodes.subset(own_ids))
    own = {k: start[k].clone().requires_grad_(True) for k in PARAMS if k != "sh"}
    own["sh0"] = start["sh"][:, :1].clone().requires_grad_(True)
    own["shN"] = start["sh"][:, 1:].clone().requires_grad_(True)
    sh_degree, aa = h.nodes.sh_degree, h.nodes.antialiased

    def mean_psnr() -> float:
        with torch.no_grad():
            params = _joined(fixed, own)
            return float(np.mean([psnr(render_splats(params, cam, sh_degree, aa, background).clamp(0, 1), tgt)
                                  for cam, tgt in targets]))

    before = mean_psnr()
    opt = _optimizer(own, extent, lr_scale)
    for step in range(steps):
        cam, target = targets[step % len(targets)]
        loss = photometric_loss(render_splats(_joined(fixed, own), cam, sh_degree, aa, background), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    after = mean_psnr()
    if not after > before:
        return own_ids, before, after
    write_back(h, own_ids, own)
    return own_ids, before, after


def write_back(h: Hierarchy, ids: np.ndarray, own: dict[str, torch.Tensor]) -> None:
    """Store the tuned tensors ``own`` (:func:`_tensors` of nodes ``ids``; quaternions normalised) into ``h``'s
    nodes ``ids`` and refresh the bounding spheres (:func:`refresh_radius`)."""
    with torch.no_grad():
        q = own["quats"] / own["quats"].norm(dim=1, keepdim=True).clamp_min(1e-12)
        h.nodes.means[ids] = own["means"].numpy()
        h.nodes.quats[ids] = q.numpy()
        h.nodes.log_scales[ids] = own["log_scales"].numpy()
        h.nodes.logit_opacities[ids] = own["logit_opacities"].numpy()
        h.nodes.sh[ids] = torch.cat([own["sh0"], own["shN"]], dim=1).numpy()
    refresh_radius(h, ids)


def ancestors(h: Hierarchy, ids: np.ndarray) -> np.ndarray:
    """Sorted ids of the proper ancestors of the nodes ``ids`` (not in ``ids`` themselves)."""
    mark = np.zeros(h.num_nodes, dtype=bool)
    p = h.parent[np.asarray(ids, dtype=np.int64)]
    while len(p := np.unique(p[p >= 0])):
        p = p[~mark[p]]
        mark[p] = True
        p = h.parent[p]
    mark[np.asarray(ids, dtype=np.int64)] = False
    return np.flatnonzero(mark)


def _children_reach(h: Hierarchy, ids: np.ndarray) -> np.ndarray:
    """[len(ids)] float64 ``max(|mu_c - mu| + r_c)`` over the children of each interior node of ``ids``."""
    lo, hi = h.child_start[ids - h.num_leaves], h.child_start[ids - h.num_leaves + 1]
    counts = hi - lo
    kids = np.concatenate([h.children[a:b] for a, b in zip(lo, hi)])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    gid = np.repeat(np.arange(len(ids)), counts)
    means = h.nodes.means.astype(np.float64)
    return bounding_radius(means[kids], h.radius[kids].astype(np.float64), means[ids], starts, gid)


def refresh_radius(h: Hierarchy, ids: np.ndarray) -> None:
    """Recompute the bounding spheres after the interior nodes ``ids`` (any depths) changed: each of them
    gets the larger of its Gaussian's own extent and ``max(|mu_c - mu| + r_c)`` over its children; each of
    their ancestors keeps its radius or grows to hold its children's spheres. Deepest first, so children are
    final before their parents. Drops the cut's cached arrays."""
    ids = np.unique(np.asarray(ids, dtype=np.int64))
    if len(ids) == 0:
        return
    if ids[0] < h.num_leaves or ids[-1] >= h.num_nodes:
        raise ValueError(f"refresh_radius: node ids must be interior nodes ({h.num_leaves} .. {h.num_nodes - 1}); "
                         f"got {ids[0]} .. {ids[-1]}")
    up = ancestors(h, ids)
    changed = np.zeros(h.num_nodes, dtype=bool)
    changed[ids] = True
    todo = np.concatenate([ids, up])
    for d in np.unique(h.depth[todo])[::-1]:
        level = todo[h.depth[todo] == d]
        r = _children_reach(h, level)
        mine = changed[level]
        own = leaf_radius(h.nodes.subset(level[mine])).astype(np.float64)
        r[mine] = np.maximum(r[mine], own)
        r[~mine] = np.maximum(r[~mine], h.radius[level[~mine]])
        h.radius[level] = r.astype(np.float32)
    for key in ("_spheres", "_flat", "_cut_state"):
        h.__dict__.pop(key, None)


def finetune_levels(h: Hierarchy, cameras: list[Camera], config: FinetuneConfig | None = None,
                    progress=None) -> list[LevelTuning]:
    """Fine-tune every merged level of ``h`` in place, fine to coarse (module docstring), seen from
    ``cameras``; ``progress``: optional callable(done, total) after each level."""
    config = config or FinetuneConfig()
    if not cameras:
        raise ValueError("fine-tuning the levels needs at least one camera")
    if config.steps < 1:
        raise ValueError(f"fine-tuning steps {config.steps}: must be >= 1")
    cams = spread(cameras, config.cameras)
    background = torch.tensor(config.background, dtype=torch.float32)
    leaves = h.nodes.subset(np.arange(h.num_leaves))
    full = _tensors(leaves)
    extent = float(np.linalg.norm(leaves.means.max(axis=0) - leaves.means.min(axis=0))) or 1.0
    z = [median_depth(leaves.means, c) for c in cams]
    depths = [d for d in range(h.octree_depth, -1, -1)
              if ((h.depth[h.num_leaves:] == d)).any()]
    results = []
    for i, d in enumerate(depths):
        own = np.flatnonzero(h.depth[h.num_leaves:] == d) + h.num_leaves
        r = float(np.median(h.radius[own]))
        level_cams = [level_camera(c, r, zc, config.pixels, config.max_side) for c, zc in zip(cams, z)]
        with torch.no_grad():
            targets = [(c, render_splats(full, c, h.nodes.sh_degree, h.nodes.antialiased, background).clamp(0, 1))
                       for c in level_cams]
        own_ids, before, after = tune_level(h, d, targets, config.steps, background, extent, config.lr_scale)
        scale = float(np.median([lc.width / c.width for lc, c in zip(level_cams, cams)]))
        results.append(LevelTuning(d, len(own_ids), len(h.level_cut(d)), scale, before, after, after > before))
        if progress is not None:
            progress(i + 1, len(depths))
    return results
