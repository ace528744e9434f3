"""Meshes from any run: render depth (and colour) of the training views, fuse it into a TSDF, marching cubes.

Pipeline (``splatforge mesh``, :func:`extract_mesh`):

1. :func:`render_depth` renders each training camera through the run's model. It is the one seam between
   a method and mesh extraction: a model that defines ``render_depth(cameras, kind, background)``
   returning ``(rgb [C, H, W, 3], depth [C, H, W, 1], alpha [C, H, W, 1])`` is asked through it (``kind``
   is ``"median"`` or ``"expected"``; a model that cannot give ``kind`` raises UsageError); a 3DGS model
   (parameters ``means``/``quats``/``sh0``/``shN``) gets its expected depth from ``rasterize_gaussians``
   with ``render_mode="RGB+ED"`` (it has no median depth). Pixels with alpha < ``ALPHA_MIN`` carry no depth.
2. The voxel size defaults to the diagonal of the bounding box of the rendered surface points (1st to 99th
   percentile per axis, all views) divided by ``resolution`` (default 512); truncation = ``trunc`` voxels
   (default 4, as in 2DGS).
3. :func:`estimate_fusion_memory` counts the voxel blocks the surface band touches (from the same points)
   and refuses (:class:`MeshMemoryError`, with the number) above ``max_memory_gb`` before anything is
   allocated.
4. :func:`fuse_tsdf` integrates each view into open3d's tensor ``VoxelBlockGrid`` (OpenCV intrinsics /
   world-to-camera extrinsics, metric float depth) and runs marching cubes (in pieces above open3d's
   32,768-block limit: :mod:`recon.geometry.tsdf`); vertex colours come from the fused colour channel.
   An empty result is :class:`EmptyMeshError` saying what to try.
5. :func:`keep_largest_component` optionally keeps the connected component with the most faces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import numpy as np
import torch

from recon.core.errors import UsageError
from recon.core.open3d_import import open3d
from recon.geometry.tsdf import ATTRIBUTES, EXTRACT_BLOCK_LIMIT, extract_triangles

DepthKind = Literal["median", "expected"]
ALPHA_MIN = 0.5  # pixels less opaque than this are treated as background (no depth)
BLOCK_RESOLUTION = 16  # voxels per block edge in the VoxelBlockGrid
BYTES_PER_VOXEL = 4 + 4 + 3 * 4  # tsdf float32, weight float32, colour 3 x float32
HASH_OVERHEAD = 1.5  # hash map capacity kept above the estimated block count


class EmptyMeshError(UsageError):
    """TSDF fusion produced no triangles."""


class MeshMemoryError(UsageError):
    """The voxel grid for the requested voxel size would not fit the memory budget."""


class NoDepthError(UsageError):
    """The run's model cannot render the depth asked for."""


@dataclass
class DepthViews:
    """Rendered views: rgb [V, H, W, 3] float32 in [0, 1], depth [V, H, W] float32 (0 = no surface, camera
    z in scene units), K [V, 3, 3] float64, world_to_cam [V, 4, 4] float64 (OpenCV axes)."""

    rgb: np.ndarray
    depth: np.ndarray
    K: np.ndarray
    world_to_cam: np.ndarray

    def surface_points(self, stride: int = 4) -> np.ndarray:
        """[P, 3] world points of every ``stride``-th pixel with depth, in all views."""
        out = []
        for rgb_depth, K, w2c in zip(self.depth, self.K, self.world_to_cam):
            d = rgb_depth[::stride, ::stride]
            ys, xs = np.nonzero(d > 0)
            if xs.size == 0:
                continue
            z = d[ys, xs].astype(np.float64)
            u, v = xs * stride + 0.5, ys * stride + 0.5
            cam = np.stack([(u - K[0, 2]) / K[0, 0] * z, (v - K[1, 2]) / K[1, 1] * z, z], axis=1)
            c2w = np.linalg.inv(w2c)
            out.append(cam @ c2w[:3, :3].T + c2w[:3, 3])
        return np.concatenate(out) if out else np.zeros((0, 3))


# -------------------------------------------------------------------------------- depth rendering

def render_depth(model, cameras: Sequence, kind: DepthKind, background: torch.Tensor | None = None):
    """(rgb [C, H, W, 3], depth [C, H, W, 1], alpha [C, H, W, 1]) of ``model`` in ``cameras`` (one size).

    Uses ``model.render_depth`` when the method defines it; otherwise a 3DGS model's expected depth.
    NoDepthError naming the method when neither applies or ``kind`` is not available."""
    if hasattr(model, "render_depth"):
        return model.render_depth(cameras, kind, background)
    method = getattr(model, "method", type(model).__name__)
    if not {"means", "quats", "sh0", "shN"} <= set(getattr(model, "params", {})):
        raise NoDepthError(f"method {method!r} renders no depth (its model has no render_depth), so no mesh "
                           f"can be extracted from this run")
    if kind != "expected":
        raise NoDepthError(f"method {method!r} renders expected depth only; use --depth expected "
                           f"(median depth comes with 2dgs runs)")
    return _gaussian_expected_depth(model, cameras, background)


def _gaussian_expected_depth(model, cameras: Sequence, background: torch.Tensor | None):
    from rasterizer import rasterize_gaussians
    from rasterizer.camera import stack_cameras

    viewmats, Ks, W, H = stack_cameras(list(cameras))
    dev = model.device
    bg = None
    if background is not None:
        bg = torch.as_tensor(background, dtype=torch.float32, device=dev).expand(viewmats.shape[0], 3)
    render, alpha, _ = rasterize_gaussians(
        model.params["means"], model.params["quats"], model.scales, model.opacities,
        (model.params["sh0"], model.params["shN"]), viewmats.to(dev, torch.float32), Ks.to(dev, torch.float32),
        W, H, sh_degree=model.sh_degree, backgrounds=bg, render_mode="RGB+ED",
        rasterize_mode="antialiased" if getattr(model, "antialiased", False) else "classic")
    return render[..., :3], render[..., 3:4], alpha


def render_views(model, cameras: Sequence, kind: DepthKind, background: torch.Tensor | None = None,
                 progress: Callable[[int], None] | None = None) -> DepthViews:
    """Render every camera (one at a time) into a :class:`DepthViews`; ``progress(1)`` after each."""
    if not cameras:
        raise UsageError("the run has no training cameras, so there are no views to fuse into a mesh")
    rgbs, depths, Ks, w2cs = [], [], [], []
    with torch.no_grad():
        for cam in cameras:
            rgb, depth, alpha = render_depth(model, [cam], kind, background)
            d = depth[0, ..., 0].float().cpu().numpy()
            a = alpha[0, ..., 0].float().cpu().numpy()
            d = np.where((a >= ALPHA_MIN) & np.isfinite(d) & (d > 0), d, 0.0).astype(np.float32)
            rgbs.append(np.clip(rgb[0].float().cpu().numpy(), 0, 1).astype(np.float32))
            depths.append(d)
            Ks.append(cam.K.double().cpu().numpy())
            w2cs.append(cam.world_to_cam.double().cpu().numpy())
            if progress:
                progress(1)
    views = DepthViews(np.stack(rgbs), np.stack(depths), np.stack(Ks), np.stack(w2cs))
    if not (views.depth > 0).any():
        raise NoDepthError(f"no rendered pixel has alpha >= {ALPHA_MIN} in any of the {len(cameras)} training "
                           f"views, so there is no depth to fuse (is the model empty or transparent?)")
    return views


# -------------------------------------------------------------------------------- sizes and memory

def default_voxel_size(points: np.ndarray, resolution: int = 512) -> float:
    """Diagonal of the 1st-99th percentile box of ``points`` [P, 3] divided by ``resolution``."""
    if resolution < 8:
        raise UsageError(f"--resolution {resolution}: give at least 8 voxels across the scene")
    lo, hi = np.percentile(points, 1, axis=0), np.percentile(points, 99, axis=0)
    diag = float(np.linalg.norm(hi - lo))
    if not diag > 0:
        raise UsageError("the rendered surface points span no volume; give --voxel-size")
    return diag / resolution


def estimate_fusion_memory(points: np.ndarray, voxel_size: float, trunc_voxels: float) -> tuple[int, int]:
    """(voxel blocks, bytes) the TSDF band around ``points`` [P, 3] needs at ``voxel_size``: the blocks
    within the truncation distance of a point, times the bytes of a block, times :data:`HASH_OVERHEAD`.
    A lower bound on the true count (points are subsampled), which the hash map grows past if needed."""
    block = voxel_size * BLOCK_RESOLUTION
    trunc = voxel_size * trunc_voxels
    keys = set()
    for offset in np.array(np.meshgrid(*[[-trunc, 0.0, trunc]] * 3)).reshape(3, -1).T:
        keys.update(map(tuple, np.unique(np.floor((points + offset) / block).astype(np.int64), axis=0)))
    blocks = len(keys)
    return blocks, int(blocks * BLOCK_RESOLUTION ** 3 * BYTES_PER_VOXEL * HASH_OVERHEAD)


def check_memory(points: np.ndarray, voxel_size: float, trunc_voxels: float, max_memory_gb: float) -> int:
    """The block count to allocate; MeshMemoryError with the estimate when it exceeds ``max_memory_gb``."""
    if not voxel_size > 0:
        raise UsageError(f"--voxel-size {voxel_size}: must be > 0")
    coarse = voxel_size * BLOCK_RESOLUTION
    span = np.ptp(points, axis=0) if len(points) else np.zeros(3)
    if float(np.prod(span / coarse + 1)) > 1e9:  # far too fine: do not even enumerate the blocks
        need = float(np.prod(span / coarse + 1))
        raise MeshMemoryError(f"--voxel-size {voxel_size:g}: the scene spans ~{need:.3g} voxel blocks; give a "
                              f"larger --voxel-size (or a smaller --resolution)")
    blocks, nbytes = estimate_fusion_memory(points, voxel_size, trunc_voxels)
    if nbytes > max_memory_gb * 2 ** 30:
        raise MeshMemoryError(f"--voxel-size {voxel_size:g}: the TSDF grid needs about {nbytes / 2 ** 30:.1f} GiB "
                              f"({blocks} blocks of {BLOCK_RESOLUTION}^3 voxels), over --max-memory-gb "
                              f"{max_memory_gb:g}; give a larger --voxel-size (or a smaller --resolution)")
    return int(blocks * HASH_OVERHEAD) + 64


# -------------------------------------------------------------------------------- fusion

@dataclass
class MeshArrays:
    """vertices [V, 3] float64, faces [F, 3] int64, colors [V, 3] float32 in [0, 1] (world frame)."""

    vertices: np.ndarray
    faces: np.ndarray
    colors: np.ndarray


def fuse_tsdf(views: DepthViews, voxel_size: float, trunc_voxels: float = 4.0, block_count: int = 10000,
              progress: Callable[[int], None] | None = None, max_blocks: int = EXTRACT_BLOCK_LIMIT) -> MeshArrays:
    """TSDF-fuse ``views`` into open3d's ``VoxelBlockGrid`` and extract its triangle mesh (in pieces of at
    most ``max_blocks`` voxel blocks: :mod:`recon.geometry.tsdf`).

    EmptyMeshError when marching cubes finds no triangle."""
    o3d = open3d("TSDF fusion (splatforge mesh)")
    o3c = o3d.core

    dev = o3c.Device("CPU:0")
    grid = o3d.t.geometry.VoxelBlockGrid(
        attr_names=ATTRIBUTES, attr_dtypes=(o3c.float32, o3c.float32, o3c.float32),
        attr_channels=((1,), (1,), (3,)), voxel_size=float(voxel_size), block_resolution=BLOCK_RESOLUTION,
        block_count=int(block_count), device=dev)
    depth_max = float(views.depth.max()) * 1.01 + voxel_size * trunc_voxels
    for rgb, depth, K, w2c in zip(views.rgb, views.depth, views.K, views.world_to_cam):
        if (depth > 0).any():
            d_img = o3d.t.geometry.Image(o3c.Tensor(np.ascontiguousarray(depth[..., None])))
            c_img = o3d.t.geometry.Image(o3c.Tensor(np.ascontiguousarray(rgb)))
            intr, extr = o3c.Tensor(K), o3c.Tensor(w2c)
            try:
                coords = grid.compute_unique_block_coordinates(d_img, intr, extr, 1.0, depth_max,
                                                               float(trunc_voxels))
            except RuntimeError as err:  # open3d aborts on a view whose depths touch no voxel block
                if "No block is touched" not in str(err):
                    raise
                coords = None
            if coords is not None:
                grid.integrate(coords, d_img, c_img, intr, intr, extr, 1.0, depth_max, float(trunc_voxels))
        if progress:
            progress(1)
    vertices, faces, colors = extract_triangles(grid, o3d, voxel_size, max_blocks)
    if len(vertices) == 0 or len(faces) == 0:
        raise EmptyMeshError(f"TSDF fusion at voxel size {voxel_size:g} produced an empty mesh; try a larger "
                             f"--voxel-size or --trunc, the other --depth, or check that the run's renders show "
                             f"the scene")
    vertices = vertices.astype(np.float64)
    colors = np.full_like(vertices, 0.7, dtype=np.float32) if colors is None else colors
    return canonical_order(MeshArrays(vertices, faces, np.clip(colors, 0, 1)))


def canonical_order(mesh: MeshArrays) -> MeshArrays:
    """The same mesh in an order that depends only on its geometry: vertices sorted by (x, y, z, then colour),
    each face rotated to start at its smallest vertex index (orientation kept), faces sorted. open3d's
    marching cubes runs in parallel and lists the same vertices and triangles in a different order from one
    call to the next; in this order the written mesh, ``--keep-largest``'s choice among equal components and
    area-sampled metrics (Chamfer: seeded samples) repeat exactly."""
    v, c = mesh.vertices, mesh.colors
    order = np.lexsort((c[:, 2], c[:, 1], c[:, 0], v[:, 2], v[:, 1], v[:, 0]))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    f = rank[mesh.faces]
    first = f.argmin(axis=1)
    rows = np.arange(len(f))[:, None]
    f = f[rows, (first[:, None] + np.arange(3)[None, :]) % 3]
    f = f[np.lexsort((f[:, 2], f[:, 1], f[:, 0]))]
    return MeshArrays(v[order], f, c[order])


def keep_largest_component(mesh: MeshArrays) -> MeshArrays:
    """The connected component (by shared vertices) with the most faces; vertices renumbered."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    f = mesh.faces
    n = len(mesh.vertices)
    rows = np.concatenate([f[:, 0], f[:, 1], f[:, 2]])
    cols = np.concatenate([f[:, 1], f[:, 2], f[:, 0]])
    _, label = connected_components(coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n)), directed=False)
    face_label = label[f[:, 0]]
    best = np.bincount(face_label).argmax()
    faces = f[face_label == best]
    used = np.unique(faces)
    remap = np.full(n, -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    return MeshArrays(mesh.vertices[used], remap[faces], mesh.colors[used])


def to_trimesh(mesh: MeshArrays):
    """A ``trimesh.Trimesh`` with 8-bit RGBA vertex colours."""
    import trimesh

    rgba = np.concatenate([np.round(mesh.colors * 255), np.full((len(mesh.colors), 1), 255)], axis=1)
    return trimesh.Trimesh(mesh.vertices, mesh.faces, vertex_colors=rgba.astype(np.uint8), process=False)


def mesh_bytes(mesh: MeshArrays, fmt: str) -> bytes:
    """The mesh encoded as ``fmt`` ("ply", "obj" or "glb") by trimesh."""
    if fmt not in ("ply", "obj", "glb"):
        raise UsageError(f"mesh format {fmt!r}: give --out with .ply, .obj or .glb")
    data = to_trimesh(mesh).export(file_type=fmt)
    return data.encode() if isinstance(data, str) else data


# -------------------------------------------------------------------------------- zero level set (neus)

def zero_level_mesh(model, resolution: int, full_grid: bool = False) -> MeshArrays:
    """The zero level set of a model with a signed distance field (``model.sdf_function()``, neus): marching
    cubes (:func:`recon.geometry.sdf_fit.extract_mesh`, scikit-image) on a ``resolution``^3 grid over the cube
    the model names (its box; a contracted capture's inner cube), vertices in world units, vertex colours from
    ``model.surface_colors`` (the colour seen along -normal). EmptyMeshError when the field has no surface there.
    A model with ``mesh_slope()`` (a bound on the field's slope per unit of the cube) has its SDF evaluated only
    near the zero level (:mod:`recon.geometry.narrow_band`: the same mesh while the bound holds), unless
    ``full_grid``."""
    from recon.geometry.sdf_fit import Normalisation, extract_mesh

    fn, centre, side = model.sdf_function()
    slope = model.mesh_slope() if hasattr(model, "mesh_slope") and not full_grid else None
    try:
        vertices, faces = extract_mesh(fn, Normalisation(centre, side), resolution, slope)
    except ValueError as err:
        raise EmptyMeshError(f"marching cubes at resolution {resolution}: {err}") from None
    rgb, _ = model.surface_colors(torch.from_numpy(vertices))
    return canonical_order(MeshArrays(vertices, faces, rgb.numpy().astype(np.float32).clip(0, 1)))
