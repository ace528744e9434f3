"""The LOD hierarchy: an octree over a model's Gaussians, each interior node the merge of its children.

Build (:func:`build_hierarchy`): the Gaussians' centres are quantised to a ``2^depth`` grid over the cube
around their bounding box and sorted by Morton code (``depth`` bits per axis). Going up one octree level at a
time (key = code >> 3 l), the current nodes whose keys agree form a group; a group of two or more becomes a
new node, the merge of its members (:func:`recon.lod.merge.merge_groups`), and a group of one passes up
unchanged (no chains of single-child nodes). After ``depth`` levels one node remains, the root.

Nodes are numbered leaves first, in Morton order (node i < N is Gaussian ``leaf_ids[i]`` of the model: nodes
near in space are near in memory, which the cut's traversal needs), then the merges, children before parents.
Per node (M = N + interior):

==============  ==============  ==============================================================================
field           shape           meaning
==============  ==============  ==============================================================================
``nodes``       SplatData [M]   the Gaussians: the model's, then the merged ones
``radius``      [M] float32     bounding sphere about the node's mean: 3 sigma of the largest axis for a leaf,
                                ``max(|mu_c - mu| + r_c)`` over the children for a merge (so a child's sphere
                                lies inside its parent's: projected sizes never grow down the tree)
``parent``      [M] int32       parent node, -1 for the root
``depth``       [M] int8        octree depth of the node's cell (0 = the whole cube); leaves ``depth + 1``
``code``        [M] uint64      Morton code of one leaf below (all leaves of a node at depth d share its first
                                3 d bits)
``child_start`` [M - N + 1]     children of interior node n are ``children[child_start[n - N]:
                int64           child_start[n - N + 1]]``
``children``    [M - 1] int32   child ids, grouped by parent
==============  ==============  ==============================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recon.core.splat_data import SplatData

from .merge import DEFAULT_OPACITY_RULE, DEFAULT_SPREAD, Moments, merge_groups, moments_of, to_splats

DEFAULT_DEPTH = 16  # bits per axis of the Morton code; 2^16 cells across the model's bounding cube
MAX_DEPTH = 21  # 3 x 21 bits fit a uint64
EXTENT_SIGMAS = 3.0  # a leaf's radius in standard deviations of its largest axis


@dataclass
class Hierarchy:
    """An LOD hierarchy (see the module docstring for the fields)."""

    nodes: SplatData
    radius: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    code: np.ndarray
    child_start: np.ndarray
    children: np.ndarray
    num_leaves: int
    leaf_ids: np.ndarray  # [N] int64: leaf node i is the model's Gaussian leaf_ids[i]
    octree_depth: int
    origin: np.ndarray  # [3] min corner of the octree's cube (world)
    size: float  # side of the cube (world)
    opacity_rule: str = "coverage"
    spread: float = 1.0  # t of the merged Gaussians drawn (recon/lod/merge.py): covariance S_in + t S_out

    @property
    def num_nodes(self) -> int:
        """M."""
        return len(self.nodes)

    @property
    def root(self) -> int:
        """Id of the root node (the last one built)."""
        return self.num_nodes - 1

    def spheres(self) -> np.ndarray:
        """[M, 4] float32 (x, y, z, radius) of every node's bounding sphere, one cache line per node for the
        cut (built once)."""
        if getattr(self, "_spheres", None) is None:
            self._spheres = np.ascontiguousarray(
                np.concatenate([self.nodes.means, self.radius[:, None]], axis=1), dtype=np.float32)
        return self._spheres

    def child_counts(self) -> np.ndarray:
        """[M] int32 number of children (0 for leaves)."""
        counts = np.zeros(self.num_nodes, dtype=np.int32)
        counts[self.num_leaves:] = np.diff(self.child_start)
        return counts

    def level_cut(self, depth: int) -> np.ndarray:
        """Node ids [n] of the cut at octree depth ``depth``: nodes at that depth or deeper whose parent is
        shallower (one node per occupied cell of that depth; ``octree_depth + 1`` gives the leaves)."""
        parent_depth = np.where(self.parent >= 0, self.depth[np.maximum(self.parent, 0)], -1)
        return np.flatnonzero((self.depth >= depth) & (parent_depth < depth)).astype(np.int32)


def morton_codes(means: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(codes [N] uint64, origin [3], cube size) of centres [N, 3] quantised to a 2^depth grid over the cube
    about their bounding box (bits interleaved x, y, z from the top)."""
    lo, hi = means.min(axis=0), means.max(axis=0)
    size = float(max((hi - lo).max(), 1e-9)) * (1 + 1e-6)
    cells = 1 << depth
    q = np.clip(((means - lo) / size * cells).astype(np.int64), 0, cells - 1).astype(np.uint64)
    code = np.zeros(len(means), dtype=np.uint64)
    for bit in range(depth):
        for axis in range(3):
            code |= ((q[:, axis] >> np.uint64(bit)) & np.uint64(1)) << np.uint64(3 * bit + (2 - axis))
    return code, lo.astype(np.float64), size


def leaf_radius(data: SplatData) -> np.ndarray:
    """[N] EXTENT_SIGMAS x the largest standard deviation of each Gaussian."""
    return (EXTENT_SIGMAS * np.exp(data.log_scales.astype(np.float64).max(axis=1))).astype(np.float32)


def bounding_radius(child_means: np.ndarray, child_radius: np.ndarray, means: np.ndarray,
                    starts: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """[G] radius about each group's mean ``means`` [G, 3] holding every child's sphere."""
    reach = np.linalg.norm(child_means - means[gid], axis=1) + child_radius
    return np.maximum.reduceat(reach, starts)


def _grow(arrays: dict, **new) -> None:
    for key, value in new.items():
        arrays[key].append(value)


def build_hierarchy(data: SplatData, depth: int = DEFAULT_DEPTH, progress=None,
                    opacity_rule: str = DEFAULT_OPACITY_RULE, spread: float = DEFAULT_SPREAD) -> Hierarchy:
    """Build the octree hierarchy of ``data`` (N >= 1 Gaussians, finite values) with ``depth`` bits per
    axis (1..21), merging by :func:`recon.lod.merge.merge_groups` with ``opacity_rule``; each merged node is
    drawn with the spread factor ``spread`` (covariance S_in + t S_out, recon/lod/merge.py) while coarser
    merges read the moments matched. ``progress``: optional callable(level, depth) called after each level."""
    if len(data) == 0:
        raise ValueError("build_hierarchy: the model has no Gaussians")
    if not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"build_hierarchy: depth {depth} outside 1..{MAX_DEPTH}")
    n = len(data)
    code, origin, size = morton_codes(data.means.astype(np.float64), depth)
    order = np.argsort(code, kind="stable")
    data, code = data.subset(order), code[order]
    mom = moments_of(data)
    cur = np.arange(n, dtype=np.int64)  # current node ids, in Morton order
    cur_code = code
    node_mom = [mom]  # per block of node ids: leaves, then each level's merges (the moments matched)
    drawn = [mom]  # the same blocks as drawn (spread t < 1: narrower merges)
    radius = [leaf_radius(data)]
    node_depth = [np.full(n, depth + 1, dtype=np.int8)]
    node_code = [code]
    parent = np.full(n + max(n - 1, 0), -1, dtype=np.int32)  # at most N - 1 merges
    child_lists, child_counts = [], []
    all_means, all_radius = mom.means, radius[0].astype(np.float64)
    next_id = n
    for level in range(1, depth + 1):
        key = cur_code >> np.uint64(3 * level)
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        counts = np.diff(np.append(starts, len(cur)))
        multi = counts >= 2
        if multi.any():
            member = np.repeat(multi, counts)
            sub = cur[member]
            sub_counts = counts[multi]
            sub_starts = np.concatenate([[0], np.cumsum(sub_counts)[:-1]])
            children_mom = Moments(all_means[sub], _rows(node_mom, n, sub, "covs"),
                                   _rows(node_mom, n, sub, "opacities"), _rows(node_mom, n, sub, "sh"))
            merged, shown = merge_groups(children_mom, sub_starts, opacity_rule, spread)
            gid = np.repeat(np.arange(len(sub_counts)), sub_counts)
            r = bounding_radius(children_mom.means, all_radius[sub], merged.means, sub_starts, gid)
            ids = np.arange(next_id, next_id + len(sub_counts))
            parent[sub] = np.repeat(ids, sub_counts).astype(np.int32)
            child_lists.append(sub.astype(np.int32))
            child_counts.append(sub_counts)
            node_mom.append(merged)
            drawn.append(shown)  # spread 1: the matched rows themselves (merge.Merged)
            radius.append(r.astype(np.float32))
            node_depth.append(np.full(len(ids), depth - level, dtype=np.int8))
            node_code.append(cur_code[starts[multi]])
            all_means = np.concatenate([all_means, merged.means])
            all_radius = np.concatenate([all_radius, r])
            new_cur = cur[starts].copy()
            new_cur[multi] = ids
            cur = new_cur
            cur_code = cur_code[starts]
            next_id += len(ids)
        if progress is not None:
            progress(level, depth)
    total = next_id
    merged_all = _concat_moments(drawn)
    nodes = _nodes_splats(data, merged_all, n)
    counts = np.concatenate(child_counts) if child_counts else np.zeros(0, np.int64)
    return Hierarchy(
        nodes=nodes, radius=np.concatenate(radius), parent=parent[:total], depth=np.concatenate(node_depth),
        code=np.concatenate(node_code), child_start=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        children=np.concatenate(child_lists) if child_lists else np.zeros(0, np.int32), num_leaves=n,
        leaf_ids=order.astype(np.int64), octree_depth=depth, origin=origin, size=size, opacity_rule=opacity_rule,
        spread=spread)


def _rows(blocks: list[Moments], n: int, ids: np.ndarray, field: str) -> np.ndarray:
    """Field ``field`` of the nodes ``ids`` from the per-level blocks (block 0: the n leaves)."""
    sizes = [len(b) for b in blocks]
    offsets = np.cumsum([0] + sizes)
    first = getattr(blocks[0], field)
    out = np.empty((len(ids),) + first.shape[1:], dtype=first.dtype)
    block = np.searchsorted(offsets, ids, side="right") - 1
    for b in np.unique(block):
        sel = block == b
        out[sel] = getattr(blocks[b], field)[ids[sel] - offsets[b]]
    return out


def _concat_moments(blocks: list[Moments]) -> Moments | None:
    """The merged nodes' moments (blocks 1..), one array per field; None without merges."""
    if len(blocks) == 1:
        return None
    return Moments(*(np.concatenate([getattr(b, f) for b in blocks[1:]])
                     for f in ("means", "covs", "opacities", "sh")))


def _nodes_splats(data: SplatData, merged: Moments | None, n: int) -> SplatData:
    """The model's Gaussians followed by the merged ones, as one SplatData."""
    if merged is None:
        return data.copy()
    extra = to_splats(merged, data.antialiased)
    return SplatData(*(np.concatenate([getattr(data, f), getattr(extra, f)])
                       for f in ("means", "quats", "log_scales", "logit_opacities", "sh")),
                     antialiased=data.antialiased)


def cut_splats(h: Hierarchy, cut: np.ndarray) -> SplatData:
    """The Gaussians of the nodes ``cut`` (a model to render or write)."""
    return h.nodes.subset(np.asarray(cut))
