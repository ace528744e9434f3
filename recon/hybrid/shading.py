"""Shading of inserted meshes and the shadows they cast onto the scene (one function per step).

Mesh shading (diffuse assets; Lambert with shadow rays), for a surface point with albedo ``a``, unit
normal ``n`` (facing the viewer) and lights ``l`` (unit direction toward the light ``w_l``, radiance
``E_l`` = intensity x colour, divided by the squared distance for a point light):

    C_mesh = a * (ambient + sum_l max(n . w_l, 0) * E_l * visible_l)

``visible_l`` is 0 when a shadow ray toward light ``l`` meets an asset or the scene's proxy mesh (the
scene shadows the asset; assets shadow themselves and each other), else 1.

Shadows cast onto the scene: the scene's radiance already holds its own lighting (and shadows), so an
asset only takes light away. At the scene's surface point of a pixel, shadow rays toward each light are
tested against the **assets only** (:meth:`MeshScene.occluded` with ``assets_only=True``; the proxy never
shadows the scene), and the scene's colour there is scaled by

    factor = 1 - shadow_strength * blocked,   blocked = sum_l w_l [ray l blocked] / sum_l w_l,

with weights ``w_l`` = intensity x mean colour of light ``l`` (so one light gives blocked in {0, 1}).
``shadow_strength`` (default :data:`SHADOW_STRENGTH`) is how much of the scene's light the asset takes
away; the scene's own normals are unknown, so the factor does not depend on the angle to the light.

Arrays: numpy float64 (mesh quantities are constants of the differentiable render); points [R, 3]
world, normals [R, 3] unit; lights a sequence of :class:`recon.hybrid.assets.Light`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from recon.hybrid.assets import Light
from recon.hybrid.raycast import MeshScene

SHADOW_STRENGTH = 0.6
"""Default fraction of the scene's radiance an asset's shadow takes away (see the module docstring)."""


def light_radiance(light: Light, distance: np.ndarray) -> np.ndarray:
    """[R, 3] radiance E arriving from ``light`` over ``distance`` [R] (a sun: intensity x colour; a point
    light: intensity x colour / distance^2)."""
    e = light.intensity * np.asarray(light.color, np.float64)
    if light.kind == "sun":
        return np.broadcast_to(e, (len(distance), 3)).copy()
    return e[None] / np.maximum(distance, 1e-12)[:, None] ** 2


def shadow_visible(scene: MeshScene, points: np.ndarray, normals: np.ndarray, light: Light,
                   test: np.ndarray | None = None, assets_only: bool = False) -> np.ndarray:
    """[R] float 1 where the segment from ``points`` (offset along ``normals`` by the scene's eps) toward
    ``light`` is free, 0 where it is blocked; only rays where ``test`` [R] bool is true are cast (others
    count as visible)."""
    visible = np.ones(len(points))
    sel = np.arange(len(points)) if test is None else np.nonzero(test)[0]
    if len(sel) == 0:
        return visible
    start = points[sel] + scene.eps * normals[sel]
    dirs, dist = light.toward(start)
    visible[sel] = ~scene.occluded(start, dirs, dist, assets_only=assets_only)
    return visible


def lambert(albedo: np.ndarray, normals: np.ndarray, points: np.ndarray, lights: Sequence[Light],
            visible: Sequence[np.ndarray] | None, ambient: float) -> np.ndarray:
    """[R, 3] ``albedo * (ambient + sum_l max(n . w_l, 0) E_l visible_l)`` (module docstring);
    ``visible`` per light [R] (None: all lit)."""
    light_sum = np.full((len(points), 3), float(ambient))
    for i, light in enumerate(lights):
        dirs, dist = light.toward(points)
        cos = np.maximum(np.einsum("rc,rc->r", normals, dirs), 0.0)
        vis = 1.0 if visible is None else visible[i]
        light_sum += (cos * vis)[:, None] * light_radiance(light, dist)
    return albedo * light_sum


def shade_diffuse(scene: MeshScene, points: np.ndarray, normals: np.ndarray, albedo: np.ndarray,
                  lights: Sequence[Light], ambient: float, shadows: bool = True) -> np.ndarray:
    """[R, 3] Lambert colour of diffuse mesh points, with shadow rays against assets and proxy when
    ``shadows`` (only toward lights the surface faces)."""
    visible = None
    if shadows and lights:
        visible = []
        for light in lights:
            dirs, _ = light.toward(points)
            facing = np.einsum("rc,rc->r", normals, dirs) > 0
            visible.append(shadow_visible(scene, points, normals, light, facing))
    return lambert(albedo, normals, points, lights, visible, ambient)


def blocked_fraction(scene: MeshScene, points: np.ndarray, lights: Sequence[Light]) -> np.ndarray:
    """[R] light-weighted fraction of the lights that the assets (only) hide from scene ``points`` [R, 3]
    (module docstring; shadow rays start :attr:`MeshScene.eps` along their direction)."""
    weights = np.array([light.intensity * float(np.mean(light.color)) for light in lights], np.float64)
    blocked = np.zeros(len(points))
    if len(points) == 0 or not len(lights) or weights.sum() <= 0:
        return blocked
    lo, hi = scene.bounds
    for w, light in zip(weights, lights):
        if w > 0:
            dirs, dist = light.toward(points)
            one = dirs[:1] if light.kind == "sun" else dirs  # a sun's rays share one direction
            near = np.nonzero(segment_meets_box(points, one, dist, lo - scene.eps, hi + scene.eps))[0]
            if len(near):
                blocked[near] += w * scene.occluded(points[near], dirs[near], dist[near], assets_only=True)
    return blocked / weights.sum()


def segment_meets_box(points: np.ndarray, dirs: np.ndarray, dist: np.ndarray, lo: np.ndarray,
                      hi: np.ndarray) -> np.ndarray:
    """[R] bool: the segment from ``points`` [R, 3] along ``dirs`` [R, 3] (or [1, 3]) up to ``dist`` [R] meets the box
    ``lo`` .. ``hi`` (slab test; a cheap cull before casting shadow rays against the assets)."""
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        return np.zeros(len(points), bool)
    safe = np.where(np.abs(dirs) < 1e-12, np.where(dirs < 0, -1e-12, 1e-12), dirs)
    inv = 1.0 / safe
    t1, t2 = (lo[None] - points) * inv, (hi[None] - points) * inv
    near = np.minimum(t1, t2).max(axis=1)
    far = np.maximum(t1, t2).min(axis=1)
    return (near <= far) & (far >= 0) & (near <= dist)


def scene_shadow_factor(blocked: np.ndarray, strength: float = SHADOW_STRENGTH) -> np.ndarray:
    """[R] multiplier of the scene's radiance: ``1 - strength * blocked``."""
    return 1.0 - float(strength) * blocked


__all__ = ["SHADOW_STRENGTH", "blocked_fraction", "lambert", "light_radiance", "scene_shadow_factor",
           "segment_meets_box", "shade_diffuse", "shadow_visible"]
