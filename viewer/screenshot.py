"""Screenshot of the viewer page in headless Chromium (for docs; also a manual smoke test).

    python -m viewer.screenshot RUN_DIR_OR_FILE OUT.png [--width 960 --height 600 --wait 20]

Uses the Debian ``/usr/bin/chromium`` through playwright (never ``playwright install``). WebGL runs on
SwiftShader there, so large scenes take tens of seconds per frame: ``--wait`` seconds are given to it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def capture(url: str, out: str | Path, width: int = 960, height: int = 600, wait: float = 20.0) -> Path:
    """Open ``url`` in headless Chromium at ``width x height``, close notifications, wait ``wait``
    seconds for the WebGL frame, save a PNG (palette-quantised to stay small)."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    out = Path(out)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(url)
        page.locator("canvas").first.wait_for(state="visible", timeout=60_000)
        time.sleep(wait)
        # hide notifications (e.g. "Software WebGL rendering detected") so they do not cover the scene
        page.evaluate("""() => document.querySelectorAll('[role=alert], [class*=Notification-root]')
                                .forEach(e => e.style.display = 'none')""")
        time.sleep(1.0)
        page.screenshot(path=str(out))
        browser.close()
    img = Image.open(out).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    img.save(out, optimize=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("out")
    ap.add_argument("--width", type=int, default=960)
    ap.add_argument("--height", type=int, default=600)
    ap.add_argument("--wait", type=float, default=20.0)
    args = ap.parse_args()
    from viewer.commands import ViewConfig, build_viewer

    viewer = build_viewer(ViewConfig(path=Path(args.path), port=0)).start()
    try:
        print(capture(viewer.url, args.out, args.width, args.height, args.wait))
    finally:
        viewer.stop()


if __name__ == "__main__":
    main()
