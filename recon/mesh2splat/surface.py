"""Surface samples of a normalised mesh (the initial Gaussians) and the distance of Gaussian centres to it."""

from __future__ import annotations

import numpy as np

from recon.core.open3d_import import open3d
from recon.data.mesh_render import AMBIENT, LIGHT, MeshShader, raycasting_scene


def surface_samples(mesh, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(points [count, 3] float32 uniform by area on ``mesh``, colours [count, 3] uint8): the albedo at each
    point (texture, vertex colour or the neutral grey of :class:`MeshShader`) shaded as the renders are
    (ambient + Lambert under the fixed light, face normal)."""
    import trimesh

    points, faces = trimesh.sample.sample_surface(mesh, count, seed=seed)
    bary = trimesh.triangles.points_to_barycentric(mesh.triangles[faces], points)
    shader = MeshShader(mesh)
    albedo = shader.albedo(faces, bary[:, 1], bary[:, 2])
    normal = shader.normal(faces, bary[:, 1], bary[:, 2])
    light = AMBIENT + (1 - AMBIENT) * np.clip(normal @ LIGHT, 0, None)
    colours = np.clip(albedo * light[:, None], 0, 1)
    return points.astype(np.float32), np.round(colours * 255).astype(np.uint8)


def bounding_diagonal(mesh) -> float:
    """Length of the diagonal of ``mesh``'s axis-aligned bounding box."""
    v = np.asarray(mesh.vertices)
    return float(np.linalg.norm(v.max(axis=0) - v.min(axis=0)))


def centre_distances(mesh, centres: np.ndarray) -> np.ndarray:
    """[N] unsigned distance of each point of ``centres`` [N, 3] to ``mesh``'s surface (open3d)."""
    o3c = open3d("Chamfer of Gaussian centres").core
    scene = raycasting_scene(mesh)
    return scene.compute_distance(o3c.Tensor(np.asarray(centres, dtype=np.float32))).numpy()


def chamfer_percent(mesh, centres: np.ndarray) -> float:
    """Mean distance of ``centres`` to the surface, in % of the bounding-box diagonal (the issue's "Chamfer
    of the Gaussian centres to the surface": one-sided, every Gaussian counted)."""
    if len(centres) == 0:
        return float("nan")
    return float(100.0 * centre_distances(mesh, centres).mean() / bounding_diagonal(mesh))
