"""The summary of a mesh2splat batch: ``OUT/report/`` with summary.json, histograms.png and contact_sheet.png.

- ``summary.json``: objects done / failed, the failures' reasons, medians of Gaussians, train and test PSNR,
  Chamfer and seconds per object (the seconds a worker spent on it);
- ``histograms.png``: histograms of Gaussians, test PSNR, seconds and Chamfer over the done objects;
- ``contact_sheet.png``: renders of a random sample of done objects (``sample`` of them, drawn with
  ``seed``), each from one fixed camera looking at the unit sphere, titled with its source and test PSNR.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import torch

from recon.core.atomic import atomic_write_bytes
from recon.data.mesh_render import CAMERA_RADIUS, FOV_X
from recon.data.procedural import look_at_world_to_cam
from recon.data.splat_index import latest_rows, read_index
from recon.export import read_splats
from recon.models.base import model_class

REPORT_DIR = "report"
FIELDS = ("gaussians", "train_psnr", "test_psnr", "chamfer_pct", "seconds")


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.median(vals)) if vals else None


def summarize(rows: list[dict]) -> dict:
    """summary.json's content from the index rows (last row per source)."""
    done = [r for r in rows if r.get("status") == "done"]
    failed = [r for r in rows if r.get("status") != "done"]
    return {"objects": len(rows), "done": len(done), "failed": len(failed),
            "failures": {r["source"]: r.get("reason") for r in failed},
            "median": {f: _median([r.get(f) for r in done]) for f in FIELDS}}


def new_figure(rows: int, cols: int, size: tuple[float, float]):
    """(an Agg figure of ``size`` inches, its rows x cols axes as a flat list)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(fig)
    return fig, [fig.add_subplot(rows, cols, i + 1) for i in range(rows * cols)]


def plot_histograms(rows: list[dict]):
    """A matplotlib figure with a histogram per field of the done rows."""
    done = [r for r in rows if r.get("status") == "done"]
    shown = (("gaussians", "Gaussians"), ("test_psnr", "held-out PSNR (dB)"), ("seconds", "seconds per object"),
             ("chamfer_pct", "Chamfer (% of diagonal)"))
    fig, axes = new_figure(1, len(shown), (4 * len(shown), 3.2))
    for ax, (key, title) in zip(axes, shown):
        vals = [r[key] for r in done if r.get(key) is not None and math.isfinite(r[key])]
        ax.hist(vals, bins=min(20, max(1, len(vals))), color="#4477aa")
        ax.set_title(f"{title} (n={len(vals)})")
    fig.tight_layout()
    return fig


def sheet_camera(size: int):
    """A camera at the render distance of mesh_render, looking at the origin from above the front."""
    from rasterizer.camera import Camera

    eye = CAMERA_RADIUS * np.array([0.6, -0.6, 0.53]) / np.linalg.norm([0.6, -0.6, 0.53])
    w2c = look_at_world_to_cam(eye, np.zeros(3), np.array([0.0, 0.0, 1.0]))
    f = 0.5 * size / math.tan(0.5 * FOV_X)
    K = torch.tensor([[f, 0, size / 2], [0, f, size / 2], [0, 0, 1]], dtype=torch.float32)
    return Camera(torch.as_tensor(w2c, dtype=torch.float32), K, size, size)


def render_object(path: Path, method: str, size: int) -> np.ndarray:
    """[size, size, 3] render of the splat file ``path`` on white (the object's method's renderer)."""
    model = model_class(method).from_splat_data(read_splats(path))
    with torch.no_grad():
        rgb, _, _ = model.render([sheet_camera(size)], background=torch.ones(3))
    return rgb[0].clamp(0, 1).cpu().numpy()


def plot_contact_sheet(out: Path, rows: list[dict], sample: int = 16, seed: int = 0, size: int = 128):
    """A figure of renders of ``sample`` done objects drawn at random (None when none is done)."""
    done = sorted((r for r in rows if r.get("status") == "done"), key=lambda r: r["source"])
    if not done:
        return None
    picked = random.Random(seed).sample(done, min(sample, len(done)))
    cols = min(4, len(picked))
    nrows = math.ceil(len(picked) / cols)
    fig, axes = new_figure(nrows, cols, (2.6 * cols, 2.8 * nrows))
    for ax in axes:
        ax.axis("off")
    for ax, row in zip(axes, picked):
        ax.imshow(render_object(Path(out) / row["output"], row.get("method", "3dgs"), size))
        ax.set_title(f"{row['source']}\n{row.get('test_psnr')} dB", fontsize=7)
    fig.tight_layout()
    return fig


def write_report(out: Path, sample: int = 16, seed: int = 0) -> dict:
    """Write ``OUT/report/`` (see the module docstring) from ``OUT/index.jsonl``; returns the summary."""
    import json

    from recon.outputs.plots import save_figure

    out = Path(out)
    rows = list(latest_rows(read_index(out)).values())
    report = out / REPORT_DIR
    report.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows)
    atomic_write_bytes(report / "summary.json", json.dumps(summary, indent=2).encode(), force=True)
    save_figure(plot_histograms(rows), report / "histograms.png")
    sheet = plot_contact_sheet(out, rows, sample, seed)
    if sheet is not None:
        save_figure(sheet, report / "contact_sheet.png")
    return summary
