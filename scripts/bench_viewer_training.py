#!/usr/bin/env python
"""Cost of the live viewer during training (``splatforge train --viewer``), printed as JSON.

Trains the procedural scene (recon/data/procedural_scene.py) the same number of steps with identical
trainers (same seed, same views): one without hooks, one with the viewer hook (server running, no
browser) and, with --browser, one with a headless Chromium page connected to its viewer. The trainers
advance in interleaved chunks of steps (default: one step each in turn) so that load from other
processes, the browser's own rendering included, hits all of them alike: the "with browser" figure is
the server-side cost of a connected client (snapshot, serialisation, sending), not Chromium's CPU use.
The trainers start identical but drift apart a little (multithreaded float sums, then densification
decisions), so their Gaussian counts and step costs differ slightly even without any hook.

Reported per variant: median and mean seconds per step (mean = total / steps, which includes the splat
updates every --every steps; the median hides them), the seconds spent inside the hook (the direct
overhead, ``hook_share_of_time``), and the slowdown of each against the run without the viewer.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHROMIUM = "/usr/bin/chromium"


class TimedHook:
    """Wraps a hook and adds up the seconds spent in its on_step."""

    def __init__(self, hook):
        self.hook, self.seconds, self.update_seconds = hook, 0.0, []

    def on_train_start(self, trainer):
        self.hook.on_train_start(trainer)

    def on_step(self, trainer, result):
        t = time.perf_counter()
        self.hook.on_step(trainer, result)
        dt = time.perf_counter() - t
        self.seconds += dt
        if trainer.step % self.hook.every == 0:
            self.update_seconds.append(dt)

    def on_train_end(self, trainer):
        self.hook.on_train_end(trainer)


def make_trainer(args, out: Path, hooks=()):
    from recon.training.trainer import TrainConfig, Trainer

    cfg = TrainConfig(out=out, steps=args.steps, data_factor=args.data_factor, save_every=0, progress=False,
                      device="cpu", seed=0)
    trainer = Trainer(cfg, log=lambda *a: None, hooks=list(hooks))
    trainer.prepare_out()
    for h in trainer.hooks:
        h.on_train_start(trainer)
    return trainer


def connect_browser(url: str, hook):
    """(playwright, browser, page) with the viewer open and its camera reported; None if unavailable."""
    import os

    if not os.path.exists(CHROMIUM):
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    pw = sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"])
    page = browser.new_page(viewport={"width": 640, "height": 480})
    page.goto(url)
    t0 = time.monotonic()
    while not hook.viewer.server.get_clients() and time.monotonic() - t0 < 60:
        time.sleep(0.1)
    time.sleep(2.0)  # first scene download and the first frames drawn
    return pw, browser, page


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=600, help="steps per variant")
    p.add_argument("--every", type=int, default=200, help="viewer update interval (TrainConfig.viewer_every)")
    p.add_argument("--data-factor", type=int, default=1, help="procedural scene is 128 x 128 / this")
    p.add_argument("--chunk", type=int, default=1, help="steps per variant before switching to the next")
    p.add_argument("--browser", action="store_true", help="also a variant with headless Chromium connected")
    args = p.parse_args()
    with contextlib.redirect_stdout(sys.stderr):  # viser prints a banner on start and a line on stop
        result = run(args)
    print(json.dumps(result, indent=2))


def run(args) -> dict:
    import torch

    from viewer.training import TrainingViewer

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        warm = make_trainer(args, tmp / "warmup")  # Numba compilation / cache load, untimed
        for s in range(3):
            warm.advance(s)
        del warm
        variants = {"no_viewer": make_trainer(args, tmp / "a")}
        hooks = {"viewer_no_browser": TimedHook(TrainingViewer(every=args.every, port=0, verbose=False))}
        variants["viewer_no_browser"] = make_trainer(args, tmp / "b", [hooks["viewer_no_browser"]])
        browser = None
        if args.browser:
            hooks["viewer_with_browser"] = TimedHook(TrainingViewer(every=args.every, port=0, verbose=False))
            variants["viewer_with_browser"] = make_trainer(args, tmp / "c", [hooks["viewer_with_browser"]])
            browser = connect_browser(hooks["viewer_with_browser"].hook.url, hooks["viewer_with_browser"].hook)
            if browser is None:
                del variants["viewer_with_browser"], hooks["viewer_with_browser"]
        times = {k: [] for k in variants}
        for start in range(0, args.steps, args.chunk):
            for name, trainer in variants.items():
                for step in range(start, min(start + args.chunk, args.steps)):
                    t = time.perf_counter()
                    trainer.advance(step)
                    times[name].append(time.perf_counter() - t)
        if browser is not None:
            browser[2].close()
            browser[1].close()
            browser[0].stop()
        for h in hooks.values():
            h.hook.stop()
        cam = variants["no_viewer"].scene.frames_train[0].camera
        base_med = statistics.median(times["no_viewer"])
        base_mean = sum(times["no_viewer"]) / args.steps
        result = {"benchmark": "viewer_training", "scene": "procedural", "width": cam.width, "height": cam.height,
                  "steps": args.steps, "viewer_every": args.every, "chunk": args.chunk,
                  "torch_threads": torch.get_num_threads(), "variants": {}}
        for name, t in times.items():
            med, mean = statistics.median(t), sum(t) / len(t)
            row = {"median_step_seconds": round(med, 5), "mean_step_seconds": round(mean, 5),
                   "num_gaussians_end": len(variants[name].model)}
            if name in hooks:
                h = hooks[name]
                row.update(hook_seconds_total=round(h.seconds, 4),
                           hook_seconds_per_update=[round(x, 4) for x in h.update_seconds],
                           hook_share_of_time=round(h.seconds / sum(t), 4),
                           slowdown_median_pct=round(100 * (med / base_med - 1), 2),
                           slowdown_mean_pct=round(100 * (mean / base_mean - 1), 2))
            result["variants"][name] = row
    return result


if __name__ == "__main__":
    main()
