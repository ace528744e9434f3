"""One model from trained blocks: each block keeps its Gaussians whose centres lie in its core box.

Core boxes are half-open on the ground plane (``lo <= x < hi``, unbounded on the scene's outer sides;
:func:`recon.distributed.partition.in_core`), so every Gaussian comes from exactly one block. The merged
model is evaluated on the whole scene's test views; metrics.json adds each block's own metrics (its test
views, before merging) and counts, and the seam metric (:mod:`recon.distributed.seams`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from recon.core.limits import load_json
from recon.outputs import files as rf
from recon.distributed.partition import Partition, in_core
from recon.distributed.seams import seam_metric
from recon.export import read_splats, write_splats
from recon.core.splat_data import FIELDS, SplatData

FINETUNE_DIR = "finetune"


def block_dir(out: Path, block: int) -> Path:
    """The run folder of block ``block`` inside the job's run folder."""
    return Path(out) / "blocks" / f"block_{block:03d}"


def core_part(part: Partition, block_id: int, data: SplatData) -> SplatData:
    """The Gaussians of ``data`` (block ``block_id``'s model) whose centres are in the block's core box."""
    block = next(b for b in part.blocks if b.id == block_id)
    keep = in_core(part.ground(data.means), block.core)
    return SplatData(*(getattr(data, f)[keep] for f in FIELDS), antialiased=data.antialiased)


def concatenate(parts: list[SplatData]) -> SplatData:
    """One record holding all ``parts`` in order (same SH degree and antialiasing; ValueError if not)."""
    degrees = {p.sh.shape[1] for p in parts}
    if len(degrees) != 1 or len({p.antialiased for p in parts}) != 1:
        raise ValueError(f"blocks differ in SH size {sorted(degrees)} or antialiasing; they cannot be merged")
    return SplatData(*(np.concatenate([getattr(p, f) for p in parts]) for f in FIELDS),
                     antialiased=parts[0].antialiased)


def merge_blocks(part: Partition, out: Path) -> tuple[SplatData, list[dict]]:
    """(merged record, per-block counts) from every block's ``splats.ply`` under ``out/blocks/``."""
    parts, counts = [], []
    for b in part.blocks:
        data = read_splats(block_dir(out, b.id) / rf.SPLATS_FILE)
        kept = core_part(part, b.id, data)
        parts.append(kept)
        counts.append({"id": b.id, "trained_gaussians": int(len(data.means)), "kept_gaussians": int(len(kept.means))})
    return concatenate(parts), counts


def without_densification(cfg):
    """``cfg`` with ADC / MCMC refinement off and no MCMC noise (refining a trained model keeps its Gaussians)."""
    import dataclasses

    return dataclasses.replace(cfg, adc=dataclasses.replace(cfg.adc, refine_stop_iter=0),
                               mcmc=dataclasses.replace(cfg.mcmc, refine_stop_iter=0, noise_lr=0.0))


def finetune_config(cfg, out: Path, steps: int):
    """The global fine-tune's config: ``steps`` steps on the whole scene in ``out/finetune``, no
    densification (:func:`without_densification`), means learning rate starting where the blocks'
    schedule ended (``means x means_final_ratio``), started over whenever the merge is redone."""
    import dataclasses

    return without_densification(dataclasses.replace(
        cfg, out=Path(out) / FINETUNE_DIR, steps=steps, progress=False, viewer=False, overwrite=True,
        save_every=0, eval_every=0,
        lr=dataclasses.replace(cfg.lr, means=cfg.lr.means * cfg.lr.means_final_ratio, means_final_ratio=1.0)))


def run_finished(folder: Path, steps: int) -> bool:
    """Whether the run folder ``folder`` finished training ``steps`` steps (its metrics.json, written last)."""
    path = Path(folder) / rf.METRICS_FILE
    try:
        return path.is_file() and load_json(path, "metrics", allow_nan=True).get("steps") == steps
    except (ValueError, AttributeError):  # damaged or not an object: not finished
        return False


def finetune(merged: SplatData, scene, cfg, out: Path, steps: int, device: torch.device, log=print):
    """Train the merged model ``steps`` more steps on the whole scene (:func:`finetune_config`); returns
    (the fine-tuned model, its metrics.json)."""
    from recon.models.base import model_class
    from recon.training.trainer import Trainer

    ft_cfg = finetune_config(cfg, out, steps)
    model = model_class(cfg.method).from_splat_data(merged, extent=scene.extent, lrs=ft_cfg.lr)
    trainer = Trainer(ft_cfg, log=log, scene=scene, model=model, device=device)
    metrics = trainer.run()
    return trainer.model, metrics


def merge_run(out: Path, part: Partition, scene, cfg, device: torch.device, log=print,
              finetune_steps: int = 0, consistency: str = "independent", prior: Path | None = None) -> dict:
    """Merge the blocks of job folder ``out``; write splats.ply, renders/ and metrics.json (whole-scene test
    views, per-block metrics, counts, summed training time, seam metric). With ``finetune_steps`` > 0 the
    merged model is fine-tuned on the whole scene first (``out/finetune/``; metrics.json then also holds the
    merged model's test metrics before it, ``merged_test``). ``prior``: the splats.ply of the whole-scene
    model the blocks started from (``--prior-steps``), whose seam metric is the reference (seams_against).
    Returns the metrics."""
    from recon.training.evaluation import evaluate_model
    from recon.data.frame_images import FrameImages
    from recon.models.base import model_class
    from recon.training.trainer import background_color

    merged, counts = merge_blocks(part, out)
    model = model_class(cfg.method).from_splat_data(merged, extent=scene.extent).to(device)
    bg = background_color(cfg, scene)
    images = FrameImages(scene.frames_test, device)
    before = None
    if finetune_steps > 0:
        before = evaluate_model(model, scene.frames_test, images, bg, cfg.sh_degree, supersample=cfg.supersample)
        log(f"merged model before the fine-tune: test PSNR {before['psnr']:.2f}; fine-tuning {finetune_steps} steps")
        model, _ = finetune(merged, scene, cfg, out, finetune_steps, device, log)
        model = model.to(device)
        merged = model.to_splat_data()
    write_splats(Path(out) / rf.SPLATS_FILE, merged, force=True)
    test = evaluate_model(model, scene.frames_test, images, bg, cfg.sh_degree, Path(out) / rf.RENDERS_DIR,
                          supersample=cfg.supersample)
    seams = seam_metric(model, scene.frames_test, images, bg, part) if cfg.method == "3dgs" else None
    if seams is not None and prior is not None and Path(prior).is_file():
        reference = model_class(cfg.method).from_splat_data(read_splats(Path(prior)), extent=scene.extent).to(device)
        seams = seams_against(seams, seam_metric(reference, scene.frames_test, images, bg, part))
    blocks = []
    for c in counts:
        m = rf_json(block_dir(out, c["id"]) / rf.METRICS_FILE)
        blocks.append({**c, "test_psnr": m.get("test", {}).get("psnr"), "test_views": m.get("test", {}).get("num_views"),
                       "steps": m.get("steps"), "train_seconds": m.get("train_seconds")})
    metrics = {
        "test": {k: test[k] for k in ("psnr", "ssim", "lpips", "num_views") if k in test},
        "steps": cfg.steps,
        "num_gaussians": int(len(merged.means)),
        "train_seconds": round(sum(b["train_seconds"] or 0.0 for b in blocks), 3),
        "seams": seams,
        "finetune_steps": finetune_steps,
        "merged_test": None if before is None else {k: before[k] for k in ("psnr", "ssim", "lpips", "num_views")},
        "consistency": consistency,
        "num_blocks": len(blocks),
        "blocks": blocks,
        "workers": [rf_json(p) for p in sorted((Path(out) / "workers").glob("rank_*.json"))],
    }
    rf.write_json(Path(out) / rf.METRICS_FILE, metrics)
    log(f"merged {len(blocks)} blocks: {len(merged.means):,} Gaussians, test PSNR "
        f"{'n/a' if test['psnr'] is None else format(test['psnr'], '.2f')} over {test['num_views']} views")
    return metrics


def seams_against(seams: dict, reference: dict) -> dict:
    """The merged model's seam metric with that of a whole-scene model of the same views (``reference``: one
    without block borders, e.g. the prior) and ``gap_change``: (seam - interior PSNR) of the merged model minus
    the reference's. The seam pixels show other content than the rest, so the gap itself is not zero without
    any border (on the 402-image city, whole-scene models: -1.29 to +0.81 dB); its change is what the blocks'
    borders did. None when a PSNR is missing."""
    values = (seams["seam_psnr"], seams["interior_psnr"], reference["seam_psnr"], reference["interior_psnr"])
    change = None if None in values else (values[0] - values[1]) - (values[2] - values[3])
    return {**seams, "reference": {k: reference[k] for k in ("seam_psnr", "interior_psnr")}, "gap_change": change}


def rf_json(path: Path) -> dict:
    """A JSON file's object ({} when missing)."""
    return load_json(path, allow_nan=True) if Path(path).is_file() else {}
