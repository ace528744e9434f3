"""Viewer playback of a 4D model: new time slices per second, sliced on the server and received by a
headless Chromium (the issue-17 target: >= 10 per second for 200k 4D Gaussians).

A random 4D model (N Gaussians in a box, times uniform in [0, 1], temporal standard deviation 0.2, so a
part is culled at any time) is served by ``splatforge view``'s server; Chromium (/usr/bin/chromium through
playwright, when present) opens it; playback runs for ``--seconds``. Reported: the median time of one
slice (``model.slice``), of the browser arrays (``SpaceTimeScene.browser``) and of slice + send
(``ViewerServer.set_time``) over ``--repeats`` times; the server's slices / s while playing; and the
splat buffers the browser received per second (websocket messages of at least ``--min-frame-bytes``;
playwright hands every received frame to Python, which takes CPU from the server on a small machine, so
this is a lower bound). Prints JSON. Usage: .venv/bin/python scripts/bench_viewer_4d.py [--n 200000]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import numpy as np
import torch

from recon.models.base import model_class
from recon.core.spacetime_data import SpaceTimeData
from viewer.server import ViewerServer
from viewer.spacetime import SpaceTimeScene

CHROMIUM = "/usr/bin/chromium"


def random_model(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    means = np.c_[rng.uniform(-1, 1, (n, 2)), rng.uniform(3, 5, (n, 1)), rng.uniform(0, 1, (n, 1))]
    scales = np.log(np.c_[rng.uniform(0.01, 0.03, (n, 3)), np.full((n, 1), 0.2)])
    data = SpaceTimeData(means, scales, rng.normal(size=(n, 4)), rng.normal(size=(n, 4)), rng.normal(size=n),
                         rng.uniform(-1, 1, (n, 1, 3)))
    return model_class("4dgs").from_spacetime_data(data)


def median_ms(fn, repeats: int) -> float:
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--min-frame-bytes", type=int, default=100_000)
    ap.add_argument("--torch-threads", type=int, default=None)
    args = ap.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    model = random_model(args.n)
    scene = SpaceTimeScene.from_model(model, _Path("random.ply"))
    times = np.linspace(0.05, 0.95, args.repeats)
    result = {"gaussians_4d": args.n, "machine": platform.processor() or platform.machine(),
              "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
              "load_average_1min": os.getloadavg()[0]}
    result["slice_ms_median"] = median_ms(lambda i: model.slice(float(times[i])), args.repeats)
    result["sliced_gaussians_at_0.5"] = len(model.slice(0.5))
    result["browser_arrays_ms_median"] = median_ms(lambda i: (scene.set_time(times[i]), scene.browser()),
                                                   args.repeats)
    with tempfile.TemporaryDirectory() as out:
        v = ViewerServer(scene, port=0, output_dir=out, verbose=False).start()
        try:
            result["set_time_and_send_ms_median"] = median_ms(lambda i: v.set_time(float(times[i])), args.repeats)
            browser = page = pw = None
            received: list[int] = []
            if os.path.exists(CHROMIUM):
                try:
                    from playwright.sync_api import sync_playwright

                    pw = sync_playwright().start()
                    browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
                        "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
                    page = browser.new_page(viewport={"width": 640, "height": 480})

                    def on_ws(ws):  # viser's websocket lives in a worker, out of reach of page scripts
                        ws.on("framereceived", lambda payload: received.append(len(payload)))

                    page.on("websocket", on_ws)
                    page.goto(v.url)
                    t0 = time.monotonic()
                    while not v.server.get_clients() and time.monotonic() - t0 < 120:
                        time.sleep(0.1)
                except ImportError:
                    result["browser"] = "playwright not installed"
            else:
                result["browser"] = f"{CHROMIUM} not installed"
            result["browser_connected"] = bool(v.server.get_clients())
            v.gui["speed"].value = 0.1
            if page is not None:
                page.wait_for_timeout(2000)  # deliver what arrived before playback
            before = sum(n >= args.min_frame_bytes for n in received)
            start = time.perf_counter()
            v.set_playing(True)
            rates = []
            while time.perf_counter() - start < args.seconds:
                if page is not None:
                    page.wait_for_timeout(1000)  # playwright delivers the page's websocket frames meanwhile
                else:
                    time.sleep(1.0)
                if v.slice_rate is not None:
                    rates.append(v.slice_rate)
            v.set_playing(False)
            played = time.perf_counter() - start
            result["played_seconds"] = played
            result["server_slices_per_s_median"] = statistics.median(rates) if rates else None
            if page is not None:
                page.wait_for_timeout(3000)  # buffers sent while playing that are still on their way
                after = sum(n >= args.min_frame_bytes for n in received)
                result["browser_splat_buffers_per_s"] = (after - before) / played
                browser.close()
                pw.stop()
        finally:
            v.stop()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
