"""Ray casting against the inserted meshes (and the scene's proxy mesh) with open3d's ``RaycastingScene``.

:class:`MeshScene` holds two open3d scenes built once per asset pose:

- the *asset* scene (the posed assets only): primary and secondary rays find the first asset hit there
  (:meth:`MeshScene.first_hit`);
- the *occluder* scene (assets plus the scene's proxy mesh, when given): shadow rays are tested there
  (:meth:`MeshScene.occluded`), so assets shadow the scene and the scene shadows the assets.

Rays: origins [R, 3], unit directions [R, 3] (world, float64 in, float32 inside open3d); distances t along
the ray. Normals are the geometric (face) normals in world space, turned to face the ray
(``dot(n, d) <= 0``); ``front`` says whether the ray hit the face's front side (needed by glass to know
whether it enters or leaves).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from recon.hybrid.assets import PlacedAsset
from recon.core.open3d_import import open3d

NO_HIT = -1
SHADOW_EPS = 1e-4  # relative offset (of the scene scale) that keeps shadow and secondary rays off their surface


@dataclass
class Hits:
    """First hits of R rays: t [R] float64 (inf: no hit), normal [R, 3] (facing the ray; 0 where no hit),
    front [R] bool (hit the face's outward side), asset [R] int64 (index into the assets, -1: no hit), part
    [R] int64, face [R] int64 (within the part), bary [R, 2] (open3d primitive uvs)."""

    t: np.ndarray
    normal: np.ndarray
    front: np.ndarray
    asset: np.ndarray
    part: np.ndarray
    face: np.ndarray
    bary: np.ndarray

    @property
    def hit(self) -> np.ndarray:
        return self.asset >= 0


def _rays(origins: np.ndarray, dirs: np.ndarray):
    o3d = open3d("ray casting against meshes")

    rays = np.concatenate([origins, dirs], axis=1).astype(np.float32)
    return o3d.core.Tensor(np.ascontiguousarray(rays))


def _tensor_mesh(vertices: np.ndarray, faces: np.ndarray):
    o3d = open3d("ray casting against meshes")

    mesh = o3d.t.geometry.TriangleMesh()
    mesh.vertex.positions = o3d.core.Tensor(np.ascontiguousarray(vertices, np.float32))
    mesh.triangle.indices = o3d.core.Tensor(np.ascontiguousarray(faces, np.int32))
    return mesh


class MeshScene:
    """Posed assets (and an optional proxy mesh of the scene) ready for ray casting.

    Args:
        assets: the placed assets; ``frame`` [3, 3] the ground frame (columns e1, e2, up); ``time`` the
            normalised time at which keyframed assets are posed.
        proxy: (vertices [V, 3], faces [F, 3]) of the scene's proxy mesh in world space, or None.
    """

    def __init__(self, assets: Sequence[PlacedAsset], frame: np.ndarray, time: float | None = None,
                 proxy: tuple[np.ndarray, np.ndarray] | None = None):
        o3d = open3d("ray casting against meshes")

        self.assets = list(assets)
        self.frame = np.asarray(frame, np.float64)
        self.time = time
        self._asset_scene = o3d.t.geometry.RaycastingScene()
        self._occluder_scene = o3d.t.geometry.RaycastingScene()
        self._geometry: dict[int, tuple[int, int]] = {}  # asset-scene geometry id -> (asset, part)
        self.parts_world: list[list[np.ndarray]] = []
        lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
        for a, asset in enumerate(self.assets):
            world = asset.world_vertices(self.frame, time)
            self.parts_world.append(world)
            for p, (verts, part) in enumerate(zip(world, asset.mesh.parts)):
                gid = self._asset_scene.add_triangles(_tensor_mesh(verts, part.faces))
                self._geometry[int(gid)] = (a, p)
                self._occluder_scene.add_triangles(_tensor_mesh(verts, part.faces))
                lo, hi = np.minimum(lo, verts.min(0)), np.maximum(hi, verts.max(0))
        self.has_proxy = proxy is not None and len(proxy[1]) > 0
        self._proxy_scene = None
        if self.has_proxy:
            self._occluder_scene.add_triangles(_tensor_mesh(*proxy))
            self._proxy_scene = o3d.t.geometry.RaycastingScene()
            self._proxy_scene.add_triangles(_tensor_mesh(*proxy))
        self.bounds = (lo, hi)
        self.scale = float(np.linalg.norm(hi - lo)) if np.all(np.isfinite(lo)) else 1.0

    @property
    def eps(self) -> float:
        """Offset along rays that start on a surface (a fraction of the assets' size)."""
        return SHADOW_EPS * max(self.scale, 1e-6)

    def first_hit(self, origins: np.ndarray, dirs: np.ndarray, t_min: float | np.ndarray = 0.0) -> Hits:
        """First asset hit of each ray at distance > ``t_min`` (a number or [R]); see :class:`Hits`."""
        R = len(origins)
        t_min = np.broadcast_to(np.asarray(t_min, np.float64), (R,))
        o = origins + t_min[:, None] * dirs
        ans = self._asset_scene.cast_rays(_rays(o, dirs))
        t = ans["t_hit"].numpy().astype(np.float64)
        gid = ans["geometry_ids"].numpy().astype(np.int64)
        hit = np.isfinite(t)
        t = np.where(hit, t + t_min, np.inf)
        asset = np.full(R, NO_HIT, np.int64)
        part = np.zeros(R, np.int64)
        if hit.any():
            lookup = np.array([self._geometry.get(int(g), (NO_HIT, 0)) for g in range(max(self._geometry) + 1)])
            asset[hit] = lookup[gid[hit], 0]
            part[hit] = lookup[gid[hit], 1]
        normal = ans["primitive_normals"].numpy().astype(np.float64)
        facing = np.einsum("rc,rc->r", normal, dirs)
        front = facing < 0
        normal = np.where(front[:, None], normal, -normal) * hit[:, None]
        return Hits(t=t, normal=normal, front=front & hit, asset=asset, part=part,
                    face=np.where(hit, ans["primitive_ids"].numpy().astype(np.int64), 0),
                    bary=ans["primitive_uvs"].numpy().astype(np.float64))

    def proxy_distance(self, origins: np.ndarray, dirs: np.ndarray) -> np.ndarray:
        """[R] float64 distance to the first proxy-mesh hit of each ray (inf: no hit, or no proxy)."""
        if self._proxy_scene is None:
            return np.full(len(origins), np.inf)
        return self._proxy_scene.cast_rays(_rays(origins, dirs))["t_hit"].numpy().astype(np.float64)

    def albedo(self, hits: Hits) -> np.ndarray:
        """[R, 3] float32 albedo at the hits (0 where no hit)."""
        out = np.zeros((len(hits.t), 3), np.float32)
        for a, asset in enumerate(self.assets):
            for p, part in enumerate(asset.mesh.parts):
                sel = np.nonzero((hits.asset == a) & (hits.part == p))[0]
                if len(sel):
                    out[sel] = part.albedo(hits.face[sel], hits.bary[sel])
        return out

    def occluded(self, origins: np.ndarray, dirs: np.ndarray, t_max: np.ndarray | float = np.inf,
                 assets_only: bool = False) -> np.ndarray:
        """[R] bool: something in the occluder scene (assets, proxy) lies on the segment from ``origins``
        (offset by :attr:`eps`) toward ``dirs`` up to ``t_max``. ``assets_only``: test the assets alone
        (shadows cast onto the scene: the proxy must not shadow the scene, whose own shadows are baked in
        its radiance)."""
        R = len(origins)
        t_max = np.broadcast_to(np.asarray(t_max, np.float64), (R,))
        far = np.where(np.isfinite(t_max), t_max - 2 * self.eps, np.inf)
        hit = np.zeros(R, bool)
        live = far > 0
        if live.any():
            o = origins[live] + self.eps * dirs[live]
            scene = self._asset_scene if assets_only else self._occluder_scene
            t = scene.cast_rays(_rays(o, dirs[live]))["t_hit"].numpy().astype(np.float64)
            hit[live] = t < far[live]
        return hit
