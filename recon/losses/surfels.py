"""The geometry losses of 2D Gaussian surfels (2DGS, Huang et al., SIGGRAPH 2024) and their config section.

- **Depth distortion**: the mean over pixels of the render's distortion map, sum_{i<j} w_i w_j |z_i - z_j|
  per pixel (``rasterize_surfels``' ``distortion``; gsplat's L1 camera-depth form).
- **Normal consistency**: the mean over pixels of 1 - n . N_d, where n is the render's alpha-weighted
  normal (sum w_i n_i, not normalised) and N_d the unit normal of the surface seen in the median (or
  expected: ``normal_depth``) depth map (cross product of central differences of the back-projected
  depth), times the detached alpha (as the 2DGS code: pixels that see nothing add nothing that can be
  lowered).

Images are channels-last ``[C, H, W, D]``, camera frame (OpenCV: x right, y down, z forward), normals
facing the camera (n . p < 0 for a point p seen along the ray).

Defaults of :class:`SurfelConfig` and their sources: start steps 3000 (distortion) and 7000 (normal
consistency) and the normal weight 0.05 are the 2DGS paper's (section 5, "Implementation details") and
its code's (``train.py``: ``lambda_dist`` from iteration 3000, ``lambda_normal`` 0.05 from 7000), also
gsplat's ``simple_trainer_2dgs.py``. The distortion weight: the paper gives 1000 for object captures
(DTU) and 100 for unbounded scenes (Tanks and Temples, its scripts), for its form, squared differences of
NDC-mapped depth (near 0.2, far 100). The rasterizer composites gsplat's L1 form in camera depth instead,
whose magnitude differs (for an object seen from about 4 units, the paper's term of a pair is about
4e-4 |dz|^2 where ours is |dz|), so the paper's numbers cannot be taken over unchanged; the default is
gsplat's 2DGS trainer's 0.01 for this form (``dist_lambda`` in its ``simple_trainer_2dgs.py``). Measured
(procedural scene, 64 x 64, 600 steps, cpu backend; test PSNR, mean distortion of the test views):
dist_lambda 0: 30.46 dB, 0.0304; 0.01: 30.38 dB, 0.0294; 0.1: 30.20 dB, 0.0249; 1: 27.82 dB, 0.0105;
100: 11.05 dB; 1000: 8.39 dB (the paper's weights on this form wipe the scene out). Iteration counts are
multiplied by the run's ``steps_scaler`` like the strategies'.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

ITERATION_FIELDS = ("dist_start_iter", "normal_start_iter")
NORMAL_EPS = 1e-8


@dataclass
class SurfelConfig:
    """2DGS training options: the ``surfels`` section of :class:`recon.training.trainer.TrainConfig`
    (``--surfels.normal-lambda 0.05``), read by ``--method 2dgs`` only."""

    depth: Literal["intersection", "centre"] = "intersection"
    """surfel depth composited into depth, median depth and distortion: the ray-splat intersection (the
    paper's; sloped depth on tilted surfels, cpu/reference backends) or the surfel centre (gsplat's; the
    cuda backend always uses it)"""
    dist_lambda: float = 0.01
    """depth-distortion weight (L1 camera-depth form; gsplat's 2DGS trainer's 1e-2). The paper's 1000
    (objects) / 100 (unbounded) are for its squared NDC-depth form: see recon/losses/surfels.py. On real unbounded
    captures use 0 (as the 2DGS code does): on colmap_bird it cost about 2 dB of test PSNR (README)"""
    dist_start_iter: int = 3000
    """first step of the distortion loss (paper: 3000; x steps_scaler)"""
    normal_lambda: float = 0.05
    """normal-consistency weight (paper: 0.05)"""
    normal_start_iter: int = 7000
    """first step of the normal-consistency loss (paper: 7000; x steps_scaler)"""
    normal_depth: Literal["median", "expected"] = "median"
    """depth whose normals the rendered normals must match: the median depth (the 2DGS code's
    ``depth_ratio`` 1, which its authors use for objects: only the surfel where T crosses 0.5 gets a
    gradient) or the expected depth (``depth_ratio`` 0, its code's default: the gradient reaches every
    surfel on the ray). Measured on lego_400 (data factor 2, 7,000 steps, random background): median
    15.42 deg normal error, 32.02 dB; expected 16.28 deg, 31.88 dB"""

    def scaled(self, steps_scaler: float) -> "SurfelConfig":
        """Copy with the start steps multiplied by ``steps_scaler`` (rounded, at least 0)."""
        return replace(self, **{f: max(0, round(getattr(self, f) * steps_scaler)) for f in ITERATION_FIELDS})


def depth_to_points(depth: Tensor, Ks: Tensor) -> Tensor:
    """Back-project a depth map: depth [C, H, W, 1] (camera z), Ks [C, 3, 3] pixels -> [C, H, W, 3] camera
    frame points at the pixel centres (x + 0.5, y + 0.5)."""
    C, H, W, _ = depth.shape
    ys = torch.arange(H, dtype=depth.dtype, device=depth.device) + 0.5
    xs = torch.arange(W, dtype=depth.dtype, device=depth.device) + 0.5
    fx, fy = Ks[:, 0, 0].to(depth)[:, None, None], Ks[:, 1, 1].to(depth)[:, None, None]
    cx, cy = Ks[:, 0, 2].to(depth)[:, None, None], Ks[:, 1, 2].to(depth)[:, None, None]
    z = depth[..., 0]
    x = (xs[None, None, :] - cx) / fx * z
    y = (ys[None, :, None] - cy) / fy * z
    return torch.stack([x, y, z], dim=-1)


def normals_from_depth(depth: Tensor, Ks: Tensor) -> Tensor:
    """Unit normals of the surface seen in a depth map, [C, H, W, 3] camera frame, facing the camera:
    normalize((p[y+1] - p[y-1]) x (p[x+1] - p[x-1])) of the back-projected points (2DGS's
    ``depth_to_normal`` up to the frame); zeros on the one-pixel border (no central difference there)."""
    p = depth_to_points(depth, Ks)
    d_col = p[:, 1:-1, 2:] - p[:, 1:-1, :-2]
    d_row = p[:, 2:, 1:-1] - p[:, :-2, 1:-1]
    n = F.normalize(torch.cross(d_row, d_col, dim=-1), dim=-1, eps=NORMAL_EPS)
    return F.pad(n, (0, 0, 1, 1, 1, 1))


def normal_consistency_loss(normals: Tensor, median_depth: Tensor, alpha: Tensor, Ks: Tensor) -> Tensor:
    """Mean over the interior pixels (the one-pixel border has no depth normal) of
    ``1 - normals . N_d alpha.detach()``: normals [C, H, W, 3] the render's alpha-weighted camera-frame
    normals, N_d = :func:`normals_from_depth` of median_depth [C, H, W, 1], alpha [C, H, W, 1]."""
    n_depth = normals_from_depth(median_depth, Ks) * alpha.detach()
    err = 1.0 - (normals * n_depth).sum(dim=-1)
    return err[:, 1:-1, 1:-1].mean()


def distortion_loss(distortion: Tensor) -> Tensor:
    """Mean of the render's distortion map [C, H, W, 1]."""
    return distortion.mean()
