"""``splatforge view``: serve a splat FILE or training RUN_DIR in the browser (viser)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np

from recon.core.errors import fail
from viewer.scene import ViewerInputError, load_meshes, load_scene

try:
    import tyro

    _Positional = tyro.conf.Positional
    _NoPrefix = tyro.conf.arg(name="")
    _UseAppend = tyro.conf.UseAppendAction
except ImportError:  # pragma: no cover - tyro is a dependency; keeps the module importable
    _Positional = _NoPrefix = _UseAppend = None


def _appended(tp):
    """``--flag A --flag B`` (repeated flags) for a tuple field, as ``splatforge insert`` takes them."""
    return Annotated[tp, _UseAppend] if _UseAppend is not None else tp


@dataclass
class ViewConfig:
    """Browser viewer configuration."""

    path: Annotated[Path, _Positional] if _Positional else Path
    """splat file (.ply, .splat, .spz), a ply4d 4D model, or a training run folder (a 4dgs run shows its 4D
    model with a time slider; a neus sequence run on dynamic data its frames, the nearest to the slider's time)"""
    host: str = "127.0.0.1"
    """address to listen on (0.0.0.0 exposes the viewer to the network)"""
    port: int = 8080
    """port to listen on; if it is in use the next free port is taken (and printed)"""
    strict_port: bool = False
    """fail instead of moving to the next free port"""
    mesh: tuple[Path, ...] = ()
    """meshes (OBJ, PLY, GLB) to show with the splats"""
    cameras: bool = True
    """show the training cameras of a run folder or of a file's view sidecar (FILE.view.json /
    FILE.cameras.json); --no-cameras also ignores the sidecar"""
    up: str | None = None
    """world up axis: x, y, z, -x, -y or -z (default: the run's or the sidecar's, else estimated from the
    splats; docs/viewer.md, "The first view")"""
    camera: str | None = None
    """first camera as "px,py,pz,tx,ty,tz": its position and the point it looks at (default: the run's or the
    sidecar's start camera, else the splats' core framed)"""
    crop: str | None = None
    """crop box "x0,y0,z0,x1,y1,z1" (min and max corners, world units): only the Gaussians whose centre is inside
    are shown and rendered; write --crop=-1,-1,-1,1,1,1 for a negative first number (default: off; the GUI's
    "crop box" toggles and moves it)"""
    output: Path | None = None
    """folder for render PNGs and camera_path.json (default: RUN_DIR/viewer or FILE's folder/viewer)"""
    time: float | None = None
    """4D models: the normalised time in [0, 1] shown first (default 0)"""
    play: bool = False
    """4D models: start playing at once"""
    exit_after: float | None = None
    """stop the server after this many seconds (tests, scripted screenshots)"""
    asset: _appended(tuple[Path, ...]) = ()
    """mesh asset (OBJ, PLY, GLB) to place in the scene with a transform gizmo; repeat the flag for several;
    the GUI shows each one's --pose string for splatforge insert"""
    pose: _appended(tuple[str, ...]) = ()
    """"x,y,z[,yaw,pitch,roll[,scale]]" per --asset, in order (default: the scene's centre, upright, 0.3 of
    the scene's radius)"""
    material: _appended(tuple[str, ...]) = ()
    """diffuse, mirror or glass[:ior] per --asset (shown by the server hybrid render; default diffuse)"""
    asset_up: Literal["y", "z"] = "y"
    """up axis of the asset files: y (glTF, most OBJ) or z"""
    light: _appended(tuple[str, ...]) = ()
    """sun:azimuth,elevation[,intensity[,r,g,b]] or point:x,y,z[,intensity[,r,g,b]]; repeat for several
    lights (default: sun:45,60)"""
    hybrid: bool = False
    """start with the server hybrid render (shadows, reflections) instead of browser compositing"""
    hybrid_size: int = 320
    """longest side in pixels of the server hybrid render (the browser stretches it to the canvas)"""


def build_viewer(cfg: ViewConfig, verbose: bool = True):
    """Load and validate everything, then return an unstarted :class:`viewer.server.ViewerServer`.
    Raises ViewerInputError naming the file for missing/corrupt inputs."""
    from viewer.server import ViewerServer

    crop = crop_box(cfg)
    scene = load_scene(cfg.path, cameras=cfg.cameras)
    first = first_view(cfg, scene)
    if cfg.time is not None or cfg.play:
        check_time_flags(cfg, scene)
    meshes = load_meshes(cfg.mesh)
    if not cfg.asset and (cfg.pose or cfg.material or cfg.light or cfg.hybrid):
        raise ViewerInputError("--pose / --material / --light / --hybrid apply to inserted assets: give the mesh "
                               "with --asset FILE (OBJ, PLY or GLB)")
    assets = asset_layer(cfg, scene, verbose) if cfg.asset or baked_splats(scene) else None
    base = scene.run_dir if scene.run_dir is not None else scene.source.parent
    output = cfg.output if cfg.output is not None else base / "viewer"
    return ViewerServer(scene, host=cfg.host, port=cfg.port, meshes=meshes, output_dir=output,
                        strict_port=cfg.strict_port, verbose=verbose, assets=assets, first_view=first, crop=crop)


def crop_box(cfg: ViewConfig):
    """The :class:`viewer.crop.CropBox` of ``--crop`` (None without it); ViewerInputError for a bad one."""
    from viewer.crop import parse_crop

    if cfg.crop is None:
        return None
    try:
        return parse_crop(cfg.crop)
    except ValueError as err:
        raise ViewerInputError(str(err)) from None


def first_view(cfg: ViewConfig, scene):
    """The :class:`viewer.framing.FirstView` of ``--camera`` / ``--up`` / the scene (ViewerInputError for a bad
    flag); ``--up`` also becomes the scene's up."""
    from viewer.framing import parse_camera, parse_up
    from viewer.server import initial_view

    try:
        up = parse_up(cfg.up) if cfg.up is not None else None
        camera = parse_camera(cfg.camera) if cfg.camera is not None else None
    except ValueError as err:
        raise ViewerInputError(str(err)) from None
    if up is not None:
        scene.up, scene.up_known = up, True
    return initial_view(scene, up=up, camera=camera)


def baked_splats(scene) -> bool:
    """Whether ``scene`` is a run whose splats.ply only stands in for the model (a NeRF's baked Gaussians:
    ``SPLAT_FILE_IS_BAKED``): then the viewer shows server-rendered frames of the model itself."""
    if scene.run_dir is None or scene.dynamic:
        return False
    from recon.core.errors import SplatforgeError
    from recon.run.folder import Run

    try:
        return bool(getattr(Run.open(scene.run_dir).model_class, "SPLAT_FILE_IS_BAKED", False))
    except (SplatforgeError, OSError):
        return False


def asset_layer(cfg: ViewConfig, scene, verbose: bool = True):
    """The :class:`viewer.hybrid.AssetLayer` of ``--asset`` / ``--pose`` / ``--material`` / ``--light``;
    ViewerInputError naming the file or string that cannot be used (and for the hybrid flags without
    --asset). Warns when an asset lies entirely outside the scene's bounds."""
    from recon.hybrid.assets import AssetError, check_inside
    from viewer.assets import load_assets, load_lights, scene_frame
    from viewer.hybrid import MAX_SIDE, MIN_SIDE, AssetLayer
    from viewer.scene import load_run_cameras, robust_bounds

    if not MIN_SIDE <= cfg.hybrid_size <= MAX_SIDE:
        raise ViewerInputError(f"--hybrid-size {cfg.hybrid_size}: give {MIN_SIDE}..{MAX_SIDE} pixels (the longest "
                               f"side of the server hybrid render)")
    cameras = scene.cameras or (load_run_cameras(scene.run_dir) if scene.run_dir is not None else [])
    frame = scene_frame(cameras, None if cameras else scene.up)
    means = scene.splats.means.astype(np.float64)
    centre, radius = robust_bounds(means)
    try:
        assets = load_assets(cfg.asset, cfg.pose, cfg.material, centre=centre, radius=radius, up=cfg.asset_up)
        lights = load_lights(cfg.light, frame)
    except AssetError as err:
        raise ViewerInputError(str(err)) from None
    lo, hi = np.percentile(means, [1.0, 99.0], axis=0)
    check_inside(assets, frame, lo, hi,
                 lambda msg: print(f"[splatforge view] warning: {msg}", flush=True) if verbose else None)
    return AssetLayer(assets, lights, frame, run_dir=scene.run_dir, names=[Path(p).name for p in cfg.asset],
                      start_hybrid=cfg.hybrid or baked_splats(scene), hybrid_side=cfg.hybrid_size)


def check_time_flags(cfg: ViewConfig, scene) -> None:
    """ViewerInputError for --time outside [0, 1] and for --time / --play with a 3D model; sets the 4D
    scene's first time."""
    from recon.core.errors import UsageError
    from recon.run.time_args import check_time

    if not scene.dynamic:
        raise ViewerInputError(f"--time / --play: {cfg.path} holds 3D Gaussians, which do not change with time "
                               f"(they apply to 4D models, a --method 4dgs run or a ply4d file, and to "
                               f"avatars, a --method meshgs run)")
    if cfg.time is not None:
        try:
            scene.set_time(check_time(cfg.time))
        except UsageError as err:
            raise ViewerInputError(str(err)) from None


def view(cfg: Annotated[ViewConfig, _NoPrefix] if _NoPrefix else ViewConfig) -> None:
    """Serve the splats until Ctrl-C (or ``exit_after`` seconds)."""
    try:
        viewer = build_viewer(cfg)
        viewer.start()
        if cfg.play:
            viewer.set_playing(True)
    except (ViewerInputError, OSError) as e:
        fail("view", e)
    try:
        t0 = time.monotonic()
        while cfg.exit_after is None or time.monotonic() - t0 < cfg.exit_after:
            time.sleep(0.1 if cfg.exit_after is not None else 1.0)
    except KeyboardInterrupt:
        pass
    finally:
        viewer.stop()
