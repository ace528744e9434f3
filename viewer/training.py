"""Live training in the browser: a :class:`recon.training.trainer.TrainingHook` that serves the model being trained.

``splatforge train ... --viewer`` creates a :class:`TrainingViewer` (imported lazily, only then) and passes
it to the trainer. On the trainer thread, every ``every`` steps, the current Gaussians are copied to numpy
(a :class:`recon.export.SplatData` snapshot, so the optimiser keeps writing its own tensors; for a 4D model
a copy of the 4D model, sliced at the time slider's time) and re-sent with
:meth:`viewer.server.ViewerServer.refresh_splats`. A "Training" GUI folder shows step, loss, PSNR,
Gaussian count and steps/s (updated about once a second, and at every splat update) and a pause/resume
button: while paused the trainer blocks in :meth:`TrainingViewer.on_step` on a :class:`threading.Event`.

Robustness: no viewer error ever reaches the training loop (it is logged once and the viewer stops
updating); when the last browser disconnects while training is paused, training resumes by itself
(nobody is left to press "resume").
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import numpy as np

from recon.export import SplatData
from recon.export.splats import FIELDS
from recon.outputs.files import SPLATS4D_FILE, SPLATS_FILE
from viewer.scene import SplatScene, training_cameras, up_from_cameras

STATS_INTERVAL = 1.0  # seconds between stats panel updates (besides the splat updates)


def model_snapshot(model) -> SplatData:
    """The export record of a :class:`recon.models.base.SceneModel` (``to_splat_data``), with every array
    copied: on the CPU ``Tensor.numpy()`` shares memory with tensors that the optimiser updates in place."""
    import torch

    with torch.no_grad():
        data = model.to_splat_data()
    return dataclasses.replace(data, **{k: np.array(getattr(data, k), dtype=np.float32, copy=True) for k in FIELDS})


def model_snapshot_4d(model):
    """A CPU copy of a 4D model (:class:`recon.models.SpaceTimeGaussians`) that shares no memory with it, for
    slicing in the viewer while the optimiser goes on updating the original in place."""
    import torch

    with torch.no_grad():
        data = model.to_spacetime_data()
    copied = dataclasses.replace(data, **{k: np.array(getattr(data, k), dtype=np.float32, copy=True)
                                          for k in ("means4", "log_scales4", "quats_left", "quats_right",
                                                    "logit_opacities", "sh")})
    return type(model).from_spacetime_data(copied)


def training_scene(model, out: Path, cameras) -> SplatScene:
    """The viewer's scene of a model being trained: a :class:`viewer.spacetime.SpaceTimeScene` (time slider)
    for a 4D model, else a static :class:`SplatScene` of its export record."""
    if hasattr(model, "to_spacetime_data"):
        from viewer.spacetime import SpaceTimeScene

        scene = SpaceTimeScene.from_model(model_snapshot_4d(model), out / SPLATS4D_FILE, run_dir=out)
        scene.cameras = cameras
        return scene
    return SplatScene(model_snapshot(model), out / SPLATS_FILE, run_dir=out, cameras=cameras)


class TrainingViewer:
    """Training hook + viewer server. Create, pass in ``Trainer.hooks``; the server starts in
    ``on_train_start`` (or call :meth:`start` yourself with a trainer to connect a browser first).

    Args:
        every: send the Gaussians every this many steps (also at the start, on pause and at the end).
        port, host: where to serve (a busy port moves to the next free one; 0 = any free port).
        output_dir: render PNGs / camera_path.json of the viewer's buttons (default OUT/viewer).
        log: where messages go (the trainer's log by default).
    """

    def __init__(self, every: int = 200, port: int = 8080, host: str = "127.0.0.1",
                 output_dir: str | Path | None = None, log=None, verbose: bool = True):
        self.every = max(1, int(every))
        self.port, self.host = port, host
        self.output_dir = output_dir
        self.log = log
        self.verbose = verbose
        self.viewer = None  # viewer.server.ViewerServer
        self.gui: dict[str, object] = {}
        self._running = threading.Event()
        self._running.set()
        self._holding = threading.Event()  # set while on_step holds the training loop (paused)
        self._failed = False
        self._stats_time = 0.0
        self._rate_mark: tuple[float, int] | None = None  # (time, step) for steps/s
        self._paused_seconds = 0.0
        self.updates = 0  # splat pushes so far
        self.last_update_step = -1

    # ------------------------------------------------------------------------------------ state

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def holding_training(self) -> bool:
        """True while :meth:`on_step` holds the training loop (paused); a pause takes hold only once
        the step in flight has finished."""
        return self._holding.is_set()

    def pause(self) -> None:
        self._running.clear()
        self._set_button()

    def resume(self) -> None:
        self._running.set()
        self._set_button()

    def _say(self, msg: str) -> None:
        if self.log is not None:
            self.log(msg)
        elif self.verbose:
            print(f"[splatforge viewer] {msg}", flush=True)

    def _guard(self, what: str, fn, *args) -> None:
        """Run a viewer action; the first failure is reported and disables the viewer (training goes on)."""
        if self._failed:
            return
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - the viewer must never stop training
            self._failed = True
            self._running.set()
            self._say(f"viewer {what} failed ({type(e).__name__}: {e}); training continues without it")

    # ------------------------------------------------------------------------------------ server

    def start(self, trainer) -> "TrainingViewer":
        """Start the server showing ``trainer``'s current model (idempotent)."""
        if self.viewer is not None:
            return self
        from viewer.server import ViewerServer

        out = Path(getattr(trainer, "out", "."))
        cameras = training_cameras(trainer.scene)
        scene = training_scene(trainer.model, out, cameras)
        scene.up = up_from_cameras(cameras)
        if cameras:  # like `view RUN`: start at the first training camera, the run's up
            scene.up_known, scene.start_camera = True, 0
        if self.log is None and hasattr(trainer, "log"):
            self.log = trainer.log
        self.viewer = ViewerServer(scene, host=self.host, port=self.port,
                                   output_dir=self.output_dir if self.output_dir is not None else out / "viewer",
                                   verbose=self.verbose)
        self.viewer.start()
        self._build_panel()
        self.viewer.server.on_client_disconnect(self._on_disconnect)
        self.updates, self.last_update_step = 1, trainer.step
        self._update_stats(trainer, None, force=True)
        return self

    def stop(self) -> None:
        self._running.set()
        if self.viewer is not None:
            self.viewer.stop()
            self.viewer = None

    @property
    def url(self) -> str:
        return self.viewer.url

    def _on_disconnect(self, _client) -> None:
        if self.paused and self.viewer is not None and self.viewer.server is not None \
                and not self.viewer.server.get_clients():
            self._say("last browser disconnected while paused; resuming training")
            self.resume()

    def _build_panel(self) -> None:
        gui = self.viewer.server.gui
        with gui.add_folder("Training", order=-1.0):
            g = self.gui
            g["step"] = gui.add_text("step", initial_value="0", disabled=True)
            g["loss"] = gui.add_text("loss", initial_value="-", disabled=True)
            g["psnr"] = gui.add_text("PSNR (train view)", initial_value="-", disabled=True)
            g["gaussians"] = gui.add_text("Gaussians", initial_value="-", disabled=True)
            g["rate"] = gui.add_text("steps/s", initial_value="-", disabled=True)
            g["status"] = gui.add_text("status", initial_value="training", disabled=True)
            g["button"] = gui.add_button("pause")

        @g["button"].on_click
        def _(_event) -> None:
            if self.paused:
                self.resume()
            else:
                self.pause()

    def _set_button(self) -> None:
        b = self.gui.get("button")
        if b is not None and not self._failed:
            try:
                b.label = "resume" if self.paused else "pause"
                self.gui["status"].value = "paused" if self.paused else "training"
            except Exception as e:  # noqa: BLE001 - a GUI hiccup must not stop training: say it, go on
                self._say(f"viewer button update failed ({type(e).__name__}: {e})")

    # ------------------------------------------------------------------------------------ updates

    def push_model(self, trainer) -> None:
        """Snapshot the model and re-send it (trainer thread)."""
        v = self.viewer
        if v.scene.dynamic:  # a 4D model: slice the new snapshot at the slider's time
            v.scene.set_model(model_snapshot_4d(trainer.model))
        else:
            v.scene.splats = model_snapshot(trainer.model)
        v.refresh_splats()
        self.updates += 1
        self.last_update_step = trainer.step

    def _update_stats(self, trainer, result, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._stats_time < STATS_INTERVAL:
            return
        g = self.gui
        g["step"].value = f"{trainer.step:,} / {trainer.cfg.steps:,}"
        if result is not None:
            g["loss"].value = f"{result.loss:.4f}"
            g["psnr"].value = f"{min(result.psnr, 99.0):.2f} dB"
        g["gaussians"].value = f"{len(trainer.model):,}"
        if self._rate_mark is not None and trainer.step > self._rate_mark[1]:
            dt = now - self._rate_mark[0] - self._paused_seconds
            if dt > 0:
                g["rate"].value = f"{(trainer.step - self._rate_mark[1]) / dt:.1f}"
        self._rate_mark, self._paused_seconds = (now, trainer.step), 0.0
        self._stats_time = now

    # ------------------------------------------------------------------------------------ hook API

    def on_train_start(self, trainer) -> None:
        self._guard("start", self.start, trainer)

    def on_step(self, trainer, result) -> None:
        if self._failed or self.viewer is None:
            return
        if trainer.step % self.every == 0:
            self._guard("update", self.push_model, trainer)
            self._guard("stats", self._update_stats, trainer, result, True)
        else:
            self._guard("stats", self._update_stats, trainer, result)
        if self.paused and not self._failed:
            self._wait_while_paused(trainer, result)

    def _wait_while_paused(self, trainer, result) -> None:
        t0 = time.perf_counter()
        if self.last_update_step != trainer.step:
            self._guard("update", self.push_model, trainer)  # show what training has reached
        self._guard("stats", self._update_stats, trainer, result, True)
        self._set_button()
        self._holding.set()
        try:
            while not self._running.wait(0.1):  # short waits keep Ctrl-C working
                pass
        finally:
            self._holding.clear()
        dt = time.perf_counter() - t0
        self._paused_seconds += dt
        if hasattr(trainer, "idle_seconds"):
            trainer.idle_seconds += dt  # paused time is not training time (metrics.json)
        self._set_button()

    def on_train_end(self, trainer) -> None:
        if self._failed or self.viewer is None:
            return
        if self.last_update_step != trainer.step:
            self._guard("update", self.push_model, trainer)
        self._guard("stats", self._update_stats, trainer, None, True)
        if "status" in self.gui and not self._failed:
            self.gui["status"].value = "finished"

    def show_splats(self, data) -> None:
        """Show ``data`` (a SplatData: ``train --remove-floaters``' cleaned model) instead of the last snapshot
        of a 3D model; nothing for a 4D one or a viewer that failed."""
        if self._failed or self.viewer is None or self.viewer.scene.dynamic:
            return

        def show() -> None:
            self.viewer.scene.splats = data
            self.viewer.refresh_splats()

        self._guard("update", show)

    def serve_forever(self) -> None:
        """Block until Ctrl-C (the final model stays on show), then stop the server."""
        if self.viewer is None:
            return
        self._say(f"training finished; the viewer stays at {self.url} (Ctrl-C to exit)")
        try:
            while True:
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

