"""Marching cubes on open3d's ``VoxelBlockGrid`` of any size: in pieces when one call would crash.

open3d 0.20's CPU ``VoxelBlockGrid.extract_triangle_mesh`` keeps a per-voxel table of int32 [blocks, R, R, R,
4] (three edge-vertex indices and the cube's case, R = block resolution) and addresses it with 32-bit byte
offsets, so with more than 2^31 / (R^3 x 16) active blocks (32,768 at R = 16: 134 M voxels) it writes out
of bounds and the process dies with a segmentation fault (measured: 32,760 blocks extract, 32,780 crash;
a real capture fused at 1/235 of its extent has 36,194).

:func:`extract_triangles` therefore extracts a grid with more blocks in pieces:

1. the active blocks are sorted by their coordinates along the grid's longest axis (then the others) and
   cut into consecutive pieces of at most ``max_blocks // 2`` blocks (a piece *owns* its blocks), a piece
   halved again while it and its neighbours are more than ``max_blocks``;
2. each piece is copied (tsdf, weight, colour of its blocks and of their 26 neighbours, so the cubes that
   straddle the piece's border see all eight corners) into a grid of its own, which is extracted;
3. a triangle is kept by the piece that owns the block of its marching cube (the voxel cell that holds its
   centroid), so each triangle of the whole grid is kept once;
4. vertices on the cuts, made by both pieces from the same voxel values, are bit-identical and are merged.

The result is the single call's mesh up to the order of vertices and faces (``tests``: equal after
``mesh_extraction.canonical_order``).
"""

from __future__ import annotations

import numpy as np

EXTRACT_BLOCK_LIMIT = 32_768  # 2^31 / (16^3 voxels x 16 bytes): open3d 0.20's int32 table offsets
ATTRIBUTES = ("tsdf", "weight", "color")  # the attributes of mesh_extraction.fuse_tsdf's grids
OFFSETS = np.array(np.meshgrid([-1, 0, 1], [-1, 0, 1], [-1, 0, 1], indexing="ij")).reshape(3, -1).T  # [27, 3]


def extract_triangles(grid, o3d, voxel_size: float, max_blocks: int = EXTRACT_BLOCK_LIMIT,
                      weight_threshold: float = 1.0):
    """Marching cubes of ``grid`` (an open3d ``VoxelBlockGrid`` of ``voxel_size`` with the attributes
    :data:`ATTRIBUTES`).

    Returns (vertices [V, 3] float32 world, faces [F, 3] int64, colours [V, 3] float32, or None when the grid
    has no colour); V = F = 0 when there is no surface. Grids with more than ``max_blocks`` active blocks
    are extracted in pieces (module docstring)."""
    hashmap = grid.hashmap()
    if hashmap.size() == 0:
        return np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int64), None
    if hashmap.size() <= max_blocks:
        return mesh_arrays(grid.extract_triangle_mesh(weight_threshold=weight_threshold))
    keys = hashmap.key_tensor()[hashmap.active_buf_indices()].numpy().astype(np.int64)  # [B, 3] block coords
    pieces, resolution = [], grid_resolution(grid)
    for own, sub_keys in pieces_within(keys, max_blocks):
        sub = sub_grid(grid, o3d, voxel_size, sub_keys)
        vertices, faces, colors = mesh_arrays(sub.extract_triangle_mesh(weight_threshold=weight_threshold))
        faces = faces[owned(vertices, faces, keys[own], voxel_size, resolution)]
        pieces.append((vertices, faces, colors))
    return weld(pieces)


def grid_resolution(grid) -> int:
    """Voxels per block edge of ``grid`` (its tsdf attribute is [capacity, R, R, R, 1])."""
    return int(grid.attribute("tsdf").shape[1])


def mesh_arrays(mesh):
    """(vertices float32, faces int64, colours float32 or None) of an open3d tensor TriangleMesh (empty
    arrays when it has no vertices or no triangles)."""
    if "positions" not in mesh.vertex or "indices" not in mesh.triangle:
        return np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int64), None
    vertices = mesh.vertex.positions.numpy().astype(np.float32)
    colors = mesh.vertex.colors.numpy().astype(np.float32) if "colors" in mesh.vertex else None
    return vertices, mesh.triangle.indices.numpy().astype(np.int64), colors


def piece_groups(keys: np.ndarray, size: int) -> list[np.ndarray]:
    """Indices into ``keys`` [B, 3] (block coordinates) in pieces of at most ``size``: sorted along the axis
    of the largest extent first, so that pieces are slabs with few blocks on their borders."""
    axes = np.argsort(np.ptp(keys, axis=0))  # smallest extent first: lexsort's last key is the primary one
    order = np.lexsort(tuple(keys[:, a] for a in axes))
    return [order[i:i + size] for i in range(0, len(order), size)]


def pieces_within(keys: np.ndarray, max_blocks: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(own indices into ``keys``, own blocks with their active neighbours [Q, 3]) per piece, Q <= ``max_blocks``:
    :func:`piece_groups` of ``max_blocks // 2``, a piece whose neighbours take it over the limit halved (in
    its sorted order) until it fits (a single block with its 26 neighbours always does)."""
    if max_blocks < len(OFFSETS):
        raise ValueError(f"max_blocks {max_blocks}: at least {len(OFFSETS)} (a block and its neighbours)")
    todo, done = piece_groups(keys, max(1, max_blocks // 2))[::-1], []
    while todo:
        own = todo.pop()
        near = with_neighbours(keys[own], keys)
        if len(near) <= max_blocks:
            done.append((own, near))
        else:
            half = len(own) // 2
            todo += [own[half:], own[:half]]
    return done


def block_codes(keys: np.ndarray) -> np.ndarray:
    """One int64 per block coordinate row of ``keys`` [B, 3] (each coordinate within +-2^20)."""
    k = keys.astype(np.int64) + (1 << 20)
    return (k[:, 0] << 42) | (k[:, 1] << 21) | k[:, 2]


def with_neighbours(own: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The blocks of ``own`` [P, 3] and those of their 26 neighbours that are active (rows of ``keys``),
    without repeats: [Q, 3]."""
    near = (own[:, None, :] + OFFSETS[None]).reshape(-1, 3)
    near = near[np.isin(block_codes(near), block_codes(keys))]
    return np.unique(near, axis=0)


def sub_grid(grid, o3d, voxel_size: float, keys: np.ndarray):
    """A new ``VoxelBlockGrid`` like ``grid`` holding a copy of the blocks ``keys`` [Q, 3] (all active in
    ``grid``) and their attribute values."""
    o3c = o3d.core
    attrs = {n: grid.attribute(n) for n in ATTRIBUTES}
    sub = o3d.t.geometry.VoxelBlockGrid(
        attr_names=tuple(attrs), attr_dtypes=tuple(a.dtype for a in attrs.values()),
        attr_channels=tuple((int(a.shape[-1]),) for a in attrs.values()), voxel_size=float(voxel_size),
        block_resolution=grid_resolution(grid), block_count=len(keys) + 64, device=o3c.Device("CPU:0"))
    key_tensor = o3c.Tensor(np.ascontiguousarray(keys, dtype=np.int32))
    src, found = grid.hashmap().find(key_tensor)
    dst, made = sub.hashmap().activate(key_tensor)
    if not (found.numpy().all() and made.numpy().all()):
        raise RuntimeError("TSDF extraction: a piece's block is missing from the fused grid")
    src_i = o3c.Tensor(src.numpy().astype(np.int64))
    dst_i = o3c.Tensor(dst.numpy().astype(np.int64))
    for name, values in attrs.items():
        target = sub.attribute(name)
        target[dst_i] = values[src_i]
    return sub


def owned(vertices: np.ndarray, faces: np.ndarray, own: np.ndarray, voxel_size: float, resolution: int) -> np.ndarray:
    """[F] bool: faces whose marching cube (the voxel cell of the centroid; vertices are voxel_size x global
    voxel coordinates) lies in a block of ``own`` [P, 3]."""
    if len(faces) == 0:
        return np.zeros(0, bool)
    centroid = vertices[faces].astype(np.float64).mean(axis=1)
    block = np.floor(np.floor(centroid / voxel_size) / resolution).astype(np.int64)
    return np.isin(block_codes(block), block_codes(own))


def weld(pieces):
    """One mesh from the pieces' (vertices, faces, colours): unused vertices dropped, vertices with equal
    positions (a cut's edges, computed by both of its pieces from the same values) merged."""
    pieces = [p for p in pieces if len(p[1])] or pieces[:1]  # a piece without faces adds nothing (nor colours)
    vertices, faces, colors, base = [], [], [], 0
    for v, f, c in pieces:
        used = np.unique(f)
        remap = np.full(len(v), -1, np.int64)
        remap[used] = np.arange(len(used)) + base
        vertices.append(v[used])
        colors.append(c[used] if c is not None else None)
        faces.append(remap[f])
        base += len(used)
    v = np.concatenate(vertices)
    f = np.concatenate(faces)
    c = None if any(x is None for x in colors) else np.concatenate(colors)
    unique, first, inverse = np.unique(v, axis=0, return_index=True, return_inverse=True)
    return unique, inverse.reshape(-1)[f], (c[first] if c is not None else None)
