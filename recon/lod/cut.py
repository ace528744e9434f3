"""The cut through an LOD hierarchy for one camera: fine near the camera, coarse far away.

A cut is a set of nodes holding every leaf exactly once (each leaf has exactly one ancestor-or-self in it).
The projected size of node n for a pinhole camera is ``s(n) = f r(n) / (z(n) - r(n))`` pixels (f the larger
focal length, r the node's bounding radius, z the camera depth of its mean; infinite when the sphere reaches
the near plane); a sphere outside the view frustum, or behind the camera, counts as size 0. Children's
spheres lie inside their parent's (their nearest depth z - r is no nearer), so sizes never grow down the
tree.

:func:`select_cut` starts from the root and splits the largest node first, until every node of the cut is
at most ``pixels`` large, or the next split would take the cut past ``budget`` nodes (either or both; a leaf
never splits). The order is kept with a bucket queue over the sizes' log2 (:data:`BUCKETS_PER_OCTAVE`
buckets per factor of 2; nodes within a bucket split in the order they came), so the work is proportional to
the nodes visited (the cut and the nodes above it), not to the hierarchy's size: one Numba kernel, no
per-node Python.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from rasterizer.camera import Camera

from .hierarchy import Hierarchy

BUCKETS_PER_OCTAVE = 4
TOP_LOG2 = 24.0  # sizes above 2^24 px share the first bucket
NUM_BUCKETS = int(2 * TOP_LOG2 * BUCKETS_PER_OCTAVE) + 2  # down to 2^-24 px; the last bucket: size 0 (never split)
NEAR = 0.01


@njit(cache=True, inline="always")
def _bucket(size):
    """Bucket index of a projected size (0 = largest; the last = size 0)."""
    if size <= 0.0:
        return NUM_BUCKETS - 1
    if size >= 2.0 ** TOP_LOG2:
        return 0
    b = int((TOP_LOG2 - math.log2(size)) * BUCKETS_PER_OCTAVE)
    return min(max(b, 0), NUM_BUCKETS - 2)


@njit(cache=True, inline="always")
def _size(node, spheres, view, planes, focal):
    """Projected size in pixels of node ``node`` (0 outside the frustum): ``focal r / (z - r)`` with z the
    camera depth of its mean (no square root; inf when the sphere reaches the near plane)."""
    x, y, z = spheres[node, 0], spheres[node, 1], spheres[node, 2]
    px = view[0, 0] * x + view[0, 1] * y + view[0, 2] * z + view[0, 3]
    py = view[1, 0] * x + view[1, 1] * y + view[1, 2] * z + view[1, 3]
    pz = view[2, 0] * x + view[2, 1] * y + view[2, 2] * z + view[2, 3]
    r = spheres[node, 3]
    if pz < NEAR - r:
        return 0.0
    for i in range(4):
        if planes[i, 0] * px + planes[i, 1] * py + planes[i, 2] * pz < -r:
            return 0.0
    if pz - r <= NEAR:
        return np.inf
    return focal * r / (pz - r)


BLOCK = 64  # entries per block of a bucket's list


@njit(cache=True, inline="always")
def _push(b, node, sz, head, fill, block_next, pool_node, pool_size, free, state):
    """Append (node, size) to bucket b's list of blocks; ``state`` = [blocks used, free blocks]."""
    k = head[b]
    if k == -1 or fill[b] == BLOCK:
        if state[1] > 0:
            state[1] -= 1
            nk = free[state[1]]
        else:
            nk = state[0]
            state[0] += 1
        block_next[nk] = k
        head[b] = nk
        fill[b] = 0
        k = nk
    pool_node[k * BLOCK + fill[b]] = node
    pool_size[k * BLOCK + fill[b]] = sz
    fill[b] += 1


@njit(cache=True)
def _cut_kernel(spheres, child_start, children, num_leaves, root, view, planes, focal, pixels, budget, pool_node,
                pool_size, block_next, free, out):
    """Node ids of the cut (see :func:`select_cut`). Each bucket is a stack of blocks of :data:`BLOCK`
    (node, size) entries, so popping reads memory in runs (a linked list of nodes chased one pointer per node
    and cost 4x as much); emptied blocks are reused. ``pool_*``, ``block_next``, ``free``, ``out``: scratch
    (contents ignored)."""
    head = np.full(NUM_BUCKETS, -1, dtype=np.int64)
    fill = np.zeros(NUM_BUCKETS, dtype=np.int64)
    state = np.zeros(2, dtype=np.int64)
    n_out = 0
    s = _size(root, spheres, view, planes, focal)
    _push(_bucket(s), root, s, head, fill, block_next, pool_node, pool_size, free, state)
    count = 1
    full = False
    for b in range(NUM_BUCKETS - 1):
        while head[b] != -1 and not full:
            k = head[b]
            if fill[b] == 0:  # empty block: back to the (full) one below, this one to the free list
                head[b] = block_next[k]
                fill[b] = BLOCK
                free[state[1]] = k
                state[1] += 1
                continue
            fill[b] -= 1
            node = pool_node[k * BLOCK + fill[b]]
            if node < num_leaves or pool_size[k * BLOCK + fill[b]] <= pixels:
                out[n_out] = node
                n_out += 1
                continue
            lo = child_start[node - num_leaves]
            hi = child_start[node - num_leaves + 1]
            if count - 1 + (hi - lo) > budget:
                out[n_out] = node
                n_out += 1
                full = True
                break
            count += hi - lo - 1
            for j in range(lo, hi):
                c = children[j]
                if c < num_leaves:  # a leaf never splits: straight into the cut
                    out[n_out] = c
                    n_out += 1
                    continue
                sc = _size(c, spheres, view, planes, focal)
                _push(max(_bucket(sc), b), c, sc, head, fill, block_next, pool_node, pool_size, free, state)
        if full:
            break
    for b in range(NUM_BUCKETS):
        k = head[b]
        f = fill[b]
        while k != -1:
            for i in range(f):
                out[n_out] = pool_node[k * BLOCK + i]
                n_out += 1
            k = block_next[k]
            f = BLOCK
    return out[:n_out].copy()


def frustum_planes(K: np.ndarray, width: int, height: int) -> np.ndarray:
    """[4, 3] unit inward normals (camera frame, OpenCV axes) of the side planes of a pinhole frustum through
    the camera centre: a point p is inside when every ``n . p >= 0``."""
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    planes = np.array([
        [fx, 0.0, cx],            # u >= 0: fx x + cx z >= 0
        [-fx, 0.0, width - cx],   # u <= W
        [0.0, fy, cy],            # v >= 0
        [0.0, -fy, height - cy],  # v <= H
    ])
    return planes / np.linalg.norm(planes, axis=1, keepdims=True)


def select_cut(h: Hierarchy, camera: Camera, budget: int | None = None, pixels: float | None = None) -> np.ndarray:
    """Node ids [n] int32 of the cut of ``h`` for ``camera``: nodes split largest projected size first, while
    larger than ``pixels`` (None: no size limit) and while the cut stays within ``budget`` nodes (None: no
    count limit). With neither limit every node in the view frustum splits down to the leaves (nodes outside it
stay whole). ``budget`` < 1 gives the root."""
    if budget is not None and budget < 1:
        budget = 1
    if h.num_leaves == h.num_nodes:  # no merges: the model itself
        return np.arange(h.num_leaves, dtype=np.int32)
    K = camera.K_numpy()
    return _cut_kernel(h.spheres(), h.child_start, h.children, h.num_leaves, h.root,
                       camera.world_to_cam_numpy(), frustum_planes(K, camera.width, camera.height),
                       float(max(K[0, 0], K[1, 1])), -1.0 if pixels is None else float(pixels),
                       np.iinfo(np.int64).max if budget is None else int(budget), *_scratch(h))


def _scratch(h: Hierarchy) -> tuple[np.ndarray, ...]:
    """Work arrays of the kernel, allocated once per hierarchy (fresh ones page-fault as the kernel first
    touches them). Live entries never exceed M, so M / BLOCK + one partly filled block per bucket (+ 1) blocks
    suffice. One cut at a time per hierarchy."""
    if getattr(h, "_cut_scratch", None) is None:
        m = h.num_nodes
        blocks = m // BLOCK + NUM_BUCKETS + 2
        h._cut_scratch = (np.empty(blocks * BLOCK, np.int32), np.empty(blocks * BLOCK, np.float32),
                          np.empty(blocks, np.int64), np.empty(blocks, np.int64), np.empty(m, np.int32))
    return h._cut_scratch
