"""Small models and cameras for the LOD tests."""

from __future__ import annotations

import numpy as np
import torch

from rasterizer import Camera, rasterize_gaussians
from recon.core.splat_data import SplatData, random_splats, sigmoid


def small_model(n: int = 600, seed: int = 0, extent: float = 1.0, sh_degree: int = 1) -> SplatData:
    """n random Gaussians in [-extent, extent]^3, sizes about extent / 30, opacities 0.2..0.95."""
    data = random_splats(n, sh_degree=sh_degree, seed=seed, extent=extent)
    rng = np.random.default_rng(seed + 1)
    data.log_scales[:] = np.log(extent / 30.0) + rng.uniform(-0.7, 0.3, size=(n, 3))
    data.logit_opacities[:] = rng.uniform(-1.4, 3.0, size=n)
    return data


def camera_at(distance: float, width: int = 64, height: int = 48, focal: float = 60.0) -> Camera:
    """A camera on the -z axis at ``distance`` from the origin, looking at it (OpenCV: z forward)."""
    w2c = np.eye(4)
    w2c[2, 3] = distance
    K = [[focal, 0.0, width / 2], [0.0, focal, height / 2], [0.0, 0.0, 1.0]]
    return Camera.from_arrays(w2c, K, width, height, dtype=torch.float32)


def render(data: SplatData, camera: Camera, background=(0.0, 0.0, 0.0)) -> torch.Tensor:
    """[H, W, 3] render of ``data`` with the cpu rasterizer."""
    t = data.to_torch()
    out = rasterize_gaussians(
        t["means"], t["quats"], torch.exp(t["log_scales"]), torch.sigmoid(t["logit_opacities"]), t["sh"],
        camera.world_to_cam[None].float(), camera.K[None].float(), camera.width, camera.height,
        sh_degree=data.sh_degree, backgrounds=torch.tensor([background], dtype=torch.float32), backend="cpu",
        rasterize_mode="antialiased" if data.antialiased else "classic")
    return out.render[0]


def opacities(data: SplatData) -> np.ndarray:
    return sigmoid(data.logit_opacities)
