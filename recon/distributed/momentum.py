"""Momentum-GS style consistency across blocks (``--consistency momentum``).

- A shared, decoupled appearance module (:class:`Appearance`: a per-image embedding and a small MLP giving
  a per-image colour transform ``render (1 + a) + b``, VastGaussian / Momentum-GS's decoupled appearance) is
  applied to the render in the training loss only; test views are rendered without it.
- All workers train at once, in lock-step rounds (round r: worker w trains the r x world + w-th unfinished
  block; a worker without a block that round still joins every step). Each step makes ONE flattened
  all_reduce of [appearance gradients, active flag, every rank's running PSNR]; the gradient sum is divided
  by the number of active workers, so every replica takes the same Adam step and stays identical.
- A momentum teacher (EMA of the appearance module, m = ``momentum``, 0.9) gives the consistency loss
  ``consistency_weight x mean |A_student(render) - A_teacher(render)|``.
- Reconstruction-guided block weighting: the reconstruction loss of a block is multiplied by
  ``w = 2 - exp(-dPSNR^2 / (2 x 10^2))``, dPSNR = (best running training PSNR among the active blocks) -
  (this block's), so weaker blocks weigh more (Momentum-GS's rule without its SSIM term).

With ``--prior-steps`` the prior (recon/distributed/prior.py) is trained through the appearance module as
well, by worker 0 alone (:class:`SharedAppearance` with ``collective=False``: no exchange), and the rounds
start from its module (``OUT/prior/appearance.pt``): a prior trained without it bakes the training images'
exposures into the Gaussians, which a block's few refinement steps cannot undo.

Resuming works per round: a rerun skips finished blocks; an unfinished block starts over, with the
appearance module of the last finished round (``OUT/appearance.pt``), else the prior's.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import torch
from torch import Tensor, nn

from recon.losses.image import masked_render, photometric_loss, quick_psnrs
from recon.training.trainer import StepResult, Trainer, TrainingHook

APPEARANCE_FILE = "appearance.pt"


class Appearance(nn.Module):
    """Per-image colour transform: ``embedding[i]`` [dim] -> MLP -> (a [3], b [3]); image -> image (1 + a) + b.
    The last layer starts at zero, so the transform starts as the identity."""

    def __init__(self, num_images: int, dim: int = 16, hidden: int = 32, generator: torch.Generator | None = None):
        super().__init__()
        self.embedding = nn.Parameter(torch.randn(num_images, dim, generator=generator) * 0.1)
        self.hidden = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, 6)
        with torch.no_grad():
            bound = 1 / math.sqrt(dim)
            self.hidden.weight.copy_(torch.rand(hidden, dim, generator=generator) * 2 * bound - bound)
            self.hidden.bias.zero_()
            self.out.weight.zero_()
            self.out.bias.zero_()

    def transform(self, index: int) -> tuple[Tensor, Tensor]:
        """(a [3], b [3]) of training image ``index``."""
        ab = self.out(torch.relu(self.hidden(self.embedding[index])))
        return ab[:3], ab[3:]

    def forward(self, image: Tensor, index: int) -> Tensor:
        """``image`` [H, W, 3] as training image ``index`` would show it."""
        a, b = self.transform(index)
        return image * (1 + a) + b


def flat_grads(module: nn.Module) -> Tensor:
    """[P] all parameter gradients in one vector (zeros where a parameter has none)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in module.parameters()])


def set_flat_grads(module: nn.Module, flat: Tensor) -> None:
    i = 0
    for p in module.parameters():
        n = p.numel()
        p.grad = flat[i:i + n].view_as(p).clone()
        i += n


def block_weight(psnr: float, best: float) -> float:
    """Momentum-GS's reconstruction-guided weight (PSNR term): 2 - exp(-(best - psnr)^2 / 200)."""
    d = best - psnr
    return 2.0 - math.exp(-(d * d) / (2 * 10.0 ** 2))


class SharedAppearance:
    """The shared module, its Adam optimiser and EMA teacher on one rank, and the per-step exchange."""

    def __init__(self, num_images: int, rank: int, world: int, device: torch.device, seed: int, lr: float = 1e-3,
                 momentum: float = 0.9, weight: float = 1.0, dim: int = 16, collective: bool = True):
        gen = torch.Generator().manual_seed(seed)
        self.student = Appearance(num_images, dim, generator=gen).to(device)
        self.teacher = copy.deepcopy(self.student).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.student.parameters(), lr=lr)
        self.rank, self.world, self.device = rank, world, device
        self.momentum, self.weight = momentum, weight
        self.collective = collective  # False: one replica (the prior's), no all_reduce
        self.running_psnr = 0.0  # this rank's block (EMA of the training PSNR)
        self.best_psnr = 0.0  # best running PSNR of the active blocks, from the last exchange

    def exchange(self, active: bool, psnr: float | None) -> int:
        """One flattened all_reduce: this rank's gradients (zeros when idle), its active flag and running PSNR;
        then the averaged Adam step and the teacher update on every rank. Returns the active count. Without
        ``collective`` the same step from this rank's values alone."""
        import torch.distributed as dist

        grads = flat_grads(self.student) if active else torch.zeros(
            sum(p.numel() for p in self.student.parameters()), device=self.device)
        table = torch.zeros(self.world, device=self.device)
        if active and psnr is not None:
            self.running_psnr = psnr if self.running_psnr == 0 else 0.9 * self.running_psnr + 0.1 * psnr
            table[self.rank] = self.running_psnr
        flat = torch.cat([grads, torch.tensor([1.0 if active else 0.0], device=self.device), table])
        if self.collective:
            dist.all_reduce(flat)
        count = int(round(float(flat[grads.numel()])))
        self.best_psnr = float(flat[grads.numel() + 1:].max())
        if count > 0:
            set_flat_grads(self.student, flat[:grads.numel()] / count)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            for t, s in zip(self.teacher.parameters(), self.student.parameters()):
                t.mul_(self.momentum).add_(s, alpha=1 - self.momentum)
        return count

    def state_dict(self) -> dict:
        return {"student": self.student.state_dict(), "teacher": self.teacher.state_dict(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.student.load_state_dict(state["student"])
        self.teacher.load_state_dict(state["teacher"])
        self.optimizer.load_state_dict(state["optimizer"])

    def digest(self) -> str:
        """sha256 of the student's parameters (replicas must agree)."""
        import hashlib

        h = hashlib.sha256()
        for p in self.student.parameters():
            h.update(p.detach().cpu().numpy().tobytes())
        return h.hexdigest()

    def save(self, path: Path) -> None:
        from recon.core.atomic import atomic_open

        with atomic_open(path, force=True) as f:
            torch.save(self.state_dict(), f)

    def load(self, path: Path) -> None:
        self.load_state_dict(torch.load(path, map_location=self.device, weights_only=True))


class SaveAppearance(TrainingHook):
    """The prior's appearance module to ``path`` with the trainer's checkpoints (every ``cfg.save_every`` steps)
    and when training ends, so that a resumed prior resumes it too."""

    def __init__(self, shared: SharedAppearance, path: Path):
        self.shared, self.path = shared, Path(path)

    def on_train_start(self, trainer) -> None:
        if trainer.step > 0 and self.path.is_file():
            self.shared.load(self.path)

    def on_step(self, trainer, result) -> None:
        every = trainer.cfg.save_every
        if every and trainer.step % every == 0:
            self.shared.save(self.path)

    def on_train_end(self, trainer) -> None:
        self.shared.save(self.path)


class MomentumTrainer(Trainer):
    """A block's trainer in momentum mode: the loss goes through the shared appearance module (global image
    indices ``image_index[name]``), weighted by the block weight, plus the consistency loss; after backward
    the appearance gradients are exchanged (:meth:`SharedAppearance.exchange`)."""

    shared: SharedAppearance | None = None
    image_index: dict | None = None

    def train_step(self, step: int) -> StepResult:
        """One step on the views of :meth:`Trainer.render_views`: per view its render seen through the
        student appearance of its image, the photometric loss times the block weight, and the consistency
        loss (student against teacher on the detached render), averaged over the views; plus the
        strategy's regulariser."""
        from recon.training.trainer import check_finite_loss

        picks, gts, render, meta = self.render_views(step)
        shared = self.shared
        w = block_weight(shared.running_psnr, shared.best_psnr) if shared.best_psnr > 0 else 1.0
        photo = consistency = 0.0
        psnrs, masked_psnrs = [], []
        for k, ((i, _), gt) in enumerate(zip(picks, gts)):
            index = self.image_index[self.scene.frames_train[i].name]
            seen, mask = shared.student(render[k], index), self.images.mask(i)
            pred = masked_render(seen, gt, mask)  # loss mask: no loss outside it
            photo = photo + photometric_loss(pred, gt, self.cfg.ssim_lambda)
            with torch.no_grad():
                target = shared.teacher(render[k].detach(), index)
            consistency = consistency + (shared.student(render[k].detach(), index) - target).abs().mean()
            full, masked = quick_psnrs(seen.detach(), gt, mask)  # full image, nothing filled in; one sync
            psnrs.append(full)
            if masked is not None:
                masked_psnrs.append(masked)
        n = len(picks)
        loss = w * photo / n + self.strategy.regularization(self.model) + shared.weight * consistency / n
        value = self.optimise(loss, meta, step)
        psnr = sum(psnrs) / n
        shared.exchange(True, psnr)  # before the check: the other workers must not wait for a failed one
        check_finite_loss(value, step)
        return StepResult(value, psnr, sum(masked_psnrs) / len(masked_psnrs) if masked_psnrs else None)
