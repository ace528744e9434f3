"""Evaluate a Gaussian model (or any splat file) on a scene's test (or training) views: PSNR, SSIM, side-by-side PNGs.

LPIPS (alex) is computed when its weights are on this machine (:mod:`recon.losses.lpips`; nothing is
downloaded); otherwise metrics carry ``"lpips": null`` and :data:`LPIPS_NOTE` says why.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from recon.core.errors import UsageError
from recon.data.scene import DataFormatError, Frame, Scene
from recon.export import read_splats
from recon.data.frame_images import FrameImages
from recon.losses.image import auto_ssim, psnr
from recon.losses.lpips import NOTE as LPIPS_NOTE
from recon.losses.lpips import load_lpips, lpips_distance
from recon.models.base import SceneModel, model_class
from recon.outputs.images import draw_output
from recon.training.supersample import render_supersampled
from recon.outputs.files import METRICS_FILE, RENDERS_DIR, write_json, write_png

ERROR_GAIN = 4.0  # error panel shows 4 x mean |gt - render| as grey


def side_by_side(gt: Tensor, render: Tensor) -> np.ndarray:
    """uint8 [H, 3W, 3]: ground truth | render | error (4 x mean absolute difference, grey)."""
    err = ((gt - render).abs().mean(dim=-1, keepdim=True) * ERROR_GAIN).clamp(0, 1).expand_as(gt)
    panel = torch.cat([gt, render.clamp(0, 1), err], dim=1)
    return (panel.detach().cpu().numpy() * 255.0 + 0.5).astype(np.uint8)


@torch.no_grad()
def evaluate_model(model: SceneModel, frames: Sequence[Frame], images: FrameImages, background: Tensor,
                   sh_degree: int | None = None, renders_dir: Path | None = None,
                   prefix: str = "test", supersample: int = 1) -> dict:
    """PSNR / SSIM of ``model`` (any :class:`SceneModel`) on ``frames`` (images composited on ``background`` [3]).

    Writes ``renders_dir/{prefix}_XXX.png`` (gt | render | error) when ``renders_dir`` is given, and
    ``{prefix}_XXX_{name}.png`` for each of the model's extra outputs (2dgs: depth, normals; drawn by
    :mod:`recon.outputs.images`). Each view is rendered at its frame's time (dynamic scenes; static models
    ignore it). ``supersample`` N renders each view at N x its resolution and averages N x N pixel blocks
    (a run trained with ``--supersample N``: :mod:`recon.training.supersample`; the extra outputs stay at the rendered
    resolution).
    Returns ``{"psnr", "ssim", "lpips", "num_views", "per_view": [{"name", "psnr", "ssim", "lpips"}]}``
    (views with a time also carry ``time``, and the dict then has ``per_time``, see :func:`per_time_psnr`);
    psnr/ssim/lpips are means over views (None when there are no views; lpips None without its weights).
    """
    per_view = []
    bg = background.to(model.device)
    lpips_weights = load_lpips(model.device)
    for i, frame in enumerate(frames):
        images.prefetch([i + 1] if i + 1 < len(frames) else [])  # the next view decodes while this one renders
        gt = images.rgb(i, bg)
        render, _, meta = render_supersampled(model, [frame.camera], supersample, sh_degree, bg,
                                              t=frame.time)  # each view at its own time
        out = render[0].clamp(0, 1)
        lp = None if lpips_weights is None else float(lpips_distance(out, gt, lpips_weights))
        per_view.append({"name": frame.name, "psnr": psnr(out, gt), "ssim": float(auto_ssim(out, gt)), "lpips": lp,
                         **({} if frame.time is None else {"time": frame.time})})
        if renders_dir is not None:
            write_png(Path(renders_dir) / f"{prefix}_{i:03d}.png", side_by_side(gt, out))
            for name, image in model.extra_outputs(meta).items():
                write_png(Path(renders_dir) / f"{prefix}_{i:03d}_{name}.png", draw_output(name, image[0]))
    images.close()  # no prefetch thread left behind (the images stay usable)
    n = len(per_view)
    result = {
        "psnr": float(np.mean([v["psnr"] for v in per_view])) if n else None,
        "ssim": float(np.mean([v["ssim"] for v in per_view])) if n else None,
        "lpips": float(np.mean([v["lpips"] for v in per_view])) if n and lpips_weights is not None else None,
        "num_views": n,
        "per_view": per_view,
    }
    if any("time" in v for v in per_view):
        result["per_time"] = per_time_psnr(per_view)
    groups = model.metric_groups(per_view)
    if groups:
        result["groups"] = groups
    return result


def per_time_psnr(per_view: Sequence[dict]) -> list[dict]:
    """``[{"time", "psnr", "num_views"}]`` in increasing time: the mean PSNR of the views at each time
    (views of dynamic scenes carry ``time``; those without are left out)."""
    by_time: dict[float, list[float]] = {}
    for v in per_view:
        if "time" in v:
            by_time.setdefault(float(v["time"]), []).append(v["psnr"])
    return [{"time": t, "psnr": float(np.mean(p)), "num_views": len(p)} for t, p in sorted(by_time.items())]


def evaluate_splat_file(splats: Path | str, scene: Scene, out_dir: Path | None = None,
                        background: Sequence[float] | None = None, device: str = "cpu",
                        run_facts: dict | None = None, method: str = "3dgs") -> dict:
    """Evaluate a splat file (.ply / .splat / .spz), read as a model of ``method``, on ``scene``'s test views.

    Writes ``out_dir/renders/test_XXX.png`` and ``out_dir/metrics.json`` when ``out_dir`` is given.
    Raises ValueError when the scene has no test views, SplatFileError for bad files.
    """
    if not os.path.isfile(splats):
        raise FileNotFoundError(f"splat file not found: {splats}")
    model = model_class(method).from_splat_data(read_splats(splats), extent=scene.extent).to(device)
    return evaluate_on_scene(model, scene, out_dir, background, source=str(splats), run_facts=run_facts)


RUN_FACTS = ("steps", "train_seconds", "seconds_per_step")  # metrics.json keys that come from training


SPLITS = ("test", "train")  # the views eval can score: the held-out ones, or the training views


def split_frames(scene: Scene, split: str = "test", every: int = 1) -> list[Frame]:
    """Frames of ``split`` ("test" or "train") of ``scene``, every ``every``-th one (1: all), in order.
    UsageError for an unknown split or ``every`` < 1; DataFormatError when the split has no views."""
    if split not in SPLITS:
        raise UsageError(f"--split {split!r}: must be one of {', '.join(SPLITS)}")
    if int(every) != every or every < 1:
        raise UsageError(f"--every {every!r}: must be a positive integer (1 = every view)")
    frames = scene.frames_test if split == "test" else scene.frames_train
    if not frames:
        hint = "; score the training views with --split train" if split == "test" else ""
        raise DataFormatError(f"{scene.root or scene.source_format}: the scene has no {split} views to evaluate "
                              f"on{hint}")
    return list(frames)[::int(every)]


def metrics_file_name(split: str) -> str:
    """metrics.json for the test views (the run's schema), metrics_<split>.json for another split."""
    return METRICS_FILE if split == "test" else f"{Path(METRICS_FILE).stem}_{split}.json"


def evaluate_on_scene(model: SceneModel, scene: Scene, out_dir: Path | None = None,
                      background: Sequence[float] | None = None, source: str = "",
                      run_facts: dict | None = None, supersample: int = 1, split: str = "test",
                      every: int = 1) -> dict:
    """Evaluate ``model`` on the views of ``split`` of ``scene`` (:func:`split_frames`: "test", or "train"
    for captures without test views; every ``every``-th view); optional renders ``{split}_XXX.png`` and
    metrics under ``out_dir`` (``supersample``: see :func:`evaluate_model`). Each view's PSNR is the
    full-image PSNR of the plain render, as a training step reports it.

    The metrics file (:func:`metrics_file_name`) has the training run's schema (the split's metrics under
    its name, ``num_gaussians`` and :data:`RUN_FACTS`, taken from ``run_facts``, the run's own
    metrics.json, or null for a bare splat file) plus ``source`` (and ``every`` when not 1)."""
    frames = split_frames(scene, split, every)
    bg = torch.tensor(background if background is not None else scene.background, dtype=torch.float32)
    images = FrameImages(frames, model.device)
    renders = Path(out_dir) / RENDERS_DIR if out_dir is not None else None
    metrics = evaluate_model(model, frames, images, bg, renders_dir=renders, prefix=split, supersample=supersample)
    if out_dir is not None:
        facts = {k: (run_facts or {}).get(k) for k in RUN_FACTS}
        extra = {} if every == 1 else {"every": int(every)}
        write_json(Path(out_dir) / metrics_file_name(split),
                   {split: metrics, "num_gaussians": len(model), **facts, "source": source, **extra})
    return metrics
