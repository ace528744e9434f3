"""What a training run went through, step by step: the data behind ``loss.png`` and ``splatforge compare``.

A :class:`RunHistory` is plain Python lists (no tensors, no syncs): per step the loss, the Gaussian count
after the step, the seconds the step took, the full-image PSNR of the step's plain render (never one with
loss-masked pixels filled in from the target) and, where the views have loss masks, the PSNR over the kept
pixels (``masked_psnr``); per evaluation on the test views its step, PSNR and SSIM.
Entry ``i`` of the per-step lists is step ``i + 1`` (steps count from 1, as ``Trainer.step`` after a
step). It travels in checkpoints as a plain dict (:meth:`to_dict`), so a resumed run's curves are whole,
and is written at the end of a run as ``OUT/history.json`` (:mod:`recon.outputs.files`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from recon.core.errors import DamagedFileError

SECONDS_DIGITS = 6  # microseconds: finer digits of a step's wall time are noise
PSNR_DIGITS = 4
PSNR_CAP = 99.0  # a step's PSNR is stored at most this (a perfect render's inf is not JSON)
OPTIONAL_PER_STEP = ("psnr", "masked_psnr")  # absent from histories written before they existed


def stored_psnr(value: float | None) -> float | None:
    """A step's PSNR as stored: rounded, capped at :data:`PSNR_CAP`; None for None or NaN."""
    if value is None or value != value:
        return None
    return round(min(float(value), PSNR_CAP), PSNR_DIGITS)


@dataclass
class RunHistory:
    """Per-step and per-evaluation records of a run (all lists of plain numbers; None = not recorded)."""

    loss: list[float] = field(default_factory=list)
    """training loss of each step"""
    num_gaussians: list[int | None] = field(default_factory=list)
    """Gaussian count after each step (None: not recorded, a run from before histories)"""
    step_seconds: list[float | None] = field(default_factory=list)
    """wall seconds of each optimisation step (hooks, checkpoints and evaluations not included)"""
    psnr: list[float | None] = field(default_factory=list)
    """full-image PSNR (dB) of each step's training views, plain render against target (None: not recorded)"""
    masked_psnr: list[float | None] = field(default_factory=list)
    """PSNR over the pixels the views' loss masks keep (None: no loss mask, or not recorded)"""
    eval_step: list[int] = field(default_factory=list)
    """step of each evaluation on the test views"""
    eval_psnr: list[float | None] = field(default_factory=list)
    eval_ssim: list[float | None] = field(default_factory=list)

    @property
    def num_steps(self) -> int:
        return len(self.loss)

    @property
    def steps(self) -> list[int]:
        """1-based step of each per-step entry."""
        return list(range(1, self.num_steps + 1))

    def record_step(self, loss: float, num_gaussians: int, seconds: float, psnr: float | None = None,
                    masked_psnr: float | None = None) -> None:
        self.loss.append(float(loss))
        self.num_gaussians.append(int(num_gaussians))
        self.step_seconds.append(round(float(seconds), SECONDS_DIGITS))
        self.psnr.append(stored_psnr(psnr))
        self.masked_psnr.append(stored_psnr(masked_psnr))

    def record_eval(self, step: int, psnr: float | None, ssim: float | None) -> None:
        """Add an evaluation; one at the same step as the last replaces it (a finished run finished again)."""
        if self.eval_step and self.eval_step[-1] == step:
            self.eval_step.pop(), self.eval_psnr.pop(), self.eval_ssim.pop()
        self.eval_step.append(int(step))
        self.eval_psnr.append(None if psnr is None else float(psnr))
        self.eval_ssim.append(None if ssim is None else float(ssim))

    def to_dict(self) -> dict:
        """Plain dict of lists (JSON and ``torch.load(weights_only=True)`` safe)."""
        return {k: list(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict, source: str = "history") -> "RunHistory":
        """Inverse of :meth:`to_dict`; ValueError naming ``source`` for missing keys or uneven lists."""
        names = [f.name for f in fields(cls)]
        required = [k for k in names if k not in OPTIONAL_PER_STEP]
        if not isinstance(data, dict) or any(not isinstance(data.get(k), list) for k in required) \
                or any(k in data and not isinstance(data[k], list) for k in OPTIONAL_PER_STEP):
            raise DamagedFileError(f"{source}: expected lists {', '.join(names)}")
        unknown = sorted(str(k) for k in data if k not in names)
        if unknown:  # a damaged key name would otherwise silently drop an optional list (psnr -> [None] * n)
            raise DamagedFileError(f"{source}: unknown key(s) {', '.join(unknown)[:80]} (expected {', '.join(names)})")
        n = len(data["loss"])
        history = cls(**{k: list(data[k]) if k in data else [None] * n for k in names})
        for name in names:  # each list holds what it records, so plots and `compare` never meet a string
            ints, optional = name in ("num_gaussians", "eval_step"), name not in ("loss", "eval_step")
            for i, value in enumerate(getattr(history, name)):
                if value is None and optional:
                    continue
                if isinstance(value, bool) or not isinstance(value, int if ints else (int, float)):
                    raise DamagedFileError(f"{source}: {name}[{i}] is {value!r:.40}, not "
                                           f"{'an integer' if ints else 'a number'}{' or null' if optional else ''}")
        per_step = {len(history.loss), len(history.num_gaussians), len(history.step_seconds), len(history.psnr),
                    len(history.masked_psnr)}
        per_eval = {len(history.eval_step), len(history.eval_psnr), len(history.eval_ssim)}
        if len(per_step) != 1 or len(per_eval) != 1:
            raise DamagedFileError(f"{source}: per-step or per-evaluation lists have different lengths")
        return history

    @classmethod
    def from_checkpoint(cls, payload: dict, source: str = "checkpoint history") -> "RunHistory":
        """The record a checkpoint holds: its ``history``, or the ``losses`` of checkpoints written before
        histories existed."""
        if "history" in payload:
            return cls.from_dict(payload["history"], source)
        return cls.from_losses(payload.get("losses", []))

    @classmethod
    def from_losses(cls, losses: list[float]) -> "RunHistory":
        """The history of a checkpoint from before histories: its losses, counts and times unknown."""
        n = len(losses)
        return cls(loss=[float(x) for x in losses], num_gaussians=[None] * n, step_seconds=[None] * n,
                   psnr=[None] * n, masked_psnr=[None] * n)

