"""Render the first view that ``splatforge view FILE`` chooses and print JSON: the rule used, the up axis chosen,
and how much of the frame the object covers.

    python scripts/check_first_view.py lego.ply [--no-sidecar] [--rotate y-down|y-up|z-up] [--expect-up z]
        [--png out.png] [--width 640 --height 480] [--browser]

The view is the viewer's own (:func:`viewer.commands.build_viewer`, not served); the picture is rendered with
the rasterizer like the viewer's render button and ``splatforge render`` (all SH degrees, white background).
``coverage``: fraction of the frame whose accumulated alpha is >= 0.5 (all Gaussians); ``core_coverage``: the
same for the core Gaussians only (:func:`viewer.framing.core_box`: the floaters left out). ``--rotate`` writes
a rotated copy (means and rotations; SH cut to degree 0, as they are not rotated) of a z-up file (Blender,
lego) into a temporary folder and checks that; ``--expect-up`` (the up of the file as given, before
``--rotate``; rotated with it) adds ``upright``: whether the chosen up is within 30 degrees of it. ``--browser``
serves the file to headless Chromium and adds the browser's coverage and its PSNR against the rasterizer.
FILE may be a run folder; for a NeRF / NeuS run (baked splats: the viewer shows the field itself) the output adds
the field's first frame (:func:`field_first_frame`: its decoder, coverage, contrast) and ``--png`` saves that frame.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROTATIONS = {  # z-up world -> the named convention
    "z-up": np.eye(3),
    "y-down": np.array([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]]),  # z -> -y (COLMAP / OpenCV)
    "y-up": np.array([[1.0, 0, 0], [0, 0, 1.0], [0, -1.0, 0]]),  # z -> +y (OpenGL / glTF)
}


def rotated_copy(path: Path, rotation: np.ndarray, folder: Path) -> Path:
    """A copy of splat file ``path`` with means and quaternions rotated by ``rotation`` [3, 3], SH degree 0."""
    from rasterizer.quaternions import rotmat_to_quat as r2q
    from recon.export import read_splats, write_splats
    from recon.core.splat_data import SplatData

    d = read_splats(path).with_sh_degree(0)
    q = r2q(rotation)  # wxyz
    w1, v1 = q[0], q[1:]
    w2, v2 = d.quats[:, 0].astype(np.float64), d.quats[:, 1:].astype(np.float64)
    w = w1 * w2 - v2 @ v1
    v = w1 * v2 + w2[:, None] * v1 + np.cross(v1, v2)
    out = folder / f"{path.stem}_rotated.ply"
    write_splats(out, SplatData((d.means.astype(np.float64) @ rotation.T).astype(np.float32),
                                np.concatenate([w[:, None], v], 1).astype(np.float32), d.log_scales,
                                d.logit_opacities, d.sh, d.antialiased))
    return out


def alpha_fraction(data, camera, threshold: float = 0.5) -> float:
    """Fraction of the pixels of ``camera`` where the accumulated alpha of ``data`` is >= ``threshold``."""
    import torch

    from rasterizer import rasterize_gaussians

    t = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32)  # noqa: E731
    cam = camera.to(dtype=torch.float32)
    with torch.no_grad():
        _, alpha, _ = rasterize_gaussians(
            t(data.means), t(data.quats), torch.exp(t(data.log_scales)), torch.sigmoid(t(data.logit_opacities)),
            t(data.sh[:, :1]), cam.world_to_cam[None], cam.K[None], cam.width, cam.height, sh_degree=0,
            rasterize_mode="antialiased" if data.antialiased else "classic")
    return float((alpha[0, ..., 0] >= threshold).float().mean())


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def browser_check(viewer, width: int, height: int, timeout: float = 240.0) -> dict:
    """Serve ``viewer`` (built, not started) to headless Chromium at width x height; wait until the browser
    reports the first view's camera and shows splats; return the browser frame's alpha coverage, the PSNR of
    the browser frame against the rasterizer's render of the camera the browser reports (black background;
    the browser draws degree-0 colour only), and whether the browser camera is at the chosen position."""
    import time

    from playwright.sync_api import sync_playwright

    from viewer.camera_path import viser_camera_to_frame

    def until(grab, ok, what):
        t0 = time.monotonic()
        while True:
            value = grab()
            if ok(value):
                return value
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"waited {timeout:.0f} s for {what}")
            time.sleep(0.2)

    viewer.start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(viewer.url)
            clients = until(viewer.server.get_clients, bool, "the browser to connect")
            client = next(iter(clients.values()))
            pos = until(lambda: np.array(client.camera.position),
                        lambda q: np.allclose(q, viewer.first_view.position, atol=1e-3), "the first camera")
            wxyz, fov = np.array(client.camera.wxyz), float(client.camera.fov)

            def grab():
                rgba = client.get_render(height, width, wxyz=wxyz, position=pos, fov=fov, transport_format="png",
                                         timeout=timeout).astype(np.float64) / 255.0
                return rgba

            rgba = until(grab, lambda r: (r[..., 3] >= 0.5).mean() > 0.01, "the splats in the browser")
            ref = viewer.render_frame(viser_camera_to_frame(wxyz, pos, fov, width, height), background=(0.0, 0.0, 0.0))
            img = rgba[..., :3] * rgba[..., 3:]
            mse = float(np.mean((img - ref) ** 2))
            browser.close()
            return {"browser_at_first_view": True, "browser_coverage": round(float((rgba[..., 3] >= 0.5).mean()), 4),
                    "browser_psnr_vs_render": round(10 * math.log10(1.0 / max(mse, 1e-12)), 2)}
    finally:
        viewer.stop()


def field_first_frame(viewer, camera) -> tuple[dict, np.ndarray] | None:
    """For a run whose splats are a baked stand-in (NeRF, NeuS: the viewer starts in server hybrid mode and shows the
    field itself), the field's render of ``camera`` as the viewer's first frame builds it (its ``make_renderer``, then
    :func:`viewer.hybrid.hybrid_image`): ({"field": the density decoder's class, "field_coverage": the fraction of
    pixels that differ from the white background by more than 8 of 255, "field_std": the image's standard
    deviation in 0..255, "field_render_seconds" / "field_render_cpu_seconds": wall / CPU seconds of the render, made
    without gradients as the viewer's), the image float [H, W, 3] in 0..1); None for any other file."""
    import torch

    from viewer.hybrid import hybrid_image

    assets = viewer.assets
    if assets is None or not assets.start_hybrid:
        return None
    renderer = assets.make_renderer()
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():  # as the viewer renders (AssetLayer.render_client); with gradients the field runs twice
        rgb, _ = hybrid_image(renderer.render(camera, time=None, shadows=False))
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    field = renderer.model.field
    decoder = getattr(field, "density_mlp", None)
    info = {"field": type(field).__name__, "field_decoder": type(decoder).__name__,
            "field_coverage": round(float((np.abs(rgb.astype(np.int16) - 255).max(-1) > 8).mean()), 4),
            "field_std": round(float(rgb.std()), 2), "field_render_seconds": round(seconds, 2),
            "field_render_cpu_seconds": round(cpu_seconds, 2)}
    return info, rgb.astype(np.float64) / 255.0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file", type=Path)
    p.add_argument("--no-sidecar", action="store_true", help="ignore FILE.view.json / FILE.cameras.json")
    p.add_argument("--rotate", choices=sorted(ROTATIONS), help="check a rotated copy of a z-up file")
    p.add_argument("--expect-up", help="the file's true up (x, y, z, -x, -y, -z), before --rotate")
    p.add_argument("--png", type=Path, help="save the render here")
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--browser", action="store_true",
                   help=f"also serve it to headless Chromium ({CHROMIUM}) and compare the browser's first frame")
    args = p.parse_args(argv)

    from rasterizer.camera import Camera, intrinsics_from_vertical_fov
    from viewer.commands import ViewConfig, build_viewer
    from viewer.framing import core_box, parse_up

    with tempfile.TemporaryDirectory() as tmp:
        path = args.file
        rotation = ROTATIONS[args.rotate] if args.rotate else np.eye(3)
        if args.rotate:
            path = rotated_copy(path, rotation, Path(tmp))
        v = build_viewer(ViewConfig(path=path, port=0, output=Path(tmp) / "viewer", cameras=not args.no_sidecar),
                         verbose=False)
        view = v.first_view
        cam = Camera.from_arrays(view.world_to_cam(), intrinsics_from_vertical_fov(view.fov, args.width, args.height),
                                 args.width, args.height)
        data = v.scene.splats
        _, _, core = core_box(data.means.astype(np.float64), 1 / (1 + np.exp(-data.logit_opacities.astype(np.float64))))
        result = {"file": str(args.file), "rotate": args.rotate, "sidecar": not args.no_sidecar, "rule": view.how,
                  "up": np.round(view.up, 4).tolist(), "position": np.round(view.position, 4).tolist(),
                  "look_at": np.round(view.look_at, 4).tolist(), "fov_deg": round(math.degrees(view.fov), 2),
                  "coverage": round(alpha_fraction(data, cam), 4),
                  "core_coverage": round(alpha_fraction(data.subset(core), cam), 4),
                  "core_gaussians": int(core.sum()), "gaussians": len(data)}
        if args.expect_up:
            truth = rotation @ parse_up(args.expect_up)
            result["upright"] = bool(view.up @ truth >= math.cos(math.radians(30)))
        field = field_first_frame(v, cam)
        if field is not None:
            result.update(field[0])
        if args.png:
            from PIL import Image

            img = field[1] if field is not None else v.scene.render_image(cam, (1.0, 1.0, 1.0), "cpu")
            Image.fromarray((img * 255 + 0.5).astype(np.uint8)).save(args.png)
            result["png"] = str(args.png)
        if args.browser:
            result.update(browser_check(v, args.width, args.height))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
