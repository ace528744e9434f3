"""Inserted assets in the viewer: gizmos, pose read-outs, and the browser / server-hybrid compositing toggle.

:class:`AssetLayer` adds, for each :class:`recon.hybrid.assets.PlacedAsset`, a viser transform gizmo with the
asset's mesh parts under it (:mod:`viewer.assets` for the frames), and an "Assets" GUI folder:

- per asset, ``pose NN`` (the ``--pose`` string of ``splatforge insert``, in the scene's ground frame; it
  follows the gizmo, and typing a pose there moves the gizmo) and ``scale NN``;
- ``compositing``: **browser** (default) or **server hybrid**;
- ``hybrid size`` (longest side of the server render, pixels), ``shadows``, and ``hybrid frame`` (the last
  server frame's time).

Compositing modes.

- *browser*: viser draws the splats (WebGL, DC colour) and the asset meshes (their texture or colours under
  three.js lighting) depth-tested against each other in the browser; no shadows, and mirror / glass assets
  show their albedo; interactive.
- *server hybrid*: the server renders the client's camera with :class:`recon.hybrid.render.HybridRenderer`
  (occlusion, shadows both ways, mirror / glass bounces) at a reduced size and sends it with
  ``client.scene.set_background_image(rgb, depth=...)``; the browser stretches it over the canvas. The
  browser's splats **and asset meshes are hidden** in this mode: the server image already holds both, and a
  browser mesh drawn over it would cover the asset's shading in the server picture, its reflections and
  what glass shows, and z-fight with the server's own mesh pixels (the depths agree only to the resolution
  of the reduced render). What stays in the browser is depth-tested against the server image's depth
  (camera z of the first visible surface: asset or expected scene depth): the training-camera frustums;
  the gizmo is drawn without depth test so it can always be grabbed. A re-render is queued when the
  client's camera, a gizmo, a pose/scale field, the scene time or a hybrid setting changes; one render runs
  at a time and the newest request wins (renders are coalesced, not queued), at most one per
  ``MIN_INTERVAL`` seconds per client. While a render is in flight the previous image stays on screen.
  Progressive: a request is first rendered at :data:`PREVIEW_FRACTION` of ``hybrid size`` (a quarter of the
  pixels), and once no new request has come for :data:`REFINE_DELAY` seconds (the camera stopped) again at
  full size.

Without assets the layer is a plain server renderer: ``splatforge view`` of a NeRF run (its splats.ply is
only a baked approximation of the field) starts in this mode and shows the field itself, low resolution
while the camera moves and refined when it stops (no proxy mesh is built: nothing casts shadows).

The depth sent is camera z (what viser's background shader expects, ``viewZToPerspectiveDepth``); pixels
with no surface get ``FAR_DEPTH`` (viser's encoding saturates at 167.77 scene units, so content further
than that composites as if at that distance).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from recon.hybrid.assets import AssetError, Light, PlacedAsset, parse_pose
from viewer.assets import browser_meshes, format_pose, pose_from_gizmo, pose_to_gizmo

MODES = ("browser", "server hybrid")
DEFAULT_HYBRID_SIDE = 320  # longest side of the server render on a CPU (pixels)
MIN_SIDE, MAX_SIDE = 64, 1024  # the "hybrid size" slider's range
MIN_INTERVAL = 0.05  # seconds between two server renders of one client (throttle)
DEBOUNCE = 0.03  # seconds to wait after a request so a stream of camera updates coalesces
FAR_DEPTH = 167.0  # camera z sent where the server image shows no surface (viser saturates at 167.77)
PREVIEW_FRACTION = 0.5  # while the camera moves, server frames are rendered at this fraction of "hybrid size"
REFINE_DELAY = 0.3  # seconds without a new request after which a preview is rendered again at full size


class HybridUnavailable(AssetError):
    """The server-side hybrid render cannot run for this scene (no run folder, method not compositable, or
    the hybrid renderer is not installed); the message says why."""


def default_renderer_factory(run_dir: Path | None, assets: list[PlacedAsset], lights: list[Light]):
    """A callable building :class:`recon.hybrid.render.HybridRenderer` for ``run_dir`` (its proxy mesh is
    cached in RUN/hybrid/proxy.ply by the renderer); HybridUnavailable when ``run_dir`` is None."""

    def make():
        if run_dir is None:
            raise HybridUnavailable("server hybrid rendering needs a training run folder (splatforge view RUN "
                                    "--asset ...): a splat file has no model to composite against")
        try:
            from recon.hybrid.render import HybridRenderer
        except ImportError as err:
            raise HybridUnavailable(f"server hybrid rendering is unavailable: recon.hybrid.render cannot be "
                                    f"imported ({err})") from None
        from recon.run.folder import Run

        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        return HybridRenderer.for_run(Run.open(run_dir), assets, lights, device=device, proxy=bool(assets),
                                      warn=lambda msg: None)  # the viewer warned about outside assets already

    return make


def reposed(renderer, assets: list[PlacedAsset]):
    """``renderer`` showing ``assets`` at their current poses. :class:`recon.hybrid.render.HybridRenderer`
    caches its ray-casting scene of the assets (keyed by time only), so a moved asset needs a renderer of
    its own: the same model, lights, frame, proxy and settings through the public constructor (cheap: the
    model and the proxy mesh are shared, not rebuilt). A renderer with an ``invalidate()`` method is told
    instead."""
    if hasattr(renderer, "invalidate"):
        renderer.invalidate()
        return renderer
    r = renderer
    extra = {k: getattr(r, k) for k in ("shadow_strength", "backend") if hasattr(r, k)}
    return type(r)(r.model, assets, r.lights, r.frame, r.proxy, r.ambient, r.bounces, r.background, **extra)


def hybrid_image(out) -> tuple[np.ndarray, np.ndarray]:
    """(rgb uint8 [H, W, 3], depth float32 [H, W] camera z with FAR_DEPTH where no surface) of a
    :class:`recon.hybrid.render.HybridFrame` for ``set_background_image``."""
    import torch

    rgb = out.rgb.detach() if isinstance(out.rgb, torch.Tensor) else torch.as_tensor(out.rgb)
    rgb = (rgb.float().clamp(0.0, 1.0) * 255.0 + 0.5).to(torch.uint8).cpu().numpy()
    depth = np.asarray(out.depth, np.float32)
    depth = np.where((depth > 0) & np.isfinite(depth), np.minimum(depth, FAR_DEPTH), FAR_DEPTH)
    return rgb, depth.astype(np.float32)


class AssetLayer:
    """Gizmos, GUI and hybrid rendering for inserted assets in a :class:`viewer.server.ViewerServer`.

    Args:
        assets: the placed assets (their ``pose`` is updated as gizmos move; the same objects are handed to
            the hybrid renderer); lights: for the hybrid render; frame [3, 3]: the ground frame (columns
            e1, e2, up); names: a display name per asset.
        make_renderer: () -> an object with ``render(camera, time=None, shadows=True) -> HybridFrame``
            (default: :func:`default_renderer_factory` of ``run_dir``); built on the first hybrid request.
        start_hybrid: start in "server hybrid" mode; hybrid_side: initial ``hybrid size``.
    """

    def __init__(self, assets: Sequence[PlacedAsset], lights: Sequence[Light], frame: np.ndarray,
                 run_dir: Path | None = None, names: Sequence[str] | None = None,
                 make_renderer: Callable[[], object] | None = None, start_hybrid: bool = False,
                 hybrid_side: int = DEFAULT_HYBRID_SIDE):
        self.assets = list(assets)
        self.lights = list(lights)
        self.frame = np.asarray(frame, np.float64)
        self.run_dir = run_dir
        self.names = list(names) if names is not None else [a.mesh.name for a in self.assets]
        self.make_renderer = make_renderer or default_renderer_factory(run_dir, self.assets, self.lights)
        self.start_hybrid, self.hybrid_side = start_hybrid, int(hybrid_side)
        self.viewer = None
        self.gizmos: list = []
        self.mesh_handles: list[list] = []
        self.gui: dict[str, object] = {}
        self.renderer = None
        self.renderer_error: str | None = None
        self.frame_times: list[dict] = []  # per server frame: ms (all), render_ms, send_ms, size, stage_* (renderer)
        self.frames_sent = 0
        self._lock = threading.RLock()
        self._pending: dict[object, object] = {}  # client id -> client handle awaiting a render
        self._refine: dict[object, object] = {}  # client id -> client whose last frame was a preview
        self._last_render: dict[object, float] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._syncing = False  # a pose field being set from the gizmo (not typed by the user)
        self._poses_changed = False  # the renderer's ray-casting scene must be rebuilt
        self.build_seconds: float | None = None

    # ------------------------------------------------------------------------------------------ setup

    def attach(self, viewer) -> None:
        """Add the gizmos, meshes and GUI to a started ``viewer`` (:class:`viewer.server.ViewerServer`)."""
        self.viewer = viewer
        scene = viewer.server.scene
        for i, (asset, name) in enumerate(zip(self.assets, self.names)):
            node = f"/assets/{i:02d}_{Path(name).stem}"
            wxyz, position = pose_to_gizmo(asset.pose, self.frame)
            v = asset.mesh.vertices
            size = float(np.max(v.max(0) - v.min(0))) * asset.pose.scale
            gizmo = scene.add_transform_controls(node, scale=max(0.75 * size, 1e-3), depth_test=False,
                                                 wxyz=wxyz, position=position)
            parts = [scene.add_mesh_trimesh(f"{node}/part_{p:02d}", mesh, scale=asset.pose.scale)
                     for p, mesh in enumerate(browser_meshes(asset.mesh))]
            gizmo.on_update(lambda event, i=i: self._gizmo_moved(i))
            self.gizmos.append(gizmo)
            self.mesh_handles.append(parts)
        self._build_gui(viewer.server.gui)
        viewer.server.on_client_connect(self._client_connected)
        viewer.server.on_client_disconnect(lambda client: self._forget(client.client_id))
        for client in viewer.server.get_clients().values():
            self._client_connected(client)
        self._worker = threading.Thread(target=self._loop, name="splatforge-hybrid", daemon=True)
        self._worker.start()
        if self.start_hybrid:
            self.gui["mode"].value = MODES[1]

    def _build_gui(self, gui) -> None:
        with gui.add_folder("Assets"):
            for i, (asset, name) in enumerate(zip(self.assets, self.names)):
                pose = gui.add_text(f"pose {i:02d}", initial_value=format_pose(asset.pose),
                                    hint=f"{name}: --pose for splatforge insert (x,y,z world; yaw,pitch,roll "
                                         f"degrees about up / e2 / e1 of the ground frame; scale). Type a pose "
                                         f"to move the asset.")
                scale = gui.add_number(f"scale {i:02d}", initial_value=float(asset.pose.scale), min=1e-6,
                                       step=1e-3, hint=f"{name}: uniform scale")
                pose.on_update(lambda _e, i=i: self._pose_typed(i))
                scale.on_update(lambda _e, i=i: self._scale_changed(i))
                self.gui[f"pose{i}"], self.gui[f"scale{i}"] = pose, scale
            mode = gui.add_dropdown("compositing", MODES, initial_value=MODES[0],
                                    hint="browser: splats and meshes depth-tested in the browser (fast, no "
                                         "shadows); server hybrid: the server's hybrid render (shadows, "
                                         "reflections) as the background image, with its depth")
            side = gui.add_slider("hybrid size", min=MIN_SIDE, max=MAX_SIDE, step=16, initial_value=self.hybrid_side,
                                  hint="longest side of the server render in pixels (the browser stretches it)")
            shadows = gui.add_checkbox("shadows", initial_value=True)
            info = gui.add_text("hybrid frame", initial_value="-", disabled=True,
                                hint="time of the last server render (render + encode/send) and its size")
            gui.add_markdown("_server hybrid hides the browser splats and asset meshes (the server image holds "
                             "both, with shadows and reflections); the gizmo stays on top._")
            mode.on_update(lambda _e: self._mode_changed())
            side.on_update(lambda _e: self.request_all())
            shadows.on_update(lambda _e: self.request_all())
            self.gui.update(mode=mode, side=side, shadows=shadows, info=info)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._worker is not None and self._worker is not threading.current_thread():
            self._worker.join(timeout=30.0)

    # ------------------------------------------------------------------------------------------ poses

    @property
    def hybrid(self) -> bool:
        return "mode" in self.gui and self.gui["mode"].value == MODES[1]

    def pose_text(self, i: int) -> str:
        return self.gui[f"pose{i}"].value

    def _gizmo_moved(self, i: int) -> None:
        g = self.gizmos[i]
        with self._lock:
            pose = pose_from_gizmo(g.wxyz, g.position, self.assets[i].pose.scale, self.frame)
            self.assets[i].pose = pose
            self._poses_changed = True
            self._show_pose(i, pose)
        self.request_all()

    def _show_pose(self, i: int, pose) -> None:
        self._syncing = True
        try:
            self.gui[f"pose{i}"].value = format_pose(pose)
            if abs(self.gui[f"scale{i}"].value - pose.scale) > 1e-12:
                self.gui[f"scale{i}"].value = float(pose.scale)
        finally:
            self._syncing = False

    def set_pose(self, i: int, pose) -> None:
        """Move asset ``i`` (gizmo, meshes, read-out, hybrid render) to ``pose``."""
        with self._lock:
            self.assets[i].pose = pose
            self._poses_changed = True
            wxyz, position = pose_to_gizmo(pose, self.frame)
            self.gizmos[i].wxyz, self.gizmos[i].position = wxyz, position
            for h in self.mesh_handles[i]:
                h.scale = float(pose.scale)
            self._show_pose(i, pose)
        self.request_all()

    def _pose_typed(self, i: int) -> None:
        if self._syncing:
            return
        text = self.gui[f"pose{i}"].value
        try:
            pose = parse_pose(text)
        except AssetError as err:
            self._notify("Pose not understood", str(err), "red")
            return
        if format_pose(pose) != format_pose(self.assets[i].pose):
            self.set_pose(i, pose)

    def _scale_changed(self, i: int) -> None:
        if self._syncing:
            return
        s = float(self.gui[f"scale{i}"].value)
        if s > 0 and s != self.assets[i].pose.scale:
            self.set_pose(i, replace(self.assets[i].pose, scale=s))

    # ------------------------------------------------------------------------------------------ modes

    def _mode_changed(self) -> None:
        hybrid = self.hybrid
        v = self.viewer
        v.set_splats_hidden(hybrid)
        for parts in self.mesh_handles:
            for h in parts:
                h.visible = not hybrid
        if hybrid:
            self.request_all()
        else:
            for client in v.server.get_clients().values():
                client.scene.set_background_image(None)

    def _client_connected(self, client) -> None:
        client.camera.on_update(lambda _cam: self.request(client))
        self.request(client)

    def _forget(self, client_id) -> None:
        with self._lock:
            self._pending.pop(client_id, None)
            self._refine.pop(client_id, None)
            self._last_render.pop(client_id, None)

    def request(self, client) -> None:
        """Queue a server render for ``client`` (hybrid mode only; coalesced with any pending request)."""
        if not self.hybrid:
            return
        with self._lock:
            self._pending[client.client_id] = client
        self._wake.set()

    def request_all(self) -> None:
        if self.viewer is not None and self.viewer.server is not None:
            for client in self.viewer.server.get_clients().values():
                self.request(client)

    def _notify(self, title: str, body: str, color: str | None = None) -> None:
        if self.viewer is None or self.viewer.server is None:
            return
        for client in self.viewer.server.get_clients().values():
            client.add_notification(title, body, auto_close_seconds=8.0, color=color)

    # ------------------------------------------------------------------------------------------ worker

    def _loop(self) -> None:
        """Serve requests (previews at :data:`PREVIEW_FRACTION` of the size) and, once no request has come
        for :data:`REFINE_DELAY` seconds, the full-size frames of the clients whose last frame was a preview."""
        while not self._stop.is_set():
            woke = self._wake.wait(timeout=REFINE_DELAY if self._refine else 0.5)
            if self._stop.is_set():
                return
            if woke:
                self._wake.clear()
                time.sleep(DEBOUNCE)
                with self._lock:
                    jobs, self._pending = self._pending, {}
                fraction = PREVIEW_FRACTION
            else:
                with self._lock:
                    jobs, self._refine = self._refine, {}
                fraction = 1.0
            if not self._serve(jobs, fraction):
                continue

    def _serve(self, jobs: dict, fraction: float) -> bool:
        """Render each client of ``jobs`` at ``fraction`` of the size (previews are queued for refinement);
        False when rendering stopped (hybrid off, failure)."""
        for cid, client in jobs.items():
            if self._stop.is_set() or not self.hybrid:
                return False
            wait = MIN_INTERVAL - (time.monotonic() - self._last_render.get(cid, -1e9))
            if wait > 0:
                time.sleep(wait)
            try:
                self.render_client(client, fraction)
            except HybridUnavailable as err:
                self._hybrid_failed(str(err))
                return False
            except Exception as err:  # noqa: BLE001 - report in the browser, keep serving
                if self.viewer is not None and self.viewer.server is not None:
                    self.viewer.say(f"hybrid render failed: {type(err).__name__}: {err}")
                    self._hybrid_failed(f"{type(err).__name__}: {err}")
                return False
            self._last_render[cid] = time.monotonic()
            if fraction < 1.0:
                with self._lock:
                    if cid not in self._pending:
                        self._refine[cid] = client
        return True

    def _hybrid_failed(self, message: str) -> None:
        self.renderer_error = message
        self._notify("Server hybrid render unavailable", message, "red")
        self.gui["info"].value = f"failed: {message}"
        self.gui["mode"].value = MODES[0]  # back to browser compositing (its callback restores the splats)

    def ensure_renderer(self):
        """The hybrid renderer, built on first use (loading the model and the proxy mesh; may take a while),
        and re-posed when gizmos moved since the last render (:func:`reposed`)."""
        if self.renderer is None:
            self.gui["info"].value = "building the hybrid renderer (model, proxy mesh)..."
            t0 = time.perf_counter()
            self.renderer = self.make_renderer()
            self.build_seconds = time.perf_counter() - t0
            self.viewer.say(f"hybrid renderer ready in {self.build_seconds:.1f} s")
            frame = getattr(self.renderer, "frame", None)
            if frame is not None and not np.allclose(frame, self.frame, atol=1e-6):
                self.viewer.say("warning: the hybrid renderer's ground frame differs from the viewer's; the pose "
                                "read-out follows the renderer's")
                self.frame = np.asarray(frame, np.float64)
            self._poses_changed = False
        with self._lock:
            if self._poses_changed:
                self.renderer = reposed(self.renderer, self.assets)
                self._poses_changed = False
        return self.renderer

    def camera_for(self, client, fraction: float = 1.0):
        """The client's camera at ``fraction`` of the reduced hybrid size (same aspect as its canvas),
        float32."""
        import torch

        cam = client.camera
        w, h = int(cam.image_width), int(cam.image_height)
        if w <= 0 or h <= 0:
            w, h = 960, 540
        k = max(float(self.gui["side"].value) * fraction, 16.0) / max(w, h)
        frame = self.viewer.client_frame(client, max(1, round(w * k)), max(1, round(h * k)))
        model = getattr(self.renderer, "model", None)
        return frame.to(device=getattr(model, "device", None), dtype=torch.float32)

    def render_client(self, client, fraction: float = 1.0) -> dict:
        """Render ``client``'s camera (at ``fraction`` of the hybrid size) with the hybrid renderer and send it
        as its background image (with depth). Returns the frame's timing record (also appended to
        ``frame_times``; ``preview``: rendered below full size)."""
        import torch

        renderer = self.ensure_renderer()
        t0 = time.perf_counter()
        camera = self.camera_for(client, fraction)
        scene = self.viewer.scene
        with torch.no_grad():
            out = renderer.render(camera, time=getattr(scene, "time", None) if scene.dynamic else None,
                                  shadows=bool(self.gui["shadows"].value))
        t1 = time.perf_counter()
        rgb, depth = hybrid_image(out)
        if not self.hybrid:  # switched back while rendering: do not cover the browser view
            return {}
        if self.viewer.server is None or client.client_id not in self.viewer.server.get_clients():
            return {}  # the page went away while rendering
        client.scene.set_background_image(rgb, format="jpeg", jpeg_quality=90, depth=depth)
        t2 = time.perf_counter()
        record = {"ms": 1e3 * (t2 - t0), "render_ms": 1e3 * (t1 - t0), "send_ms": 1e3 * (t2 - t1),
                  "preview": fraction < 1.0,
                  "size": (int(camera.width), int(camera.height)), **{f"stage_{k}": float(v) for k, v in
                                                                      dict(getattr(out, "timings", {})).items()}}
        self.frame_times.append(record)
        self.frames_sent += 1
        self.gui["info"].value = f"{record['ms']:.0f} ms at {camera.width}x{camera.height}"
        return record
