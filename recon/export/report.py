"""The short report printed after an export.

The test PSNR before and after an export of a run is measured by :func:`recon.run.export_psnr.export_psnr`
(beside the run code: this package never imports the trainer, evaluation or run files); the report
says "n/a" when it was not measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .splat_format import STORED_SH_DEGREE as SPLAT_SH_DEGREE

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
