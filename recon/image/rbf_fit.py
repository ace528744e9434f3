"""Fit an image with a Gaussian RBF field (:class:`recon.image.rbf_image.ImageRBF`): sizing, initialisation, loop.

Sizing (:func:`rbf_layout`): a parameter budget P (the CLI's default: what ``--gaussians N`` image Gaussians hold,
N (5 + C)) is spent on the decoder (2 K D + K C + C) and the grids: the finest level's cell count across is the
largest whose grids still fit in what is left.

Initialisation: grid values uniform in [-FEATURE_INIT, FEATURE_INIT] (recon/nerf/rbf.py), neuron centres by
k-means over the features of random pixels, precisions from the centres' spacing, read-out weights N(0, 1/K),
biases at the image's mean colour.

Loop: each step takes the next ``batch`` pixels of a random order of all pixels (:func:`pixel_batches`: every
pixel once per pass, a fresh order each pass) and one Adam step on their mean squared error (point samples at pixel
centres); learning rate: one-cycle (warm-up over the first 5 %, cosine decay to
~0). The PSNR reported to ``progress`` is that of the current batch; the final PSNR is measured on the whole
rendered image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from torch import Tensor

from recon.losses.image import quick_psnr
from recon.nerf.rbf import FEATURE_INIT, kmeans, precision_from_spacing

from .model import CHANNEL_LAYOUTS
from .rbf_image import ImageRBF, grid_parameters, level_sizes, render_rbf_image, sample_points

INIT_PIXELS = 8192  # random pixels whose features place the neurons
# q of a neuron at its nearest neighbour's centre at initialisation (recon/nerf/rbf.py): more local than the
# NeRF heads' 1/2. On kodim01 (600 steps, 2 Dec 2026 stop 60) q0 = 8 gave 28.80 dB and q0 = 1/2 28.55 dB;
# 8 is what the layer's per-feature rule gave the image's 16 features before stop 60.
NEIGHBOUR_Q = 8.0
PROGRESS_EVERY = 25


@dataclass
class RBFFitConfig:
    """How to fit one image with a Gaussian RBF field."""

    parameters: int = 200_000
    """parameter budget (grids + decoder); the CLI's default is that of 25,000 image Gaussians."""
    levels: int = 8
    """grid levels (each half the resolution of the next, at least 2 cells a side)."""
    features: int = 2
    """features per level. On kodim01 at 200,000 parameters (600 steps, one thread, 6 Dec 2026; docs/image-gaussians.md)
    8 levels of 2 features (finest 270 cells across) reached 30.86 dB against 28.65 for the earlier 4 levels of 4
    (191 cells): a finer grid with fewer features wins, and the coarse levels cost next to nothing."""
    neurons: int = 64
    """Gaussian RBF neurons. (32 neurons were screened on 7 Dec 2026, stop 65: faster steps and better short fits on
    kodim05 (1,000 steps: 31.86 dB in 23.2 CPU s against 64 neurons' 31.67 in 34.8 s), but the full fit lost: 5,000
    steps of 32 neurons 34.52 dB against 35.49 for 4,000 of 64; docs/image-gaussians.md.)"""
    steps: int = 4_000
    """(2,000 until 7 Dec 2026: a 2,000-step fit took ~0.35-0.39x the CPU time of 25,000 image Gaussians' 3,000 steps
    on kodim01 / kodim02, so twice the steps still fit in their time; docs/image-gaussians.md.)"""
    batch: int = 1 << 14
    """random pixels per step. (On kodim05, 8,192 pixels over 6,500 steps: 35.12 dB against this default's 35.49,
    7 Dec 2026 stop 65.)"""
    lr_grid: float = 5e-3
    """(1e-2 until 6 Dec 2026: on kodim01 at 600 steps 5e-3 gave 31.11 dB, 1e-2 30.86, 3e-2 and 1e-1 less; on kodim05,
    full length, 1e-2 35.16 dB against 35.49.)"""
    lr_decoder: float = 1e-2
    seed: int = 0
    backend: str = "auto"
    """the RBF layer's implementation (recon/nerf/rbf.py: auto, matmul, numba, reference)."""


@dataclass
class RBFFitResult:
    model: ImageRBF
    psnr: float
    history: list[tuple[int, float]]


def rbf_layout(cfg: RBFFitConfig, width: int, height: int, channels: int) -> list[tuple[int, int]]:
    """Level sizes [(ry, rx)] spending the budget (module docstring); ValueError when even the smallest grids do
    not fit."""
    d = cfg.levels * cfg.features
    left = cfg.parameters - (2 * cfg.neurons * d + cfg.neurons * channels + channels)
    finest = 2
    if grid_parameters(level_sizes(width, height, finest, cfg.levels), cfg.features) > left:
        raise ValueError(f"a parameter budget of {cfg.parameters:,} leaves {max(left, 0):,} for the grids after the "
                         f"decoder's; raise it or use fewer neurons / levels / features")
    while grid_parameters(level_sizes(width, height, finest + 1, cfg.levels), cfg.features) <= left:
        finest += 1
    return level_sizes(width, height, finest, cfg.levels)


def init_model(target: Tensor, cfg: RBFFitConfig, layout: str, source: dict, generator: torch.Generator) -> ImageRBF:
    """A fresh field for ``target`` [H, W, C] (module docstring)."""
    H, W, C = target.shape
    sizes = rbf_layout(cfg, W, H, C)
    grids = tuple((torch.rand(ry + 1, rx + 1, cfg.features, generator=generator) * 2 - 1) * FEATURE_INIT
                  for ry, rx in sizes)
    probe = ImageRBF(grids, torch.zeros(1, cfg.levels * cfg.features), torch.zeros(1, cfg.levels * cfg.features),
                     torch.zeros(C, 1), torch.zeros(C), W, H, layout, source)
    u = sample_points(W, H)[torch.randint(W * H, (INIT_PIXELS,), generator=generator)]
    centres = kmeans(probe.encode(u), cfg.neurons, generator)
    weight = torch.randn(C, cfg.neurons, generator=generator) / math.sqrt(cfg.neurons)
    return ImageRBF(grids, centres, precision_from_spacing(centres, NEIGHBOUR_Q), weight,
                    target.reshape(-1, C).mean(0).clone(),
                    W, H, layout, source)


def warmup_fraction(steps: int) -> float:
    """The one-cycle schedule's warm-up share: 5 %, but at least two steps from 4 steps on (torch's OneCycleLR
    divides by the warm-up's length in steps minus one, so a warm-up of exactly one step, 20 steps at 5 %, raised
    ZeroDivisionError)."""
    return max(0.05, 2.0 / steps) if steps >= 4 else 0.05


def pixel_batches(count: int, batch: int, generator: torch.Generator) -> Iterator[Tensor]:
    """Endless [batch] int64 indices into ``count`` pixels: passes over all pixels, each a fresh random permutation;
    a batch may straddle two passes (the pass's remainder starts the next batch), so the first ``k count`` indices
    drawn hold every pixel exactly k times. Lower-variance than drawing with replacement (which leaves ~1/e of the
    pixels out of any ``count`` draws): on kodim02, 1,000 steps of 16,384 pixels, 36.95 -> 37.31 dB (one thread,
    7 Dec 2026, docs/image-gaussians.md)."""
    rest = torch.empty(0, dtype=torch.long)
    while True:
        order = torch.cat([rest, torch.randperm(count, generator=generator)])
        whole = order.numel() // batch * batch
        for lo in range(0, whole, batch):
            yield order[lo:lo + batch]
        rest = order[whole:]


def fit_rbf_image(target: Tensor, cfg: RBFFitConfig, *, layout: str | None = None, source: dict | None = None,
                  progress: Callable[[int, float], None] | None = None) -> RBFFitResult:
    """Fit ``target`` [H, W, C] in [0, 1] (module docstring). ``progress(step, psnr)`` every few steps."""
    H, W, C = target.shape
    layout = layout or CHANNEL_LAYOUTS[C]
    gen = torch.Generator().manual_seed(cfg.seed)
    model = init_model(target, cfg, layout, dict(source or {}), gen)
    params = [t.requires_grad_() for t in model.tensors()]
    L = len(model.grids)
    opt = torch.optim.Adam([{"params": params[:L], "lr": cfg.lr_grid}, {"params": params[L:], "lr": cfg.lr_decoder}],
                           betas=(0.9, 0.99), eps=1e-15)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[cfg.lr_grid, cfg.lr_decoder], total_steps=cfg.steps,
                                                pct_start=warmup_fraction(cfg.steps))
    pixels = target.reshape(-1, C)
    u_all = sample_points(W, H)
    history = []
    batches = pixel_batches(W * H, cfg.batch, gen)
    for step in range(1, cfg.steps + 1):
        idx = next(batches)
        pred = model.evaluate(u_all[idx], cfg.backend)
        loss = torch.mean((pred - pixels[idx]) ** 2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % PROGRESS_EVERY == 0 or step == cfg.steps:
            value = float(quick_psnr(pred.detach().clamp(0, 1), pixels[idx]))
            history.append((step, value))
            if progress is not None:
                progress(step, value)
    final = model.detached()
    render = render_rbf_image(final, backend=cfg.backend)
    mse = float(torch.mean((render - target) ** 2))
    return RBFFitResult(final, 10.0 * math.log10(1.0 / max(mse, 1e-20)), history)
