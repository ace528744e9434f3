"""`splatforge compare RUN_A RUN_B ...`: training runs side by side.

Prints a table of each run's metrics (test PSNR / SSIM / LPIPS, Gaussians, steps, training seconds, from
its ``metrics.json``; the best value of a column in bold), a table of the ``config.yaml`` fields that differ
between the runs, and with ``--out compare.png`` writes their curves overlaid (:func:`recon.outputs.plots.
plot_compare`, from each run's ``history.json``). Runs from before ``history.json`` are in the tables and
left out of the curves; a run still training (no ``metrics.json`` yet) shows its metrics as "-".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable

import tyro

from recon.outputs import files as rf
from recon.commands.train import USER_ERRORS, fail
from recon.core.errors import UsageError
from recon.outputs.history import RunHistory

MISSING = "-"
IGNORED_CONFIG_KEYS = ("out",)  # differs between any two runs and says nothing about them


@dataclass
class RunRecord:
    """What ``compare`` reads of one run folder."""

    name: str
    """the folder as given on the command line"""
    config: dict
    metrics: dict | None
    """metrics.json; None while the run is still training"""
    history: RunHistory | None
    """history.json; None for runs from before histories (or still training)"""


def read_run(path: Path) -> RunRecord:
    """The run in folder ``path``; ValueError / FileNotFoundError naming the folder or file when it is not
    a run or a file of it is damaged."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such folder; give run folders written by `splatforge train`")
    config_file = path / rf.CONFIG_FILE
    if not config_file.is_file():
        raise UsageError(f"{path}: not a training run (no {rf.CONFIG_FILE}); give run folders written by "
                         f"`splatforge train`")
    metrics_file = path / rf.METRICS_FILE
    metrics = None
    if metrics_file.exists() or metrics_file.is_symlink():  # a folder or FIFO there: refused by read_metrics
        metrics = rf.read_metrics(metrics_file, f"rerun `splatforge eval --run {path}`")
    # sections (adc, mcmc, lr) flattened to dotted keys: the table names the field that differs
    return RunRecord(str(path), rf.flatten_config(rf.read_config_dict(config_file)), metrics, rf.read_history(path))


# ------------------------------------------------------------------------------------------ metrics


def _test(key: str) -> Callable[[dict], float | None]:
    return lambda m: (m.get("test") or {}).get(key)


# (column, value from metrics.json, format, which is best: max / min / None)
METRIC_COLUMNS: list[tuple[str, Callable[[dict], object], str, Callable | None]] = [
    ("test PSNR", _test("psnr"), "{:.2f}", max),
    ("SSIM", _test("ssim"), "{:.4f}", max),
    ("LPIPS", _test("lpips"), "{:.4f}", min),
    ("Gaussians", lambda m: m.get("num_gaussians"), "{:,}", None),
    ("steps", lambda m: m.get("steps"), "{:,}", None),
    ("train s", lambda m: m.get("train_seconds"), "{:.1f}", None),
]


def metric_values(runs: list[RunRecord]) -> list[list[object]]:
    """[run][column] raw values (None where a run lacks one)."""
    return [[None if r.metrics is None else get(r.metrics) for _, get, _, _ in METRIC_COLUMNS] for r in runs]


def metrics_table(runs: list[RunRecord]):
    """rich Table: one row per run, the best value of PSNR / SSIM / LPIPS in bold."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title="metrics", title_justify="left")
    table.add_column("run")
    for name, *_ in METRIC_COLUMNS:
        table.add_column(name, justify="right")
    values = metric_values(runs)
    best = []
    for j, (_, _, _, pick) in enumerate(METRIC_COLUMNS):
        column = [row[j] for row in values if row[j] is not None]
        best.append(pick(column) if pick is not None and len(column) > 1 else None)
    for run, row in zip(runs, values):
        cells = []
        for j, (_, _, fmt, _) in enumerate(METRIC_COLUMNS):
            text = MISSING if row[j] is None else fmt.format(row[j])
            cells.append(Text(text, style="bold" if best[j] is not None and row[j] == best[j] else ""))
        table.add_row(Text(run.name), *cells)
    return table


# ------------------------------------------------------------------------------------------ config


def config_differences(runs: list[RunRecord]) -> list[tuple[str, list[object]]]:
    """(field, value per run) for the config.yaml fields whose values differ (a field a run's file lacks,
    an older run's, counts as a value of its own); ``out`` left out."""
    keys: list[str] = []
    for run in runs:
        keys += [k for k in run.config if k not in keys and k not in IGNORED_CONFIG_KEYS]
    absent = object()
    diffs = []
    for key in keys:
        values = [run.config.get(key, absent) for run in runs]
        if any(v != values[0] for v in values[1:]):
            diffs.append((key, [MISSING if v is absent else v for v in values]))
    return diffs


def config_table(runs: list[RunRecord]):
    """rich Table of :func:`config_differences` (None when the runs agree on every field)."""
    from rich.table import Table
    from rich.text import Text

    diffs = config_differences(runs)
    if not diffs:
        return None
    table = Table(title="config differences", title_justify="left")
    table.add_column("field")
    for run in runs:
        table.add_column(run.name)
    for key, values in diffs:
        table.add_row(Text(key), *[Text(str(v)) for v in values])
    return table


# ------------------------------------------------------------------------------------------ command


def write_curves(runs: list[RunRecord], out: Path) -> list[str]:
    """Overlaid curves of the runs with a history.json at ``out``; returns the names of those left out."""
    from recon.outputs.plots import plot_compare, save_figure

    with_history = {r.name: r.history for r in runs if r.history is not None}
    if not with_history:
        raise UsageError(f"--out {out}: none of the runs has a {rf.HISTORY_FILE} (runs trained before "
                         f"histories, or still training): there are no curves to draw")
    save_figure(plot_compare(with_history), out)
    return [r.name for r in runs if r.history is None]


def compare(runs: Annotated[tuple[Path, ...], tyro.conf.Positional], out: Path | None = None) -> None:
    """Compare training runs: a table of their test metrics, the config fields that differ, and with
    --out FILE.png their loss / test PSNR / Gaussian count / time per step curves overlaid.

    Args:
        runs: run folders written by `splatforge train` (two or more, or one to see its summary).
        out: write the overlaid curves here (.png, .svg or .pdf); runs without a history.json (trained
            before it existed) are left out of the curves.
    """
    from rich.console import Console

    try:
        if not runs:
            raise UsageError("give the run folders to compare, e.g. `splatforge compare runs/a runs/b`")
        if out is not None:
            from recon.outputs.plots import FIGURE_FORMATS

            if Path(out).suffix.lower().lstrip(".") not in FIGURE_FORMATS:
                raise UsageError(f"--out {out}: give a .png, .svg or .pdf file name")
        records = [read_run(Path(r)) for r in runs]
        console = Console()
        console.print(metrics_table(records))
        table = config_table(records)
        console.print(table if table is not None else "config: the runs agree on every field (except out)")
        if out is not None:
            left_out = write_curves(records, Path(out))
            for name in left_out:
                console.print(f"{name}: no {rf.HISTORY_FILE} (trained before histories, or still training): "
                              f"not in the curves", markup=False)
            console.print(f"curves written to {out}", markup=False)
    except USER_ERRORS as err:
        fail("compare", err)
