"""The hybrid renderer: inserted meshes inside a trained scene, one camera at a time.

Per camera (FIELD_NOTES §4; frames as rasterizer/CONVENTIONS.md):

1. **rays** (:func:`primary_rays`): one per pixel through its centre (+0.5), OpenCV axes, from the camera
   centre; unit world directions and the camera z per unit distance along each ray;
2. **raycast**: the first asset hit (:meth:`MeshScene.first_hit`), converted to camera z: the
   ``depth_limit`` [1, H, W] (+inf where no asset);
3. **front**: ``model.render_front`` composites the scene's fragments in front of the limit: premultiplied
   colour, the transmittance T left for what is behind, their expected depth (differentiable in the
   scene's parameters; no gradient reaches what lies behind the mesh);
4. **shade**: diffuse assets by Lambert with shadow rays against assets and the scene's proxy mesh
   (:mod:`recon.hybrid.shading`); mirror and glass assets by secondary rays
   (:mod:`recon.hybrid.secondary`, through ``model.trace_rays``);
5. **scene shadows**: the scene's surface point per pixel (where the ray meets the proxy mesh in front of
   the asset, else the expected depth from step 3) sends shadow rays toward the lights against the assets
   only; the scene's colour is scaled there by
   ``1 - shadow_strength * blocked fraction`` (:mod:`recon.hybrid.shading`);
6. **composite**: ``C = factor * rgb_front + T * C_behind`` with ``C_behind`` the shaded mesh at asset
   pixels and the background elsewhere.

The outputs (:class:`HybridFrame`): rgb [H, W, 3] tensor (differentiable in the model's parameters; mesh
colours are constants), depth [H, W] float32 camera z of the first visible surface (the scene's front
fragments where their opacity 1 - T >= :data:`VISIBLE_ALPHA`, else the asset hit, else 0), asset_id
[H, W] int32 (the asset seen at the pixel: hit and not hidden by scene fragments of opacity >=
:data:`VISIBLE_ALPHA`; -1 elsewhere), timings (ms per stage).

Time: ``time`` (normalised, [0, 1]) goes to the model (4D runs) and poses keyframed assets; the
:class:`MeshScene` is rebuilt only when a keyframed asset's time changes.
"""

from __future__ import annotations

import time as _time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from recon.hybrid.assets import Light, PlacedAsset, check_inside
from recon.hybrid.raycast import MeshScene
from recon.hybrid.secondary import Paths, subset_hits, trace_specular
from recon.hybrid.shading import SHADOW_STRENGTH, blocked_fraction, scene_shadow_factor, shade_diffuse

VISIBLE_ALPHA = 0.5
"""Scene fragments at least this opaque (1 - T) count as the visible surface (depth, asset mask)."""
SECONDARY_MIN_T = 1e-4
"""Mirror / glass pixels behind scene fragments leaving less light than this are not traced."""
SHADOW_MIN_ALPHA = 1.0 / 255.0
"""Pixels whose scene fragments are less opaque than this cast no scene-shadow rays (nothing to darken)."""


@dataclass
class HybridFrame:
    """One hybrid render (module docstring): rgb [H, W, 3] tensor, depth [H, W] float32 numpy (camera z, 0
    none), asset_id [H, W] int32 numpy (-1 none), timings {stage: ms}."""

    rgb: Tensor
    depth: np.ndarray
    asset_id: np.ndarray
    timings: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------ steps


def primary_rays(camera) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(origins [H*W, 3], unit directions [H*W, 3], z_per_t [H*W]) of ``camera``'s pixel rays, row-major
    (pixel (i, j) at index j * W + i, through (i + 0.5, j + 0.5)); world frame, float64. A point at
    distance t along a ray has camera z = t * z_per_t."""
    K, w2c = camera.K_numpy(), camera.world_to_cam_numpy()
    W, H = int(camera.width), int(camera.height)
    j, i = np.mgrid[0:H, 0:W]
    d_cam = np.stack([(i.ravel() + 0.5 - K[0, 2]) / K[0, 0], (j.ravel() + 0.5 - K[1, 2]) / K[1, 1],
                      np.ones(H * W)], axis=1)
    norm = np.linalg.norm(d_cam, axis=1)
    R = w2c[:3, :3]
    dirs = (d_cam / norm[:, None]) @ R  # R^T applied to each row
    centre = -R.T @ w2c[:3, 3]
    return np.broadcast_to(centre, dirs.shape).copy(), dirs, 1.0 / norm


def depth_limit_from_hits(t: np.ndarray, z_per_t: np.ndarray, H: int, W: int) -> np.ndarray:
    """[1, H, W] float32 camera z of the hits (distances ``t`` [H*W], inf where none)."""
    return np.where(np.isfinite(t), t * z_per_t, np.inf).astype(np.float32).reshape(1, H, W)


def composite(rgb_front: Tensor, transmittance: Tensor, behind: Tensor, factor: Tensor | None = None) -> Tensor:
    """[..., 3] ``factor * rgb_front + transmittance * behind`` (factor [..., 1] the scene-shadow factor,
    None: 1): the scene's premultiplied front colour over what lies behind it."""
    front = rgb_front if factor is None else rgb_front * factor
    return front + transmittance * behind


def visible_depth(front_depth: np.ndarray, front_alpha: np.ndarray, mesh_z: np.ndarray) -> np.ndarray:
    """[H, W] float32 camera z of the first visible surface: the front fragments' expected depth where
    their opacity >= :data:`VISIBLE_ALPHA`, else the mesh hit (inf -> none), else the front depth where
    any (0: nothing)."""
    opaque_front = (front_alpha >= VISIBLE_ALPHA) & (front_depth > 0)
    mesh = np.isfinite(mesh_z)
    out = np.where(opaque_front, front_depth, np.where(mesh, mesh_z, np.where(front_alpha >= VISIBLE_ALPHA,
                                                                                 front_depth, 0.0)))
    return out.astype(np.float32)


def ground_frame_of(frames) -> np.ndarray:
    """[3, 3] the scene's ground frame (columns e1, e2, up) from training frames (their ``.camera``):
    :func:`recon.distributed.partition.up_axis` and ``ground_frame``."""
    from recon.distributed.partition import ground_frame, up_axis

    up = up_axis(frames)
    e1, e2 = ground_frame(up)
    return np.stack([e1, e2, up], axis=1)


class _Clock:
    """Milliseconds per named stage."""

    def __init__(self):
        self.timings: dict[str, float] = {}
        self._t = _time.perf_counter()

    def lap(self, name: str) -> None:
        now = _time.perf_counter()
        self.timings[name] = self.timings.get(name, 0.0) + 1000.0 * (now - self._t)
        self._t = now


# ------------------------------------------------------------------------------------------ renderer


class HybridRenderer:
    """Renders a scene model with inserted mesh assets (module docstring).

    Args:
        model: a :class:`recon.models.base.SceneModel` that implements ``render_front`` (and ``trace_rays``
            for mirror / glass assets).
        assets: the placed assets; lights: the lights (an empty list: ambient only, no shadows).
        frame: [3, 3] the scene's ground frame (columns e1, e2, up) that poses are given in.
        proxy: (vertices [V, 3], faces [F, 3]) of the scene's proxy mesh (world), or None: then the scene
            does not shadow the assets.
        ambient: the assets' ambient light; bounces: secondary-ray bounce limit; background: [3] colour
            behind everything (None: black).
        shadow_strength: fraction of the scene's radiance an asset's shadow takes away.
        backend: the model's rasterizer backend ("auto": cpu on the CPU, reference on CUDA).
    """

    def __init__(self, model, assets: Sequence[PlacedAsset], lights: Sequence[Light], frame: np.ndarray,
                 proxy: tuple[np.ndarray, np.ndarray] | None = None, ambient: float = 0.35, bounces: int = 2,
                 background=None, *, shadow_strength: float = SHADOW_STRENGTH, backend: str = "auto"):
        self.model = model
        self.assets = list(assets)
        self.lights = list(lights)
        self.frame = np.asarray(frame, np.float64)
        self.proxy = proxy
        self.ambient = float(ambient)
        self.bounces = int(bounces)
        self.shadow_strength = float(shadow_strength)
        self.backend = backend
        bg = torch.zeros(3) if background is None else torch.as_tensor(background, dtype=torch.float32)
        self.background = bg.reshape(3).to(torch.float32).to(model.device)
        self._scene: MeshScene | None = None
        self._scene_key = object()
        self.keyframed = any(a.path is not None for a in self.assets)
        self._ray_cache = None

    # ---------------------------------------------------------------------------- mesh scene

    def mesh_scene(self, time: float | None = None) -> MeshScene:
        """The assets (posed at ``time`` when keyframed) and the proxy, ready for ray casting (cached)."""
        key = (0.0 if time is None else float(time)) if self.keyframed else None
        if self._scene is None or key != self._scene_key:
            self._scene = MeshScene(self.assets, self.frame, time, self.proxy)
            self._scene_key = key
        return self._scene

    # ---------------------------------------------------------------------------- render

    def _rays(self, camera) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`primary_rays` of ``camera``, cached for the last camera (a video's fixed view, the viewer)."""
        key = (camera.world_to_cam_numpy().tobytes(), camera.K_numpy().tobytes(), int(camera.width),
               int(camera.height))
        if self._ray_cache is None or self._ray_cache[0] != key:
            self._ray_cache = (key, primary_rays(camera))
        return self._ray_cache[1]

    def render(self, camera, time: float | None = None, shadows: bool = True) -> HybridFrame:
        """One :class:`HybridFrame` of ``camera`` (a :class:`rasterizer.Camera`) at normalised ``time``."""
        clock = _Clock()
        W, H = int(camera.width), int(camera.height)
        dev = self.model.device
        origins, dirs, z_per_t = self._rays(camera)
        clock.lap("rays")
        scene = self.mesh_scene(time)
        clock.lap("scene")
        hits = scene.first_hit(origins, dirs)
        limit = depth_limit_from_hits(hits.t, z_per_t, H, W)
        clock.lap("raycast")
        rgb_f, trans, depth_f = self.model.render_front([camera], torch.from_numpy(limit).to(dev), t=time,
                                                        backend=self.backend)
        rgb_f, trans, depth_f = rgb_f[0].reshape(H * W, 3), trans[0].reshape(H * W, 1), depth_f[0].reshape(H * W)
        clock.lap("front")
        behind = self._behind(scene, hits, origins, dirs, shadows, time, clock, trans)
        factor = None
        if shadows and self.lights:
            factor = self._scene_shadow(scene, origins, dirs, z_per_t, trans, depth_f, hits.t)
            clock.lap("scene_shadows")
        rgb = composite(rgb_f, trans, behind, factor).reshape(H, W, 3)
        front_alpha = 1.0 - trans.detach().reshape(H, W).float().cpu().numpy()
        front_depth = depth_f.detach().reshape(H, W).float().cpu().numpy()
        mesh_z = limit[0]
        depth = visible_depth(front_depth, front_alpha, mesh_z)
        asset_id = np.where(np.isfinite(mesh_z) & (front_alpha < VISIBLE_ALPHA), hits.asset.reshape(H, W), -1)
        clock.lap("composite")
        timings = dict(clock.timings)
        timings["total"] = sum(timings.values())
        return HybridFrame(rgb, depth, asset_id.astype(np.int32), timings)

    def _behind(self, scene: MeshScene, hits, origins: np.ndarray, dirs: np.ndarray, shadows: bool,
                time: float | None, clock: _Clock, trans: Tensor) -> Tensor:
        """[H*W, 3] what lies behind the scene's front fragments: shaded assets, else the background
        (mirror / glass pixels whose transmittance ``trans`` [H*W, 1] is below :data:`SECONDARY_MIN_T` are
        not traced: they show the background, weighted by that transmittance)."""
        dev = self.model.device
        n = len(origins)
        behind = self.background[None].expand(n, 3).clone()
        specular = np.array([a.material.kind != "diffuse" for a in self.assets] + [False])[hits.asset]
        diffuse = np.nonzero(hits.hit & ~specular)[0]
        hit = np.nonzero(hits.hit)[0]
        points = np.zeros_like(origins)
        points[hit] = origins[hit] + hits.t[hit, None] * dirs[hit]
        if len(diffuse):
            sub = subset_hits(hits, diffuse)
            colour = shade_diffuse(scene, points[diffuse], hits.normal[diffuse], scene.albedo(sub).astype(np.float64),
                                   self.lights, self.ambient, shadows)
            idx = torch.as_tensor(diffuse, dtype=torch.long, device=dev)
            behind[idx] = torch.as_tensor(colour, dtype=behind.dtype, device=dev)
        clock.lap("shade")
        seen = trans.detach()[:, 0].float().cpu().numpy() >= SECONDARY_MIN_T
        spec = np.nonzero(specular & hits.hit & seen)[0]
        if len(spec):
            paths = Paths(np.arange(len(spec)), points[spec], dirs[spec], hits.normal[spec], hits.front[spec],
                          hits.asset[spec], np.ones((len(spec), 3)),
                          torch.ones((len(spec), 1), dtype=torch.float32, device=dev))
            traced = trace_specular(self.model, scene, paths, len(spec), self.lights, self.ambient,
                                    self.background, self.bounces, time, shadows)
            idx = torch.as_tensor(spec, dtype=torch.long, device=dev)
            behind = behind.index_put((idx,), traced)
            clock.lap("secondary")
        return behind

    def _scene_shadow(self, scene: MeshScene, origins: np.ndarray, dirs: np.ndarray, z_per_t: np.ndarray,
                      trans: Tensor, depth: Tensor, asset_t: np.ndarray) -> Tensor:
        """[H*W, 1] factor on the scene's front colour: 1 - shadow_strength * blocked fraction at the
        scene's surface point of each pixel with fragments: where the pixel's ray meets the proxy mesh in
        front of the asset hit (``asset_t`` [H*W], inf: none), that proxy point (the TSDF fuses all training
        views, so it does not move with view-dependent floaters); else the expected depth's point."""
        alpha = 1.0 - trans.detach()[:, 0].float().cpu().numpy()
        z = depth.detach().float().cpu().numpy().astype(np.float64)
        sel = np.nonzero((alpha >= SHADOW_MIN_ALPHA) & (z > 0))[0]
        factor = np.ones(len(origins))
        if len(sel):
            t = z[sel] / z_per_t[sel]
            t_proxy = scene.proxy_distance(origins[sel], dirs[sel])
            on_proxy = np.isfinite(t_proxy) & (t_proxy < asset_t[sel])
            t = np.where(on_proxy, t_proxy, t)
            points = origins[sel] + t[:, None] * dirs[sel]
            factor[sel] = scene_shadow_factor(blocked_fraction(scene, points, self.lights), self.shadow_strength)
        return torch.as_tensor(factor, dtype=trans.dtype, device=trans.device)[:, None]

    # ---------------------------------------------------------------------------- runs

    @classmethod
    def for_run(cls, run, assets: Sequence[PlacedAsset], lights: Sequence[Light], *, ambient: float = 0.35,
                bounces: int = 2, background=None, proxy: bool = True, splats: str | Path | None = None,
                device: torch.device | str = "cpu", proxy_time: float | None = None, rebuild_proxy: bool = False,
                warn: Callable[[str], None] | None = None, progress: bool = False,
                shadow_strength: float = SHADOW_STRENGTH, backend: str = "auto",
                proxy_options: dict | None = None) -> "HybridRenderer":
        """A renderer for run folder ``run`` (a :class:`recon.run.folder.Run`): its model (``splats`` or the run's
        own), its ground frame (training cameras), its background (unless ``background`` is given) and
        its proxy mesh (RUN/hybrid/proxy.ply, built once by :mod:`recon.hybrid.proxy`; ``proxy=False``:
        none; ``proxy_options``: :func:`recon.hybrid.proxy.build_proxy` options such as ``resolution``,
        ``max_views``, ``scale``; ``proxy_time``: the time a 4D run's proxy is built at). ``warn`` (default:
        ``warnings.warn``) hears about assets outside the scene's bounds."""
        from recon.hybrid.proxy import load_or_build_proxy, scene_bounds

        model = run.load_model(splats, device=device)
        frames = run.scene.frames_train
        frame = ground_frame_of(frames)
        mesh = load_or_build_proxy(run, model, time=proxy_time, rebuild=rebuild_proxy, progress=progress,
                                   **(proxy_options or {})) if proxy else None
        lo, hi = scene_bounds(run, mesh)
        check_inside(assets, frame, lo, hi, warn or (lambda m: warnings.warn(m, stacklevel=2)))
        bg = run.background() if background is None else background
        return cls(model, assets, lights, frame, None if mesh is None else (mesh.vertices, mesh.faces), ambient,
                   bounces, bg, shadow_strength=shadow_strength, backend=backend)


__all__ = ["HybridFrame", "HybridRenderer", "SECONDARY_MIN_T", "SHADOW_MIN_ALPHA", "VISIBLE_ALPHA", "composite",
           "depth_limit_from_hits", "ground_frame_of", "primary_rays", "visible_depth"]
