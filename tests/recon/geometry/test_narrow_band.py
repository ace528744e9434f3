"""recon.geometry.narrow_band: marching cubes on the narrow band's values gives the full grid's mesh exactly."""

import math

import numpy as np
import pytest
import torch

from recon.geometry.narrow_band import (NARROW_BAND_STRIDE, coarse_indices, edge_slope, kept_cells,
                                        narrow_band_grid, nearest_coarse)
from recon.geometry.sdf_fit import Normalisation, extract_mesh, field_grid


def shapes(resolution: int):
    """(unit-cube points [N, 3] -> [N]) a distance field (slope 1): a sphere, a thin torus and a ball centred in a
    coarse cell of the narrow band's grid at ``resolution`` whose corners lie 0.6 x half the cell's diagonal from
    it: inside the band, but only just (a band half as wide would miss it)."""
    h = math.sqrt(3.0) * 0.5 * NARROW_BAND_STRIDE / resolution  # half the coarse cell's diagonal
    c = (NARROW_BAND_STRIDE * np.array([3, 12, 4]) + NARROW_BAND_STRIDE / 2) / resolution

    def sdf(u: torch.Tensor) -> torch.Tensor:
        x = u.double()
        sphere = (x - torch.tensor([0.35, 0.5, 0.5], dtype=x.dtype)).norm(dim=1) - 0.2
        p = x - torch.tensor([0.68, 0.45, 0.55], dtype=x.dtype)
        ring = torch.stack([p[:, :2].norm(dim=1) - 0.17, p[:, 2]], 1).norm(dim=1) - 0.03
        ball = (x - torch.from_numpy(c)).norm(dim=1) - 0.4 * h
        return torch.minimum(torch.minimum(sphere, ring), ball).float()

    return sdf


@pytest.mark.parametrize("resolution", [64, 62])  # 62: the last coarse cell is 2 fine cells long
def test_narrow_band_mesh_is_the_full_grids(resolution):
    """Same vertices and faces as marching cubes on the full grid, from a fraction of the field evaluations."""
    norm = Normalisation((0.0, 0.0, 0.0), 2.0)
    shapes_sdf = shapes(resolution)
    full_v, full_f = extract_mesh(shapes_sdf, norm, resolution)
    band_v, band_f = extract_mesh(shapes_sdf, norm, resolution, slope=1.0)
    assert len(full_f) > 2000
    np.testing.assert_array_equal(band_v, full_v)
    np.testing.assert_array_equal(band_f, full_f)

    calls = []

    def counted(u):
        calls.append(len(u))
        return shapes_sdf(u)

    values = narrow_band_grid(counted, resolution, 1.0)
    assert sum(calls) < 0.5 * (resolution + 1) ** 3
    full = field_grid(shapes_sdf, resolution)
    assert (np.sign(values) == np.sign(full)).all()  # elsewhere: the sign, from the nearest coarse vertex


def test_nearest_coarse_vertex():
    cidx = coarse_indices(10, 4)
    np.testing.assert_array_equal(cidx, [0, 4, 8, 10])
    np.testing.assert_array_equal(cidx[nearest_coarse(10, cidx)], [0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 10])


def test_cells_whose_corners_change_sign_are_kept():
    """A field steeper than the bound: a cell whose corners change sign is kept even when no corner is near 0."""
    coarse = np.full((3, 3, 3), 5.0, dtype=np.float32)
    coarse[0, 0, 0] = -5.0
    kept = kept_cells(coarse, 1.0)
    assert kept[0, 0, 0] and kept.sum() == 1


def test_slope_must_be_positive():
    with pytest.raises(ValueError, match="slope"):
        narrow_band_grid(shapes(16), 16, 0.0)


def test_a_field_steeper_than_the_bound_gets_the_full_grid():
    """A small ball whose field is 8x a distance (slope 8) against a bound of 1: inside coarse cells whose corners
    all lie outside the band, so the band alone would drop it; the measured slope exceeds the bound and every
    vertex is evaluated: the full grid's mesh."""
    resolution = 48
    c = torch.tensor([NARROW_BAND_STRIDE * 5 + 2.0, NARROW_BAND_STRIDE * 6 + 2.0, NARROW_BAND_STRIDE * 5 + 2.0])

    def steep(u: torch.Tensor) -> torch.Tensor:
        return (8.0 * ((u.double() - c.double() / resolution).norm(dim=1) - 1.2 / resolution)).float()

    norm = Normalisation((0.0, 0.0, 0.0), 2.0)
    full_v, full_f = extract_mesh(steep, norm, resolution)
    band_v, band_f = extract_mesh(steep, norm, resolution, slope=1.0)
    assert len(full_f) > 0
    np.testing.assert_array_equal(band_v, full_v)
    np.testing.assert_array_equal(band_f, full_f)


def test_mesh_full_grid_option_skips_the_band(monkeypatch):
    """zero_level_mesh(..., full_grid=True) (`splatforge mesh --sdf-full-grid`) evaluates every vertex."""
    import recon.geometry.sdf_fit as sdf_fit
    from recon.geometry.mesh_extraction import zero_level_mesh

    seen = []
    monkeypatch.setattr(sdf_fit, "narrow_band_grid", lambda *a, **k: seen.append("band") or field_grid(a[0], a[1]))

    class Model:
        def sdf_function(self):
            return shapes(16), (0.0, 0.0, 0.0), 2.0

        def mesh_slope(self):
            return 1.0

        def surface_colors(self, v):
            return torch.zeros(len(v), 3), None

    zero_level_mesh(Model(), 16)
    assert seen == ["band"]
    zero_level_mesh(Model(), 16, full_grid=True)
    assert seen == ["band"]


@pytest.mark.parametrize("masked", [False, True])
def test_edge_slope_is_the_steepest_edge_of_the_whole_grid(masked):
    """edge_slope (one slab at a time) against every edge of the grid at once, with uneven edge lengths and
    (masked) only the edges whose two ends are valid: noise plus a ramp along each axis in turn (the steepest
    edges then lie along that axis, so a missed or mis-measured axis changes the answer), and a step inside the
    last slab only (its within-slab edges, across the shortest edge length)."""
    rng = np.random.default_rng(3)
    n = 7
    spacing = rng.uniform(0.5, 1.5, n - 1).astype(np.float32)
    spacing[2] = 0.25  # the shortest edges: between indices 2 and 3 along each axis
    valid = rng.random((n, n, n)) < 0.7 if masked else None

    def whole_grid(values):
        largest = 0.0
        for axis in range(3):
            lo, hi = ([slice(None)] * 3 for _ in range(2))
            lo[axis], hi[axis] = slice(None, -1), slice(1, None)
            step = np.abs(values[tuple(hi)] - values[tuple(lo)]) / spacing.reshape([-1 if k == axis else 1
                                                                                    for k in range(3)])
            ok = np.ones_like(step, bool) if valid is None else valid[tuple(hi)] & valid[tuple(lo)]
            largest = max(largest, float(step[ok].max()))
        return largest

    grids = []
    for axis in range(3):
        ramp = np.arange(n, dtype=np.float32).reshape([-1 if k == axis else 1 for k in range(3)])
        grids.append(rng.uniform(-1, 1, (n, n, n)).astype(np.float32) + 5 * np.cumsum(
            np.r_[0, spacing * rng.uniform(1, 3, n - 1)]).astype(np.float32).reshape(ramp.shape))
    last = rng.uniform(-1, 1, (n, n, n)).astype(np.float32)
    last[-1, 3:, :] += 100  # steepest along the last slab's axis-1 edges 2 -> 3 (length 0.25)
    grids.append(last)
    for values in grids:
        expected = whole_grid(values)
        assert expected > 0
        assert edge_slope(values, valid, spacing) == pytest.approx(expected, rel=1e-6)
