"""Secondary rays at mirror and glass assets: a throughput loop with a bounce limit.

A pixel whose first visible mesh hit is a mirror or glass asset gets its colour from paths that leave the
hit (FIELD_NOTES §4, as Dynamic Mesh-Aware Radiance Fields):

- mirror: one reflected path, weight x the material's tint;
- glass: a reflected path with weight F and a refracted one (Snell) with weight 1 - F (F: the exact Fresnel
  reflectance of unpolarised light for the index ``ior``; total internal reflection gives F = 1), both
  x the tint. The optics are :mod:`recon.hybrid.optics`. A ray that hits a face's outward side enters the glass (n1 = 1, n2 = ior), else it leaves.

Each path segment (origin: the surface point, start ``t_min`` = the scene's eps):

1. the next asset hit bounds the segment: ``t_max`` = its distance (+inf when none);
2. the scene along the segment, ``model.trace_rays(origins, dirs, t_min, t_max, t=time)`` ->
   (rgb premultiplied, transmittance T): colour += throughput x weight x rgb, throughput x= T
   (``throughput`` is a tensor: differentiable in the scene's parameters);
3. then: no hit -> colour += throughput x weight x background; a diffuse asset -> colour += throughput x
   weight x its shaded colour (:func:`recon.hybrid.shading.shade_diffuse`, shadows included); a mirror /
   glass asset -> the path goes on from there, while bounces remain; past the bounce limit it ends with
   the background colour (so a limit of 0 shows mirrors and glass as the background).

Paths whose weight drops below :data:`MIN_WEIGHT` are dropped. Directions are world unit vectors;
normals face the incoming ray (:class:`recon.hybrid.raycast.Hits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from recon.hybrid.assets import Light, PlacedAsset
from recon.hybrid.optics import fresnel_dielectric, glass_eta, reflect, refract
from recon.hybrid.raycast import Hits, MeshScene
from recon.hybrid.shading import shade_diffuse

MIN_WEIGHT = 1e-3


# ------------------------------------------------------------------------------------------ paths


@dataclass
class Paths:
    """P light paths sitting on a specular hit: ``pixel`` [P] int64 (index into the caller's rays),
    ``point`` [P, 3], ``incoming`` [P, 3] unit direction that reached the point, ``normal`` [P, 3] (facing
    the incoming ray), ``front`` [P] bool (outward side hit), ``asset`` [P] int64, ``weight`` [P, 3]
    (mesh factors: tints, Fresnel), ``throughput`` [P, 1] tensor (scene transmittance so far)."""

    pixel: np.ndarray
    point: np.ndarray
    incoming: np.ndarray
    normal: np.ndarray
    front: np.ndarray
    asset: np.ndarray
    weight: np.ndarray
    throughput: Tensor

    def take(self, sel: np.ndarray) -> "Paths":
        idx = torch.as_tensor(sel, dtype=torch.long, device=self.throughput.device)
        return Paths(self.pixel[sel], self.point[sel], self.incoming[sel], self.normal[sel], self.front[sel],
                     self.asset[sel], self.weight[sel], self.throughput[idx])


def spawn(paths: Paths, assets: Sequence[PlacedAsset]) -> tuple[Paths, np.ndarray]:
    """The child rays leaving each path's specular hit: (children as :class:`Paths` whose ``incoming`` is
    the new direction, still at the parent's point; their directions [Q, 3])."""
    kind = np.array([assets[a].material.kind for a in paths.asset])
    tint = np.array([assets[a].material.tint for a in paths.asset], np.float64).reshape(-1, 3)
    ior = np.array([assets[a].material.ior for a in paths.asset], np.float64)
    d, n = paths.incoming, paths.normal
    refl = reflect(d, n)
    glass = kind == "glass"
    eta = glass_eta(paths.front, ior)
    f = np.where(glass, fresnel_dielectric(-np.einsum("rc,rc->r", d, n), eta), 1.0)
    refr, tir = refract(d, n, eta)
    refr = refr / np.linalg.norm(refr, axis=1, keepdims=True)
    parents = [np.arange(len(d)), np.nonzero(glass & ~tir)[0]]
    dirs = np.concatenate([refl, refr[parents[1]]])
    factor = np.concatenate([f, 1.0 - f[parents[1]]])
    parent = np.concatenate(parents)
    child = paths.take(parent)
    child.weight = child.weight * tint[parent] * factor[:, None]
    child.incoming = dirs
    return child, dirs


def trace_specular(model, scene: MeshScene, paths: Paths, n_rays: int, lights: Sequence[Light], ambient: float,
                   background: Tensor, bounces: int, time: float | None = None, shadows: bool = True) -> Tensor:
    """[n_rays, 3] colour (a tensor, differentiable in the scene's parameters) that the ``paths`` send back
    to their pixels, following the module docstring's loop for up to ``bounces`` bounces.

    ``background`` [3] tensor on the model's device; ``model.trace_rays`` composites the scene along each
    segment (:class:`recon.models.base.NotCompositableError` when the method cannot trace)."""
    dev = background.device
    out = torch.zeros((n_rays, 3), dtype=background.dtype, device=dev)
    eps = scene.eps
    if bounces <= 0:
        pix = torch.as_tensor(paths.pixel, dtype=torch.long, device=dev)
        w = torch.as_tensor(paths.weight, dtype=out.dtype, device=dev)
        return out.index_add(0, pix, paths.throughput * w * background[None])
    for bounce in range(bounces):
        if len(paths.pixel) == 0:
            break
        child, dirs = spawn(paths, scene.assets)
        keep = np.nonzero(child.weight.max(axis=1) >= MIN_WEIGHT)[0]
        child, dirs = child.take(keep), dirs[keep]
        if len(keep) == 0:
            break
        hits = scene.first_hit(child.point, dirs, t_min=eps)
        o = torch.as_tensor(child.point, dtype=torch.float32, device=dev)
        d = torch.as_tensor(dirs, dtype=torch.float32, device=dev)
        t_min = torch.full((len(keep),), eps, dtype=torch.float32, device=dev)
        t_max = torch.as_tensor(hits.t, dtype=torch.float32, device=dev)
        rgb, trans, _ = model.trace_rays(o, d, t_min, t_max, t=time)
        pix = torch.as_tensor(child.pixel, dtype=torch.long, device=dev)
        w = torch.as_tensor(child.weight, dtype=out.dtype, device=dev)
        out = out.index_add(0, pix, child.throughput * w * rgb.to(out.dtype))
        throughput = child.throughput * trans.to(out.dtype)
        ends = _ending_colour(scene, hits, child, dirs, lights, ambient, background, shadows,
                              last=bounce == bounces - 1)
        out = out.index_add(0, pix, throughput * w * ends)
        go_on = np.nonzero(hits.hit & _is_specular(scene, hits.asset))[0] if bounce < bounces - 1 \
            else np.zeros(0, np.int64)
        paths = Paths(child.pixel[go_on], child.point[go_on] + hits.t[go_on, None] * dirs[go_on], dirs[go_on],
                      hits.normal[go_on], hits.front[go_on], hits.asset[go_on], child.weight[go_on],
                      throughput[torch.as_tensor(go_on, dtype=torch.long, device=dev)])
    return out


def subset_hits(hits: Hits, sel: np.ndarray) -> Hits:
    """The :class:`Hits` of rays ``sel`` [S] (indices)."""
    return Hits(*(getattr(hits, f)[sel] for f in ("t", "normal", "front", "asset", "part", "face", "bary")))


def _is_specular(scene: MeshScene, asset: np.ndarray) -> np.ndarray:
    """[R] bool: the asset index (-1: none) is a mirror or glass."""
    kinds = np.array([a.material.kind != "diffuse" for a in scene.assets] + [False])
    return kinds[asset]


def _ending_colour(scene: MeshScene, hits: Hits, child: Paths, dirs: np.ndarray, lights, ambient: float,
                   background: Tensor, shadows: bool, last: bool) -> Tensor:
    """[Q, 3] what a segment ends on: background (no hit, or a specular hit past the bounce limit), the
    shaded diffuse asset, or 0 for a specular hit whose path goes on."""
    dev = background.device
    spec = hits.hit & _is_specular(scene, hits.asset)
    diffuse = hits.hit & ~spec
    colour = np.zeros((len(dirs), 3))
    if diffuse.any():
        sel = np.nonzero(diffuse)[0]
        pts = child.point[sel] + hits.t[sel, None] * dirs[sel]
        sub = subset_hits(hits, sel)
        colour[sel] = shade_diffuse(scene, pts, hits.normal[sel], scene.albedo(sub).astype(np.float64), lights,
                                    ambient, shadows)
    out = torch.as_tensor(colour, dtype=background.dtype, device=dev)
    to_bg = ~hits.hit | (spec if last else np.zeros_like(spec))
    mask = torch.as_tensor(to_bg, device=dev)[:, None]
    return torch.where(mask, background[None].expand_as(out), out)


__all__ = ["MIN_WEIGHT", "Paths", "spawn", "subset_hits", "trace_specular"]
