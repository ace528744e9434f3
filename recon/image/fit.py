"""Fit an image with N 2D Gaussians (GaussianImage, ECCV 2024): parameters, initialisation, the loop.

Parameterisation (GaussianImage's): means = tanh(xyz) in normalised coordinates; a Cholesky factor in
*pixels of the fitted image*, L_px = raw + (0.5, 0, 0.5) (its "+0.5 on the diagonal" bound), mapped to
normalised units for the rasterizer by L = diag(2 / W, 2 / H) L_px; colours with opacity folded in (fixed 1).
The render is the unordered sum (rasterizer "sum" mode). Adam, one learning rate per group, halved on a
step schedule; loss L2 (GaussianImage) or L1 + SSIM.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Literal

import torch
from torch import Tensor

from recon.losses.image import quick_psnr

from .model import CHANNEL_LAYOUTS, ImageGaussians

CHOLESKY_BOUND = (0.5, 0.0, 0.5)  # GaussianImage adds it to the raw Cholesky factor (pixels)
MIN_DIAGONAL = 0.1  # pixels: the diagonal of L_px is kept at least this far from 0 (no degenerate Gaussian)


@dataclass
class FitConfig:
    """How to fit one image."""

    gaussians: int = 25_000
    """number of Gaussians."""
    steps: int = 3_000
    """optimisation steps."""
    init: Literal["image", "gaussianimage"] = "image"
    """"gaussianimage": the paper's (uniform means, random Cholesky in [0, 1] + bound, random colours);
    "image": uniform means, isotropic Gaussians sized to the pixels per Gaussian, colours sampled from the image
    (reaches a given PSNR in fewer steps on a CPU)."""
    loss: Literal["l2", "l1+ssim"] = "l2"
    """l2 (GaussianImage) or 0.8 L1 + 0.2 (1 - SSIM)."""
    lr_means: float = 0.01
    lr_cholesky: float = 0.05
    lr_colors: float = 0.01
    pixel_variance: float = 1.0 / 12.0
    """pixels^2: each fitted pixel is the area average of the continuous image over the pixel (a Gaussian low-pass
    of a 1-pixel box's variance, 1/12), not a point sample at its centre; kept in the model, so renders at other
    sizes sample their own pixels the same way and agree with the fit (0: point samples, GaussianImage)."""
    lr_decay_steps: tuple[float, ...] = (0.6, 0.85)
    """fractions of ``steps`` at which all learning rates are halved."""
    seed: int = 0
    backend: str = "auto"
    device: str = "cpu"
    """"cpu", "cuda" or "auto" (the GPU when there is one): where the parameters and the image live while fitting
    (the model returned is on the CPU either way)."""


PRESETS: dict[str, FitConfig] = {
    # tuned on the 2-core CPU: colours sampled from the image, larger learning rates, 3,000 steps
    "default": FitConfig(),
    # the paper's settings (GaussianImage, ECCV 2024: random initialisation, learning rate 1e-3 for every
    # group, 50,000 steps, halved at step 20,000; Adam here, the paper's code uses Adan): for a GPU
    "gaussianimage": FitConfig(init="gaussianimage", steps=50_000, pixel_variance=0.0, lr_means=1e-3, lr_cholesky=1e-3, lr_colors=1e-3,
                               lr_decay_steps=(0.4,)),
}


@dataclass
class FitResult:
    model: ImageGaussians
    psnr: float
    seconds: float
    steps: int
    history: list[tuple[int, float]] = field(default_factory=list)  # (step, PSNR) every so often


def psnr(render: Tensor, target: Tensor) -> float:
    """PSNR in dB of ``render`` clamped to [0, 1] (what is saved) against ``target``: recon.losses.image.quick_psnr."""
    return quick_psnr(render.detach(), target)


class GaussianParams(torch.nn.Module):
    """The optimised tensors: xyz [N, 2] (means = tanh(xyz)), raw Cholesky [N, 3] (pixels), colours [N, C]."""

    def __init__(self, xyz: Tensor, raw_cholesky: Tensor, colors: Tensor, width: int, height: int):
        super().__init__()
        self.xyz = torch.nn.Parameter(xyz)
        self.raw_cholesky = torch.nn.Parameter(raw_cholesky)
        self.colors = torch.nn.Parameter(colors)
        self.width, self.height = width, height

    def cholesky(self) -> Tensor:
        """Normalised Cholesky factors [N, 3]: diag(2 / W, 2 / H) (raw + bound)."""
        px = self.raw_cholesky + self.raw_cholesky.new_tensor(CHOLESKY_BOUND)
        return px * px.new_tensor([2.0 / self.width, 2.0 / self.height, 2.0 / self.height])

    def model(self, layout: str, source: dict, pixel_variance: float) -> ImageGaussians:
        return ImageGaussians(torch.tanh(self.xyz), self.cholesky(), self.colors, self.width, self.height, layout,
                              source, pixel_variance).detached()

    @torch.no_grad()
    def keep_diagonal(self) -> None:
        """Project |diagonal of L_px| >= MIN_DIAGONAL (a zero diagonal is a degenerate covariance)."""
        for k, bound in ((0, CHOLESKY_BOUND[0]), (2, CHOLESKY_BOUND[2])):
            d = self.raw_cholesky[:, k] + bound
            fixed = torch.where(d.abs() < MIN_DIAGONAL, torch.where(d < 0, -MIN_DIAGONAL, MIN_DIAGONAL), d)
            self.raw_cholesky[:, k] = fixed - bound


def initial_params(target: Tensor, cfg: FitConfig, generator: torch.Generator) -> GaussianParams:
    """GaussianParams for target [H, W, C] by ``cfg.init`` (see FitConfig)."""
    H, W, C = target.shape
    N = cfg.gaussians
    u = torch.rand(N, 2, generator=generator) * 2.0 - 1.0
    xyz = torch.atanh(u.clamp(-0.999, 0.999))
    if cfg.init == "gaussianimage":
        raw = torch.rand(N, 3, generator=generator)
        colors = torch.rand(N, C, generator=generator)
        return GaussianParams(xyz, raw, colors, W, H)
    sigma = 0.8 * math.sqrt(H * W / (math.pi * N))  # pixels: the Gaussians roughly tile the image
    raw = torch.tensor([sigma - CHOLESKY_BOUND[0], 0.0, sigma - CHOLESKY_BOUND[2]]).repeat(N, 1)
    px = ((u + 1.0) * 0.5 * torch.tensor([W, H])).long()
    sampled = target[px[:, 1].clamp(0, H - 1), px[:, 0].clamp(0, W - 1)]
    coverage = N * 2.0 * math.pi * sigma * sigma / (H * W)  # expected sum of Gaussian weights at a pixel
    return GaussianParams(xyz, raw, sampled / coverage, W, H)


def image_loss(render: Tensor, target: Tensor, kind: str) -> Tensor:
    if kind == "l2":
        return torch.mean((render - target) ** 2)
    from recon.losses.ssim import can_fuse, fused_ssim
    from recon.losses import ssim

    s = fused_ssim(render, target) if can_fuse(render, target) else ssim(render, target)
    return 0.8 * torch.mean(torch.abs(render - target)) + 0.2 * (1.0 - s)


@contextmanager
def single_threaded_torch():
    """PyTorch on one thread inside the loop: its ops here are small (N x 8 parameters, one image), and its
    OpenMP team waking for each of them cost more than the ops on the shared 2-core machine (cProfile of 200
    kodim01 steps: 10.8 s of autograd-engine time with 2 threads, 1.1 s with 1). The Numba kernels keep theirs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def one_step(params: GaussianParams, optimizer: torch.optim.Optimizer, target: Tensor, cfg: FitConfig) -> Tensor:
    """Render, loss, backward, Adam step, diagonal projection; returns the step's render [H, W, C]."""
    H, W, _ = target.shape
    from rasterizer.image import rasterize_image_gaussians

    render = rasterize_image_gaussians(torch.tanh(params.xyz), params.colors, W, H, cholesky=params.cholesky(),
                                       prefilter_variance=cfg.pixel_variance, backend=cfg.backend).render
    loss = image_loss(render, target, cfg.loss)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    params.keep_diagonal()
    return render.detach()


def fit_image(target: Tensor, cfg: FitConfig, *, layout: str | None = None, source: dict | None = None,
              progress: Callable[[int, float], None] | None = None) -> FitResult:
    """Fit ``target`` [H, W, C] (float, values in [0, 1]) with cfg.gaussians Gaussians for cfg.steps steps.

    ``progress(step, psnr)`` is called every few steps (a progress bar). Returns the model, its final PSNR (of
    the render it saves, clamped to [0, 1]) and the seconds spent."""
    from recon.core.devices import resolve_device

    H, W, C = target.shape
    device = resolve_device(cfg.device)
    target = target.to(torch.float32).contiguous()
    generator = torch.Generator().manual_seed(cfg.seed)
    params = initial_params(target, cfg, generator).to(device)  # drawn on the CPU: the same start on any device
    target = target.to(device)
    groups = [{"params": [params.xyz], "lr": cfg.lr_means}, {"params": [params.raw_cholesky], "lr": cfg.lr_cholesky},
              {"params": [params.colors], "lr": cfg.lr_colors}]
    optimizer = torch.optim.Adam(groups, eps=1e-15)
    milestones = sorted({max(1, int(f * cfg.steps)) for f in cfg.lr_decay_steps})
    schedule = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones, gamma=0.5)
    history: list[tuple[int, float]] = []
    t0 = time.perf_counter()
    with single_threaded_torch():
        for step in range(1, cfg.steps + 1):
            render = one_step(params, optimizer, target, cfg)
            schedule.step()
            if step % 50 == 0 or step == cfg.steps:
                history.append((step, psnr(render, target)))
                if progress is not None:
                    progress(step, history[-1][1])
    seconds = time.perf_counter() - t0
    model = params.model(layout or CHANNEL_LAYOUTS.get(C, f"{C}ch"), source or {}, cfg.pixel_variance)
    with torch.no_grad():
        final = psnr(model.render(backend=cfg.backend), target)
    model = model.to("cpu")
    return FitResult(model, final, seconds, cfg.steps, history)
