"""The cut through an LOD hierarchy for one camera: fine near the camera, coarse far away.

A cut is a set of nodes holding every leaf exactly once (each leaf has exactly one ancestor-or-self in it).
The projected size of node n for a pinhole camera is ``s(n) = f r(n) / (z(n) - r(n))`` pixels (f the larger
focal length, r the node's bounding radius, z the camera depth of its mean; infinite when the sphere reaches
the near plane); a sphere outside the view frustum, or behind the camera, counts as size 0. Children's
spheres lie inside their parent's (their nearest depth z - r is no nearer), so sizes never grow down the
tree. The split priority is ``s(n) w(n)``, w the metric's split weight (recon/lod/flat.py: 1 for ``size``),
made non-increasing down the tree, so priorities never grow down the tree either.

The cut (:func:`select_cut`): starting from the root, split the splittable node of largest priority
first (ties: the earlier position in recon/lod/flat.py's breadth-first order), until the next split would
take the cut past ``budget`` nodes. A node
is splittable when it has children, is larger than ``pixels`` (when given) and its priority is above 0
(nodes outside the view never split). :func:`select_cut_reference` does exactly that with a heap.

The fast way (same result): because priorities never grow down the tree, "split every splittable node of
priority above t" is a cut for any t, and the largest-first cut is such a cut followed by part of the ties
at its last priority. So (all in Numba, over the breadth-first arrays of recon/lod/flat.py):

1. scan: the cut at a lower bound ``t`` -- a queue from the root (a node that splits appends its children,
   contiguous in memory), recording each node visited and each split one with its priority; given up past
   ``cap`` nodes (t too low);
2. select: from the recorded split candidates, the longest prefix in priority order (ties: preorder) whose
   extra nodes fit the budget -- a histogram over log2 of the priorities, one sort of the boundary bin;
3. emit: the cut, read from the recorded nodes (those not split whose parent split).

``t`` starts from the previous call's boundary priority on the same hierarchy (consecutive frames of a
viewer need nearly the same), and is moved while it is too low (the scan passes ``cap``: x 4, bisected once
bracketed) or too high (everything above it fits and a node below it could still split: down by the square
root of the count's shortfall).
"""

from __future__ import annotations

import heapq
import math

import numpy as np
from numba import njit

from rasterizer.camera import Camera

from .flat import DEFAULT_METRIC, FlatTree, flatten
from .hierarchy import Hierarchy

NEAR = 0.01
HIST_BINS_PER_OCTAVE = 64
HIST_OCTAVES = 48  # priorities above 2^48 x t (and inf) share the top bin
CAP_FACTOR = 4  # the scan gives up past CAP_FACTOR x budget + CAP_SLACK nodes visited
CAP_SLACK = 256
START_MARGIN = 0.96  # the first t of a call: this x the previous call's boundary priority
DIVIDE_MARGIN = 1e-9  # _scan divides only within this relative margin of a bound (float64 rounding: ~1e-16)


@njit(cache=True, inline="always")
def _size(x, y, z, r, v, focal):
    """Projected size in pixels of the sphere (x, y, z, r) (0 outside the frustum; inf when it reaches the
    near plane). ``v`` [24]: :func:`camera_terms`' rows of the world-to-camera matrix (3 x 4), then the 4
    frustum planes (3 each)."""
    pz = v[8] * x + v[9] * y + v[10] * z + v[11]
    if pz < NEAR - r:
        return 0.0
    px = v[0] * x + v[1] * y + v[2] * z + v[3]
    py = v[4] * x + v[5] * y + v[6] * z + v[7]
    if (v[12] * px + v[13] * py + v[14] * pz < -r or v[15] * px + v[16] * py + v[17] * pz < -r
            or v[18] * px + v[19] * py + v[20] * pz < -r or v[21] * px + v[22] * py + v[23] * pz < -r):
        return 0.0
    if pz - r <= NEAR:
        return np.inf
    return focal * r / (pz - r)


@njit(cache=True)
def _scan(rec, rec_int, view_planes, focal, pixels, t, cap, vis_pos, vis_parent, cand_j, cand_prio, cand_k):
    """Step 1: the cut at priority bound ``t`` (split when splittable and priority > t), walked as a queue
    over the breadth-first records (recon/lod/flat.py): ``vis_pos`` is the queue of positions (each visited
    node, then its children when it splits; once visited, the entry is replaced by the node's id),
    ``vis_parent`` the queue index of each one's parent (-1: the root); each split node (a candidate) goes
    into ``cand_*`` (queue index, priority, kids - 1).
    Returns (visited, candidates, extra, below): visited is -1 past ``cap`` nodes; extra the cut's size minus
    1 (the sum of kids - 1 over the candidates); below the largest priority of a splittable node left whole
    (0 if none).

    The priority ``focal r / (z - r) x w`` (:func:`_size` x weight) is computed exactly, as the reference
    does, only for the nodes that split or may raise ``below``: the others (most of the nodes visited) are
    told apart without dividing, ``focal r w <= t (z - r)`` with a relative margin of ``DIVIDE_MARGIN``
    (far above the rounding of either side), and the exact test decides within the margin."""
    v = np.empty(24, dtype=np.float64)  # a private copy: the compiler may keep it in registers (no aliasing)
    for i in range(24):
        v[i] = view_planes[i]
    low = 1.0 - DIVIDE_MARGIN
    vis_pos[0] = 0
    vis_parent[0] = -1
    n = 1
    nc = 0
    extra = 0
    below = 0.0
    j = 0
    while j < n:
        p = vis_pos[j]
        k = rec_int[p, 6]
        vis_pos[j] = rec_int[p, 7]
        j += 1
        if k == 0:
            continue
        x, y, z, r = rec[p, 0], rec[p, 1], rec[p, 2], rec[p, 3]
        # _size's culling, written out here on purpose: calling a shared helper that returns the depth (-inf when
        # culled) made the 2M-Gaussian cut 1.4x slower (3.7-3.8 -> 5.3-5.5 ms CPU, 2 interleaved pairs, 7 Dec 2026)
        pz = v[8] * x + v[9] * y + v[10] * z + v[11]
        if pz < NEAR - r:  # behind the near plane: size 0 (as _size)
            continue
        px = v[0] * x + v[1] * y + v[2] * z + v[3]
        py = v[4] * x + v[5] * y + v[6] * z + v[7]
        if (v[12] * px + v[13] * py + v[14] * pz < -r or v[15] * px + v[16] * py + v[17] * pz < -r
                or v[18] * px + v[19] * py + v[20] * pz < -r or v[21] * px + v[22] * py + v[23] * pz < -r):
            continue
        w = rec[p, 4]
        den = pz - r
        if den <= NEAR:
            pr = np.inf * w  # s = inf > pixels (nan when w = 0: never splits, as in _size x w)
        else:
            fr = focal * r
            if fr <= pixels * den * low:  # s <= pixels for sure
                continue
            if fr * w <= t * den * low:  # priority <= t for sure: whole; exact only if it may raise `below`
                if fr * w > below * den * low:
                    s = fr / den
                    if s > pixels and s * w > below:
                        below = s * w
                continue
            s = fr / den
            if s <= pixels:
                continue
            pr = s * w
        if pr > t:
            if n + k > cap:
                return -1, nc, extra, below
            cand_j[nc] = j - 1
            cand_prio[nc] = pr
            cand_k[nc] = k - 1
            nc += 1
            extra += k - 1
            f = rec_int[p, 5]
            for i in range(k):
                vis_pos[n + i] = f + i
                vis_parent[n + i] = j - 1
            n += k
        elif pr > below:
            below = pr
    return n, nc, extra, below


@njit(cache=True)
def _select(cand_j, cand_prio, cand_k, nc, t, budget, split, n):
    """Step 2: ``split[j]`` for the visited nodes j < n: the longest prefix of the candidates in priority order
    (ties: the earlier position, the order they were recorded in) whose extra nodes keep the cut within ``budget``.
    Returns the boundary priority (the smallest split one; 0 when none split)."""
    split[:n] = False
    nb = HIST_BINS_PER_OCTAVE * HIST_OCTAVES + 1
    hist = np.zeros(nb, dtype=np.int64)
    bins = np.empty(nc, dtype=np.int32)
    for i in range(nc):
        pr = cand_prio[i]
        b = nb - 1
        if t > 0.0 and pr < np.inf:
            mant, ex = math.frexp(pr / t)  # pr / t = mant 2^ex, mant in [0.5, 1): 2^(ex - 1) (1 + f)
            b = min((ex - 1) * HIST_BINS_PER_OCTAVE + int((2.0 * mant - 1.0) * HIST_BINS_PER_OCTAVE), nb - 1)
            b = max(b, 0)
        bins[i] = b
        hist[b] += cand_k[i]
    room = budget - 1
    edge = -1
    for b in range(nb - 1, -1, -1):
        if hist[b] > room:
            edge = b
            break
        room -= hist[b]
    last = 0.0
    m = 0
    for i in range(nc):
        if bins[i] > edge:
            split[cand_j[i]] = True
            if last == 0.0 or cand_prio[i] < last:
                last = cand_prio[i]
        elif bins[i] == edge:
            m += 1
    if edge >= 0:  # the boundary bin: priority order, the earlier position among ties, while it fits
        idx = np.empty(m, dtype=np.int64)
        key = np.empty(m, dtype=np.float64)
        m = 0
        for i in range(nc):
            if bins[i] == edge:
                idx[m] = i
                key[m] = -cand_prio[i]
                m += 1
        order = np.argsort(key, kind="mergesort")
        for q in range(m):
            i = idx[order[q]]
            if cand_k[i] > room:
                break
            room -= cand_k[i]
            split[cand_j[i]] = True
            if last == 0.0 or cand_prio[i] < last:
                last = cand_prio[i]
    return last


@njit(cache=True)
def _emit(vis_node, vis_parent, n, split, out):
    """Step 3: node ids of the cut: the visited nodes not split whose parent split (the split ones are
    closed upwards: a split node's ancestors all split). ``vis_node``: the scan's queue after the visits."""
    k = 0
    for j in range(n):
        par = vis_parent[j]
        if not split[j] and (par < 0 or split[par]):
            out[k] = vis_node[j]
            k += 1
    return out[:k].copy()


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


def camera_terms(camera: Camera) -> tuple[np.ndarray, float]:
    """(view_planes [24] float64, focal) of a camera, as the kernels take them: the first three rows of the
    world-to-camera matrix (12 numbers), then the frustum planes (:func:`frustum_planes`, 12 numbers)."""
    K = camera.K_numpy()
    view_planes = np.concatenate([camera.world_to_cam_numpy()[:3].ravel(),
                                  frustum_planes(K, camera.width, camera.height).ravel()]).astype(np.float64)
    return view_planes, float(max(K[0, 0], K[1, 1]))


class _CutState:
    """Work arrays of one hierarchy's cuts (allocated once: fresh ones page-fault as the kernels first touch
    them) and the previous boundary priority per (metric, budget). One cut at a time per hierarchy."""

    def __init__(self, m: int):
        self.vis_pos = np.empty(m, np.int32)
        self.vis_parent = np.empty(m, np.int32)
        self.cand_j = np.empty(m, np.int32)
        self.cand_prio = np.empty(m, np.float64)
        self.cand_k = np.empty(m, np.int32)
        self.split = np.empty(m, np.bool_)
        self.out = np.empty(m, np.int32)
        self.last: dict = {}

    def scan(self, flat: FlatTree, cam: tuple, pixels: float, t: float, cap: int) -> tuple[int, int, int, float]:
        """:func:`_scan` into these arrays."""
        return _scan(flat.packed, flat.packed_int, *cam, pixels, t, cap, self.vis_pos, self.vis_parent,
                     self.cand_j, self.cand_prio, self.cand_k)


def _state(h: Hierarchy) -> _CutState:
    if h.__dict__.get("_cut_state") is None:
        h._cut_state = _CutState(h.num_nodes)
    return h._cut_state


def select_cut(h: Hierarchy, camera: Camera, budget: int | None = None, pixels: float | None = None,
               metric: str = DEFAULT_METRIC) -> np.ndarray:
    """Node ids [n] int32 of the cut of ``h`` for ``camera`` (module docstring): nodes split largest priority
    first (``metric``: recon/lod/flat.py), while larger than ``pixels`` (None: no size limit) and while the cut
    stays within ``budget`` nodes (None: no count limit). With neither limit every node in the view frustum
    splits down to the leaves (nodes outside it stay whole). ``budget`` < 1 gives the root."""
    if budget is not None and budget < 1:
        budget = 1
    if h.num_leaves == h.num_nodes:  # no merges: the model itself
        return np.arange(h.num_leaves, dtype=np.int32)
    flat = flatten(h, metric)
    st = _state(h)
    cam = camera_terms(camera)
    pix = 0.0 if pixels is None else float(pixels)
    m = h.num_nodes
    if budget is None or budget >= h.num_leaves:  # the budget cannot bind: one scan at t = 0
        n, nc, _, _ = st.scan(flat, cam, pix, 0.0, m)
        st.split[:n] = False
        st.split[st.cand_j[:nc]] = True
        return _emit(st.vis_pos, st.vis_parent, n, st.split, st.out)
    n, nc, t = _bounded_scan(flat, st, cam, pix, int(budget), metric, m)
    last = _select(st.cand_j, st.cand_prio, st.cand_k, nc, t, int(budget), st.split, n)
    if last > 0.0:
        st.last[(metric, int(budget))] = last
    return _emit(st.vis_pos, st.vis_parent, n, st.split, st.out)


def _bounded_scan(flat: FlatTree, st: _CutState, cam: tuple, pix: float, budget: int, metric: str,
                  m: int) -> tuple[int, int, float]:
    """(visited, candidates, t): a scan at a bound t low enough that the budget binds above it (or t = 0),
    within the cap when possible; what it visited is in ``st``."""
    cap = CAP_FACTOR * budget + CAP_SLACK
    t = st.last.get((metric, budget))
    if t is None:  # a first guess from the root: sizes halve per octree level, counts grow 4-8x
        t = _root_priority(flat, cam, pix) / budget ** (1.0 / 3.0)
    else:
        t *= START_MARGIN
    if not np.isfinite(t):  # the camera inside the root's sphere: start high, the scan's `below` brings it down
        t = 1e30
    lo, hi = 0.0, np.inf  # t known too low (past the cap) / too high (fits, more could split)
    for _ in range(200):
        n, nc, extra, below = st.scan(flat, cam, pix, t, cap)
        if n < 0:
            lo = t
        elif t > 0.0 and below > 0.0 and extra + 1 <= budget:
            hi = min(t, below)
        else:
            return n, nc, t
        if hi / max(lo, 1e-300) < 1.0 + 1e-6 or (lo == 0.0 and hi < 1e-30):
            break
        if hi == np.inf:
            t = 4.0 * t
        elif lo > 0.0:
            t = math.sqrt(lo * hi)
        else:  # counts grow as t^-2 (surfaces) to t^-3 (volumes): step as for a surface, past the budget
            t = hi * 0.95 * min(max((extra + 1) / budget, 1.0 / 256.0), 1.0) ** 0.5
    # ties or degenerate priorities: the scan at the last bound known too low, without a cap
    t = lo
    n, nc, _, _ = st.scan(flat, cam, pix, t, m)
    return n, nc, t


def _root_priority(flat: FlatTree, cam: tuple, pix: float) -> float:
    """The root's split priority (0 when it cannot split)."""
    s = _size(*(float(v) for v in flat.spheres[0]), *cam)  # cam = (view_planes, focal)
    return float(s * flat.weight[0]) if s > pix else 0.0


def node_priorities(h: Hierarchy, camera: Camera, pixels: float | None = None,
                    metric: str = DEFAULT_METRIC) -> np.ndarray:
    """[M] float64 split priority of every node id (-1: not splittable), computed in NumPy the way the kernel
    does (the reference's input)."""
    flat = flatten(h, metric)
    vp, focal = camera_terms(camera)
    view, planes = vp[:12].reshape(3, 4), vp[12:].reshape(4, 3)
    s = flat.spheres.astype(np.float64)
    x, y, z, r = s[:, 0], s[:, 1], s[:, 2], s[:, 3]
    pz = view[2, 0] * x + view[2, 1] * y + view[2, 2] * z + view[2, 3]
    px = view[0, 0] * x + view[0, 1] * y + view[0, 2] * z + view[0, 3]
    py = view[1, 0] * x + view[1, 1] * y + view[1, 2] * z + view[1, 3]
    inside = pz >= NEAR - r
    for i in range(4):
        inside &= ~(planes[i, 0] * px + planes[i, 1] * py + planes[i, 2] * pz < -r)
    with np.errstate(divide="ignore", invalid="ignore"):
        size = np.where(pz - r <= NEAR, np.inf, focal * r / (pz - r))
    size = np.where(inside, size, 0.0)
    pix = 0.0 if pixels is None else float(pixels)
    prio = size * flat.weight.astype(np.float64)
    prio = np.where((flat.kids > 0) & (size > pix) & (prio > 0.0), prio, -1.0)
    out = np.empty(len(prio))
    out[flat.node] = prio
    return out


def select_cut_reference(h: Hierarchy, camera: Camera, budget: int | None = None, pixels: float | None = None,
                         metric: str = DEFAULT_METRIC) -> np.ndarray:
    """The plain cut (module docstring) with a heap: pop the node of largest priority (ties: earlier in
    position); keep it if not splittable, stop at the first split that does not fit, else split. Python per
    node: for tests on small hierarchies."""
    if budget is not None and budget < 1:
        budget = 1
    if h.num_leaves == h.num_nodes:
        return np.arange(h.num_leaves, dtype=np.int32)
    prio = node_priorities(h, camera, pixels, metric)
    pos = flatten(h, metric).position
    limit = np.inf if budget is None else budget
    heap = [(-prio[h.root], int(pos[h.root]), h.root)]
    cut, count = [], 1
    while heap:
        neg, _, node = heapq.heappop(heap)
        if -neg <= 0.0:
            cut.append(node)
            continue
        kids = h.children[h.child_start[node - h.num_leaves]:h.child_start[node - h.num_leaves + 1]]
        if count + len(kids) - 1 > limit:
            cut.append(node)
            break
        count += len(kids) - 1
        for c in kids:
            heapq.heappush(heap, (-prio[c], int(pos[c]), int(c)))
    cut.extend(node for _, _, node in heap)
    return np.array(sorted(cut), dtype=np.int32)
