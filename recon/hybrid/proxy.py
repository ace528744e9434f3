"""The scene's proxy mesh: a TSDF of the run's rendered depth, for shadows between assets and the scene.

Shadow rays need the scene as a surface (the scene shadows the assets; :mod:`recon.hybrid.shading`). The
proxy is built with the mesh-extraction pipeline (:mod:`recon.geometry.mesh_extraction`): the run's training
views (at most ``max_views`` of them, evenly spaced, rendered at ``scale`` of their size) give depth,
:func:`recon.geometry.mesh_extraction.fuse_tsdf` fuses it at a voxel size of the surface's extent / ``resolution``.

Depth per method: a model with ``render_depth`` (2dgs, nerf) gives its median depth; any other
compositable model (3dgs, 4dgs at ``time``) gives the expected depth of ``render_front`` without a limit
(:class:`FrontDepth`), with opacity 1 - T.

Cache: RUN/hybrid/proxy.ply (vertex-coloured PLY, written atomically) is reused while it is newer than the
file the run's model comes from (:func:`model_source`: splats4d.ply for 4D runs, splats.ply, else the
newest checkpoint) and was built for the same time; ``rebuild=True`` builds it again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from recon.core.errors import DamagedFileError, OutputError
from recon.core.limits import load_json, require_finite, require_indices, require_regular_file
from recon.geometry import mesh_extraction as mx
from recon.core.atomic import atomic_write_bytes

PROXY_DIR = "hybrid"
PROXY_FILE = "proxy.ply"
PROXY_INFO = "proxy.json"
DEFAULT_RESOLUTION = 256
DEFAULT_MAX_VIEWS = 48
DEFAULT_SCALE = 0.5
COARSEN_STEPS = 4


class FrontDepth:
    """Mesh extraction's depth seam for any model with ``render_front``: ``render_depth(cameras, kind,
    background)`` -> (rgb [C, H, W, 3] over ``background``, expected depth [C, H, W, 1], opacity
    [C, H, W, 1]) at normalised time ``time``; ``kind`` must be "expected"."""

    def __init__(self, model, time: float | None = None):
        self.model, self.time = model, time
        self.method = getattr(model, "method", type(model).__name__)

    @property
    def device(self):
        return self.model.device

    def render_depth(self, cameras: Sequence, kind: str, background: torch.Tensor | None = None):
        if kind != "expected":
            raise mx.NoDepthError(f"method {self.method!r}: the proxy uses expected depth only")
        C, W, H = len(cameras), cameras[0].width, cameras[0].height
        limit = torch.full((C, H, W), float("inf"), device=self.model.device)
        rgb, trans, depth = self.model.render_front(list(cameras), limit, t=self.time)
        if background is not None:
            rgb = rgb + trans * torch.as_tensor(background, dtype=rgb.dtype, device=rgb.device)
        return rgb, depth, 1.0 - trans


def pick_views(cameras: Sequence, max_views: int) -> list:
    """At most ``max_views`` of ``cameras``, evenly spaced in their order."""
    if len(cameras) <= max_views:
        return list(cameras)
    idx = np.unique(np.round(np.linspace(0, len(cameras) - 1, max_views)).astype(int))
    return [cameras[i] for i in idx]


def render_scene_views(model, cameras: Sequence, time: float | None = None, background=None,
                       progress: Callable[[int], None] | None = None) -> mx.DepthViews:
    """:func:`recon.geometry.mesh_extraction.render_views` of the model (median depth through its own
    ``render_depth`` when it has one, else :class:`FrontDepth`)."""
    if hasattr(model, "render_depth"):
        return mx.render_views(model, cameras, "median", background, progress)
    return mx.render_views(FrontDepth(model, time), cameras, "expected", background, progress)


def fuse_views(views: mx.DepthViews, resolution: int = DEFAULT_RESOLUTION, trunc_voxels: float = 4.0,
               voxel_size: float | None = None, max_memory_gb: float = 2.0,
               progress: Callable[[int], None] | None = None) -> mx.MeshArrays:
    """TSDF mesh of ``views`` (:func:`recon.geometry.mesh_extraction.fuse_tsdf`), voxel size the surface's extent /
    ``resolution`` unless given. A default voxel size whose grid would need more than ``max_memory_gb`` is
    doubled (up to :data:`COARSEN_STEPS` times): a proxy for shadows can be coarse; a given one is kept."""
    points = views.surface_points()
    voxel = voxel_size if voxel_size is not None else mx.default_voxel_size(points, resolution)
    for step in range(COARSEN_STEPS + 1):
        try:
            blocks = mx.check_memory(points, voxel, trunc_voxels, max_memory_gb)
            break
        except mx.MeshMemoryError:
            if voxel_size is not None or step == COARSEN_STEPS:
                raise
            voxel *= 2.0
    return mx.fuse_tsdf(views, voxel, trunc_voxels, blocks, progress)


def build_proxy(model, cameras: Sequence, *, time: float | None = None, resolution: int = DEFAULT_RESOLUTION,
                max_views: int = DEFAULT_MAX_VIEWS, scale: float = DEFAULT_SCALE, background=None,
                progress: bool = False) -> mx.MeshArrays:
    """The proxy mesh of ``model`` seen from (a subset of) ``cameras`` (module docstring)."""
    from rich.progress import Progress

    views_cams = [c.scaled(scale) for c in pick_views(cameras, max_views)]
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("proxy: rendering depth", total=len(views_cams))
        views = render_scene_views(model, views_cams, time, background, lambda n: bar.advance(task, n))
        task = bar.add_task("proxy: fusing TSDF", total=len(views_cams))
        return fuse_views(views, resolution, progress=lambda n: bar.advance(task, n))


def model_source(run) -> Path | None:
    """The file the run's model is read from (its modification time dates the model), or None."""
    from recon.outputs import files as rf

    if run.is_4d and run.splats4d_path.is_file():
        return run.splats4d_path
    if not getattr(run.model_class, "MODEL_IN_CHECKPOINTS", False) and run.splats_path.is_file():
        return run.splats_path
    ckpts = sorted((run.dir / rf.CHECKPOINT_DIR).glob("ckpt_*.pt"))
    return ckpts[-1] if ckpts else (run.splats_path if run.splats_path.is_file() else None)


def proxy_path(run) -> Path:
    return run.dir / PROXY_DIR / PROXY_FILE


def read_proxy(path: Path) -> mx.MeshArrays:
    """A proxy PLY back as :class:`recon.geometry.mesh_extraction.MeshArrays`; DamagedFileError naming the file
    when it is not a regular file, its header declares more than it holds, trimesh cannot read it, or its
    faces or vertices are out of range or not finite (:func:`load_or_build_proxy` then builds it again)."""
    import trimesh

    from recon.export.ply import check_ply_counts

    def damaged(p, problem: str) -> DamagedFileError:
        return DamagedFileError(f"{p}: {problem}; it is a cache: delete it and it is made again")

    require_regular_file(path, "proxy mesh", damaged)
    try:
        check_ply_counts(path)  # plyfile / trimesh allocate declared counts before reading
        mesh = trimesh.load(str(path), process=False, force="mesh")
    except Exception as err:  # noqa: BLE001 - trimesh raises many types for damaged files
        raise damaged(path, f"not a readable mesh ({type(err).__name__}: {' '.join(str(err).split())[:160]})") \
            from None
    if not isinstance(mesh, trimesh.Trimesh):
        raise damaged(path, "holds no triangle mesh")
    require_indices(mesh.faces, len(mesh.vertices), path, "faces", damaged)
    require_finite(np.asarray(mesh.vertices), path, "vertices", damaged)
    colors = np.asarray(mesh.visual.vertex_colors, np.float32)[:, :3] / 255.0 \
        if getattr(mesh.visual, "kind", None) == "vertex" else np.full((len(mesh.vertices), 3), 0.7, np.float32)
    return mx.MeshArrays(np.asarray(mesh.vertices, np.float64), np.asarray(mesh.faces, np.int64), colors)


def _cache_fresh(run, time: float | None) -> bool:
    path, info = proxy_path(run), proxy_path(run).with_name(PROXY_INFO)
    if not path.is_file():
        return False
    source = model_source(run)
    if source is not None and path.stat().st_mtime <= source.stat().st_mtime:
        return False
    try:
        saved = load_json(info, "proxy info").get("time")
    except (OSError, ValueError, AttributeError):  # damaged or not an object: made again
        return time is None
    return saved == time


def load_or_build_proxy(run, model, *, time: float | None = None, rebuild: bool = False, progress: bool = False,
                        **kw) -> mx.MeshArrays:
    """The run's proxy mesh: RUN/hybrid/proxy.ply when fresh (module docstring), else built from ``model``
    and the run's training cameras and written there atomically. ``kw``: :func:`build_proxy` options."""
    path = proxy_path(run)
    if not rebuild and _cache_fresh(run, time):
        try:
            return read_proxy(path)
        except DamagedFileError:  # a damaged cache is made again
            pass
    if path.is_dir() and not path.is_symlink():  # checked before the build: the cache could not be written over it
        raise OutputError(f"{path}: is a folder where the run's proxy mesh cache belongs; move it away (the proxy "
                          f"is made again)")
    mesh = build_proxy(model, run.cameras, time=time, background=run.background(), progress=progress, **kw)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, mx.mesh_bytes(mesh, "ply"), force=True)
    atomic_write_bytes(path.with_name(PROXY_INFO), json.dumps({"time": time, "faces": len(mesh.faces)}).encode(),
                       force=True)
    return mesh


def scene_bounds(run, proxy: mx.MeshArrays | None) -> tuple[np.ndarray, np.ndarray]:
    """(lo [3], hi [3]) of the scene's content: the proxy's vertices (1st-99th percentile) when given, else
    the splat file's centres (0.5-99.5th; a NeRF run's splats.ply is its baked approximation), else the
    dataset's points (1st-99th), else the training cameras' centres."""
    if proxy is not None and len(proxy.vertices):
        return np.percentile(proxy.vertices, 1, axis=0), np.percentile(proxy.vertices, 99, axis=0)
    if run.splats_path.is_file():
        means = np.asarray(run.read_splats().means, np.float64)
        if len(means):
            return np.quantile(means, 0.005, axis=0), np.quantile(means, 0.995, axis=0)
    scene = run.scene
    pts = scene.points if getattr(scene, "points", None) is not None and len(scene.points) else \
        np.stack([c.center.detach().cpu().double().numpy() for c in run.cameras])
    pts = np.asarray(pts, np.float64)
    return np.percentile(pts, 1, axis=0), np.percentile(pts, 99, axis=0)


__all__ = ["DEFAULT_MAX_VIEWS", "DEFAULT_RESOLUTION", "DEFAULT_SCALE", "FrontDepth", "PROXY_FILE", "build_proxy",
           "fuse_views", "load_or_build_proxy", "model_source", "pick_views", "proxy_path", "read_proxy",
           "render_scene_views", "scene_bounds"]
