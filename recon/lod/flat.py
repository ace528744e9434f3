"""The hierarchy flattened in breadth-first order, for the cut (recon/lod/cut.py).

Position 0 is the root; then every node of tree depth 1, then depth 2, ..., each depth in the order of its
parents' positions, so a node's children are the contiguous positions ``first[p] .. first[p] + kids[p] - 1``
(in Morton order) and a parent's position is always below its children's. The cut walks it as a queue: the
positions still to look at are known long before they are read, so their memory loads overlap instead of
each waiting for the one before (a depth-first scan whose next address is the last load's result spends its
time waiting on memory).

==============  ==============  ==============================================================================
field           shape           meaning
==============  ==============  ==============================================================================
``node``        [M] int32       node id (recon/lod/hierarchy.py numbering) at each position
``first``       [M] int32       position of the first child (-1 for a leaf)
``kids``        [M] int32       number of children (0 for a leaf)
``spheres``     [M, 4] float32  bounding sphere (x, y, z, radius) of the node, world frame
``weight``      [M] float32     split weight (1 by default; see :func:`split_weights`), never larger than
                                the parent's, so the split priority ``size x weight`` never grows down the tree
==============  ==============  ==============================================================================

The cut reads them packed, one 32-byte record per position (:attr:`FlatTree.packed`: x, y, z, radius, weight
as float32, then first, kids and node id as int32 in the same bytes, :attr:`FlatTree.packed_int`): one cache
line per node visited, siblings side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from recon.core.splat_data import sigmoid

from .hierarchy import Hierarchy

CUT_METRICS = ("size", "opacity", "error", "error_area")
DEFAULT_METRIC = "error_area"  # select_cut's, the distillation's and the LOD export's: at a 10 % budget its cuts
# render faster than "error"'s and lose no more PSNR on the far test views of both scenes (docs/lod.md, Targets)
SH_C0 = 0.28209479177387814  # colour = SH_C0 x band 0 (+ 0.5)
ERROR_FLOOR = 0.02  # colour spread added to every node's, so a large node of one colour still splits
LOG_ALPHA_FLOOR = 0.5  # footprint_area: ln(255 a) raised to this, so a faint merge still has an area
GROWTH_CLAMP = 8.0  # area_growth is kept inside [1 / this, this]


@dataclass
class FlatTree:
    """A hierarchy in breadth-first order (see the module docstring)."""

    node: np.ndarray
    first: np.ndarray
    kids: np.ndarray
    spheres: np.ndarray
    weight: np.ndarray

    def __post_init__(self):
        rec = np.zeros((len(self.node), 8), dtype=np.float32)
        rec[:, :4] = self.spheres
        rec[:, 4] = self.weight
        ints = rec.view(np.int32)
        ints[:, 5] = self.first
        ints[:, 6] = self.kids
        ints[:, 7] = self.node
        self.packed, self.packed_int = rec, ints

    @property
    def position(self) -> np.ndarray:
        """[M] int32 inverse of ``node``: the position of each node id."""
        pos = np.empty(len(self.node), dtype=np.int32)
        pos[self.node] = np.arange(len(self.node), dtype=np.int32)
        return pos


@njit(cache=True)
def _breadth_first(child_start, children, num_leaves, num_nodes):
    """(node [M], first [M], kids [M]): positions handed out in queue order from the root (the last id)."""
    node = np.empty(num_nodes, dtype=np.int32)
    first = np.full(num_nodes, -1, dtype=np.int32)
    kids = np.zeros(num_nodes, dtype=np.int32)
    node[0] = num_nodes - 1
    tail = 1
    for p in range(num_nodes):
        n = node[p]
        if n >= num_leaves:
            lo, hi = child_start[n - num_leaves], child_start[n - num_leaves + 1]
            first[p] = tail
            kids[p] = hi - lo
            for j in range(lo, hi):
                node[tail] = children[j]
                tail += 1
    return node, first, kids


@njit(cache=True)
def _monotone(weight, first, kids):
    """Each position's weight lowered to at most its parent's (in place; parents come first)."""
    for p in range(len(first)):
        for c in range(first[p], first[p] + kids[p]):
            if weight[c] > weight[p]:
                weight[c] = weight[p]
    return weight


@njit(cache=True)
def _colour_spread(child_start, children, num_leaves, weight, colour):
    """[M] variance (summed over RGB) of the leaves' colours below each node about its mean, weighted by
    ``weight`` (children before parents in id order; the law of total variance from the children's)."""
    m = len(weight)
    var = np.zeros(m)
    mean = colour.copy()
    wsum = weight.copy()
    for n in range(num_leaves, m):
        lo, hi = child_start[n - num_leaves], child_start[n - num_leaves + 1]
        w = 0.0
        mu = np.zeros(3)
        for j in range(lo, hi):
            c = children[j]
            w += wsum[c]
            for a in range(3):
                mu[a] += wsum[c] * mean[c, a]
        if w <= 0.0:
            continue
        v = 0.0
        for a in range(3):
            mu[a] /= w
        for j in range(lo, hi):
            c = children[j]
            d = 0.0
            for a in range(3):
                d += (mean[c, a] - mu[a]) ** 2
            v += wsum[c] * (var[c] + d)
        var[n] = v / w
        wsum[n] = w
        for a in range(3):
            mean[n, a] = mu[a]
    return var


def scale_area(log_scales: np.ndarray) -> np.ndarray:
    """[N] float64 the merge's area proxy A (recon/lod/merge.py: sqrt of the second invariant of the covariance)
    from log standard deviations [N, 3]: sqrt((s1 s2)^2 + (s2 s3)^2 + (s1 s3)^2)."""
    s = np.exp(log_scales.astype(np.float64))
    return np.sqrt((s[:, 0] * s[:, 1]) ** 2 + (s[:, 1] * s[:, 2]) ** 2 + (s[:, 0] * s[:, 2]) ** 2)


def colour_spread(h: Hierarchy) -> np.ndarray:
    """[M] float64 standard deviation of the base colours (SH band 0) of the leaves below each node, each leaf
    weighted by opacity x area (the merge's weights, recon/lod/merge.py): what a merge averages away
    (0 for a leaf)."""
    leaves = np.arange(h.num_leaves)
    area = scale_area(h.nodes.log_scales[leaves])
    weight = np.zeros(h.num_nodes)
    weight[leaves] = area / (1.0 + np.exp(-h.nodes.logit_opacities[leaves].astype(np.float64)))
    colour = np.zeros((h.num_nodes, 3))
    colour[leaves] = SH_C0 * h.nodes.sh[leaves, 0].astype(np.float64)
    return np.sqrt(_colour_spread(h.child_start, h.children, h.num_leaves, weight, colour))


def footprint_area(h: Hierarchy) -> np.ndarray:
    """[M] float64 world-space stand-in for the area where each node, as drawn, reaches alpha >= 1/255 (the pixels
    the rasterizer evaluates): A(S) ln(255 a), A the merge's area proxy (recon/lod/merge.py) and a the opacity;
    the alpha >= 1/255 ellipse of a flat Gaussian of standard deviations s1, s2 has area 2 pi s1 s2 ln(255 a).
    ln(255 a) is floored at LOG_ALPHA_FLOOR."""
    a = sigmoid(h.nodes.logit_opacities.astype(np.float64))
    return scale_area(h.nodes.log_scales) * np.maximum(np.log(255.0 * a), LOG_ALPHA_FLOOR)


def area_growth(h: Hierarchy) -> np.ndarray:
    """[M] float64 sum of the children's :func:`footprint_area` over the node's own (1 for a leaf): how much the
    pixel work grows when the node splits (below 1: the merge's moment-matched tail covers more than its
    children do), kept inside [1 / GROWTH_CLAMP, GROWTH_CLAMP]."""
    area = footprint_area(h)
    out = np.ones(h.num_nodes)
    kids = np.add.reduceat(area[h.children], h.child_start[:-1]) if len(h.children) else np.zeros(0)
    own = area[h.num_leaves:]
    out[h.num_leaves:] = np.clip(kids / np.maximum(own, 1e-300), 1.0 / GROWTH_CLAMP, GROWTH_CLAMP)
    return out


def split_weights(h: Hierarchy, metric: str) -> np.ndarray:
    """[M] float32 per-node split weight of the cut's error metric ``metric`` (node ids):

    * ``"size"``: 1 (split the node of largest projected size first);
    * ``"opacity"``: sqrt of the node's opacity (a faint merged Gaussian shows its error less, so the budget
      goes to the nodes whose merge would show; docs/lod.md gives the measured effect);
    * ``"error"``: a screen-space error: sqrt(opacity) x (the spread of the leaves' colours below the node,
      :func:`colour_spread`, + ERROR_FLOOR): a node that averages away a detail splits before a larger one
      of one colour (priority = projected size x this);
    * ``"error_area"``: the ``"error"`` weight over :func:`area_growth`: screen error per pixel area the split
      adds, so at the same budget the cut spends its splits where they add the least pixel work (and first
      where splitting takes pixel work away: a merge whose tail covers more than its children do).
    """
    if metric == "size":
        return np.ones(h.num_nodes, dtype=np.float32)
    if metric == "opacity":
        a = 1.0 / (1.0 + np.exp(-h.nodes.logit_opacities.astype(np.float64)))
        return np.sqrt(a).astype(np.float32)
    if metric in ("error", "error_area"):
        a = 1.0 / (1.0 + np.exp(-h.nodes.logit_opacities.astype(np.float64)))
        weight = np.sqrt(a) * (colour_spread(h) + ERROR_FLOOR)
        if metric == "error_area":
            weight = weight / area_growth(h)
        return weight.astype(np.float32)
    raise ValueError(f"cut metric {metric!r}: choose one of {', '.join(CUT_METRICS)}")


def flatten(h: Hierarchy, metric: str = DEFAULT_METRIC) -> FlatTree:
    """The :class:`FlatTree` of ``h`` with the split weights of ``metric`` (cached on ``h`` per metric)."""
    cache = h.__dict__.setdefault("_flat", {})
    if metric not in cache:
        weight = split_weights(h, metric)
        base = next(iter(cache.values()), None)
        if base is None:
            node, first, kids = _breadth_first(h.child_start, h.children, h.num_leaves, h.num_nodes)
            spheres = np.ascontiguousarray(h.spheres()[node])
        else:
            node, first, kids, spheres = base.node, base.first, base.kids, base.spheres
        cache[metric] = FlatTree(node, first, kids, spheres, _monotone(weight[node].copy(), first, kids))
    return cache[metric]
