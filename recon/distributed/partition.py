"""Split a scene into blocks for block-partitioned training (VastGaussian / CityGaussian style).

Steps (one function each):

1. :func:`up_axis`: the scene's up direction from the cameras (the normal of their x axes, which have
   no roll in street / drone / orbit captures; else the mean of their "up" vectors ``-R^T e_y``), and a ground-plane
   basis ``e1, e2`` (:func:`ground_frame`). Ground coordinates of a world point ``x`` are
   ``(x . e1, x . e2)``, its height ``x . up``.
2. :func:`robust_box`: a bounding rectangle on the ground from percentiles of the points and camera
   centres (``percentile`` .. ``100 - percentile``), and a height range from the points.
3. :func:`kd_cells`: balanced k-d cells: ``A x B`` (columns of equal camera counts, then rows of equal
   counts inside each column), or recursive median splits of the longer side until each cell holds at
   most ``max_images`` cameras and ``max_points`` points. Core boxes tile the whole plane: a cell's
   outer sides are unbounded (``None``), so every Gaussian lies in exactly one core box (half-open:
   ``lo <= x < hi``).
4. :func:`expanded_box`: the core box (cut to the robust box) grown by ``overlap`` x its size per side.
5. :func:`assign_cameras`: a camera belongs to a block when its centre is in the expanded box, or when
   the block's 3D box (expanded box x height range) covers >= ``visibility`` of its image
   (VastGaussian's rule; coverage = share of a ``16 x 16`` grid of pixel rays that hit the box).
6. :func:`block_points`: initial points per block: the points whose ground coordinates are in the
   expanded box.

The result is :class:`Partition` (``blocks.json``: the dataset's identity, the frame, the boxes, each
block's image names) and ``blocks.png``, a top view (:func:`plot_partition`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from recon.core.limits import load_json
from recon.data.scene import Frame, Scene, camera_centers
from recon.core.errors import SplatforgeError

FORMAT = "splatforge-blocks"
VERSION = 1
RAY_GRID = 16  # rays per image side for the coverage estimate


class PartitionError(SplatforgeError, ValueError):
    """The scene cannot be split as asked, or a partition file does not fit the dataset."""


# ------------------------------------------------------------------------------------------ identity


def dataset_fingerprint(scene: Scene) -> str:
    """sha256 (hex) of every frame's name, size, world_to_cam and K (train then test) and the point count:
    the same dataset moved elsewhere keeps it; another dataset (or another ``data_factor``'s sizes) does not."""
    h = hashlib.sha256()
    for split, frames in (("train", scene.frames_train), ("test", scene.frames_test)):
        h.update(split.encode())
        for f in frames:
            h.update(f.name.encode() + b"\0")
            h.update(np.asarray([f.width, f.height], np.int64).tobytes())
            h.update(np.round(f.camera.world_to_cam.detach().cpu().double().numpy(), 5).tobytes())
            h.update(np.round(f.camera.K.detach().cpu().double().numpy(), 3).tobytes())
    h.update(str(0 if scene.points is None else len(scene.points)).encode())
    return h.hexdigest()


# ------------------------------------------------------------------------------------------ frame


def up_axis(frames: Sequence[Frame]) -> np.ndarray:
    """[3] unit up direction of the scene, turned toward the mean camera up (``-R^T e_y``):

    - cameras without roll (street, drone and orbit captures) have horizontal x axes: up is the normal of
      the plane of their x axes (smallest singular vector; used when that plane is clear, singular values
      s3 < 0.2 s2), exact even when every camera looks down;
    - else the normalised mean camera up when the cameras agree (mean length >= 0.5);
    - else the normal of the best plane through the camera centres."""
    w2c = np.stack([f.camera.world_to_cam.detach().cpu().double().numpy() for f in frames])
    ups = -w2c[:, 1, :3]
    mean = ups.mean(axis=0)
    rights = w2c[:, 0, :3]
    if len(frames) >= 2:
        _, s, vt = np.linalg.svd(rights, full_matrices=True)
        if len(s) >= 2 and (len(s) < 3 or s[2] < 0.2 * s[1]) and abs(vt[2] @ mean) > 1e-6:
            return vt[2] if vt[2] @ mean > 0 else -vt[2]
    if np.linalg.norm(mean) >= 0.5 or len(frames) < 3:
        return mean / max(np.linalg.norm(mean), 1e-12)
    centres = camera_centers(frames)
    _, _, vt = np.linalg.svd(centres - centres.mean(axis=0))
    normal = vt[2]
    return normal if normal @ mean >= 0 else -normal


def ground_frame(up: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(e1, e2): orthonormal ground axes with (e1, e2, up) right-handed; e1 is the world axis least
    aligned with ``up``, made orthogonal to it."""
    axis = np.eye(3)[int(np.argmin(np.abs(up)))]
    e1 = axis - (axis @ up) * up
    e1 /= np.linalg.norm(e1)
    return e1, np.cross(up, e1)


def to_ground(points: np.ndarray, e1: np.ndarray, e2: np.ndarray) -> np.ndarray:
    """[N, 2] ground coordinates of world points [N, 3]."""
    return np.stack([points @ e1, points @ e2], axis=1)


# ------------------------------------------------------------------------------------------ boxes


@dataclass
class RobustBox:
    """Ground rectangle ``lo`` [2] .. ``hi`` [2] and height range ``z`` (lo, hi) along up."""

    lo: np.ndarray
    hi: np.ndarray
    z: tuple[float, float]


def robust_box(points2d: np.ndarray, cams2d: np.ndarray, heights: np.ndarray, percentile: float) -> RobustBox:
    """Percentile box of the points and camera centres together on the ground; height range from the
    points' heights (same percentiles; the camera heights when there are no points)."""
    both = np.concatenate([points2d, cams2d])
    lo = np.percentile(both, percentile, axis=0)
    hi = np.percentile(both, 100 - percentile, axis=0)
    zlo, zhi = np.percentile(heights, [percentile, 100 - percentile])
    return RobustBox(lo, hi, (float(zlo), float(zhi)))


Box = list  # [[xlo, ylo], [xhi, yhi]]; None entries are unbounded


def _split_value(values: np.ndarray, fraction: float, lo: float, hi: float) -> float:
    """The split position leaving ``fraction`` of ``values`` below it, kept strictly inside (lo, hi) (the
    middle when there are no values)."""
    if len(values) == 0:
        return 0.5 * (lo + hi)
    v = float(np.quantile(values, fraction))
    eps = 1e-6 * max(hi - lo, 1e-9)
    return min(max(v, lo + eps), hi - eps)


def _check_cuts(cuts: np.ndarray, n: int, what: str) -> None:
    """PartitionError when balanced cuts coincide (many cameras share one position: empty cells)."""
    if np.any(np.diff(cuts) <= 1e-9 * max(cuts[-1] - cuts[0], 1e-9)):
        raise PartitionError(f"--blocks-xy: the camera centres cannot be split into {n} {what} of equal counts "
                             f"(too many share a position); ask for fewer blocks")


def grid_cells(cams2d: np.ndarray, box: RobustBox, a: int, b: int) -> list[tuple[list, list]]:
    """``a x b`` balanced cells as (core [[xlo, ylo], [xhi, yhi]] with None = unbounded, bounded core):
    ``a`` columns along e1 holding equal shares of the camera centres, each split into ``b`` rows along e2
    with equal shares of its own cameras. Order: column-major."""
    c = np.clip(cams2d, box.lo, box.hi)
    xs = [box.lo[0]] + [_split_value(c[:, 0], k / a, box.lo[0], box.hi[0]) for k in range(1, a)] + [box.hi[0]]
    xs = np.maximum.accumulate(np.asarray(xs))
    _check_cuts(xs, a, "columns")
    cells = []
    for i in range(a):
        col = c[(c[:, 0] >= xs[i]) & (c[:, 0] < xs[i + 1])] if i < a - 1 else c[c[:, 0] >= xs[i]]
        ys = [box.lo[1]] + [_split_value(col[:, 1], k / b, box.lo[1], box.hi[1]) for k in range(1, b)] + [box.hi[1]]
        ys = np.maximum.accumulate(np.asarray(ys))
        _check_cuts(ys, b, "rows")
        for j in range(b):
            bounded = [[float(xs[i]), float(ys[j])], [float(xs[i + 1]), float(ys[j + 1])]]
            core = [[None if i == 0 else bounded[0][0], None if j == 0 else bounded[0][1]],
                    [None if i == a - 1 else bounded[1][0], None if j == b - 1 else bounded[1][1]]]
            cells.append((core, bounded))
    return cells


def kd_cells(cams2d: np.ndarray, points2d: np.ndarray, box: RobustBox, max_images: int | None,
             max_points: int | None, max_depth: int = 12) -> list[tuple[list, list]]:
    """Recursive median splits (longer side first) of the robust box until every cell holds at most
    ``max_images`` camera centres and ``max_points`` points (``None``: no limit). Same cell format as
    :func:`grid_cells`; outer sides of the cells on the box border are unbounded."""
    out = []

    def inside(xy: np.ndarray, lo, hi) -> np.ndarray:
        return np.all((xy >= lo) & (xy < hi), axis=1) if len(xy) else np.zeros(0, bool)

    def recurse(lo: np.ndarray, hi: np.ndarray, cams: np.ndarray, pts: np.ndarray, depth: int) -> None:
        too_many = ((max_images is not None and len(cams) > max_images)
                    or (max_points is not None and len(pts) > max_points))
        if not too_many or depth >= max_depth or len(cams) < 2:
            out.append((lo.copy(), hi.copy()))
            return
        axis = int(np.argmax(hi - lo))
        cut = _split_value(cams[:, axis], 0.5, lo[axis], hi[axis])
        for side in (0, 1):
            nlo, nhi = lo.copy(), hi.copy()
            (nhi if side == 0 else nlo)[axis] = cut
            recurse(nlo, nhi, cams[inside(cams, nlo, nhi)], pts[inside(pts, nlo, nhi)], depth + 1)

    top = box.hi - 1e-9 * np.maximum(box.hi - box.lo, 1e-9)  # half-open cells: keep the top edge inside
    clip_c = np.clip(cams2d, box.lo, top)
    clip_p = np.clip(points2d, box.lo, top) if len(points2d) else points2d.reshape(0, 2)
    recurse(box.lo.astype(float), box.hi.astype(float), clip_c, clip_p, 0)
    cells = []
    for lo, hi in out:
        core = [[None if lo[k] <= box.lo[k] else float(lo[k]) for k in range(2)],
                [None if hi[k] >= box.hi[k] else float(hi[k]) for k in range(2)]]
        cells.append((core, [[float(lo[0]), float(lo[1])], [float(hi[0]), float(hi[1])]]))
    return cells


def expanded_box(bounded: list, overlap: float) -> list:
    """The bounded core box grown by ``overlap`` x its width / depth on each side."""
    lo, hi = np.asarray(bounded[0], float), np.asarray(bounded[1], float)
    grow = overlap * (hi - lo)
    return [(lo - grow).tolist(), (hi + grow).tolist()]


def in_core(xy: np.ndarray, core: list) -> np.ndarray:
    """[N] bool: ground points [N, 2] in the half-open core box (``lo <= x < hi``; None = unbounded)."""
    keep = np.ones(len(xy), bool)
    for k in range(2):
        if core[0][k] is not None:
            keep &= xy[:, k] >= core[0][k]
        if core[1][k] is not None:
            keep &= xy[:, k] < core[1][k]
    return keep


def in_box(xy: np.ndarray, box: list) -> np.ndarray:
    """[N] bool: ground points [N, 2] in the closed box [[xlo, ylo], [xhi, yhi]]."""
    lo, hi = np.asarray(box[0]), np.asarray(box[1])
    return np.all((xy >= lo) & (xy <= hi), axis=1)


# ------------------------------------------------------------------------------------------ cameras


def pixel_rays(frame: Frame, n: int = RAY_GRID) -> tuple[np.ndarray, np.ndarray]:
    """(origin [3], directions [n*n, 3]) of a grid of rays through pixel centres, world frame."""
    w2c = frame.camera.world_to_cam.detach().cpu().double().numpy()
    K = frame.camera.K.detach().cpu().double().numpy()
    R, t = w2c[:3, :3], w2c[:3, 3]
    u = (np.arange(n) + 0.5) / n * frame.width
    v = (np.arange(n) + 0.5) / n * frame.height
    uu, vv = np.meshgrid(u, v, indexing="xy")
    d_cam = np.stack([(uu.ravel() - K[0, 2]) / K[0, 0], (vv.ravel() - K[1, 2]) / K[1, 1], np.ones(n * n)], axis=1)
    return -R.T @ t, d_cam @ R  # R^T d for each row


def box_coverage(origin: np.ndarray, dirs: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Share of rays ``origin + s dirs`` (s > 0) that hit the axis-aligned box lo..hi [3] (slab test;
    coordinates already in the box's frame)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / dirs
        t1, t2 = (lo - origin) * inv, (hi - origin) * inv
    t1 = np.where(np.isnan(t1), -np.inf, t1)
    t2 = np.where(np.isnan(t2), np.inf, t2)
    near = np.max(np.minimum(t1, t2), axis=1)
    far = np.min(np.maximum(t1, t2), axis=1)
    return float(np.mean((far >= np.maximum(near, 0.0))))


def assign_cameras(frames: Sequence[Frame], cams2d: np.ndarray, expanded: list, z: tuple[float, float],
                   basis: np.ndarray, visibility: float) -> list[int]:
    """Indices of ``frames`` in the block: centre in ``expanded`` (ground), or the block's box
    (``expanded`` x height range ``z``) covers >= ``visibility`` of the image. ``basis`` [3, 3] rows e1,
    e2, up (world -> box frame)."""
    chosen = []
    inside = in_box(cams2d, expanded)
    lo = np.array([expanded[0][0], expanded[0][1], z[0]])
    hi = np.array([expanded[1][0], expanded[1][1], z[1]])
    for i, f in enumerate(frames):
        if inside[i]:
            chosen.append(i)
            continue
        origin, dirs = pixel_rays(f)
        if box_coverage(basis @ origin, dirs @ basis.T, lo, hi) >= visibility:
            chosen.append(i)
    return chosen


# ------------------------------------------------------------------------------------------ result


def _checked_box(box, what: str, unbounded: bool = False) -> list:
    """``box`` when it is [[xlo, ylo], [xhi, yhi]] of finite numbers (None allowed with ``unbounded``);
    ValueError naming ``what`` otherwise (a blocks.json edited or damaged)."""
    def number(v) -> bool:
        return (v is None and unbounded) or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                             and math.isfinite(v))

    if not (isinstance(box, list) and len(box) == 2 and all(isinstance(c, list) and len(c) == 2 for c in box)
            and all(number(v) for c in box for v in c)):
        raise ValueError(f"{what} is {box!r:.80}, not [[xlo, ylo], [xhi, yhi]] of finite numbers")
    return box


def _checked_vector(value, n: int, what: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64) if isinstance(value, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value) else None
    if arr is None or arr.shape != (n,) or not np.isfinite(arr).all():
        raise ValueError(f"{what} is {value!r:.80}, not {n} finite numbers")
    return arr


@dataclass
class Block:
    """One block: ``core`` (half-open, None = unbounded), ``bounded`` (core cut to the robust box),
    ``expanded`` (training region), its train / test image names, its initial point count."""

    id: int
    core: list
    bounded: list
    expanded: list
    train_images: list[str]
    test_images: list[str]
    num_points: int

    def to_dict(self) -> dict:
        return {"id": self.id, "core": self.core, "bounded": self.bounded, "expanded": self.expanded,
                "num_train_images": len(self.train_images), "num_test_images": len(self.test_images),
                "num_points": self.num_points, "train_images": self.train_images, "test_images": self.test_images}

    @classmethod
    def from_dict(cls, d: dict) -> "Block":
        """The block of a blocks.json entry; ValueError / TypeError / KeyError naming the field when a box is not
        [[xlo, ylo], [xhi, yhi]] of finite numbers (None = unbounded only in ``core``) or the image lists are not
        lists of names."""
        if not isinstance(d, dict):
            raise TypeError(f"a block is a {type(d).__name__}, not an object")
        boxes = {name: _checked_box(d[name], f"block {d.get('id')!r} {name}", unbounded=name == "core")
                 for name in ("core", "bounded", "expanded")}
        names = {}
        for key in ("train_images", "test_images"):
            if not isinstance(d[key], list) or not all(isinstance(n, str) for n in d[key]):
                raise TypeError(f"block {d.get('id')!r} {key} is not a list of image names")
            names[key] = list(d[key])
        ident, points = d["id"], d["num_points"]
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in (ident, points)):
            raise ValueError(f"block id {ident!r} / num_points {points!r} must be non-negative integers")
        return cls(ident, boxes["core"], boxes["bounded"], boxes["expanded"], names["train_images"],
                   names["test_images"], points)


@dataclass
class Partition:
    """A scene's blocks and how they were made (``blocks.json``)."""

    dataset: dict
    up: np.ndarray
    e1: np.ndarray
    e2: np.ndarray
    box: RobustBox
    settings: dict
    blocks: list[Block] = field(default_factory=list)

    @property
    def basis(self) -> np.ndarray:
        """[3, 3] rows e1, e2, up."""
        return np.stack([self.e1, self.e2, self.up])

    def ground(self, points: np.ndarray) -> np.ndarray:
        return to_ground(np.asarray(points, dtype=np.float64), self.e1, self.e2)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "dataset": self.dataset,
                "frame": {"up": self.up.tolist(), "e1": self.e1.tolist(), "e2": self.e2.tolist()},
                "box": {"lo": self.box.lo.tolist(), "hi": self.box.hi.tolist(), "height": list(self.box.z)},
                "settings": self.settings, "blocks": [b.to_dict() for b in self.blocks]}

    def write(self, path: Path) -> None:
        from recon.core.atomic import atomic_write_bytes

        atomic_write_bytes(path, (json.dumps(self.to_dict(), indent=1) + "\n").encode(), force=True)

    @classmethod
    def read(cls, path: Path) -> "Partition":
        """PartitionError naming ``path`` when it is missing, not JSON, or not a blocks file."""
        path = Path(path)
        if not path.is_file():
            raise PartitionError(f"--blocks {path}: no such file; make one with `splatforge partition --data DIR "
                                 f"--out {path.name}`, or give --blocks auto")
        try:
            d = load_json(path, "blocks file")  # a ValueError (InputFileError) when not JSON
            if not isinstance(d, dict):
                raise ValueError(f"it holds a {type(d).__name__}, not an object")
            if d.get("format") != FORMAT:
                raise ValueError(f"format is {d.get('format')!r}, not {FORMAT!r}")
            if int(d.get("version", 0)) > VERSION:
                raise ValueError(f"version {d['version']} is newer than this splatforge reads ({VERSION})")
            fr = d["frame"]
            box = RobustBox(_checked_vector(d["box"]["lo"], 2, "box lo"), _checked_vector(d["box"]["hi"], 2, "box hi"),
                            tuple(_checked_vector(d["box"]["height"], 2, "box height").tolist()))
            if not isinstance(d["dataset"], dict) or not isinstance(d.get("settings", {}), dict) \
                    or not isinstance(d["blocks"], list):
                raise TypeError("dataset and settings must be objects, blocks a list")
            return cls(d["dataset"], *(_checked_vector(fr[k], 3, f"frame {k}") for k in ("up", "e1", "e2")), box,
                       d.get("settings", {}), [Block.from_dict(b) for b in d["blocks"]])
        except (ValueError, KeyError, TypeError, OverflowError) as err:
            raise PartitionError(f"{path}: not a blocks file written by `splatforge partition` ({err}); "
                                 f"make it again") from None

    def check_dataset(self, scene: Scene, source: str) -> None:
        """PartitionError when this partition was made from another dataset than ``scene``."""
        if self.dataset.get("fingerprint") != dataset_fingerprint(scene):
            raise PartitionError(
                f"{source}: this partition was made from another dataset ({self.dataset.get('path')}, "
                f"{self.dataset.get('num_train')} train images) than --data ({len(scene.frames_train)} train "
                f"images; its image names, cameras or image sizes (--data-factor) differ); run `splatforge partition` on this dataset")


def block_points(partition: Partition, scene: Scene, block: Block) -> np.ndarray:
    """Indices of the scene's points whose ground coordinates are in the block's expanded box."""
    if scene.points is None or len(scene.points) == 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(in_box(partition.ground(scene.points), block.expanded))


def block_scene(partition: Partition, scene: Scene, block: Block) -> Scene:
    """The block as a :class:`Scene`: its train / test frames (dataset order) and initial points."""
    from dataclasses import replace

    train_names, test_names = set(block.train_images), set(block.test_images)
    pick = block_points(partition, scene, block)
    has_points = scene.points is not None and len(scene.points) > 0
    return replace(scene, frames_train=[f for f in scene.frames_train if f.name in train_names],
                   frames_test=[f for f in scene.frames_test if f.name in test_names],
                   points=scene.points[pick] if has_points else scene.points,
                   point_colors=scene.point_colors[pick] if has_points and scene.point_colors is not None
                   else scene.point_colors)


# ------------------------------------------------------------------------------------------ driver


@dataclass
class PartitionConfig:
    """How to split (flags of ``splatforge partition``; the same ones with ``train --blocks auto``)."""

    blocks_xy: str | None = None
    """"AxB": A columns x B rows of balanced cells (default: k-d splits by the limits below)"""
    overlap: float = 0.2
    """expanded box = core box grown by this share of its size on each side"""
    max_images_per_block: int | None = 300
    """k-d splitting: split cells whose camera centres exceed this"""
    max_points_per_block: int | None = None
    """k-d splitting: split cells whose points exceed this"""
    min_images_per_block: int = 3
    """refuse blocks with fewer training images"""
    visibility: float = 0.25
    """also assign a camera when the block's box covers this share of its image"""
    percentile: float = 2.0
    """robust box: percentiles percentile .. 100 - percentile of points and cameras"""

    def grid(self) -> tuple[int, int] | None:
        if self.blocks_xy is None:
            return None
        try:
            a, b = (int(v) for v in self.blocks_xy.lower().split("x"))
        except ValueError:
            raise PartitionError(f"--blocks-xy {self.blocks_xy}: write AxB, e.g. 3x2") from None
        if a < 1 or b < 1:
            raise PartitionError(f"--blocks-xy {self.blocks_xy}: both counts must be >= 1")
        return a, b

    def check(self) -> None:
        self.grid()
        if not 0 <= self.overlap < 2:
            raise PartitionError(f"--overlap {self.overlap}: must be in [0, 2)")
        if not 0 < self.visibility <= 1:
            raise PartitionError(f"--visibility {self.visibility}: must be in (0, 1]")
        if not 0 <= self.percentile < 50:
            raise PartitionError(f"--percentile {self.percentile}: must be in [0, 50)")
        for name in ("max_images_per_block", "max_points_per_block"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise PartitionError(f"--{name.replace('_', '-')} {v}: must be >= 1")
        if self.blocks_xy is None and self.max_images_per_block is None and self.max_points_per_block is None:
            raise PartitionError("give --blocks-xy AxB, or a limit (--max-images-per-block / --max-points-per-block)")


def partition_scene(scene: Scene, cfg: PartitionConfig, source: str = "") -> Partition:
    """Split ``scene`` (see the module docstring). PartitionError for a block with too few images."""
    cfg.check()
    frames_train = scene.frames_train
    if len(frames_train) < 1:
        raise PartitionError(f"{source}: the dataset has no training images")
    up = up_axis(frames_train)
    e1, e2 = ground_frame(up)
    basis = np.stack([e1, e2, up])
    cams = camera_centers(frames_train)
    cams2d = to_ground(cams, e1, e2)
    points = np.zeros((0, 3)) if scene.points is None else np.asarray(scene.points, np.float64)
    points2d = to_ground(points, e1, e2)
    heights = points @ up if len(points) else cams @ up
    box = robust_box(points2d, cams2d, heights, cfg.percentile)
    grid = cfg.grid()
    cells = grid_cells(cams2d, box, *grid) if grid else kd_cells(cams2d, points2d, box, cfg.max_images_per_block,
                                                                  cfg.max_points_per_block)
    test2d = to_ground(camera_centers(scene.frames_test), e1, e2) if scene.frames_test else np.zeros((0, 2))
    dataset = {"path": source, "fingerprint": dataset_fingerprint(scene), "num_train": len(frames_train),
               "num_test": len(scene.frames_test), "num_points": int(len(points))}
    settings = {k: getattr(cfg, k) for k in ("blocks_xy", "overlap", "max_images_per_block",
                                             "max_points_per_block", "min_images_per_block", "visibility",
                                             "percentile")}
    part = Partition(dataset, up, e1, e2, box, settings)
    for k, (core, bounded) in enumerate(cells):
        exp = expanded_box(bounded, cfg.overlap)
        train = assign_cameras(frames_train, cams2d, exp, box.z, basis, cfg.visibility)
        test = assign_cameras(scene.frames_test, test2d, exp, box.z, basis, cfg.visibility)
        block = Block(k, core, bounded, exp, [frames_train[i].name for i in train],
                      [scene.frames_test[i].name for i in test], 0)
        block.num_points = int(len(block_points(part, scene, block)))
        part.blocks.append(block)
    check_blocks(part, cfg, source)
    return part


def check_blocks(part: Partition, cfg: PartitionConfig, source: str) -> None:
    """PartitionError naming every block with fewer than ``min_images_per_block`` training images (none
    at all is said as such) or over ``max_points_per_block`` with --blocks-xy."""
    few = [b for b in part.blocks if len(b.train_images) < cfg.min_images_per_block]
    if few:
        what = ", ".join(f"block {b.id} has {'no cameras' if not b.train_images else f'{len(b.train_images)} images'}"
                         for b in few)
        raise PartitionError(f"{source}: {what} (at least {cfg.min_images_per_block} needed: "
                             f"--min-images-per-block); use fewer blocks (--blocks-xy, --max-images-per-block) "
                             f"or a larger --overlap")


def write_partition(part: Partition, out: Path, scene: Scene, plot: bool = True) -> list[Path]:
    """Write ``out`` (blocks.json) and, with ``plot``, ``blocks.png`` beside it; returns the paths."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    part.write(out)
    written = [out]
    if plot:
        png = out.with_suffix(".png") if out.name != "blocks.json" else out.parent / "blocks.png"
        plot_partition(part, scene, png)
        written.append(png)
    return written


def plot_partition(part: Partition, scene: Scene, path: Path, max_points: int = 20000) -> None:
    """Top view: points (grey), training cameras (dots coloured by how many blocks hold them), core cells
    (solid, numbered) and expanded boxes (dashed), in ground coordinates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from recon.outputs.plots import save_figure

    fig, ax = plt.subplots(figsize=(8, 8))
    if scene.points is not None and len(scene.points):
        pts = part.ground(scene.points)
        step = max(1, len(pts) // max_points)
        ax.scatter(pts[::step, 0], pts[::step, 1], s=0.5, c="0.6", label="points")
    cams = part.ground(camera_centers(scene.frames_train))
    count = {f.name: 0 for f in scene.frames_train}
    for b in part.blocks:
        for n in b.train_images:
            count[n] += 1
    sc = ax.scatter(cams[:, 0], cams[:, 1], s=6, c=[count[f.name] for f in scene.frames_train], cmap="viridis",
                    label="cameras")
    fig.colorbar(sc, ax=ax, shrink=0.6, label="blocks holding the camera")
    colors = plt.cm.tab10.colors
    for b in part.blocks:
        c = colors[b.id % len(colors)]
        (x0, y0), (x1, y1) = b.bounded
        ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ec=c, lw=2))
        (ex0, ey0), (ex1, ey1) = b.expanded
        ax.add_patch(plt.Rectangle((ex0, ey0), ex1 - ex0, ey1 - ey0, fill=False, ec=c, lw=1, ls="--"))
        ax.text(0.5 * (x0 + x1), 0.5 * (y0 + y1), f"{b.id}\n{len(b.train_images)} img", ha="center",
                va="center", color=c, fontsize=9, weight="bold")
    ax.set_aspect("equal")
    ax.set_xlabel("e1")
    ax.set_ylabel("e2")
    ax.set_title(f"{len(part.blocks)} blocks (solid: core, dashed: expanded)")
    ax.legend(loc="upper right", fontsize=8)
    save_figure(fig, path)
    plt.close(fig)
