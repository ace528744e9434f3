"""A synthetic street scene ("city") rendered by our rasterizer into a COLMAP folder, for block training.

World frame: z up (the scene's up axis is found from the cameras by :mod:`recon.distributed.partition`,
never assumed). A grid of ``nx x ny`` textured buildings (footprint ``building`` x ``building``, random
heights, a facade colour each with a window grid) stands on a ground plane (asphalt streets with dashed
centre lines, lighter sidewalks). Cameras stand along every street line at each of ``heights``, every
``spacing`` units, looking along the street both ways and at both facades (4 views per position; 3 on the outer streets,
which do not look out of the city; views covering < 5 % of their image, at the streets' ends, are left out), pitched
down by ``pitch_deg``. Ground-truth Gaussians are flat discs on the surfaces (as
:mod:`recon.data.procedural_scene`); images are rendered with :func:`rasterizer.rasterize_gaussians` on a
transparent sky (RGBA PNGs: the trainer composites them on its background) and written with COLMAP's binary model (PINHOLE cameras, ``points3D`` = jittered surface
samples with colours). ``exposure`` > 0 multiplies each training image by its own gain ``exp(U(-e, e))``
(the per-image appearance changes that decoupled appearance modelling targets); the test images (every
8th by name, the loaders' split) keep the true colours, which a model should recover.

Size: images = about 4 x len(heights) x (camera positions along ``nx + 1`` + ``ny + 1`` street lines); the
defaults (3 x 2 buildings, spacing 1.0, 2 heights, 96 x 64) give 402 images in about 8 s on the 2-core VM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rasterizer import rasterize_gaussians
from rasterizer.quaternions import rotmat_to_quat
from recon.data.colmap import ColmapCamera, ColmapImage, ColmapModel, ColmapPoints, write_model
from recon.data.procedural_scene import Surfels, _discs
from recon.data.scene import TEST_EVERY
from recon.core.errors import UsageError

OPAQUE = 0.97
MIN_COVERAGE = 0.05  # views whose image is less covered than this (sky elsewhere) are left out


@dataclass
class CityConfig:
    """Flags of ``scripts/make_city.py`` (sizes in world units; z is up)."""

    nx: int = 3
    """buildings along x"""
    ny: int = 2
    """buildings along y"""
    building: float = 2.0
    """building footprint side"""
    street: float = 1.2
    """street width between buildings"""
    min_height: float = 1.5
    max_height: float = 4.0
    spacing: float = 1.0
    """distance between camera positions along a street"""
    heights: tuple[float, ...] = (0.5, 1.2)
    """camera heights above the ground"""
    pitch_deg: float = 12.0
    """cameras look down by this angle"""
    width: int = 96
    height: int = 64
    fov_deg: float = 70.0
    """horizontal field of view"""
    surfel_spacing: float = 0.08
    """distance between ground-truth discs on every surface"""
    num_points: int = 6000
    """points in points3D.bin"""
    exposure: float = 0.0
    """per-image gain exp(U(-e, e)) of the training images (test images keep gain 1); 0: none"""
    seed: int = 0

    def check(self) -> None:
        """UsageError naming the flag for an impossible size."""
        for name in ("nx", "ny", "width", "height", "num_points"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        for name in ("building", "street", "spacing", "surfel_spacing", "min_height"):
            if not getattr(self, name) > 0:
                raise UsageError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be > 0")
        if self.max_height < self.min_height:
            raise UsageError(f"--max-height {self.max_height}: must be >= --min-height {self.min_height}")
        if not self.heights or min(self.heights) <= 0:
            raise UsageError(f"--heights {self.heights}: give one or more heights > 0")
        if not 0 <= self.exposure < 2:
            raise UsageError(f"--exposure {self.exposure}: must be in [0, 2)")

    @property
    def period(self) -> float:
        return self.building + self.street


# ------------------------------------------------------------------------------------------ geometry


def _grid(lo: float, hi: float, step: float) -> np.ndarray:
    n = max(1, int(round((hi - lo) / step)))
    return lo + (np.arange(n) + 0.5) * (hi - lo) / n


def ground_surfels(cfg: CityConfig) -> Surfels:
    """Discs on z = 0 over the city plus one street width around it: asphalt, sidewalks, centre lines."""
    P, half_street = cfg.period, cfg.street / 2
    # the outer streets are centred on x = -street / 2 and x = nx P - street / 2 (y alike); one more
    # half street of sidewalk beyond them
    x, y = np.meshgrid(_grid(-cfg.street - half_street, cfg.nx * P + half_street, cfg.surfel_spacing),
                       _grid(-cfg.street - half_street, cfg.ny * P + half_street, cfg.surfel_spacing), indexing="ij")
    x, y = x.ravel(), y.ravel()
    # distance to the nearest street centre line (x = k P - street / 2, same in y)
    dx = np.abs(((x + half_street) + P / 2) % P - P / 2)
    dy = np.abs(((y + half_street) + P / 2) % P - P / 2)
    street = np.minimum(dx, dy) < half_street
    colors = np.tile([0.72, 0.70, 0.66], (x.size, 1))  # sidewalk / plaza
    colors[street] = (0.28, 0.29, 0.31)
    line = street & (((dx < 0.03) & (np.floor(y / 0.25) % 2 == 0)) | ((dy < 0.03) & (np.floor(x / 0.25) % 2 == 0)))
    colors[line] = (0.95, 0.92, 0.55)
    pts = np.stack([x, y, np.zeros_like(x)], axis=1)
    normals = np.tile([0.0, 0.0, 1.0], (x.size, 1))
    return _discs(pts, normals, cfg.surfel_spacing, colors)


def building_surfels(cfg: CityConfig, x0: float, y0: float, height: float, facade: np.ndarray) -> Surfels:
    """Walls and roof of the box [x0, x0 + building] x [y0, y0 + building] x [0, height]: ``facade``
    colour with a grid of dark windows (floors 0.5 high, columns 0.4 wide)."""
    b, s = cfg.building, cfg.surfel_spacing
    u = _grid(0.0, b, s)
    z = _grid(0.0, height, s)
    uu, zz = (a.ravel() for a in np.meshgrid(u, z, indexing="ij"))
    window = ((uu % 0.4) > 0.12) & ((uu % 0.4) < 0.3) & ((zz % 0.5) > 0.18) & ((zz % 0.5) < 0.4) & (zz > 0.3)
    wall_colors = np.where(window[:, None], [0.18, 0.24, 0.33], facade)
    parts = []
    for origin, direction, normal in (((x0, y0), (1, 0), (0, -1)), ((x0 + b, y0), (0, 1), (1, 0)),
                                      ((x0 + b, y0 + b), (-1, 0), (0, 1)), ((x0, y0 + b), (0, -1), (-1, 0))):
        pts = np.stack([origin[0] + direction[0] * uu, origin[1] + direction[1] * uu, zz], axis=1)
        parts.append(_discs(pts, np.tile([normal[0], normal[1], 0.0], (len(pts), 1)), s, wall_colors))
    rx, ry = (a.ravel() for a in np.meshgrid(x0 + u, y0 + u, indexing="ij"))
    roof = np.stack([rx, ry, np.full(rx.size, height)], axis=1)
    parts.append(_discs(roof, np.tile([0.0, 0.0, 1.0], (len(roof), 1)), s, np.tile(facade * 0.6, (len(roof), 1))))
    return Surfels.cat(parts)


def city_surfels(cfg: CityConfig, rng: np.random.Generator) -> Surfels:
    """All ground-truth discs: the ground and every building."""
    parts = [ground_surfels(cfg)]
    for i in range(cfg.nx):
        for j in range(cfg.ny):
            h = rng.uniform(cfg.min_height, cfg.max_height)
            facade = np.clip(rng.uniform(0.35, 0.95, size=3), 0, 1)
            parts.append(building_surfels(cfg, i * cfg.period, j * cfg.period, h, facade))
    return Surfels.cat(parts)


# ------------------------------------------------------------------------------------------ cameras


def look_world_to_cam(center: np.ndarray, forward: np.ndarray) -> np.ndarray:
    """[4, 4] float64 world-to-camera (OpenCV: x right, y down, z forward) at ``center`` looking along
    ``forward`` with world up +z."""
    f = forward / np.linalg.norm(forward)
    right = np.cross(f, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    down = np.cross(f, right)
    R = np.stack([right, down, f])
    w2c = np.eye(4)
    w2c[:3, :3] = R
    w2c[:3, 3] = -R @ center
    return w2c


def camera_poses(cfg: CityConfig) -> list[np.ndarray]:
    """World-to-camera matrices along every street line (see the module docstring), in a fixed order."""
    P, hs = cfg.period, cfg.street / 2
    pitch = math.radians(cfg.pitch_deg)
    poses = []
    # (axis, line coordinate, start, end, outward side: -1 / +1 on the outer lines, 0 inside)
    lines = [(0, k * P - hs, -hs, cfg.ny * P - hs, -1 if k == 0 else (1 if k == cfg.nx else 0))
             for k in range(cfg.nx + 1)]  # x = const, along y
    lines += [(1, k * P - hs, -hs, cfg.nx * P - hs, -1 if k == 0 else (1 if k == cfg.ny else 0))
              for k in range(cfg.ny + 1)]  # y = const, along x
    for axis, c, lo, hi, outward in lines:
        n = max(2, int(round((hi - lo) / cfg.spacing)) + 1)
        for t in np.linspace(lo, hi, n):
            for h in cfg.heights:
                centre = np.array([c, t, h]) if axis == 0 else np.array([t, c, h])
                along = np.array([0.0, 1.0]) if axis == 0 else np.array([1.0, 0.0])
                across = np.array([1.0, 0.0]) if axis == 0 else np.array([0.0, 1.0])
                sides = [d for sign, d in ((1, across), (-1, -across)) if sign != outward]  # not at the void
                for d in (along, -along, *sides):
                    fwd = np.array([d[0] * math.cos(pitch), d[1] * math.cos(pitch), -math.sin(pitch)])
                    poses.append(look_world_to_cam(centre, fwd))
    return poses


def intrinsics(cfg: CityConfig) -> np.ndarray:
    f = 0.5 * cfg.width / math.tan(math.radians(cfg.fov_deg) / 2)
    return np.array([[f, 0, cfg.width / 2], [0, f, cfg.height / 2], [0, 0, 1]], dtype=np.float64)


# ------------------------------------------------------------------------------------------ images


def render_view(s: dict, w2c: np.ndarray, K: np.ndarray, cfg: CityConfig) -> tuple[np.ndarray, np.ndarray]:
    """(straight RGB [H, W, 3], alpha [H, W, 1]) float32 render of the discs ``s`` (torch tensors)."""
    viewmat = torch.as_tensor(w2c, dtype=torch.float32)[None]
    Ks = torch.as_tensor(K, dtype=torch.float32)[None]
    with torch.no_grad():
        rgb, alpha, _ = rasterize_gaussians(s["means"], s["quats"], s["scales"], s["opacities"], s["colors"],
                                            viewmat, Ks, cfg.width, cfg.height, near_plane=0.05)
    straight = torch.where(alpha > 1e-6, rgb / alpha.clamp(min=1e-6), torch.zeros_like(rgb)).clamp(0, 1)
    return straight[0].numpy(), alpha[0].clamp(0, 1).numpy()


def make_city(out: Path, cfg: CityConfig, progress: bool = True) -> dict:
    """Write the city as a COLMAP folder ``out`` (``images/*.png``, ``sparse/0/*.bin``); returns a summary
    ``{"images", "gaussians", "points", "width", "height"}``."""
    from PIL import Image

    cfg.check()
    out = Path(out)
    rng = np.random.default_rng(cfg.seed)
    surf = city_surfels(cfg, rng)
    s = {k: torch.as_tensor(getattr(surf, k), dtype=torch.float32) for k in ("means", "quats", "scales", "colors")}
    s["opacities"] = torch.full((len(surf.means),), OPAQUE)
    poses = camera_poses(cfg)
    K = intrinsics(cfg)
    gains = np.exp(rng.uniform(-cfg.exposure, cfg.exposure, size=len(poses))) if cfg.exposure > 0 else np.ones(len(poses))
    (out / "images").mkdir(parents=True, exist_ok=True)
    images = {}
    iterator = range(len(poses))
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, desc="rendering city", unit="image")
    kept = []
    for i in iterator:
        rgb, alpha = render_view(s, poses[i], K, cfg)
        if alpha.mean() >= MIN_COVERAGE:  # else it looks out of the city at a street's end: (almost) nothing
            kept.append((i, rgb, alpha))
    for p, (i, rgb, alpha) in enumerate(kept):
        gain = 1.0 if p % TEST_EVERY == 0 else gains[i]  # test views (every 8th by name) keep the true colours
        rgba = np.concatenate([np.clip(rgb * gain, 0, 1), alpha], axis=-1)
        name = f"img_{i:05d}.png"
        Image.fromarray((rgba * 255 + 0.5).astype(np.uint8), "RGBA").save(out / "images" / name)
        R, t = poses[i][:3, :3], poses[i][:3, 3]
        images[p + 1] = ColmapImage(p + 1, rotmat_to_quat(R).astype(np.float64), t.astype(np.float64), 1, name)
    skipped = len(poses) - len(kept)
    camera = ColmapCamera(1, "PINHOLE", cfg.width, cfg.height, np.array([K[0, 0], K[1, 1], K[0, 2], K[1, 2]]))
    pick = rng.choice(len(surf.means), size=min(cfg.num_points, len(surf.means)), replace=False)
    xyz = surf.means[pick] + rng.normal(0.0, 0.01, size=(len(pick), 3))
    rgb = np.clip(surf.colors[pick] * 255 + rng.normal(0, 6, size=(len(pick), 3)), 0, 255).astype(np.uint8)
    points = ColmapPoints(np.arange(1, len(pick) + 1, dtype=np.int64), xyz, rgb, np.full(len(pick), 0.5),
                          [np.zeros((0, 2), np.int64) for _ in pick])
    write_model(ColmapModel({1: camera}, images, points), out / "sparse" / "0")
    return {"images": len(images), "views_left_out": skipped, "gaussians": int(len(surf.means)), "points": int(len(pick)),
            "width": cfg.width, "height": cfg.height, "exposure": cfg.exposure}
