"""The browser viewer: a viser server showing a :class:`viewer.scene.SplatScene` client-side.

The browser draws the splats with viser's WebGL2 Gaussian renderer (DC colour only, no SH). The GUI
panel offers: file facts, a splat-scale slider, an opacity filter and a crop box (:mod:`viewer.crop`; each
re-sends the splats), a "render" button (the current browser camera rendered at full quality with
:mod:`rasterizer`, saved as a PNG; the opacity filter and the crop box apply to it too), keyframe buttons building a camera-path JSON (:mod:`viewer.camera_path`), and for dynamic scenes (4D
runs and ply4d files, :mod:`viewer.spacetime`; avatars, meshgs runs, :mod:`viewer.avatar`) a "Time" folder: a time
slider (the server slices or poses the model at that time and re-sends it; "pose time" for an avatar), play/pause,
a playback speed and the slice rate reached.

Frames: everything is in the model's OpenCV world; viser is told the scene's up direction (``-y`` by
default). viser cameras use OpenCV camera axes too (+z forward, -y up); conversion to
a :class:`rasterizer.camera.Camera` is :func:`viewer.camera_path.viser_camera_to_frame`.
"""

from __future__ import annotations

import errno
import math
import socket
import threading
import time as time_module
from pathlib import Path

import numpy as np

from viewer.camera_path import CameraPath, save_camera_path, viser_camera_to_frame, world_to_cam_to_viser
from viewer.blocks import add_block_cells
from viewer.crop import CropBox, starting_box
from viewer.framing import FirstView, frame_splats, view_from_camera
from viewer.scene import SplatScene, robust_bounds

SPLAT_NODE = "/splats"
CROP_NODE = "/crop_box"
DEFAULT_FOV = math.radians(50.0)
MAX_RENDER_SIDE = 2048
BACKGROUNDS = {"white": (1.0, 1.0, 1.0), "black": (0.0, 0.0, 0.0)}
TIME_STEP = 0.001  # the time slider's resolution (normalised time)
DEFAULT_SPEED = 0.1  # playback: normalised time per second (the whole span in 10 s)
MAX_PLAY_RATE = 30.0  # playback slices at most this many times per second


def port_is_free(host: str, port: int) -> bool:
    """True when a TCP server could bind ``host:port`` now, False when that address is in use. Any other
    failure (a host name that does not resolve, an address not on this machine, a port out of range)
    raises OSError naming ``--host`` / ``--port`` and the reason: it is not "in use"."""
    if not 0 <= port <= 65535:
        raise OSError(f"--port {port}: must be 0..65535 (0: any free port)")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as err:
        raise OSError(f"--host {host}: cannot resolve this name ({err.strerror}); give an address of this "
                      f"machine such as 127.0.0.1 or 0.0.0.0") from None
    with socket.socket(family, kind, proto) as s:
        try:
            s.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return False
            raise OSError(f"--host {host} --port {port}: cannot listen there ({err.strerror})") from None
    return True


def initial_view(scene: SplatScene, fov: float = DEFAULT_FOV, up: np.ndarray | None = None,
                 camera: tuple[np.ndarray, np.ndarray] | None = None) -> FirstView:
    """The first view of ``scene`` (:mod:`viewer.framing`, rule in docs/viewer.md): ``camera`` (position,
    look-at) when given; else the scene's start camera (a run's first training camera, a view sidecar's)
    exactly; else the Gaussians' core framed, with ``up`` (an ``--up`` override), the scene's known up or an
    estimate."""
    means = scene.splats.means.astype(np.float64)
    if up is None and scene.up_known:
        up = scene.up
    if camera is not None:
        if up is None:
            up = frame_splats(means, scene.splats.logit_opacities, fov).up
        return FirstView(np.asarray(camera[0], float), np.asarray(camera[1], float),
                         np.asarray(up, float) / np.linalg.norm(up), fov, "camera")
    if scene.start_camera is not None and 0 <= scene.start_camera < len(scene.cameras):
        cam = scene.cameras[scene.start_camera].camera
        centre, _ = robust_bounds(means)
        w2c = cam.world_to_cam_numpy()
        ahead = float((w2c[:3, :3] @ centre + w2c[:3, 3])[2])  # depth of the splats' centre: the orbit pivot
        return view_from_camera(w2c, cam.K_numpy(), cam.height, distance=max(ahead, 1e-3))
    return frame_splats(means, scene.splats.logit_opacities, fov, up=up)


class ViewerServer:
    """viser server + GUI for one scene. ``start()`` binds, ``stop()`` shuts down.

    Args:
        scene: what to show.
        host, port: where to listen (127.0.0.1 by default: not reachable from other machines). A port
            in use moves to the next free one (said aloud) unless ``strict_port``.
        meshes: [(path, trimesh.Trimesh)] shown with viser's mesh API (depth-tested with the splats).
        assets: a :class:`viewer.hybrid.AssetLayer` (inserted assets with gizmos and the browser / server
            hybrid compositing toggle), or None.
        output_dir: where "render" PNGs and ``camera_path.json`` go.
        crop: a :class:`viewer.crop.CropBox` to start with (``--crop``), or None (crop box off).
    """

    def __init__(self, scene: SplatScene, host: str = "127.0.0.1", port: int = 8080, meshes=(),
                 output_dir: str | Path = "viewer_output", strict_port: bool = False,
                 verbose: bool = True, assets=None, first_view: FirstView | None = None,
                 crop: CropBox | None = None):
        self.scene = scene
        self.first_view = first_view if first_view is not None else initial_view(scene)
        self.assets = assets
        self.splats_hidden = False  # the server hybrid render shows the splats instead
        self.host, self.requested_port, self.strict_port = host, port, strict_port
        self.meshes = list(meshes)
        self.output_dir = Path(output_dir)
        self.verbose = verbose
        self.server = None
        self.splat_handle = None
        self.camera_path = CameraPath()
        self.renders_saved: list[Path] = []
        self._lock = threading.Lock()
        self._scale = 1.0
        self._min_opacity = 0.0
        self._crop = crop  # None: the crop box is off
        self.crop_handle = None  # the box's wireframe in the scene
        self.gui: dict[str, object] = {}
        self._player: threading.Thread | None = None
        self._stop_play = threading.Event()
        self.slice_rate: float | None = None  # slices / s reached during the last second of playback

    # ------------------------------------------------------------------------------------ lifecycle

    def say(self, msg: str) -> None:
        if self.verbose:
            print(f"[splatforge view] {msg}", flush=True)

    def start(self) -> "ViewerServer":
        import viser

        if not port_is_free(self.host, self.requested_port) and self.requested_port != 0:
            if self.strict_port:
                raise OSError(f"port {self.requested_port} on {self.host} is already in use "
                              f"(pick another with --port)")
        self.server = viser.ViserServer(host=self.host, port=self.requested_port, verbose=False)
        port = self.port
        if self.requested_port not in (0, port):
            self.say(f"port {self.requested_port} is in use; serving on port {port} instead")
        self.say(f"open http://{self.host}:{port} in a browser")
        self._build_scene()
        self._build_gui()
        if getattr(self.scene, "streams", False):  # an LOD export: chunks follow the camera
            from viewer.lod import attach_lod

            attach_lod(self)
        if self.assets is not None:
            self.assets.attach(self)
        return self

    @property
    def port(self) -> int:
        return self.server.get_port()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.set_playing(False)
        if self.assets is not None:
            self.assets.stop()
        if self.server is not None:
            self.server.stop()
            self.server = None

    # ---------------------------------------------------------------------------------------- scene

    def _build_scene(self) -> None:
        s = self.server
        view = self.first_view
        up = self.scene.up if self.scene.up_known and view.how != "framed" else view.up
        s.scene.set_up_direction(tuple(float(v) for v in up))
        s.initial_camera.fov = view.fov
        s.initial_camera.position = tuple(float(v) for v in view.position)
        s.initial_camera.look_at = tuple(float(v) for v in view.look_at)
        s.initial_camera.up = tuple(float(v) for v in view.up)
        self.refresh_splats()
        self.show_crop_box()
        _, radius = robust_bounds(self.scene.splats.means)
        for i, cam in enumerate(c.camera for c in self.scene.cameras):
            if view.how == "training camera" and i == self.scene.start_camera:
                continue  # the eye is at its apex: its frustum would fill the first view
            wxyz, position = world_to_cam_to_viser(cam.world_to_cam_numpy())
            fov = 2.0 * math.atan(0.5 * cam.height / cam.K_numpy()[1, 1])
            s.scene.add_camera_frustum(f"/cameras/{i:04d}", fov=fov, aspect=cam.width / cam.height,
                                       scale=0.03 * radius, thickness=0.003 * radius, wxyz=wxyz,
                                       position=position, color=(60, 90, 200))
        for i, (path, mesh) in enumerate(self.meshes):
            s.scene.add_mesh_trimesh(f"/meshes/{i:02d}_{Path(path).stem}", mesh)

    def refresh_splats(self) -> None:
        """(Re-)send the scene's splats with the current scale factor, opacity threshold and crop box."""
        b = self.scene.browser(self._scale, self._min_opacity, self._crop)
        with self._lock:
            if len(b) == 0:  # nothing passes the filter: hide instead of sending an empty buffer
                if self.splat_handle is not None:
                    self.splat_handle.visible = False
                return
            if self.splat_handle is None:
                self.splat_handle = self.server.scene.add_gaussian_splats(
                    SPLAT_NODE, centers=b.centers, covariances=b.covariances, rgbs=b.rgbs,
                    opacities=b.opacities, visible=not self.splats_hidden)
            else:
                self.splat_handle.set_gaussians(b.centers, b.covariances, b.rgbs, b.opacities)
                self.splat_handle.visible = not self.splats_hidden
        if "shown" in self.gui:
            self.gui["shown"].value = f"{len(b):,} of {self.scene.total():,}"

    def set_splats_hidden(self, hidden: bool) -> None:
        """Hide (or show again) the browser's splats: the server hybrid render draws them itself."""
        self.splats_hidden = bool(hidden)
        with self._lock:
            if self.splat_handle is not None:
                self.splat_handle.visible = not hidden
        if not hidden:
            self.refresh_splats()

    def set_scale(self, factor: float) -> None:
        self._scale = float(factor)
        self.refresh_splats()

    def set_min_opacity(self, threshold: float) -> None:
        self._min_opacity = float(threshold)
        self.refresh_splats()

    @property
    def crop(self) -> CropBox | None:
        """The crop box in force (None: off)."""
        return self._crop

    def set_crop(self, crop: CropBox | None) -> None:
        """Crop to ``crop`` (None: turn the crop box off); re-sends the splats and moves the box's wireframe."""
        self._crop = crop
        self.refresh_splats()
        self.show_crop_box()

    def show_crop_box(self) -> None:
        """Draw the crop box as a wireframe (hidden while the crop is off)."""
        if self.server is None:
            return
        box = self._crop
        if box is None:
            if self.crop_handle is not None:
                self.crop_handle.visible = False
            return
        if self.crop_handle is not None:
            self.crop_handle.remove()
        self.crop_handle = self.server.scene.add_box(
            CROP_NODE, color=(255, 160, 0), dimensions=tuple(float(v) for v in np.maximum(box.size, 1e-6)),
            wireframe=True, position=tuple(float(v) for v in box.centre), cast_shadow=False, receive_shadow=False)

    def set_time(self, t: float) -> None:
        """Drive a dynamic scene to normalised time ``t``; re-sends the splats when they changed."""
        if self.scene.set_time(float(t)):
            self.refresh_splats()
            if self.assets is not None:
                self.assets.request_all()  # the server hybrid image shows the new time too

    # ------------------------------------------------------------------------------------------ GUI

    def _build_gui(self) -> None:
        gui = self.server.gui
        with gui.add_folder("Scene"):
            for key, value in self.scene.facts().items():
                gui.add_text(key, initial_value=value, disabled=True)
            self.gui["shown"] = gui.add_text("shown", initial_value="", disabled=True)
            gui.add_markdown("_The browser shows the DC (degree-0) colour only; use **render** for "
                             "full-quality view-dependent colour._")
        self.refresh_splats()  # fills "shown"
        with gui.add_folder("Display"):
            scale = gui.add_slider("splat scale", min=0.1, max=2.0, step=0.05, initial_value=1.0)
            opacity = gui.add_slider("min opacity", min=0.0, max=1.0, step=0.01, initial_value=0.0)
            scale.on_update(lambda _: self.set_scale(scale.value))
            opacity.on_update(lambda _: self.set_min_opacity(opacity.value))
            self.gui.update(scale=scale, opacity=opacity)
            _, radius = robust_bounds(self.scene.splats.means)
            self.block_cells, self.gui["block_cells"] = add_block_cells(self.server, gui, self.scene.run_dir,
                                                                        0.004 * radius)
        if self.scene.dynamic:
            self._build_time_gui(gui)
        with gui.add_folder("Render"):
            bg = gui.add_dropdown("background", tuple(BACKGROUNDS), initial_value="white")
            render = gui.add_button("render")
            key = gui.add_button("keyframe")
            clear = gui.add_button("clear keyframes")
            info = gui.add_text("camera path", initial_value="0 keyframes", disabled=True)
            self.gui.update(background=bg, render=render, keyframe=key, path_info=info)
        with gui.add_folder("Crop", expand_by_default=self._crop is not None):  # last: the panel above keeps its layout
            self._build_crop_gui(gui)

        @render.on_click
        def _(event) -> None:
            if event.client is None:
                return
            note = event.client.add_notification("Rendering", "rasterizing the current view...",
                                                 loading=True, with_close_button=False)
            try:
                _, path = self.render_client(event.client)
                note.title, note.body = "Saved render", str(path)
            except Exception as e:  # noqa: BLE001 - report in the browser, keep serving
                note.title, note.body, note.color = "Render failed", f"{type(e).__name__}: {e}", "red"
            note.loading, note.with_close_button, note.auto_close_seconds = False, True, 8.0

        @key.on_click
        def _(event) -> None:
            if event.client is not None:
                path = self.add_keyframe(event.client)
                event.client.add_notification("Keyframe", f"{len(self.camera_path.frames)} frames -> {path}",
                                              auto_close_seconds=4.0)

        @clear.on_click
        def _(_event) -> None:
            self.camera_path.frames.clear()
            info.value = "0 keyframes"

    def _build_crop_gui(self, gui) -> None:
        """The crop box controls: an on/off checkbox (on when ``--crop`` was given), its min and max corners
        (world units; they start at ``--crop`` or the splats' 1..99 percentile box) and a status line."""
        box = self._crop if self._crop is not None else starting_box(self.scene.splats.means)
        step = float(max(box.size.max(), 1e-3)) / 100.0
        on = gui.add_checkbox("crop box", initial_value=self._crop is not None,
                              hint="hide the Gaussians whose centre is outside the box (browser and render)")
        lo = gui.add_vector3("crop min", initial_value=box.lo, step=step)
        hi = gui.add_vector3("crop max", initial_value=box.hi, step=step)
        status = gui.add_text("crop", initial_value=box.text() if self._crop is not None else "off", disabled=True)
        self.gui.update(crop_on=on, crop_min=lo, crop_max=hi, crop_status=status)
        for handle in (on, lo, hi):
            handle.on_update(lambda _: self.apply_crop_gui())

    def apply_crop_gui(self) -> None:
        """Read the crop controls: set the box they describe, or turn it off; a min above its max keeps the
        previous box and says why in the status line."""
        status = self.gui["crop_status"]
        if not self.gui["crop_on"].value:
            self.set_crop(None)
            status.value = "off"
            return
        try:
            box = CropBox(tuple(self.gui["crop_min"].value), tuple(self.gui["crop_max"].value))
        except ValueError as err:
            status.value = str(err).split(": ", 1)[1].split(";")[0] + " (not applied)"
            return
        self.set_crop(box)
        status.value = box.text()

    def _build_time_gui(self, gui) -> None:
        """The "Time" folder of a dynamic scene: time slider, play/pause, speed, and the slice rate reached."""
        with gui.add_folder("Time"):
            start = float(getattr(self.scene, "time", 0.0))
            label = getattr(self.scene, "time_label", "time")  # an avatar: "pose time" (viewer/avatar.py)
            time = gui.add_slider(label, min=0.0, max=1.0, step=TIME_STEP, initial_value=start,
                                  hint=getattr(self.scene, "time_hint", "") or None)
            play = gui.add_button("play")
            speed = gui.add_slider("speed", min=0.01, max=1.0, step=0.01, initial_value=DEFAULT_SPEED,
                                   hint="normalised time per second of playback (1: the whole span in 1 s)")
            rate = gui.add_text("slices / s", initial_value="-", disabled=True,
                                hint="new time slices the server sliced and sent per second while playing")
            time.on_update(lambda _: self.set_time(time.value))
            play.on_click(lambda _: self.set_playing(not self.playing))
            self.gui.update(time=time, play=play, speed=speed, rate=rate)

    @property
    def playing(self) -> bool:
        return self._player is not None and self._player.is_alive() and not self._stop_play.is_set()

    def set_playing(self, on: bool) -> None:
        """Start or stop playback (the time advances by ``speed`` per second and wraps from 1 to 0)."""
        if on and not self.playing:
            self._stop_play.clear()
            self._player = threading.Thread(target=self._play_loop, name="splatforge-playback", daemon=True)
            self._player.start()
        elif not on and self._player is not None:
            self._stop_play.set()
            if self._player is not threading.current_thread():
                self._player.join(timeout=10.0)
            self._player = None
        if "play" in self.gui:
            self.gui["play"].label = "pause" if on else "play"

    def _play_loop(self) -> None:
        """Advance the time slider (whose callback slices and re-sends) until stopped; report slices / s."""
        last = counted_since = time_module.monotonic()
        count = 0
        while not self._stop_play.is_set() and self.server is not None:
            now = time_module.monotonic()
            t = (self.gui["time"].value + self.gui["speed"].value * (now - last)) % 1.0
            last = now
            self.gui["time"].value = t  # runs set_time (slice + send) synchronously
            count += 1
            if now - counted_since >= 1.0:
                self.slice_rate = count / (now - counted_since)
                self.gui["rate"].value = f"{self.slice_rate:.1f}"
                count, counted_since = 0, now
            self._stop_play.wait(max(0.0, 1.0 / MAX_PLAY_RATE - (time_module.monotonic() - now)))

    # -------------------------------------------------------------------------- render / keyframes

    def client_frame(self, client, width: int | None = None, height: int | None = None):
        """float64 :class:`rasterizer.camera.Camera` of a client's current camera, at the browser's canvas
        size (longest side capped at MAX_RENDER_SIDE) unless width/height are given."""
        cam = client.camera
        if width is None or height is None:
            w, h = int(cam.image_width), int(cam.image_height)
            if w <= 0 or h <= 0:
                w, h = 960, 540
            k = min(1.0, MAX_RENDER_SIDE / max(w, h))
            width, height = max(1, round(w * k)), max(1, round(h * k))
        return viser_camera_to_frame(cam.wxyz, cam.position, cam.fov, width, height)

    def render_frame(self, frame, background=None) -> np.ndarray:
        """[H, W, 3] float32 sRGB render of the scene (all SH degrees; a 4D scene at its time) at ``frame``
        (a Camera)."""
        bg = BACKGROUNDS[self.gui["background"].value] if background is None and "background" in self.gui \
            else (background if background is not None else BACKGROUNDS["white"])
        return self.scene.render_image(frame, bg, self.render_device(), min_opacity=self._min_opacity,
                                       crop=self._crop)

    @staticmethod
    def render_device():
        """Where the render button renders: the GPU when PyTorch sees one (gsplat kernels), else the CPU
        (Numba kernels)."""
        import torch

        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def render_client(self, client, width: int | None = None, height: int | None = None):
        """Render a client's current camera with the rasterizer; save a PNG in ``output_dir``.
        Returns (image [H, W, 3] float32, PNG path)."""
        from PIL import Image

        img = self.render_frame(self.client_frame(client, width, height))
        self.output_dir.mkdir(parents=True, exist_ok=True)
        i = len(list(self.output_dir.glob("render_*.png")))
        path = self.output_dir / f"render_{i:04d}.png"
        Image.fromarray((img * 255 + 0.5).astype(np.uint8)).save(path)
        self.renders_saved.append(path)
        self.say(f"saved {path}")
        return img, path

    def add_keyframe(self, client) -> Path:
        """Append a client's camera to the camera path and rewrite ``output_dir/camera_path.json``."""
        self.camera_path.frames.append(self.client_frame(client))
        path = save_camera_path(self.output_dir / "camera_path.json", self.camera_path)
        if "path_info" in self.gui:
            self.gui["path_info"].value = f"{len(self.camera_path.frames)} keyframes"
        return path
