"""``splatforge insert``: mesh assets placed into a trained run, rendered with occlusion, shadows,
reflection and refraction (issue 21, :mod:`recon.hybrid`).

    splatforge insert --run RUN --asset chair.glb --pose "x,y,z,yaw,pitch,roll,s" [--material mirror]
        --light sun:45,60 (--camera N | --path orbit --frames 60 --fps 30) --out frame.png | clip.mp4
        [--depth depth.png|.npy|.mp4] [--mask mask.png|.npy|.mp4] [--export-glb scene.glb]

Everything the user gives is checked before the scene is loaded or anything is rendered (:func:`plan`):
counts of --pose / --material / --asset-path against --asset, pose / material / light strings, mesh files,
output paths, and whether the run's method can be composited at all (:func:`check_compositable`). An asset
lying entirely outside the scene's bounds is a warning, not an error.

Frames (see :mod:`recon.hybrid.assets`): poses and sun directions are in the run's ground frame (columns
e1, e2, up; up from the training cameras); translations are world coordinates.

Time. Frame ``i`` of ``n`` has the clip time ``i / (n - 1)`` (one frame: 0). Keyframed assets
(``--asset-path``) are posed at the clip time; a 4D run's scene time follows the clip time as well unless
``--time T`` holds it still.

Outputs (all written atomically, refused when they exist unless ``--force``):

- ``--out``: ``.png`` one frame, ``.mp4`` a video (H.264), a name without suffix: a folder of PNG frames;
- ``--depth``: camera z of the first visible surface. One frame: ``.png`` 16-bit (``round(z *
  --depth-scale)``, 0 = nothing; the scale is stored in the PNG's ``depth_scale`` text chunk) or ``.npy``
  float32 [H, W]; both with a coloured preview beside them (``NAME.preview.png``). A video: ``.npy`` float32
  [N, H, W] or ``.mp4`` (the coloured preview as a video);
- ``--mask``: asset ids. One frame: ``.png`` 8-bit (0 = no asset, k = the k-th --asset) or ``.npy`` int32
  [H, W] (-1 = no asset, k - 1 = the k-th --asset); a video: ``.npy`` int32 [N, H, W] or ``.mp4`` (ids as
  colours);
- ``--export-glb``: the posed assets, the scene's proxy mesh and a baked shadow as one GLB, the run's splat
  file and a manifest beside it (:mod:`recon.hybrid.export_glb`).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Optional

import numpy as np

from recon.commands.insert_outputs import (colourise_depth, colourise_mask, depth_png16, preview_path,  # noqa: F401
                                          write_outputs)
from recon.core.errors import USER_ERRORS, OutputError, UsageError, fail
from recon.core.open3d_import import open3d

try:
    import tyro

    _NoPrefix = tyro.conf.arg(name="")
    _UseAppend = tyro.conf.UseAppendAction
except ImportError:  # pragma: no cover
    _NoPrefix = None
    _UseAppend = None

DEFAULT_LIGHTS = ("sun:45,60",)
DEPTH_SUFFIXES_IMAGE = (".png", ".npy")
DEPTH_SUFFIXES_VIDEO = (".npy", ".mp4")


def _appended(tp):
    """``--flag A --flag B`` (repeated flags) for a tuple field."""
    return Annotated[tp, _UseAppend] if _UseAppend is not None else tp


@dataclass
class InsertConfig:
    """Insert mesh assets into a trained run and render them with the scene."""

    run: Path
    """Training run folder."""
    asset: _appended(tuple[Path, ...]) = ()
    """Mesh file (OBJ, PLY, GLB); repeat the flag for several assets."""
    pose: _appended(tuple[str, ...]) = ()
    """'x,y,z[,yaw,pitch,roll[,scale]]' per --asset, in order (world translation; degrees about the scene's
    up / e2 / e1 axes). Default for a single asset: the scene's centre."""
    material: _appended(tuple[str, ...]) = ()
    """diffuse, mirror or glass[:ior] per --asset (default: diffuse for every asset)."""
    asset_up: Literal["y", "z"] = "y"
    """Up axis of the asset files: y (glTF, most OBJ) or z."""
    asset_path: _appended(tuple[Path, ...]) = ()
    """Keyframe JSON per --asset ({"keyframes": [{"time": 0, "pose": "x,y,z,..."}, ...]}): the asset moves
    over the clip (times normalised to [0, 1]); give one for each asset or one for the first."""
    light: _appended(tuple[str, ...]) = ()
    """sun:azimuth,elevation[,intensity[,r,g,b]] (degrees in the ground frame) or point:x,y,z[,intensity
    [,r,g,b]]; repeat for several lights (default: sun:45,60)."""
    camera: Optional[str] = None
    """Render one view of the run: N or train:N (a training view), test:N (a test view)."""
    path: Optional[str] = None
    """Or a camera path: orbit, spiral, dataset, fixed, or a viewer camera-path JSON FILE."""
    frames: int = 60
    """Frames along --path."""
    fps: int = 30
    """Frames per second of an .mp4 --out."""
    time: Optional[float] = None
    """4D runs: hold the scene at this normalised time (default: it follows the clip time)."""
    out: Optional[Path] = None
    """Output: frame.png, clip.mp4, or a folder name (PNG frames)."""
    depth: Optional[Path] = None
    """Depth output: .png (16-bit) / .npy for one frame, .npy / .mp4 for a path."""
    depth_scale: float = 1000.0
    """16-bit depth PNG: stored value = camera z x this (0 = nothing)."""
    mask: Optional[Path] = None
    """Asset-id mask output: .png / .npy for one frame, .npy / .mp4 for a path."""
    size: Optional[str] = None
    """Render size WxH (default: the view's own size; the intrinsics are scaled with it)."""
    max_side: Optional[int] = None
    """Scale the render down so that its longest side is at most this."""
    shadows: bool = True
    """Cast shadows (asset onto scene and scene onto asset)."""
    ambient: float = 0.35
    """Share of the light that is not blocked by shadows (and lights the asset's unlit side)."""
    bounces: int = 2
    """Mirror / glass bounce limit."""
    drop_to_ground: bool = False
    """Move each (not keyframed) asset along the scene's up axis until its lowest points rest on the scene's
    proxy surface under it (the table or floor the shadows fall on)."""
    export_glb: Optional[Path] = None
    """Also write a GLB (posed assets, scene proxy mesh, baked shadow), the splat file and a manifest."""
    data: Optional[Path] = None
    """Dataset folder when the run's config.yaml does not name it (or it moved)."""
    device: Literal["auto", "cpu", "cuda"] = "cpu"
    """Where the scene is evaluated."""
    force: bool = False
    """Overwrite existing outputs."""
    progress: bool = True
    """Show a progress bar for paths."""


# ------------------------------------------------------------------------------------------ checks


def parse_size(text: str) -> tuple[int, int]:
    """``"WxH"`` -> (width, height); UsageError naming --size otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise UsageError(f"--size {text!r}: expected WIDTHxHEIGHT in pixels, e.g. 480x272")
    return int(m.group(1)), int(m.group(2))


def parse_camera(text: str) -> tuple[str, int]:
    """``"N"``, ``"train:N"`` or ``"test:N"`` -> (split, index)."""
    m = re.fullmatch(r"\s*(?:(train|test):)?\s*(\d+)\s*", str(text))
    if not m:
        raise UsageError(f"--camera {text!r}: give a view number N (a training view), train:N or test:N")
    return m.group(1) or "train", int(m.group(2))


def per_asset(values: tuple, n: int, flag: str, allow_one: bool = False) -> list:
    """``values`` spread over ``n`` assets: empty -> [None] * n; exactly n -> as given; one value for the
    first asset when ``allow_one``; else UsageError naming ``flag`` and the counts."""
    if not values:
        return [None] * n
    if len(values) == n:
        return list(values)
    if allow_one and len(values) == 1:
        return [values[0]] + [None] * (n - 1)
    raise UsageError(f"{flag}: given {len(values)} time(s) for {n} --asset(s); give one {flag} per --asset, in "
                     f"the same order")


def check_compositable(model_cls, materials) -> None:
    """NotCompositableError (before anything is rendered) when the run's method has no ``render_front``
    (it cannot be composited with meshes) or, for mirror / glass assets, no ``trace_rays``."""
    from recon.models.base import NotCompositableError, SceneModel

    method = getattr(model_cls, "method", "") or model_cls.__name__
    if getattr(model_cls, "render_front", None) is SceneModel.render_front:
        raise NotCompositableError(f"--run: the run's method {method!r} cannot be composited with inserted meshes "
                                   "(it has no depth-limited render); train the scene with --method 3dgs, 2dgs, 4dgs "
                                   "or nerf")
    reflective = [m.kind for m in materials if m.kind != "diffuse"]
    if reflective and getattr(model_cls, "trace_rays", None) is SceneModel.trace_rays:
        raise NotCompositableError(f"--material {reflective[0]}: the run's method {method!r} cannot trace "
                                   "secondary rays (mirror / glass); use --material diffuse")


def output_kind(out: Path | None) -> str | None:
    """"image" (.png), "video" (.mp4), "folder" (no suffix), None (no --out); OutputError otherwise."""
    if out is None:
        return None
    suffix = Path(out).suffix.lower()
    if suffix == ".png":
        return "image"
    if suffix == ".mp4":
        return "video"
    if suffix == "":
        return "folder"
    raise OutputError(f"--out {out}: give a .png (one frame), an .mp4 (a video along --path) or a folder name")


def check_outputs(cfg: InsertConfig, kind: str | None) -> None:
    """Suffixes, existing files (without --force) and writable folders of every output, before rendering."""
    from recon.commands.render import check_render_arguments
    from recon.outputs.paths import check_output_file

    if cfg.out is None and cfg.export_glb is None:
        raise UsageError("give --out (frame.png, clip.mp4 or a folder) and/or --export-glb scene.glb")
    if kind is not None:
        check_render_arguments(Path(cfg.out), cfg.frames, cfg.fps, cfg.force)
    many = kind in ("video", "folder")
    for flag, path in (("--depth", cfg.depth), ("--mask", cfg.mask)):
        if path is None:
            continue
        if kind is None:
            raise UsageError(f"{flag}: needs --out (the depth and mask belong to a rendered frame)")
        check_output_file(path, cfg.force, flag, DEPTH_SUFFIXES_VIDEO if many else DEPTH_SUFFIXES_IMAGE)
        if Path(path).suffix.lower() == ".png":
            check_output_file(preview_path(path), cfg.force, f"{flag} preview")
    if cfg.depth is not None and Path(cfg.depth).suffix.lower() == ".npy" and not many:
        check_output_file(preview_path(cfg.depth), cfg.force, "--depth preview")
    if cfg.export_glb is not None:
        from recon.hybrid.export_glb import export_paths

        for flag, path in export_paths(cfg.export_glb).items():
            check_output_file(path, cfg.force, f"--export-glb ({flag})",
                              (".glb",) if flag == "glb" else ())
    if not cfg.depth_scale > 0:
        raise UsageError(f"--depth-scale {cfg.depth_scale}: must be > 0")
    if not 0.0 <= cfg.ambient <= 1.0:
        raise UsageError(f"--ambient {cfg.ambient}: must be in [0, 1]")
    if cfg.bounces < 0:
        raise UsageError(f"--bounces {cfg.bounces}: must be >= 0")
    if cfg.max_side is not None and cfg.max_side < 1:
        raise UsageError(f"--max-side {cfg.max_side}: must be >= 1")
    if cfg.time is not None and not 0.0 <= cfg.time <= 1.0:
        raise UsageError(f"--time {cfg.time}: must be in [0, 1] (normalised scene time)")


# ------------------------------------------------------------------------------------------ plan


@dataclass
class InsertPlan:
    """Everything :func:`plan` checked and built, ready to render."""

    cfg: InsertConfig
    kind: str | None
    run: object
    assets: list
    lights: list
    frame: np.ndarray
    cameras: list = field(default_factory=list)
    times: list = field(default_factory=list)
    """Per frame: the time handed to the renderer (clip time; a 4D run's --time when held)."""
    warnings: list = field(default_factory=list)


def default_pose_translation(run) -> tuple[float, float, float]:
    """The scene's centre (where the training cameras look), for a single asset given no --pose."""
    from recon.data.camera_paths import scene_rig

    return tuple(float(v) for v in scene_rig(run.cameras)["center"])


def resized(camera, size: tuple[int, int] | None, max_side: int | None):
    """``camera`` at ``size`` (W, H) and/or with its longest side capped at ``max_side`` (fov kept)."""
    import torch

    from rasterizer import Camera
    from recon.data.camera_paths import resize_intrinsics

    w, h = size if size is not None else (camera.width, camera.height)
    if max_side is not None and max(w, h) > max_side:
        k = max_side / max(w, h)
        w, h = max(1, round(w * k)), max(1, round(h * k))
    if (w, h) == (camera.width, camera.height):
        return camera
    K = resize_intrinsics(camera.K.detach().cpu().double().numpy(), camera.width, camera.height, w, h)
    return Camera(camera.world_to_cam.detach().clone(), torch.tensor(K, dtype=camera.K.dtype), w, h)


def plan_cameras(cfg: InsertConfig, run, kind: str | None) -> list:
    """The cameras to render (one for --camera or a .png --out; --frames along --path)."""
    from recon.data.camera_paths import PATHS, camera_path
    from recon.commands.render import keyframe_path_cameras

    if cfg.camera is not None and cfg.path is not None:
        raise UsageError("--camera and --path: give one (a single view, or a camera path for a video)")
    if kind in ("video", "folder") and cfg.path is None:
        raise UsageError(f"--out {cfg.out}: a video or a frame folder needs --path (orbit, spiral, dataset, fixed "
                         "or a camera-path FILE); for one view give --out frame.png")
    size = parse_size(cfg.size) if cfg.size is not None else None
    if cfg.path is not None:
        n = 1 if kind in ("image", None) else cfg.frames
        if cfg.path in PATHS:
            cams = camera_path(cfg.path, run.cameras, n)
        else:
            cams = keyframe_path_cameras(Path(cfg.path), n)
        cams = cams[:n]
    else:
        split, index = parse_camera(cfg.camera) if cfg.camera is not None else ("train", 0)
        frames = run.scene.frames_train if split == "train" else run.scene.frames_test
        if index >= len(frames):
            raise UsageError(f"--camera {cfg.camera}: the run's dataset has {len(frames)} {split} views "
                             f"(0..{len(frames) - 1})")
        cams = [frames[index].camera]
    return [resized(c, size, cfg.max_side) for c in cams]


def clip_times(n: int) -> list[float]:
    """Normalised clip time of each of ``n`` frames: i / (n - 1) (one frame: 0)."""
    return [i / (n - 1) if n > 1 else 0.0 for i in range(n)]


def load_assets(cfg: InsertConfig, default_translation=None) -> list:
    """The :class:`PlacedAsset` list: meshes loaded, poses / materials / keyframe paths parsed (counts
    checked first; AssetError / UsageError naming the flag or file)."""
    from recon.hybrid.assets import (Material, PlacedAsset, Pose, load_asset_path, load_mesh, parse_material,
                                     parse_pose)

    n = len(cfg.asset)
    if n == 0:
        raise UsageError("--asset: give at least one mesh file (OBJ, PLY or GLB)")
    poses = per_asset(cfg.pose, n, "--pose")
    materials = per_asset(cfg.material, n, "--material")
    paths = per_asset(cfg.asset_path, n, "--asset-path", allow_one=True)
    if n > 1 and not cfg.pose and not cfg.asset_path:
        raise UsageError(f"--pose: {n} assets need one --pose each (or an --asset-path each)")
    parsed_poses = [parse_pose(p) if p is not None else None for p in poses]
    parsed_materials = [parse_material(m) if m is not None else Material() for m in materials]
    parsed_paths = [load_asset_path(p) if p is not None else None for p in paths]
    placed = []
    for file, pose, material, path in zip(cfg.asset, parsed_poses, parsed_materials, parsed_paths):
        if pose is None:
            pose = Pose(tuple(default_translation) if default_translation is not None else (0.0, 0.0, 0.0))
        placed.append(PlacedAsset(load_mesh(file, cfg.asset_up), pose, material, path))
    return placed


def plan(cfg: InsertConfig, warn=None) -> InsertPlan:
    """Check every input, open the run and load the assets; nothing is rendered or written.

    Order: flags and strings (cheap), output paths, the run (config only), the method's compositability,
    mesh files, then the dataset (cameras, ground frame), lights, bounds (warning)."""
    from recon.hybrid.assets import check_inside, parse_light, parse_material, parse_pose
    from recon.hybrid.proxy import scene_bounds
    from recon.hybrid.render import ground_frame_of
    from recon.run.folder import Run

    warn = warn or (lambda m: print(f"splatforge insert: warning: {m}", file=sys.stderr))
    kind = output_kind(cfg.out)
    check_outputs(cfg, kind)
    if cfg.size is not None:
        parse_size(cfg.size)
    if cfg.camera is not None:
        parse_camera(cfg.camera)
    n = len(cfg.asset)
    if n == 0:
        raise UsageError("--asset: give at least one mesh file (OBJ, PLY or GLB)")
    for values, flag in ((cfg.pose, "--pose"), (cfg.material, "--material")):
        per_asset(values, n, flag)
    per_asset(cfg.asset_path, n, "--asset-path", allow_one=True)
    for p in cfg.pose:
        parse_pose(p)
    materials = [parse_material(m) for m in cfg.material]
    run = Run.open(cfg.run, data=cfg.data)
    check_compositable(run.model_class, materials)
    if cfg.time is not None and not run.is_4d:
        raise UsageError("--time: the run holds a static (3D) scene, which does not change with time; leave --time "
                         "out (it applies to --method 4dgs runs)")
    frame = ground_frame_of(run.scene.frames_train or run.scene.frames_test)
    lights = [parse_light(text, frame) for text in (cfg.light or DEFAULT_LIGHTS)]
    assets = load_assets(cfg, default_translation=default_pose_translation(run) if not cfg.pose else None)
    warnings: list[str] = []

    def note(message):
        warnings.append(message)
        warn(message)

    lo, hi = scene_bounds(run, None)
    check_inside(assets, frame, lo, hi, note)
    cams = plan_cameras(cfg, run, kind) if kind is not None else []
    times = clip_times(len(cams))
    if run.is_4d and cfg.time is not None:
        times = [cfg.time] * len(cams)
    return InsertPlan(cfg, kind, run, assets, lights, frame, cams, times, warnings)


# ------------------------------------------------------------------------------------------ render


def build_renderer(p: InsertPlan, warn=None):
    """The :class:`recon.hybrid.render.HybridRenderer` for the plan's run, assets and lights (its proxy mesh
    built once and cached in RUN/hybrid/). Bounds warnings already given by :func:`plan` are not repeated."""
    from recon.hybrid.render import HybridRenderer

    said = set(p.warnings)

    def once(message):
        name = message.split(" at ")[0]
        if not any(w.split(" at ")[0] == name for w in said):
            said.add(message)
            (warn or print)(message)

    return HybridRenderer.for_run(p.run, p.assets, p.lights, ambient=p.cfg.ambient, bounces=p.cfg.bounces,
                                  device=resolve_device(p.cfg.device), warn=once,
                                  progress=p.cfg.progress)


def drop_to_ground(assets, frame: np.ndarray, proxy, warn) -> list:
    """``assets`` with each static asset moved along the up axis (``frame[:, 2]``) so that its lowest
    vertices (the bottom 2 % of its height) rest on the highest point of the ``proxy`` surface (vertices
    [V, 3], faces [F, 3]) found straight under them (rays cast down from one asset height above). Keyframed
    assets, and assets with no surface under them, stay where they are (with a warning)."""
    import dataclasses

    o3d = open3d("splatforge insert")

    from recon.hybrid.assets import Pose

    if proxy is None or not len(proxy[1]):
        warn("--drop-to-ground: the run has no proxy mesh of the scene; the assets stay where --pose put them")
        return list(assets)
    up = np.asarray(frame, np.float64)[:, 2]
    scene = o3d.t.geometry.RaycastingScene()
    mesh = o3d.t.geometry.TriangleMesh()
    mesh.vertex.positions = o3d.core.Tensor(np.ascontiguousarray(proxy[0], np.float32))
    mesh.triangle.indices = o3d.core.Tensor(np.ascontiguousarray(proxy[1], np.int32))
    scene.add_triangles(mesh)
    out = []
    for a in assets:
        if a.path is not None:
            warn(f"--drop-to-ground: {a.mesh.name} moves along --asset-path; its keyframes are used as given")
            out.append(a)
            continue
        v = np.concatenate(a.world_vertices(frame))
        h = v @ up
        height = max(float(h.max() - h.min()), 1e-9)
        feet = v[h <= h.min() + 0.02 * height]
        origins = feet + height * up
        rays = np.concatenate([origins, np.broadcast_to(-up, origins.shape)], axis=1).astype(np.float32)
        t = scene.cast_rays(o3d.core.Tensor(np.ascontiguousarray(rays)))["t_hit"].numpy().astype(np.float64)
        t = t[np.isfinite(t)]
        if not len(t):
            warn(f"--drop-to-ground: no scene surface under {a.mesh.name}; it stays where --pose put it")
            out.append(a)
            continue
        drop = float(t.min()) - height  # > 0: the surface is below the feet
        pose = a.pose
        moved = np.asarray(pose.translation, np.float64) - drop * up
        out.append(dataclasses.replace(a, pose=Pose(tuple(float(x) for x in moved), pose.yaw, pose.pitch, pose.roll,
                                                    pose.scale)))
    return out


def rebuilt_renderer(renderer, assets):
    """A renderer like ``renderer`` (same model, lights, frame, proxy, settings) for other ``assets``."""
    from recon.hybrid.render import HybridRenderer

    return HybridRenderer(renderer.model, assets, renderer.lights, renderer.frame, renderer.proxy, renderer.ambient,
                          renderer.bounces, renderer.background, shadow_strength=renderer.shadow_strength,
                          backend=renderer.backend)


def resolve_device(name: str):
    from recon.core.devices import resolve_device as resolve

    return resolve(name)


def held_renderer(renderer, assets, clip_time: float):
    """A renderer like ``renderer`` whose keyframed assets stand still at their pose at ``clip_time`` (a 4D
    run held at --time T while --asset-path moves the assets)."""
    from recon.hybrid.assets import PlacedAsset

    return rebuilt_renderer(renderer, [PlacedAsset(a.mesh, a.pose_at(clip_time), a.material) for a in assets])


def render_frames(p: InsertPlan, renderer, on_frame=None) -> dict:
    """Render every camera of the plan. Returns {"rgb": [uint8 [H, W, 3]], "depth": [float32 [H, W]],
    "mask": [int32 [H, W]], "timings": [dict]}; ``on_frame(i)`` after each frame."""
    import torch

    held = p.run.is_4d and p.cfg.time is not None and any(a.path is not None for a in p.assets)
    clip = clip_times(len(p.cameras))
    out = {"rgb": [], "depth": [], "mask": [], "timings": []}
    animated = any(a.path is not None for a in p.assets) or p.run.is_4d
    for i, (cam, t) in enumerate(zip(p.cameras, p.times)):
        use = held_renderer(renderer, p.assets, clip[i]) if held else renderer
        with torch.no_grad():
            frame = use.render(cam, time=t if animated else None, shadows=p.cfg.shadows)
        out["rgb"].append((frame.rgb.detach().clamp(0, 1).cpu().numpy() * 255 + 0.5).astype(np.uint8))
        out["depth"].append(np.asarray(frame.depth, np.float32))
        out["mask"].append(np.asarray(frame.asset_id, np.int32))
        out["timings"].append(dict(frame.timings))
        if on_frame is not None:
            on_frame(i)
    return out


# ------------------------------------------------------------------------------------------ command


def run_insert(cfg: InsertConfig, warn=None) -> dict:
    """Library form of ``splatforge insert``: plan (all checks), render, write. Returns a summary dict
    (written paths, frames, warnings, median stage timings)."""
    from rich.progress import Progress

    warn = warn or (lambda m: print(f"splatforge insert: warning: {m}", file=sys.stderr))
    p = plan(cfg, warn)
    if p.kind == "video" or (cfg.depth is not None and Path(cfg.depth).suffix.lower() == ".mp4"):
        from recon.commands.render import check_video_encoder

        check_video_encoder()
    renderer = build_renderer(p, warn)
    if cfg.drop_to_ground:
        p.assets = drop_to_ground(p.assets, p.frame, renderer.proxy, warn)
        renderer = rebuilt_renderer(renderer, p.assets)
    frames = {"rgb": [], "depth": [], "mask": [], "timings": []}
    written: list[Path] = []
    if p.kind is not None:
        with Progress(disable=not cfg.progress or len(p.cameras) < 2, transient=True) as bar:
            task = bar.add_task("rendering", total=len(p.cameras))
            frames = render_frames(p, renderer, lambda i: bar.advance(task))
        written += write_outputs(p, frames, warn)
    if cfg.export_glb is not None:
        from recon.hybrid.export_glb import export_run_scene

        written += export_run_scene(cfg.export_glb, p.run, p.assets, p.lights, p.frame, renderer_proxy(renderer, p.run),
                                    ambient=cfg.ambient, force=cfg.force, time=0.0 if p.times else None)
    timings = {}
    if frames["timings"]:
        keys = sorted({k for t in frames["timings"] for k in t})
        timings = {k: float(np.median([t.get(k, 0.0) for t in frames["timings"]])) for k in keys}
    return {"written": [str(w) for w in written], "frames": len(frames["rgb"]), "warnings": p.warnings,
            "timings_ms": timings, "poses": {a.mesh.name: ",".join(f"{x:.4g}" for x in a.pose.as_list())
                                             for a in p.assets if a.path is None}}


def renderer_proxy(renderer, run):
    """(vertices [V, 3], faces [F, 3]) of the scene proxy mesh the renderer uses (or RUN/hybrid/proxy.ply), or
    None when there is none."""
    proxy = getattr(renderer, "proxy", None)
    if proxy is not None and len(proxy[1]):
        return np.asarray(proxy[0], np.float64), np.asarray(proxy[1], np.int64)
    cached = Path(run.dir) / "hybrid" / "proxy.ply"
    if cached.is_file():
        import trimesh

        mesh = trimesh.load(str(cached), process=False)
        return np.asarray(mesh.vertices, np.float64), np.asarray(mesh.faces, np.int64)
    return None


def insert(config: Annotated[InsertConfig, _NoPrefix] if _NoPrefix else InsertConfig) -> dict:
    """Insert mesh assets (OBJ, PLY, GLB) into a trained run and render them with the scene: occlusion, shadows
    both ways, mirror and glass materials, keyframed motion; RGB (PNG, MP4 or frames), depth, asset-id mask;
    --export-glb for other engines. Bad input is a one-line error before anything is rendered."""
    try:
        summary = run_insert(config)
    except USER_ERRORS as exc:
        fail("insert", exc)
    if config.drop_to_ground:
        for name, pose in summary["poses"].items():
            print(f"{name}: dropped to the ground, --pose {pose}")
    for path in summary["written"]:
        print(f"wrote {path}")
    if summary["timings_ms"]:
        print("median ms per frame: " + ", ".join(f"{k} {v:.1f}" for k, v in summary["timings_ms"].items()))
    return summary
