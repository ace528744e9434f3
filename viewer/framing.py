"""The viewer's first view of a splat model: where it starts, which way is up.

The rule (docs/viewer.md, "The first view"):

1. ``--camera`` (position and look-at) wins, then a start camera: a run's first training camera or the one
   a file's view sidecar names (:mod:`recon.export.view_sidecar`), taken exactly (pose and field of view).
2. Otherwise the view frames the **core** of the Gaussians: the splat centres are binned into a 32^3 grid
   over their 0.5..99.5 percentile box, each cell weighted by the opacities inside it; the cells weighing at
   least the mean of the occupied cells are dense (the object), the rest (a sparse cloud of floaters, the
   random-init cube) is left out; the core box is the opacity-weighted 2..98 percentile box of the centres
   in dense cells.
3. Up: ``--up`` (x, y, z, -x, -y, -z) wins, then the run's or sidecar's up (mean training camera up), else
   an estimate: the normal of the core's dominant plane (the principal axis of least opacity-weighted
   variance) when it is within 25 degrees of the y or z axis (snapped to it); otherwise whichever of y and z
   has less weighted variance (captures come y-down: COLMAP/OpenCV, y-up: OpenGL/glTF, or z-up: Blender; x is
   never taken for up). Its sign points away from the heavier half of the core (objects stand on their
   base, ground planes hold the mass), or when the halves weigh within 10 % of each other, towards OpenCV's
   -y.
4. The camera looks at the core box's centre from 25 degrees above the horizon, facing the core's broad side
   (30 degrees round from its minor horizontal axis), at the distance where every corner of the core box lies
   within 90 % of the half field of view (vertically, and horizontally as in a square frame).

All positions are in the model's OpenCV world (x right, y down, z forward); directions are unit [3] float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from recon.core.splat_data import sigmoid

GRID = 32
ELEVATION_DEG = 25.0
AZIMUTH_DEG = 30.0
FILL = 0.9
SNAP_DEG = 25.0
OPENCV_UP = np.array([0.0, -1.0, 0.0])
AXES = {"x": [1.0, 0.0, 0.0], "y": [0.0, 1.0, 0.0], "z": [0.0, 0.0, 1.0]}


@dataclass
class FirstView:
    """A viewer start camera: ``position`` [3], ``look_at`` [3], ``up`` [3] (unit), vertical ``fov`` (radians),
    and how it was chosen (``how``: "camera", "training camera", "framed")."""

    position: np.ndarray
    look_at: np.ndarray
    up: np.ndarray
    fov: float
    how: str = "framed"

    def world_to_cam(self) -> np.ndarray:
        """[4, 4] OpenCV world-to-camera of this view (camera +z towards look_at, -y towards ``up``)."""
        fwd = self.look_at - self.position
        fwd = fwd / np.linalg.norm(fwd)
        right = np.cross(fwd, self.up)  # x = y cross z with y = -up
        if np.linalg.norm(right) < 1e-9:  # looking straight along up: any right will do
            right = np.cross(fwd, [1.0, 0.0, 0.0] if abs(fwd[0]) < 0.9 else [0.0, 1.0, 0.0])
        right /= np.linalg.norm(right)
        down = np.cross(fwd, right)
        R = np.stack([right, down, fwd])  # rows: camera axes in world
        w2c = np.eye(4)
        w2c[:3, :3] = R
        w2c[:3, 3] = -R @ self.position
        return w2c


def parse_up(text: str) -> np.ndarray:
    """'x' | 'y' | 'z' | '-x' | '-y' | '-z' (also '+y') -> unit [3]; ValueError naming --up otherwise."""
    t = text.strip().lower()
    sign = -1.0 if t.startswith("-") else 1.0
    axis = t.lstrip("+-")
    if axis not in AXES or len(t) - len(axis) > 1:
        raise ValueError(f"--up {text!r}: give one of x, y, z, -x, -y, -z")
    return sign * np.array(AXES[axis])


def parse_camera(text: str) -> tuple[np.ndarray, np.ndarray]:
    """'px,py,pz,tx,ty,tz' (position, then the point looked at; world units) -> (position [3], look_at [3]);
    ValueError naming --camera for anything else."""
    try:
        v = np.array([float(x) for x in text.split(",")])
    except ValueError:
        v = np.zeros(0)
    if v.shape != (6,) or not np.all(np.isfinite(v)) or np.allclose(v[:3], v[3:]):
        raise ValueError(f"--camera {text!r}: give 'px,py,pz,tx,ty,tz' (camera position, then the point it looks "
                         f"at; six numbers, the two points apart)")
    return v[:3], v[3:]


def weighted_percentiles(x: np.ndarray, w: np.ndarray, qs) -> np.ndarray:
    """[len(qs), D] per-column percentiles (0..100) of [N, D] ``x`` with weights [N]."""
    out = np.empty((len(qs), x.shape[1]))
    cw_total = float(w.sum())
    for d in range(x.shape[1]):
        order = np.argsort(x[:, d])
        cw = np.cumsum(w[order])
        for i, q in enumerate(qs):
            k = min(int(np.searchsorted(cw, q / 100.0 * cw_total)), len(order) - 1)
            out[i, d] = x[order[k], d]
    return out


def dense_mask(means: np.ndarray, weights: np.ndarray, grid: int = GRID) -> np.ndarray:
    """[N] bool: the centres ([N, 3]) lying in grid cells whose summed weight is at least the mean weight of
    the occupied cells (grid over the 0.5..99.5 percentile box; centres outside it are not dense)."""
    lo, hi = np.percentile(means, [0.5, 99.5], axis=0)
    size = np.maximum(hi - lo, 1e-9)
    idx = np.floor((means - lo) / size * grid).astype(np.int64)
    inside = np.all((idx >= 0) & (idx < grid), axis=1)
    flat = np.where(inside, (idx[:, 0] * grid + idx[:, 1]) * grid + idx[:, 2], 0)
    cells = np.bincount(flat[inside], weights=weights[inside], minlength=grid ** 3)
    occupied = cells[cells > 0]
    if len(occupied) == 0:
        return inside
    return inside & (cells[flat] >= occupied.mean())


def core_box(means: np.ndarray, opacities: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo [3], hi [3], core mask [N]): the opacity-weighted 2..98 percentile box of the centres in dense cells
    (:func:`dense_mask`); all centres when fewer than 1 % of them (or under 10) are dense."""
    w = np.clip(opacities, 1e-6, None)
    mask = dense_mask(means, w)
    if mask.sum() < max(10, 0.01 * len(means)):
        mask = np.ones(len(means), bool)
    lo, hi = weighted_percentiles(means[mask], w[mask], [2.0, 98.0])
    return lo, hi, mask


def snap_to_axis(v: np.ndarray, max_deg: float = SNAP_DEG) -> np.ndarray:
    """``v`` (unit [3]) replaced by the nearest signed world axis when within ``max_deg`` of it."""
    k = int(np.argmax(np.abs(v)))
    if abs(v[k]) >= math.cos(math.radians(max_deg)):
        out = np.zeros(3)
        out[k] = math.copysign(1.0, v[k])
        return out
    return v


def estimate_up(points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Unit [3] up of [N, 3] ``points`` (the core) with weights [N] (see the module docstring): the
    least-variance principal axis when it is within 25 degrees of the y or z axis (snapped to it), else the
    one of y and z with less weighted variance (captures are y-down, y-up or z-up; x is never up unless
    ``--up`` says so); its sign points away from the heavier half, or towards OpenCV -y on a tie."""
    w = weights / weights.sum()
    mean = w @ points
    d = points - mean
    cov = (d * w[:, None]).T @ d
    _, vecs = np.linalg.eigh(cov)
    normal = snap_to_axis(vecs[:, 0] / np.linalg.norm(vecs[:, 0]))
    if not (abs(normal[1]) == 1.0 or abs(normal[2]) == 1.0):
        normal = np.array(AXES["y"] if cov[1, 1] <= cov[2, 2] else AXES["z"])
    t = points @ normal
    lo, hi = np.percentile(t, [2.0, 98.0])
    mid = 0.5 * (lo + hi)
    below, above = float(w[t < mid].sum()), float(w[t >= mid].sum())
    if abs(below - above) > 0.1 * (below + above):
        return normal if below > above else -normal
    return normal if normal @ OPENCV_UP >= 0 else -normal


def horizontal_direction(points: np.ndarray, weights: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Unit [3] horizontal (perpendicular to ``up``) direction from the core's centre towards the camera:
    30 degrees round from the minor horizontal principal axis (facing the broad side), signed towards OpenCV
    -z (where the camera of an unrotated capture stands)."""
    w = weights / weights.sum()
    d = points - w @ points
    d = d - np.outer(d @ up, up)
    cov = (d * w[:, None]).T @ d
    vals, vecs = np.linalg.eigh(cov)  # ascending; vals[0] ~ 0 is up itself
    order = np.argsort(np.abs(vecs.T @ up))  # the two horizontal axes first
    h = [vecs[:, i] for i in order[:2]]
    h.sort(key=lambda v: float(v @ cov @ v))
    minor, major = h
    ref = np.array([0.0, 0.0, -1.0]) - up * (up @ [0.0, 0.0, -1.0])
    if np.linalg.norm(ref) < 1e-6:
        ref = np.array([1.0, 0.0, 0.0]) - up * up[0]
    if minor @ ref < 0:
        minor = -minor
    if major @ np.cross(up, minor) < 0:
        major = -major
    a = math.radians(AZIMUTH_DEG)
    out = math.cos(a) * minor + math.sin(a) * major
    return out / np.linalg.norm(out)


def fit_distance(lo: np.ndarray, hi: np.ndarray, direction: np.ndarray, up: np.ndarray, fov: float,
                 fill: float = FILL) -> float:
    """Distance from the box centre along ``direction`` (unit, centre -> camera) at which every corner of the
    box [lo, hi] lies within ``fill`` of the half field of view ``fov`` (vertical, and the same horizontally:
    a square frame, the narrowest a browser window is likely to be)."""
    fwd = -direction
    right = np.cross(fwd, up)
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    k = fill * math.tan(0.5 * fov)
    centre = 0.5 * (lo + hi)
    corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])]) - centre
    lateral = np.maximum(np.abs(corners @ right), np.abs(corners @ down))
    return max(float(np.max(lateral / k - corners @ fwd)), 1e-3)


def frame_splats(means: np.ndarray, logit_opacities: np.ndarray, fov: float, up: np.ndarray | None = None,
                 fill: float = FILL) -> FirstView:
    """The framed first view (rules 2-4 of the module docstring) of splat centres [N, 3] with raw
    ``logit_opacities`` [N], for a vertical field of view ``fov`` (radians); ``up`` overrides the estimate."""
    means = np.asarray(means, dtype=np.float64).reshape(-1, 3)
    if len(means) == 0:
        return empty_view(fov, up)
    opac = sigmoid(np.asarray(logit_opacities, dtype=np.float64).reshape(-1))
    lo, hi, mask = core_box(means, opac)
    pts, w = means[mask], np.clip(opac[mask], 1e-6, None)
    up = estimate_up(pts, w) if up is None else np.asarray(up, dtype=np.float64) / np.linalg.norm(up)
    centre = 0.5 * (lo + hi)
    e = math.radians(ELEVATION_DEG)
    direction = math.cos(e) * horizontal_direction(pts, w, up) + math.sin(e) * up  # from the centre to the camera
    dist = fit_distance(lo, hi, direction, up, fov, fill)
    return FirstView(centre + dist * direction, centre, up, fov, "framed")


def empty_view(fov: float, up: np.ndarray | None = None) -> FirstView:
    """The first view of a model without Gaussians (nothing to frame): the unit box at the origin, framed as
    rule 4 frames a core, from the OpenCV -z side, with ``up`` or OpenCV's -y."""
    up = OPENCV_UP.astype(np.float64) if up is None else np.asarray(up, dtype=np.float64) / np.linalg.norm(up)
    ref = np.array([0.0, 0.0, -1.0]) - up * (up @ [0.0, 0.0, -1.0])
    if np.linalg.norm(ref) < 1e-6:
        ref = np.array([1.0, 0.0, 0.0]) - up * up[0]
    e = math.radians(ELEVATION_DEG)
    direction = math.cos(e) * ref / np.linalg.norm(ref) + math.sin(e) * up
    lo, hi = -np.ones(3), np.ones(3)
    return FirstView(fit_distance(lo, hi, direction, up, fov) * direction, np.zeros(3), up, fov, "framed")


def view_from_camera(world_to_cam: np.ndarray, K: np.ndarray, height: int, distance: float = 1.0) -> FirstView:
    """A training camera ([4, 4] OpenCV world-to-camera, [3, 3] K, image height) as a :class:`FirstView`:
    its centre, a point ``distance`` ahead on its axis, its own up (-y) and vertical fov."""
    R, t = world_to_cam[:3, :3], world_to_cam[:3, 3]
    centre = -R.T @ t
    fov = 2.0 * math.atan(0.5 * height / K[1, 1])
    return FirstView(centre, centre + distance * R[2], -R[1], fov, "training camera")
