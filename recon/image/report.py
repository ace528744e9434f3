"""Quality and size of fitted images: MS-SSIM, the per-image record, the folder report (JSON and CSV).

A record is measured on the model as stored (read back from its .gimg file, quantisation included), rendered
at the fitted size and clamped to [0, 1], against the image as read for fitting (float, 16-bit kept).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import Tensor

from recon.core.atomic import atomic_write_bytes

MS_SSIM_WINDOW = 11
REPORT_JSON = "report.json"
REPORT_CSV = "report.csv"
MEAN_KEYS = ("psnr", "ms_ssim", "bpp", "seconds", "gaussians")


def ms_ssim(render: Tensor, target: Tensor) -> tuple[float, int]:
    """(MS-SSIM, Gaussian window size used) of two [H, W, C] images in [0, 1] (pytorch_msssim, 5 scales,
    data range 1).

    Standard MS-SSIM uses an 11-pixel window and needs the shorter side > 10 x 2^4 = 160 pixels; smaller images
    use the largest odd window that fits (side > (window - 1) x 16), so their values are not comparable with
    the standard one (the report keeps the window size)."""
    from pytorch_msssim import ms_ssim as _ms_ssim

    side = min(render.shape[0], render.shape[1])
    window = MS_SSIM_WINDOW
    while window > 1 and side <= (window - 1) * 16:
        window -= 2
    a = render.to(torch.float32).permute(2, 0, 1)[None]
    b = target.to(torch.float32).permute(2, 0, 1)[None]
    return float(_ms_ssim(a, b, data_range=1.0, size_average=True, win_size=window)), window


@dataclass
class ImageRecord:
    """One fitted image: what the folder report lists."""

    image: str
    model: str
    width: int
    height: int
    layout: str
    gaussians: int
    steps: int
    encoding: str
    psnr: float
    ms_ssim: float
    ms_ssim_window: int
    """the MS-SSIM Gaussian window (11 standard; smaller for images under 161 pixels a side)"""
    file_bytes: int
    bpp: float
    seconds: float
    parameters: int = 0
    """stored scalars of the model (Gaussians: N (5 + C); a Gaussian RBF field: grids + decoder)"""


def mean_record(records: list[ImageRecord]) -> dict:
    """The mean of :data:`MEAN_KEYS` over ``records`` (plus the image count)."""
    n = len(records)
    return {"images": n, **{k: sum(getattr(r, k) for r in records) / n for k in MEAN_KEYS}}


def report_json(records: list[ImageRecord], settings: dict) -> bytes:
    return (json.dumps({"images": [asdict(r) for r in records], "mean": mean_record(records), "settings": settings},
                       indent=2) + "\n").encode("utf-8")


def report_csv(records: list[ImageRecord]) -> bytes:
    """One row per image, then a row "mean" with the means of :data:`MEAN_KEYS` (other cells empty)."""
    names = [f.name for f in fields(ImageRecord)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow(asdict(r))
    mean = mean_record(records)
    writer.writerow({"image": "mean", **{k: mean[k] for k in MEAN_KEYS}})
    return buffer.getvalue().encode("utf-8")


def write_reports(folder: Path, records: list[ImageRecord], settings: dict, force: bool = False) -> list[Path]:
    """Write report.json and report.csv in ``folder`` atomically; returns their paths."""
    paths = [folder / REPORT_JSON, folder / REPORT_CSV]
    atomic_write_bytes(paths[0], report_json(records, settings), force=force)
    atomic_write_bytes(paths[1], report_csv(records), force=force)
    return paths
