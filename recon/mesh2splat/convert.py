"""One object of ``splatforge mesh2splat``: check the mesh, normalise it, render its views, train, check, write.

:func:`convert_object` returns the object's row of ``index.jsonl`` (:mod:`recon.mesh2splat.index`); a mesh
that cannot be converted gives a row with ``status`` "failed" and the reason, never an exception, so the
batch goes on. Training is the trainer of ``splatforge train`` (:class:`recon.training.trainer.Trainer`,
its ``run()``), handed the loaded scene of the rendered views with initial points on the surface.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from pathlib import Path

from recon.core.errors import describe, is_user_error
from recon.data import load_scene
from recon.data.frame_images import FrameImages
from recon.data.mesh_render import check_scale, load_mesh, normalised_mesh, render_dataset
from recon.export import write_splats
from recon.mesh2splat.preset import ObjectPreset, object_train_config
from recon.mesh2splat.sources import label_of, output_path, work_path
from recon.mesh2splat.surface import chamfer_percent, surface_samples
from recon.training.evaluation import evaluate_model
from recon.training.trainer import Trainer, background_color

VIEWS_DIR, RUN_DIR = "views", "run"  # inside the object's work folder


def base_row(source: str, preset: ObjectPreset, method: str) -> dict:
    """The row fields known before converting (results None, status "failed" until it succeeds)."""
    return {"source": source, "output": None, "label": label_of(source), "status": "failed", "reason": None,
            "mesh_to_world": None, "gaussians": None, "train_psnr": None, "test_psnr": None,
            "chamfer_pct": None, "seconds": None, "method": method, "steps": preset.steps,
            "views": preset.views, "size": preset.size}


def failure_reason(err: BaseException) -> str:
    """One line for the index: a user error's own message, else "internal error: Type: message"."""
    text = describe(err) if is_user_error(err) else f"internal error: {type(err).__name__}: {err}"
    return " ".join(str(text).split())


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


def train_object(mesh, views: Path, run: Path, preset: ObjectPreset, method: str, device: str, hooks=()) -> tuple:
    """(trained model, test metrics, train PSNR) of ``mesh`` (normalised) from its rendered ``views``;
    the initial Gaussians are ``preset.init_points`` surface samples."""
    points, colours = surface_samples(mesh, preset.init_points, preset.seed)
    scene = dataclasses.replace(load_scene(views), points=points, point_colors=colours)
    cfg = object_train_config(preset, method, views, run, device)
    trainer = Trainer(cfg, log=lambda *_: None, hooks=list(hooks), scene=scene)
    metrics = trainer.run()
    images = FrameImages(scene.frames_train, trainer.device)
    try:
        train = evaluate_model(trainer.model, scene.frames_train, images, background_color(cfg, scene),
                               cfg.sh_degree, prefix="train", supersample=cfg.supersample)
    finally:
        images.close()
    return trainer.model, metrics["test"], train["psnr"]


def convert_object(mesh_dir: Path, out: Path, source: str, preset: ObjectPreset, method: str = "3dgs",
                   device: str = "auto", hooks=()) -> dict:
    """Convert ``mesh_dir/source`` into ``OUT/<source>.ply``; returns its index row. Its work folder
    (``OUT/.work/<source>``) is cleared first (a half-done earlier attempt restarts) and removed after."""
    t0 = time.perf_counter()
    row = base_row(source, preset, method)
    work = work_path(out, source) / f"pid{os.getpid()}"  # a worker orphaned by a killed batch clears only its own
    shutil.rmtree(work, ignore_errors=True)
    try:
        path = Path(mesh_dir) / source
        mesh = load_mesh(path)
        check_scale(mesh, path)
        mesh, m2w = normalised_mesh(mesh)
        row["mesh_to_world"] = m2w.tolist()
        render_dataset(mesh, m2w, work / VIEWS_DIR, preset.views, preset.test_views, preset.size,
                       samples=preset.samples, geometry=False)
        model, test, train_psnr = train_object(mesh, work / VIEWS_DIR, work / RUN_DIR, preset, method, device, hooks)
        data = model.to_splat_data()
        row.update(gaussians=len(data.means), train_psnr=_rounded(train_psnr, 3), test_psnr=_rounded(test["psnr"], 3),
                   chamfer_pct=_rounded(chamfer_percent(mesh, data.means), 4))
        target = output_path(out, source)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_splats(target, data, force=True)
        row.update(status="done", output=target.relative_to(out).as_posix())
    except Exception as err:  # noqa: BLE001 - any failure of one object is its row's reason; the batch goes on
        row["reason"] = failure_reason(err)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row
