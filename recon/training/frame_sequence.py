"""Dynamic data trained frame by frame (NeuS2's incremental scheme) through the one trainer.

A method whose model class sets ``FRAME_BY_FRAME`` (neus) on a dataset whose training frames carry several
times (D-NeRF, ``procedural-4d``, multi-view video) trains each time step as a static scene: frame 0 for
``--steps`` from the method's initial model, every later frame for ``--neus.frame-steps`` starting from the
previous frame's final model (field, learned sharpness, occupancy grid and Adam moments carried over: a short
fine-tune). Each frame is one :class:`recon.training.trainer.Trainer` run of the frame's views in its own
run folder, so checkpoints, resume, evaluation and outputs are the trainer's. The sequence folder::

    RUN/config.yaml                      the command's configuration (resuming checks it, as for any run)
    RUN/frames/frame_00000/ ...          one complete run folder per time step (config.yaml, checkpoints/,
                                         metrics.json, history.json, renders/; splats.ply with
                                         --neus.frame-splats), in time order
    RUN/loss.png                         the frames' histories one after the other (:func:`sequence_history`),
                                         drawn once the sequence is trained (a frame draws no loss.png of its own)
    RUN/meshes/frame_00000.ply ...       each frame's zero-level-set mesh (--neus.frame-mesh-resolution)
    RUN/meshes/manifest.json             {"version", "fps", "format": "ply", "content": "mesh",
                                         "frames": [{"time", "file"}]}: the layout of recon.export.sequence,
                                         plus "sequence_times": every frame's time, trained or not (what
                                         `view` / `eval` of RUN read instead of loading the dataset)
    RUN/metrics.json                     per-frame PSNR / views / steps / seconds, and their summary

A frame's views: the training frames at its time; its test views: the test frames whose nearest training time
is its time (D-NeRF's test times lie between the training times). Running the command again resumes: finished
frames (metrics.json at their step count) are skipped, an interrupted frame resumes from its newest
checkpoint, and the next frame starts from the last finished frame's final checkpoint.

What a frame can recover depends on its views: with one camera per time (D-NeRF), a frame's fine-tune sees
one image, so only what that camera sees moves; the rest of the surface is the previous frames' (NeuS2 uses
multi-view rigs; ``procedural-4d`` films every time with all its training cameras).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

from recon.core.atomic import atomic_write_bytes
from recon.core.devices import resolve_device
from recon.core.errors import RunFolderError
from recon.data.scene import Scene
from recon.geometry.mesh_extraction import mesh_bytes, zero_level_mesh
from recon.models.base import model_class
from recon.outputs import files as rf
from recon.outputs.history import RunHistory
from recon.training.trainer import CHECKPOINT_KEYS, Trainer, check_resumable, resumed_config, stored_config

FRAMES_DIR = "frames"
MESHES_DIR = "meshes"
MANIFEST_FILE = "manifest.json"


def sequence_history(histories: list[RunHistory]) -> RunHistory:
    """The frames' ``histories`` one after the other: their per-step lists joined, evaluation steps counted
    from the sequence's first step (frame k's steps follow frames 0..k-1's)."""
    joined = RunHistory()
    for history in histories:
        offset = joined.num_steps
        for f in dataclasses.fields(RunHistory):
            part = getattr(history, f.name)
            getattr(joined, f.name).extend([s + offset for s in part] if f.name == "eval_step" else part)
    return joined


def frame_times(scene: Scene) -> list[float]:
    """Sorted distinct times of the training frames (empty for a static scene)."""
    return sorted({f.time for f in scene.frames_train if f.time is not None})


def trains_frame_by_frame(method: str, scene: Scene) -> bool:
    """True when ``method`` trains dynamic data frame by frame and ``scene`` has more than one time."""
    return bool(getattr(model_class(method), "FRAME_BY_FRAME", False)) and len(frame_times(scene)) > 1


def nearest_time(t: float, times: list[float]) -> float:
    """The entry of ``times`` closest to ``t`` (the earlier on a tie)."""
    return min(times, key=lambda s: (abs(s - t), s))


def frame_scene(scene: Scene, t: float, times: list[float]) -> Scene:
    """``scene`` restricted to time ``t``: its training frames at ``t``, its test frames nearest to ``t``
    (:func:`nearest_time`); points and everything else as they are (the field's space is fixed by frame 0)."""
    test = [f for f in scene.frames_test if f.time is not None and nearest_time(f.time, times) == t]
    return dataclasses.replace(scene, frames_train=[f for f in scene.frames_train if f.time == t],
                               frames_test=test, notes=[])


def frame_folder(out: Path, k: int) -> Path:
    """RUN/frames/frame_{k:05d}."""
    return Path(out) / FRAMES_DIR / f"frame_{k:05d}"


def mesh_file(out: Path, k: int) -> Path:
    """RUN/meshes/frame_{k:05d}.ply."""
    return Path(out) / MESHES_DIR / f"frame_{k:05d}.ply"


def frame_config(cfg, k: int):
    """The TrainConfig of frame ``k``: its own folder, no live viewer per frame; frame 0 as ``cfg``; later frames
    ``cfg.neus.frame_steps`` steps, no occupancy warm-up (the grid they start from is estimated: each update
    re-estimates ``--occupancy.fraction`` of it, as after frame 0's warm-up) and no learning-rate warm-up (the
    Adam moments they start from are estimated; a 40-step frame warming up over ``--nerf.lr-warmup-steps`` 100
    would never reach the full rate: it decays at 50, 75 and 90 % of the frame's steps)."""
    if k == 0:
        return dataclasses.replace(cfg, out=frame_folder(cfg.out, k), viewer=False)
    folder = frame_folder(cfg.out, k)
    return dataclasses.replace(cfg, steps=cfg.neus.frame_steps, out=folder, viewer=False,
                               occupancy=dataclasses.replace(cfg.occupancy, warmup_steps=0),
                               nerf=dataclasses.replace(cfg.nerf, lr_warmup_steps=started_warmup(folder, 0)))


def started_warmup(folder: Path, default: int) -> int:
    """The learning-rate warm-up a frame begun before 7 Dec 2026 started with (its config.yaml's
    ``nerf.lr_warmup_steps``: it resumes as it began, instead of failing the resume check), else ``default``."""
    path = folder / rf.CONFIG_FILE
    if not path.is_file():
        return default
    saved = rf.flatten_config(rf.read_config_dict(path)).get("nerf.lr_warmup_steps", default)
    return saved if isinstance(saved, int) and not isinstance(saved, bool) and saved >= 0 else default


def finished_metrics(folder: Path, steps: int) -> dict | None:
    """The frame's metrics.json when it holds a run finished at ``steps``, else None."""
    path = folder / rf.METRICS_FILE
    if not path.is_file():
        return None
    metrics = rf.read_metrics(path, "delete it to train this frame again")
    return metrics if metrics.get("steps") == steps else None


def write_mesh_manifest(out: Path, times: list[float], done: int) -> None:
    """RUN/meshes/manifest.json listing the meshes of frames 0..done-1 (atomically) and, under
    ``sequence_times``, every frame's time ``times``; times in [0, 1] are the dataset's normalised times, so fps
    is the frame count (the sequence plays in one second)."""
    frames = [{"time": times[k], "file": mesh_file(out, k).name} for k in range(done)]
    obj = {"version": 1, "fps": float(max(len(times) - 1, 1)), "format": "ply", "content": "mesh", "frames": frames,
           "sequence_times": [float(t) for t in times]}
    atomic_write_bytes(manifest_file(out), (json.dumps(obj, indent=1) + "\n").encode(), force=True)


def manifest_file(out: Path) -> Path:
    """RUN/meshes/manifest.json."""
    return Path(out) / MESHES_DIR / MANIFEST_FILE


def manifest_times(out: Path) -> list[float] | None:
    """Every frame's time as RUN/meshes/manifest.json's ``sequence_times`` records it (:func:`write_mesh_manifest`),
    or None when the file or the key is absent (a sequence before its first frame finished, or written before
    7 Dec 2026). DamagedFileError naming the file when it is not JSON or the times are not increasing numbers."""
    from recon.core.errors import DamagedFileError
    from recon.core.limits import load_json

    path = manifest_file(out)
    if not path.is_file():
        return None
    hint = "delete it and rerun `splatforge train` with the same options to write it again"
    obj = load_json(path, "mesh manifest", lambda p, problem: DamagedFileError(f"{p}: {problem}; {hint}"))
    times = obj.get("sequence_times") if isinstance(obj, dict) else None
    if times is None:
        return None
    ok = (isinstance(times, list) and times
          and all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) for t in times)
          and all(a < b for a, b in zip(times, times[1:])))
    if not ok:
        raise DamagedFileError(f"{path}: sequence_times is not a non-empty list of increasing finite numbers; {hint}")
    return [float(t) for t in times]


class FrameSequence:
    """Trains ``cfg`` (a FRAME_BY_FRAME method on dynamic ``scene``) frame by frame; :meth:`run` returns the
    sequence's metrics (see the module docstring). ``hooks`` go to every frame's trainer."""

    def __init__(self, cfg, scene: Scene, log=print, hooks=()):
        self.cfg, self.scene, self.log, self.hooks = cfg, scene, log, list(hooks)
        self.out = Path(cfg.out)
        self.times = frame_times(scene)

    def run(self) -> dict:
        """Hold RUN's lock, check / write RUN/config.yaml, train the frames not yet finished, write the metrics."""
        from recon.outputs.paths import ensure_writable_folder

        ensure_writable_folder(self.out, "--out")
        lock = rf.RunLock(self.out).acquire()
        try:
            self.prepare_out()
            return self.train_frames()
        finally:
            lock.release()

    def prepare_out(self) -> None:
        """RUN/config.yaml must describe this run when it exists (as a single run's); --overwrite starts over."""
        import shutil

        self.out.mkdir(parents=True, exist_ok=True)
        config_file = self.out / rf.CONFIG_FILE
        if self.cfg.overwrite:
            shutil.rmtree(self.out / FRAMES_DIR, ignore_errors=True)
            shutil.rmtree(self.out / MESHES_DIR, ignore_errors=True)
        elif config_file.is_file():
            saved = rf.read_config_dict(config_file)
            check_resumable(saved, self.cfg, self.out)
            self.cfg = resumed_config(saved, self.cfg)  # frames derive theirs from it (frame_config)
        rf.write_config(self.out, stored_config(self.cfg))
        (self.out / MESHES_DIR).mkdir(exist_ok=True)

    def train_frames(self) -> dict:
        """Every frame in time order: skipped when finished (its mesh written if missing), else trained from the
        previous frame's final model; returns :meth:`metrics`."""
        n = len(self.times)
        self.log(f"neus: {n} frames (times {self.times[0]:g} .. {self.times[-1]:g}); frame 0 trains "
                 f"{self.cfg.steps} steps, each later frame {self.cfg.neus.frame_steps} from the previous one")
        per_frame, model = [], None
        for k, t in enumerate(self.times):
            fcfg = frame_config(self.cfg, k)
            metrics = None if self.cfg.overwrite else finished_metrics(fcfg.out, fcfg.steps)
            if metrics is None:
                model = self.train_frame(k, t, fcfg, model)
                metrics = rf.read_metrics(fcfg.out / rf.METRICS_FILE, "train this frame again")
            else:
                model = None  # loaded from its checkpoint if a later frame needs it
            if not mesh_file(self.out, k).is_file():
                model = model or self.final_model(k)
                self.write_mesh(k, model)
            write_mesh_manifest(self.out, self.times, k + 1)
            per_frame.append(self.frame_entry(k, t, metrics))
            self.log(f"frame {k + 1}/{n} (time {t:g}): test PSNR "
                     f"{'n/a' if metrics['test']['psnr'] is None else format(metrics['test']['psnr'], '.2f')}, "
                     f"{metrics['train_seconds']:.1f} s")
        result = self.metrics(per_frame)
        rf.write_json(self.out / rf.METRICS_FILE, result)
        self.write_plot()
        return result

    def write_plot(self) -> None:
        """RUN/loss.png: :func:`sequence_history` of the frames' history.json (a damaged one: one line, no plot)."""
        from recon.outputs.plots import plot_run, save_figure  # matplotlib: imported once, at the end

        try:
            histories = [rf.read_history(frame_folder(self.out, k)) for k in range(len(self.times))]
        except ValueError as err:
            self.log(f"{err}; {self.out / rf.LOSS_PLOT_FILE} not drawn")
            return
        history = sequence_history([h for h in histories if h is not None])
        save_figure(plot_run(history, f"{len(self.times)} frames, {history.num_steps:,} steps",
                             count_name=model_class(self.cfg.method).COUNT_NAME),
                    self.out / rf.LOSS_PLOT_FILE)

    def train_frame(self, k: int, t: float, fcfg, previous):
        """Frame ``k`` through the trainer (resuming its own checkpoint if any); frames after the first start
        from ``previous`` (or frame k-1's final checkpoint), their progressive levels past frame k-1's steps.
        Returns the trained model."""
        self.log(f"frame {k + 1}/{len(self.times)} (time {t:g}): {fcfg.steps} steps"
                 + ("" if k == 0 else " from the previous frame"))
        model = None
        if k > 0:
            model = previous if previous is not None else self.final_model(k - 1)
            model.level_offset = self.cfg.steps + (k - 1) * self.cfg.neus.frame_steps
            model.cfg = fcfg.nerf  # no learning-rate warm-up (frame_config)
        trainer = Trainer(fcfg, self.log, self.hooks, scene=frame_scene(self.scene, t, self.times), model=model,
                          writes_splats=self.cfg.neus.frame_splats, writes_plot=False)
        trainer.run()
        return trainer.model

    def final_model(self, k: int):
        """Frame ``k``'s model from its newest checkpoint (RunFolderError when there is none)."""
        folder = frame_folder(self.out, k)
        found = rf.load_latest_checkpoint(folder, CHECKPOINT_KEYS, log=self.log)
        if found is None:
            raise RunFolderError(f"{folder}: frame {k} has no checkpoint to continue from; use --overwrite to "
                                 f"train the sequence again")
        return model_class(self.cfg.method).from_state_dict(found[1]["model"], resolve_device(self.cfg.device))

    def write_mesh(self, k: int, model) -> None:
        """RUN/meshes/frame_k.ply: the zero level set of frame ``k``'s field."""
        start = time.perf_counter()
        mesh = zero_level_mesh(model, self.cfg.neus.frame_mesh_resolution)
        atomic_write_bytes(mesh_file(self.out, k), mesh_bytes(mesh, "ply"), force=True)
        self.log(f"frame {k + 1}/{len(self.times)}: wrote {mesh_file(self.out, k)} ({len(mesh.vertices):,} "
                 f"vertices, {time.perf_counter() - start:.1f} s)")

    @staticmethod
    def frame_entry(k: int, t: float, metrics: dict) -> dict:
        """One frame's line of RUN/metrics.json."""
        test = metrics["test"]
        return {"frame": k, "time": t, "psnr": test["psnr"], "num_views": test["num_views"],
                "steps": metrics["steps"], "train_seconds": metrics["train_seconds"],
                "num_gaussians": metrics["num_gaussians"]}

    def metrics(self, frames: list[dict]) -> dict:
        """RUN/metrics.json: ``frames`` and the summary in a single run's keys (test PSNR: mean over the frames
        with test views; steps, seconds: sums; num_gaussians: the last frame's occupied cells)."""
        scored = [f for f in frames if f["psnr"] is not None]
        seconds = sum(f["train_seconds"] for f in frames)
        steps = sum(f["steps"] for f in frames)
        psnr = sum(f["psnr"] for f in scored) / len(scored) if scored else None
        return {"test": {"psnr": psnr, "num_views": sum(f["num_views"] for f in frames)}, "steps": steps,
                "num_gaussians": frames[-1]["num_gaussians"], "train_seconds": round(seconds, 3),
                "seconds_per_step": round(seconds / steps, 5) if steps else None,
                "frames": frames, "meshes": str(Path(MESHES_DIR) / MANIFEST_FILE)}
