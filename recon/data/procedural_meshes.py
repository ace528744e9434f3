"""Procedural meshes in category folders: a labelled mesh collection for ``splatforge mesh2splat``.

``write_mesh_collection(root, per_category, seed)`` writes ``root/<category>/<category>_<k>.<ext>`` for the
categories of :data:`CATEGORIES` (box, sphere, torus, cylinder, blob), each mesh closed and edge-manifold,
with random proportions and smooth vertex colours (a blend of three random colours along random directions),
so the folder names are the labels. Formats rotate through PLY, OBJ, GLB (vertex colours kept) and OFF
(no colours: a neutral material when rendered), so every reader of mesh2splat is exercised. The same seed
gives the same files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CATEGORIES = ("box", "sphere", "torus", "cylinder", "blob")
FORMATS = ("ply", "obj", "glb", "ply", "off")  # k-th mesh of a category: FORMATS[k % 5]


def _shape(category: str, rng: np.random.Generator):
    """An uncoloured closed trimesh of ``category`` with random proportions (about unit size)."""
    import trimesh

    if category == "box":
        return trimesh.creation.box(extents=rng.uniform(0.4, 1.6, 3))
    if category == "sphere":
        mesh = trimesh.creation.icosphere(subdivisions=3)
        mesh.apply_scale(rng.uniform(0.6, 1.4, 3))  # an ellipsoid
        return mesh
    if category == "torus":
        major = rng.uniform(0.6, 1.0)
        return trimesh.creation.torus(major, major * rng.uniform(0.2, 0.45), major_sections=48, minor_sections=24)
    if category == "cylinder":
        return trimesh.creation.cylinder(radius=rng.uniform(0.3, 0.7), height=rng.uniform(0.6, 1.8), sections=48)
    if category == "blob":
        return _blob(rng)
    raise ValueError(f"unknown category {category!r} (have {', '.join(CATEGORIES)})")


def _blob(rng: np.random.Generator):
    """An icosphere whose radius varies smoothly: 1 + sum of 4 random low-frequency cosine bumps (star-shaped,
    so still closed and manifold)."""
    import trimesh

    mesh = trimesh.creation.icosphere(subdivisions=4)
    v = np.asarray(mesh.vertices)
    radius = np.ones(len(v))
    for _ in range(4):
        d = rng.normal(size=3)
        radius += rng.uniform(0.08, 0.25) * np.cos(rng.uniform(1.5, 4.0) * v @ (d / np.linalg.norm(d))
                                                   + rng.uniform(0, 2 * np.pi))
    mesh.vertices = v * radius[:, None]
    return mesh


def smooth_colours(vertices: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[V, 4] uint8 RGBA: three random colours blended by softmax weights of the positions along three
    random directions (smooth over the surface)."""
    palette = rng.uniform(0.1, 0.95, (3, 3))
    dirs = rng.normal(size=(3, 3))
    logits = 2.0 * vertices @ dirs.T
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    rgb = w @ palette
    return np.concatenate([np.round(rgb * 255), np.full((len(rgb), 1), 255)], 1).astype(np.uint8)


def make_mesh(category: str, seed: int, coloured: bool = True):
    """One mesh of ``category`` from ``seed`` (vertex colours unless ``coloured`` is False)."""
    rng = np.random.default_rng(seed)
    mesh = _shape(category, rng)
    if coloured:
        mesh.visual.vertex_colors = smooth_colours(np.asarray(mesh.vertices), rng)
    return mesh


def write_mesh_collection(root: Path, per_category: int, seed: int = 0,
                          categories: tuple[str, ...] = CATEGORIES) -> list[Path]:
    """Write ``per_category`` meshes of each category under ``root/<category>/``; returns the paths."""
    root = Path(root)
    paths = []
    for c, category in enumerate(categories):
        (root / category).mkdir(parents=True, exist_ok=True)
        for k in range(per_category):
            ext = FORMATS[k % len(FORMATS)]
            mesh = make_mesh(category, seed * 1000 + c * 100 + k, coloured=ext != "off")
            path = root / category / f"{category}_{k:03d}.{ext}"
            mesh.export(path)
            paths.append(path)
    return paths
