"""The surfels' cpu tile binning (row chords, rasterizer.cpu.chords): the box binning's pairs less exactly
those whose tile the kernels' row trim finds no row of; no dropped pair reaches a pixel in the
specification; and the renders and gradients are those of the box binning, bit for bit."""

import numpy as np
import pytest
import torch

from rasterizer.cpu import chords as CH
from rasterizer.cpu.composite import BinnedTiles
from rasterizer.cpu.compositing import tile_box
from rasterizer.surfels import cpu as surfel_cpu
from rasterizer.surfels import cpu_kernels as K
from rasterizer.surfels.composite import surfel_alphas
from rasterizer.surfels.projection import project_surfels
from rasterizer.tiles import TileGrid

from .test_surfels import OUTPUTS, surfel_scene
from .test_surfels_cpu import _run, _weights

W, H = 70, 52


def _tilted_scene(seed=3, n=150, dtype=torch.float64):
    """Large, tilted surfels across the image edges: boxes of many tiles, most of them missed."""
    p, viewmats, Ks = surfel_scene(n=n, width=W, height=H, n_cams=2, seed=seed, spread=1.8, dtype=dtype)
    p["scales"] = (p["scales"].detach() * 4).requires_grad_(True)
    return p, viewmats, Ks


def _binned(p, viewmats, Ks):
    """(box bins, chord bins, rows [C*N, ROWS], projection) of the cpu binning."""
    proj = project_surfels(p["means"], p["quats"], p["scales"], viewmats, Ks, W, H)
    C, N = viewmats.shape[0], p["means"].shape[0]
    G = C * N
    opac = p["opacities"].detach()[None].expand(C, N).contiguous()
    flat = lambda t, *s: t.detach().reshape(G, *s).contiguous().numpy()  # noqa: E731
    packed, rows = np.empty((G, K.PACKED)), np.empty((G, K.ROWS))
    colors = p["colors"].detach()[None].expand(C, N, 3)
    K.pack_surfels(flat(proj.ray_transforms, 9), flat(proj.means2d, 2), flat(opac), flat(colors, 3),
                   flat(proj.depths), flat(proj.normals, 3), flat(proj.radii, 2), packed, rows)
    grid = TileGrid.for_image(W, H)
    # no conics, as the backend passes
    args = (proj.means2d.detach(), None, opac, proj.radii, proj.depths.detach(), grid, W, H)
    return BinnedTiles(*args), BinnedTiles(*args, chords=rows), rows, proj, grid


def _tile_pairs(bins, t):
    return bins.ids[bins.offsets[t]:bins.offsets[t + 1]].tolist()


def _reaches(rows, g, x0, y0, x1, y1):
    """The kernels' test (chords.tile_rows, as the forward trims a surfel's rows): some row is left."""
    ylo, yhi = CH.tile_rows.py_func(rows, g, x0, y0, x1, y1)
    return ylo < yhi


def test_chord_binning_is_the_box_less_the_tiles_no_row_reaches():
    """Per tile, the chord binning's surfels are the box's in the same depth order, keeping every one the
    kernels' row trim finds a row for, and few more (the binning tests the rectangle of the tile's pixel
    centres, which holds its rows, against the chords' ellipse and disc)."""
    p, viewmats, Ks = _tilted_scene()
    box, exact, rows, _, grid = _binned(p, viewmats, Ks)
    n_tiles = 2 * grid.tiles_x * grid.tiles_y
    dropped = extra = 0
    for t in range(n_tiles):
        _, x0, y0, x1, y1 = tile_box(t, grid.tiles_x, grid.tiles_x * grid.tiles_y, 16, W, H)
        kept = _tile_pairs(exact, t)
        assert kept == [g for g in _tile_pairs(box, t) if g in set(kept)], f"tile {t}: not the box's, in order"
        needed = [g for g in _tile_pairs(box, t) if _reaches(rows, g, x0, y0, x1, y1)]
        assert set(needed) <= set(kept), f"tile {t}: dropped a surfel the kernels would composite"
        dropped += len(_tile_pairs(box, t)) - len(kept)
        extra += len(kept) - len(needed)
    assert dropped > 0.2 * box.ids.shape[0], "the scene should have many box tiles its surfels miss"
    assert extra <= 0.02 * exact.ids.shape[0]
    # the per-surfel bookkeeping of the kept pairs (the backward's sums read it)
    np.testing.assert_array_equal(np.bincount(exact.ids, minlength=exact.counts.shape[0]), exact.counts)
    for g in np.flatnonzero(exact.counts)[:60]:
        q = np.arange(exact.starts[g], exact.starts[g] + exact.counts[g])
        np.testing.assert_array_equal(exact.ids[exact.perm[q]], g)


def test_dropped_pairs_reach_no_pixel_of_their_tile():
    """Every pixel of a dropped (tile, surfel) pair gets alpha < 1/255 from that surfel in the
    specification's float64 arithmetic (surfel_alphas)."""
    p, viewmats, Ks = _tilted_scene(seed=5)
    box, exact, _, proj, grid = _binned(p, viewmats, Ks)
    C, N = viewmats.shape[0], p["means"].shape[0]
    TT = grid.tiles_x * grid.tiles_y
    checked = 0
    for t in range(C * TT):
        c, x0, y0, x1, y1 = tile_box(t, grid.tiles_x, TT, 16, W, H)
        gone = sorted(set(_tile_pairs(box, t)) - set(_tile_pairs(exact, t)))
        if not gone:
            continue
        n = torch.tensor([g - c * N for g in gone])
        ys, xs = torch.meshgrid(torch.arange(y0, y1, dtype=torch.float64), torch.arange(x0, x1, dtype=torch.float64),
                                indexing="ij")
        centres = torch.stack([xs.reshape(-1) + 0.5, ys.reshape(-1) + 0.5], -1)
        alpha, _, _, _ = surfel_alphas(centres, proj.ray_transforms.detach()[c, n], proj.means2d.detach()[c, n],
                                       p["opacities"].detach()[n])
        assert float(alpha.max()) == 0.0, f"tile {t}: a dropped surfel reaches a pixel"
        checked += len(gone)
    assert checked > 100


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("surfel_depth", ["centre", "intersection"])
def test_chord_binning_changes_no_output_bit(monkeypatch, dtype, surfel_depth):
    """The cpu render and every gradient with the chord binning equal those with every tile of the box."""
    p, viewmats, Ks = _tilted_scene(seed=7, n=200, dtype=dtype)
    viewmats, Ks = viewmats.to(dtype), Ks.to(dtype)
    w = [x.to(dtype) for x in _weights(2, H, W, seed=4)]
    new = _run("cpu", p, viewmats, Ks, W, H, w, surfel_depth=surfel_depth)
    monkeypatch.setattr(surfel_cpu, "BinnedTiles", lambda *a, chords=None: BinnedTiles(*a))  # the whole box
    old = _run("cpu", p, viewmats, Ks, W, H, w, surfel_depth=surfel_depth)
    for name in OUTPUTS:
        assert torch.equal(new[0][name], old[0][name]), name
    for name, g in old[1].items():
        assert torch.equal(new[1][name], g), f"grad {name}"


def test_binning_without_conics_equals_the_degenerate_conics():
    """conics None (what the surfel backend passes) bins exactly as zero conics, which are not positive
    definite (every tile of the box, every row), with and without chords: every field of the bins."""
    p, viewmats, Ks = _tilted_scene(seed=9)
    box, exact, rows, proj, grid = _binned(p, viewmats, Ks)
    C, N = viewmats.shape[0], p["means"].shape[0]
    opac = p["opacities"].detach()[None].expand(C, N).contiguous()
    zero = torch.zeros(C, N, 3, dtype=proj.means2d.dtype)
    args = (proj.means2d.detach(), zero, opac, proj.radii, proj.depths.detach(), grid, W, H)
    fields = ("row_half", "offsets", "ids", "perm", "starts", "counts", "order")
    for none, zeros in ((box, BinnedTiles(*args)), (exact, BinnedTiles(*args, chords=rows))):
        for f in fields:
            np.testing.assert_array_equal(getattr(none, f), getattr(zeros, f), err_msg=f)
    assert exact.ids.shape[0] < box.ids.shape[0]
    assert np.isinf(box.row_half[box.counts > 0]).all()


def test_band_columns_hold_every_column_a_row_reaches():
    """chords.band_columns per tile row holds every tile column in which row_reaches keeps a row, for
    ellipses, for conic regions that are no ellipse (row by row) and for unbounded ones; and it is tight
    (few more columns), the y^2 coefficient's sign deciding which branch a surfel takes."""
    p, viewmats, Ks = _tilted_scene(seed=11, n=300)
    p["means"] = (p["means"].detach() * torch.tensor([2.5, 2.5, 1.0], dtype=torch.float64)).requires_grad_(True)
    _, _, rows, proj, grid = _binned(p, viewmats, Ks)
    kinds = {"ellipse": 0, "no ellipse": 0, "unbounded": 0}
    needed = extra = 0
    for g in np.flatnonzero((proj.radii.reshape(-1, 2) > 0).all(-1).numpy()):
        ell = CH.chord_ellipse.py_func(rows, g)
        kinds["unbounded" if rows[g, CH.R_BOUNDED] == 0 else "ellipse" if ell[-1] else "no ellipse"] += 1
        for ty in range(grid.tiles_y):
            y0, y1 = 16 * ty, min(16 * ty + 16, H)
            ea, eb, da, db = CH.band_columns.py_func(rows, g, ell, y0, y1, 16, W, CH.chord_pad(W, 16))
            for tx in range(grid.tiles_x):
                x0, x1 = 16 * tx, min(16 * tx + 16, W)
                kept = ea <= tx <= eb or da <= tx <= db
                reach = _reaches(rows, g, x0, y0, x1, y1)
                assert kept or not reach, f"surfel {g} tile ({tx}, {ty}): a reached row's column is missing"
                needed += reach
                extra += kept and not reach
    assert kinds["ellipse"] > 100 and kinds["no ellipse"] > 3 and kinds["unbounded"] > 0, kinds
    assert extra <= 0.02 * needed


@pytest.mark.parametrize("width, x_range, n", [(150, (-20, 170), 400), (4100, (1900, 4100), 150)],
                         ids=["small image", "x to 4100 px"])
def test_band_columns_on_extreme_ellipses(width, x_range, n):
    """Ellipses of every shape (log-uniform y^2 coefficients from -1e-8 to -1e4, levels from 1e-6 to 1e4,
    slopes up to 50 px per row: slivers, needles, points, ellipses beyond the image), written straight
    into chord rows: band_columns holds every tile column in which row_reaches takes a row, including the
    rows its rounding tolerance (which grows with x^2) takes beyond a sliver's end."""
    rng = np.random.default_rng(width)
    G, Wi, Hi = n, width, 120
    rows = np.zeros((G, CH.ROWS))
    A = -(10.0 ** rng.uniform(-8, 4, G))
    level = 10.0 ** rng.uniform(-6, 4, G)
    ye, xe = rng.uniform(-20, Hi + 20, G), rng.uniform(*x_range, G)
    xc1 = rng.uniform(-50, 50, G) * (rng.random(G) < 0.8)
    xc0 = xe - xc1 * ye
    B, C = -2 * A * ye, level + A * ye * ye  # h = A y^2 + B y + C with its top at ye
    rows[:, CH.R_XC1], rows[:, CH.R_XC0] = xc1, xc0
    rows[:, CH.R_Q2], rows[:, CH.R_Q1], rows[:, CH.R_Q0] = xc1 * xc1 - A, 2 * xc1 * xc0 - B, xc0 * xc0 - C
    rows[:, CH.R_YMIN], rows[:, CH.R_YMAX], rows[:, CH.R_BOUNDED] = -np.inf, np.inf, 1.0
    rows[:, CH.R_MX], rows[:, CH.R_MY], rows[:, CH.R_LEVEL] = -1e6, -1e6, -1.0  # no disc
    needed = tolerated = 0
    TW = (Wi + 15) // 16
    for g in range(G):
        ell = CH.chord_ellipse.py_func(rows, g)
        near = range(max(0, int(xe[g] // 16) - 8), min(TW, int(xe[g] // 16) + 9))  # tiles near its centre
        for ty in range((Hi + 15) // 16):
            y0, y1 = 16 * ty, min(16 * ty + 16, Hi)
            ea, eb, _, _ = CH.band_columns.py_func(rows, g, ell, y0, y1, 16, Wi, CH.chord_pad(Wi, 16))
            for tx in (range(TW) if Wi < 1000 else near):
                x0, x1 = 16 * tx, min(16 * tx + 16, Wi)
                if _reaches(rows, g, x0, y0, x1, y1):
                    assert ea <= tx <= eb, f"ellipse {g} tile ({tx}, {ty}) missing"
                    needed += 1
                    ys = np.arange(y0, y1) + 0.5
                    tolerated += bool(((A[g] * (ys - ye[g]) ** 2 + level[g]) < 0).all())
    assert needed > 500 and tolerated > 0, (needed, tolerated)
