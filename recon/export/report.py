"""The short report printed after an export, and the optional PSNR-before/after hook.

:func:`psnr_before_after` calls ``recon.evaluation.evaluate_splats`` when that module exists
(another part of the project). Its expected contract::

    evaluate_splats(splats: SplatData, run_dir: Path) -> float | dict | object
        # test-view PSNR of ``splats`` on the dataset named by run_dir/config.yaml;
        # a dict with "psnr" or an object with a ``psnr`` attribute is accepted too

If ``evaluate_splats`` is absent but ``evaluate_splat_file(path, scene)`` exists (the module as
written now), the scene is built from the run's config.yaml with ``recon.trainer.load_training_scene``.
Anything missing (module, function, config, dataset) makes the hook return None, and the report
then says "n/a".
"""

from __future__ import annotations

import importlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from .splat_format import STORED_SH_DEGREE as SPLAT_SH_DEGREE
from .splats import SplatData

FORMAT_SH_DEGREE = {"splat": SPLAT_SH_DEGREE}
"""Formats that store fewer SH degrees than the model has: format key -> the most they store."""


@dataclass
class ExportReport:
    """What an export produced; ``psnr_before``/``psnr_after`` are None when not evaluated.

    ``sh_degree`` is the degree of the model handed to the writer; :attr:`file_sh_degree` is what
    the file keeps of it (0 for ``.splat``, which stores colour only).
    """

    path: Path
    format: str
    splats: int
    bytes: int
    sh_degree: int
    input_splats: int
    dropped_nonfinite: int
    dropped_budget: int = 0
    importance: str = "none"
    target: str | None = None
    psnr_before: float | None = None
    psnr_after: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def file_sh_degree(self) -> int:
        """SH degree the written file holds: the model's, capped by what the format stores."""
        return min(self.sh_degree, FORMAT_SH_DEGREE.get(self.format, self.sh_degree))

    def sh_degree_text(self) -> str:
        """"3", or "0 (colour only: .splat stores no SH; the model had degree 3)"."""
        if self.file_sh_degree == self.sh_degree:
            return str(self.sh_degree)
        return (f"{self.file_sh_degree} (colour only: .{self.format} stores no SH; the model had "
                f"degree {self.sh_degree})")

    @property
    def bytes_per_splat(self) -> float:
        return self.bytes / self.splats if self.splats else float("nan")

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) pairs, in display order."""
        def psnr(v):
            return "n/a" if v is None else f"{v:.2f} dB"

        rows = [
            ("output", str(self.path)),
            ("format", self.format + (f" (target {self.target})" if self.target else "")),
            ("splats", f"{self.splats:,} of {self.input_splats:,}"),
            ("SH degree", self.sh_degree_text()),
            ("bytes", f"{self.bytes:,}"),
            ("bytes / splat", f"{self.bytes_per_splat:.1f}"),
            ("dropped NaN/Inf", f"{self.dropped_nonfinite:,}"),
            ("dropped by budget", f"{self.dropped_budget:,}"
             + (f" (importance: {self.importance})" if self.dropped_budget else "")),
            ("test PSNR before", psnr(self.psnr_before)),
            ("test PSNR after", psnr(self.psnr_after)),
        ]
        rows += [("note", n) for n in self.notes]
        return rows

    def as_dict(self) -> dict:
        return {"path": str(self.path), "format": self.format, "splats": self.splats,
                "bytes": self.bytes, "bytes_per_splat": self.bytes_per_splat,
                "sh_degree": self.file_sh_degree, "model_sh_degree": self.sh_degree,
                "input_splats": self.input_splats,
                "dropped_nonfinite": self.dropped_nonfinite, "dropped_budget": self.dropped_budget,
                "importance": self.importance, "target": self.target,
                "psnr_before": self.psnr_before, "psnr_after": self.psnr_after,
                "notes": list(self.notes)}


def format_report(report: ExportReport) -> str:
    """Plain-text table (two columns)."""
    rows = report.rows()
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def print_report(report: ExportReport, console=None) -> None:
    """Print the report as a rich table (plain text if rich is unavailable)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency
        print(format_report(report))
        return
    table = Table(title="splatforge export", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    for k, v in report.rows():
        table.add_row(k, v)
    (console or Console()).print(table)


def _as_psnr(value) -> float | None:
    if isinstance(value, dict):
        value = value.get("psnr")
    elif value is not None and not isinstance(value, (int, float)):
        value = getattr(value, "psnr", None)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def psnr_before_after(run_dir: str | os.PathLike, splats: SplatData,
                      original: SplatData | None = None) -> tuple[float, float] | None:
    """(test PSNR of the run's own model, test PSNR of ``splats``) or None.

    ``original`` defaults to ``run_dir/splats.ply``. Returns None when ``recon.evaluation`` (or its
    ``evaluate_splats``) does not exist yet, when the run has no config.yaml, or when evaluation
    fails (e.g. the dataset is not available here).
    """
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        return None
    try:
        evaluation = importlib.import_module("recon.evaluation")
    except ModuleNotFoundError as err:
        if err.name in ("recon.evaluation", "recon"):
            return None
        raise
    evaluate = getattr(evaluation, "evaluate_splats", None)
    if evaluate is None and hasattr(evaluation, "evaluate_splat_file"):
        evaluate = _via_splat_file(evaluation.evaluate_splat_file)
    if evaluate is None:
        return None
    try:
        if original is None:
            from . import read_splats

            original = read_splats(run_dir / "splats.ply")
        before = _as_psnr(evaluate(original, run_dir))
        after = _as_psnr(evaluate(splats, run_dir))
    except (FileNotFoundError, OSError, ValueError, KeyError, ImportError, TypeError):
        return None
    if before is None or after is None:
        return None
    return before, after


def _via_splat_file(evaluate_splat_file):
    """Adapter for ``recon.evaluation.evaluate_splat_file(path, scene) -> {"psnr": ...}``: the
    scene and background come from the run's config.yaml through the trainer's ``load_training_scene``
    and ``background_color`` (the dataset must be available), the splats go through a temporary PLY.
    The scene is loaded once."""
    scenes: dict = {}

    def evaluate(splats: SplatData, run_dir: Path):
        import tempfile

        from . import write_splats

        if run_dir not in scenes:
            from recon.run_files import config_from_dict, read_config_dict
            from recon.trainer import TrainConfig, load_training_scene

            from recon.trainer import background_color

            cfg = config_from_dict(TrainConfig, read_config_dict(run_dir / "config.yaml"))
            scene = load_training_scene(cfg)
            scenes[run_dir] = (scene, background_color(cfg, scene).tolist())  # the run's own evaluation background
        scene, background = scenes[run_dir]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "eval.ply"
            write_splats(path, splats)
            return evaluate_splat_file(path, scene, background=background)

    return evaluate
