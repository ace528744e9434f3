"""Viewer server-hybrid frames: ``splatforge view RUN --asset ...`` in "server hybrid" mode with a headless
Chromium connected (/usr/bin/chromium through playwright), the camera orbiting in ``--frames`` steps.

Reported (JSON): the hybrid renderer's build time (model + proxy mesh; the proxy is cached in RUN/hybrid),
the first frame, and over the orbit's frames the median of one frame in the viewer (hybrid render + JPEG /
depth-PNG encoding + send), of the render alone, of the send alone, and of the renderer's stages; the server
frame size (``--size`` longest side at the canvas aspect ``--canvas``); machine, threads and load average.

Usage: .venv/bin/python scripts/bench_viewer_hybrid.py --run RUN [--asset spot.obj --pose ... --size 480]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
SPOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "meshes" / "spot" / "spot_triangulated.obj"


def wait(cond, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def orbit(centre: np.ndarray, radius: float, up: np.ndarray, k: int, n: int):
    """viser (wxyz, position) of orbit camera ``k`` of ``n`` (a 60-degree arc, 30 degrees above the ground)
    around ``centre``, looking at it."""
    from recon.data.procedural import look_at_world_to_cam
    from viewer.camera_path import world_to_cam_to_viser

    e1 = np.cross(up, [1.0, 0.0, 0.0] if abs(up[0]) < 0.9 else [0.0, 1.0, 0.0])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(up, e1)
    a, el = math.radians(-30 + 60 * k / max(n - 1, 1)), math.radians(30)
    eye = centre + radius * (math.cos(el) * (math.cos(a) * e1 + math.sin(a) * e2) + math.sin(el) * up)
    return world_to_cam_to_viser(look_at_world_to_cam(eye, centre, up))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--asset", type=Path, default=SPOT)
    ap.add_argument("--pose", default=None, help="x,y,z,yaw,pitch,roll,s (default: the scene's centre)")
    ap.add_argument("--light", default="sun:140,35")
    ap.add_argument("--size", type=int, default=480, help="longest side of the server render")
    ap.add_argument("--canvas", default="960x544", help="browser viewport WxH (sets the aspect)")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--no-proxy", action="store_true", help="no proxy mesh (the scene does not shadow assets)")
    args = ap.parse_args()
    if not os.path.exists(CHROMIUM):
        raise SystemExit(f"{CHROMIUM} not installed: the viewer's hybrid frames need a browser camera")
    from playwright.sync_api import sync_playwright

    from viewer.commands import ViewConfig, build_viewer
    from viewer.scene import robust_bounds
    from viewer.screenshot import CHROMIUM_ARGS

    v = build_viewer(ViewConfig(path=args.run, port=0, cameras=False, asset=(args.asset,),
                                pose=(args.pose,) if args.pose else (), light=(args.light,), hybrid_size=args.size),
                     verbose=False)
    layer = v.assets
    if args.no_proxy:
        from recon.hybrid.render import HybridRenderer
        from recon.run.folder import Run

        layer.make_renderer = lambda: HybridRenderer.for_run(Run.open(args.run), layer.assets, layer.lights,
                                                             proxy=False, warn=lambda m: None)
    v.start()
    centre, radius = robust_bounds(v.scene.splats.means.astype(np.float64))
    up = layer.frame[:, 2]
    width, height = (int(x) for x in args.canvas.split("x"))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(v.url)
            wait(v.server.get_clients, 120, "the browser to connect")
            client = next(iter(v.server.get_clients().values()))
            client.camera.fov = math.radians(50)
            client.camera.wxyz, client.camera.position = orbit(centre, 2.2 * radius, up, 0, args.frames)[0], \
                orbit(centre, 2.2 * radius, up, 0, args.frames)[1]
            t0 = time.perf_counter()
            layer.gui["mode"].value = "server hybrid"
            wait(lambda: layer.frames_sent >= 1 or layer.renderer_error, 900, "the first hybrid frame")
            if layer.renderer_error:
                raise SystemExit(layer.renderer_error)
            first_s = time.perf_counter() - t0
            for k in range(1, args.frames + 1):
                n = layer.frames_sent
                wxyz, position = orbit(centre, 2.2 * radius, up, k % args.frames, args.frames)
                client.camera.wxyz, client.camera.position = wxyz, position
                wait(lambda: layer.frames_sent > n, 300, f"hybrid frame {k}")
            browser.close()
    finally:
        v.stop()
    frames = layer.frame_times[1:]
    med = lambda key: round(statistics.median(f[key] for f in frames), 1)  # noqa: E731
    print(json.dumps({
        "run": str(args.run), "asset": str(args.asset), "splats": len(v.scene.splats.means),
        "size": list(frames[-1]["size"]), "frames": len(frames), "proxy": not args.no_proxy,
        "renderer_build_s": round(layer.build_seconds, 2), "first_frame_s": round(first_s, 2),
        "frame_ms_median": med("ms"), "render_ms_median": med("render_ms"), "send_ms_median": med("send_ms"),
        "stages_ms_median": {k[6:]: med(k) for k in frames[-1] if k.startswith("stage_")},
        "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available(),
        "loadavg": [round(x, 2) for x in os.getloadavg()]}, indent=1))


if __name__ == "__main__":
    main()
