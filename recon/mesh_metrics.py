"""Geometry metrics between a reconstructed mesh and its ground truth.

:func:`chamfer_distance`: points sampled uniformly (by area) on both surfaces; for each sample, the
distance to the nearest sample of the other mesh; the Chamfer distance is the mean of the two directions'
mean distances, reported in % of the ground-truth bounding-box diagonal (both meshes in the same frame).
"""

from __future__ import annotations

import numpy as np


def sample_surface(vertices: np.ndarray, faces: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """[count, 3] points uniform by area on the triangles ``faces`` [F, 3] of ``vertices`` [V, 3]."""
    tri = np.asarray(vertices, dtype=np.float64)[np.asarray(faces)]
    area = 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
    if len(tri) == 0 or not area.sum() > 0:
        raise ValueError("cannot sample a mesh with no triangle area")
    pick = rng.choice(len(tri), size=count, p=area / area.sum())
    r1, r2 = rng.random(count), rng.random(count)
    s = np.sqrt(r1)
    a, b, c = 1 - s, s * (1 - r2), s * r2
    t = tri[pick]
    return a[:, None] * t[:, 0] + b[:, None] * t[:, 1] + c[:, None] * t[:, 2]


def chamfer_distance(pred_vertices, pred_faces, true_vertices, true_faces, samples: int = 100_000,
                     seed: int = 0) -> dict:
    """{"chamfer_pct", "accuracy_pct" (pred -> truth), "completeness_pct" (truth -> pred), "diagonal"}."""
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    p = sample_surface(pred_vertices, pred_faces, samples, rng)
    t = sample_surface(true_vertices, true_faces, samples, rng)
    tv = np.asarray(true_vertices, dtype=np.float64)
    diag = float(np.linalg.norm(tv.max(axis=0) - tv.min(axis=0)))
    acc = float(cKDTree(t).query(p)[0].mean()) / diag * 100
    comp = float(cKDTree(p).query(t)[0].mean()) / diag * 100
    return {"chamfer_pct": 0.5 * (acc + comp), "accuracy_pct": acc, "completeness_pct": comp, "diagonal": diag}
