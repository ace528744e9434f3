"""One object of ``splatforge mesh2splat``: check the mesh, normalise it, render its views, train, check, write.

:func:`convert_object` returns the object's row of ``index.jsonl`` (:mod:`recon.mesh2splat.index`); a mesh
that cannot be converted gives a row with ``status`` "failed" and the reason, never an exception, so the
batch goes on. Training is the trainer of ``splatforge train`` (:class:`recon.training.trainer.Trainer`,
its ``run()``, writing no run folder), handed the loaded scene of the rendered views with initial points on the
surface. The row's ``stage_seconds`` say where the object's time went (:data:`STAGES`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import socket
import time
from contextlib import contextmanager
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
STAGES = ("load", "render", "setup", "train", "test_eval", "train_eval", "chamfer", "write")
"""the stages of ``stage_seconds``: read + check + normalise the mesh; render the views (and write their PNGs);
surface samples + scene loading + trainer set-up; the training steps; the held-out evaluation (the trainer's
own, after its last step); the PSNR on the training views; Chamfer of the centres; the .ply write"""


class StageClock:
    """Wall seconds per named stage of one object (``with clock("render"): ...``)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.mark = time.perf_counter()

    @contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = round(self.seconds.get(name, 0.0) + seconds, 3)


class TrainEndMark:
    """Training hook: splits the trainer's ``run()`` into its steps and the evaluation that follows them."""

    def __init__(self):
        self.ended = None

    def on_train_start(self, trainer) -> None:
        pass

    def on_step(self, trainer, result) -> None:
        pass

    def on_train_end(self, trainer) -> None:
        self.ended = time.perf_counter()


def base_row(source: str, preset: ObjectPreset, method: str) -> dict:
    """The row fields known before converting (results None, status "failed" until it succeeds)."""
    return {"source": source, "output": None, "label": label_of(source), "status": "failed", "reason": None,
            "mesh_to_world": None, "gaussians": None, "train_psnr": None, "test_psnr": None,
            "chamfer_pct": None, "seconds": None, "cpu_seconds": None, "method": method, "steps": preset.steps,
            "views": preset.views, "size": preset.size, "stage_seconds": {}}


def failure_reason(err: BaseException) -> str:
    """One line for the index: a user error's own message, else "internal error: Type: message"."""
    text = describe(err) if is_user_error(err) else f"internal error: {type(err).__name__}: {err}"
    return " ".join(str(text).split())


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


def train_object(mesh, views: Path, run: Path, preset: ObjectPreset, method: str, device: str, hooks=(),
                 clock: StageClock | None = None) -> tuple:
    """(trained model, test metrics, train PSNR) of ``mesh`` (normalised) from its rendered ``views``;
    the initial Gaussians are ``preset.init_points`` surface samples. The trainer writes nothing (its
    ``run`` folder is only named); ``clock`` gets the setup, train, test_eval and train_eval stages."""
    clock = clock or StageClock()
    with clock("setup"):
        points, colours = surface_samples(mesh, preset.init_points, preset.seed)
        scene = dataclasses.replace(load_scene(views), points=points, point_colors=colours)
        cfg = object_train_config(preset, method, views, run, device)
        end = TrainEndMark()
        trainer = Trainer(cfg, log=lambda *_: None, hooks=[*hooks, end], scene=scene, writes_outputs=False)
    t0 = time.perf_counter()
    metrics = trainer.run()
    t1 = time.perf_counter()
    ended = end.ended if end.ended is not None else t1
    clock.add("train", ended - t0)
    clock.add("test_eval", t1 - ended)
    with clock("train_eval"):
        images = FrameImages(scene.frames_train, trainer.device)
        try:
            train = evaluate_model(trainer.model, scene.frames_train, images, background_color(cfg, scene),
                                   cfg.sh_degree, prefix="train", supersample=cfg.supersample)
        finally:
            images.close()
    return trainer.model, metrics["test"], train["psnr"]


def work_folder(out: Path, source: str, pid: int | None = None) -> Path:
    """The scratch folder for ``source`` of process ``pid`` (default: this one) on this machine:
    ``OUT/.work/<source>/<host>-<pid>`` (a worker orphaned by a killed batch clears only its own; processes on
    other machines never share one)."""
    return work_path(out, source) / f"{socket.gethostname()}-{os.getpid() if pid is None else pid}"


def convert_object(mesh_dir: Path, out: Path, source: str, preset: ObjectPreset, method: str = "3dgs",
                   device: str = "auto", hooks=()) -> dict:
    """Convert ``mesh_dir/source`` into ``OUT/<source>.ply``; returns its index row. Its work folder
    (``OUT/.work/<source>``) is cleared first (a half-done earlier attempt restarts) and removed after."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    row = base_row(source, preset, method)
    clock = StageClock()
    work = work_folder(out, source)
    shutil.rmtree(work, ignore_errors=True)
    try:
        with clock("load"):
            path = Path(mesh_dir) / source
            mesh = load_mesh(path)
            check_scale(mesh, path)
            mesh, m2w = normalised_mesh(mesh)
            row["mesh_to_world"] = m2w.tolist()
        with clock("render"):
            render_dataset(mesh, m2w, work / VIEWS_DIR, preset.views, preset.test_views, preset.size,
                           samples=preset.samples, geometry=False)
        model, test, train_psnr = train_object(mesh, work / VIEWS_DIR, work / RUN_DIR, preset, method, device,
                                               hooks, clock)
        data = model.to_splat_data()
        with clock("chamfer"):
            chamfer = chamfer_percent(mesh, data.means)
        row.update(gaussians=len(data.means), train_psnr=_rounded(train_psnr, 3), test_psnr=_rounded(test["psnr"], 3),
                   chamfer_pct=_rounded(chamfer, 4))
        with clock("write"):
            target = output_path(out, source)
            target.parent.mkdir(parents=True, exist_ok=True)
            write_splats(target, data, force=True)
        row.update(status="done", output=target.relative_to(out).as_posix())
    except Exception as err:  # noqa: BLE001 - any failure of one object is its row's reason; the batch goes on
        row["reason"] = failure_reason(err)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row["seconds"] = round(time.perf_counter() - t0, 2)
    row["cpu_seconds"] = round(time.process_time() - cpu0, 2)  # all of this process's threads
    row["stage_seconds"] = clock.seconds
    return row
