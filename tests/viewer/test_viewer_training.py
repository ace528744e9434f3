"""Live training in the browser viewer (``splatforge train --viewer``): model updates reach the browser,
the training panel follows the run, pause blocks the loop and resume continues it, and a browser that
goes away never stops training. Browser tests use headless Chromium like test_viewer.py (skipped without
it); the trainer is the procedural scene at 64 x 64.
"""

from __future__ import annotations

import ast
import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("viser")

from recon.training.trainer import TrainConfig, Trainer  # noqa: E402
from tests.viewer.test_viewer import (  # noqa: E402,F401
    H, W, browser, render_until, set_camera, wait_for)
from viewer.camera_path import world_to_cam_to_viser  # noqa: E402
from viewer.training import TrainingViewer  # noqa: E402

EVERY = 5


def small_cfg(out: Path, **kw) -> TrainConfig:
    base = dict(out=out, steps=100_000, data_factor=2, save_every=0, progress=False, viewer=True,
                viewer_port=0, viewer_every=EVERY, viewer_keep_open=False)
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def live_training(browser, tmp_path_factory):  # noqa: F811
    """(trainer, hook, client, page): a trainer whose viewer is open in Chromium (no steps run yet)."""
    trainer = Trainer(small_cfg(tmp_path_factory.mktemp("live")), log=lambda *a: None)
    trainer.prepare_out()
    hook = TrainingViewer(every=EVERY, port=0, verbose=False)
    trainer.hooks.append(hook)
    hook.start(trainer)
    page = browser.new_page(viewport={"width": 640, "height": 480})
    page.goto(hook.url)
    wait_for(hook.viewer.server.get_clients, what="the browser to connect")  # listed after its first camera report
    client = next(iter(hook.viewer.server.get_clients().values()))
    yield trainer, hook, client, page
    page.close()
    hook.stop()


def training_view(trainer):
    cam = trainer.scene.frames_train[0].camera
    wxyz, position = world_to_cam_to_viser(cam.world_to_cam.double().numpy())
    return tuple(wxyz), tuple(position), 2.0 * math.atan(0.5 * cam.height / float(cam.K[1, 1]))


def run_steps(trainer, n: int) -> None:
    for _ in range(n):
        trainer.advance(trainer.step)


def test_training_updates_change_the_browser_picture(live_training):
    trainer, hook, client, page = live_training
    cam = set_camera(client, *training_view(trainer))
    white = (1.0, 1.0, 1.0)
    before_buffer = hook.viewer.splat_handle.buffer.copy()
    before = render_until(client, cam, lambda img: (img.sum(-1) < 2.9).mean() > 0.01, "the initial model", white)
    updates = hook.updates
    run_steps(trainer, 3 * EVERY)
    assert hook.updates == updates + 3 and hook.last_update_step == trainer.step
    assert not np.array_equal(before_buffer, hook.viewer.splat_handle.buffer)  # server-side splats changed
    after = render_until(client, cam, lambda img: np.abs(img - before).mean() > 0.002,
                         f"the browser picture to change after {3 * EVERY} steps", white)
    print(f"mean browser picture change after {3 * EVERY} steps: {np.abs(after - before).mean():.4f}")


def test_training_panel_follows_the_run(live_training):
    trainer, hook, client, page = live_training
    run_steps(trainer, EVERY - trainer.step % EVERY)  # end on an update step: the panel is refreshed there
    g = hook.gui
    assert g["step"].value.startswith(f"{trainer.step:,} /")
    assert math.isclose(float(g["loss"].value), trainer.losses[-1], rel_tol=1e-3, abs_tol=1e-4)
    assert g["psnr"].value.endswith("dB") and float(g["psnr"].value.split()[0]) > 5
    assert g["gaussians"].value == f"{len(trainer.model):,}"
    assert float(g["rate"].value) > 0
    shown = lambda: page.evaluate("Array.from(document.querySelectorAll('input')).map(e => e.value)")  # noqa: E731
    wait_for(lambda: g["step"].value in shown(), what="the step value in the browser panel")
    assert g["loss"].value in shown() and g["gaussians"].value in shown()


def test_pause_blocks_training_and_resume_continues(live_training):
    trainer, hook, client, page = live_training
    stop = threading.Event()
    errors = []

    def loop():
        try:
            while not stop.is_set():
                trainer.advance(trainer.step)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        wait_for(lambda: trainer.step > 0 and trainer.step % EVERY == 1 or trainer.step > 200, what="training")
        page.get_by_role("button", name="pause", exact=True).click()
        wait_for(lambda: hook.holding_training, what="the pause to hold training")  # after the step in flight
        stopped_at = trainer.step
        time.sleep(1.0)
        assert trainer.step == stopped_at, "training went on while paused"
        assert hook.gui["status"].value == "paused" and hook.gui["button"].label == "resume"
        assert hook.last_update_step == stopped_at  # pausing shows the model as it is
        page.get_by_role("button", name="resume", exact=True).click()
        wait_for(lambda: trainer.step > stopped_at + 2, what="training to resume")
        assert not hook.paused and hook.gui["button"].label == "pause"
        assert trainer.idle_seconds > 1.0  # the pause is not counted as training time
        # a browser that goes away while paused: nobody can resume, so training resumes by itself
        hook.pause()
        wait_for(lambda: hook.holding_training, what="the pause to hold training")
        paused_at = trainer.step
        page.close()
        wait_for(lambda: not hook.paused and trainer.step > paused_at + 2, what="resume after disconnect")
    finally:
        stop.set()
        hook.resume()
        thread.join(30)
    assert not errors, errors


def test_train_command_with_viewer(tmp_path, capsys):
    from recon.commands.train import train

    out = tmp_path / "run"
    train(small_cfg(out, steps=2 * EVERY + 1, data_factor=4))
    assert "done: 11 steps" in capsys.readouterr().out
    assert (out / "splats.ply").is_file() and (out / "metrics.json").is_file()


def imports(tree) -> list[tuple[str, bool]]:
    """(top-level module, at module level?) of every import in a parsed file."""
    found = []

    def visit(node, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((a.name.split(".")[0], top) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((child.module.split(".")[0], top))
            visit(child, top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(tree, True)
    return found


def test_dependency_direction_recon_to_viewer_is_lazy():
    """rasterizer imports neither recon nor the viewer; recon imports the viewer only inside functions
    (the CLI, with --viewer or a camera-path file), never at module level."""
    root = Path(__file__).resolve().parents[2]
    for package, banned, anywhere in [("rasterizer", {"recon", "viewer", "viser"}, True),
                                      ("recon", {"viewer", "viser"}, False)]:
        for file in sorted((root / package).rglob("*.py")):
            for module, top in imports(ast.parse(file.read_text())):
                if module in banned and (anywhere or top):
                    raise AssertionError(f"{file.relative_to(root)} imports {module}"
                                         + ("" if anywhere else " at module level"))


def test_viewer_failure_never_stops_training(tmp_path):
    trainer = Trainer(small_cfg(tmp_path, steps=3 * EVERY), log=lambda *a: None)
    logs = []
    hook = TrainingViewer(every=EVERY, port=0, verbose=False, log=logs.append)
    trainer.hooks.append(hook)
    trainer.prepare_out()
    hook.start(trainer)
    try:
        def broken(*a, **k):
            raise ConnectionResetError("browser went away")

        hook.viewer.refresh_splats = broken
        run_steps(trainer, 2 * EVERY)
        assert trainer.step == 2 * EVERY
        assert len([m for m in logs if "training continues" in m]) == 1, logs
    finally:
        hook.stop()
