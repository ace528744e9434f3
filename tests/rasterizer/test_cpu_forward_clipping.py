"""The cpu compositing's row clipping (rasterizer/cpu/compositing.py): the forward blends each Gaussian only over
the rows its alpha >= 1/255 ellipse reaches in each 8-column strip (band_rows) and that still hold a live pixel
(live_rows); the backward visits the same band rows less those whose pixels all stopped in front of the Gaussian
(blended_rows). Both must only skip pixels the specification skips: the render and the gradients stay those
without clipping."""

import math

import numpy as np
import pytest
import torch

from rasterizer import rasterize_gaussians
from rasterizer.cpu import compositing as K
from rasterizer.cpu.binning import row_half_extent

from .test_cpu_vs_reference import assert_grads_close, render_and_vjp


def random_conic(rng):
    """(a, b, c) of a positive-definite 2D conic: an ellipse of sigma 0.5-12 px at any angle."""
    s1, s2 = rng.uniform(0.5, 12.0, 2)
    th = rng.uniform(0, np.pi)
    R = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
    cov = R @ np.diag([s1 * s1, s2 * s2]) @ R.T
    inv = np.linalg.inv(cov)
    return inv[0, 0], inv[0, 1], inv[1, 1]


def test_band_rows_hold_every_pixel_centre_the_ellipse_reaches():
    """For random ellipses and strips near them: every pixel centre of the strip's 8 columns with
    sigma <= ln(255 opacity) (float64) lies in a row band_rows returns, and those rows lie within
    gaussian_rows' (the clip only removes rows)."""
    rng = np.random.default_rng(3)
    checked = clipped = 0
    for _ in range(400):
        a, b, c = random_conic(rng)
        op = rng.uniform(0.01, 1.0)
        mx, my = rng.uniform(0, 64, 2)
        h = row_half_extent(np.array([[a, b, c]]), np.array([op]), 0)
        level = math.log(op * 255.0)
        r, cw, ut, sdet = K.band_shape(h, a, b, c)
        for bx0 in range(-16, 80, 8):
            for y0 in range(-16, 80, 16):
                y1 = y0 + 16
                glo, ghi = K.gaussian_rows(h, my, y0, y1)
                lo, hi = K.band_rows(r, cw, ut, sdet, mx, my, b, c, bx0, y0, y1)
                if lo < hi:
                    assert glo <= lo and hi <= ghi
                for y in range(y0, y1):
                    dy = y + 0.5 - my
                    dx = np.arange(bx0, bx0 + 8) + 0.5 - mx
                    reached = (0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy <= level).any()
                    checked += 1
                    clipped += int(glo <= y < ghi and not lo <= y < hi)
                    if reached:
                        assert lo <= y < hi, (a, b, c, op, mx, my, bx0, y)
    assert clipped > 0.1 * checked / 8  # the clip does remove rows (not a no-op)


def large_tilted_scene():
    """300 large, elongated, tilted, fairly opaque Gaussians (float64, leaf tensors that require gradients) in front
    of an 80 x 60 camera: they cross both strips of many tiles and pixels finish early. Returns (params, viewmats,
    Ks, width, height)."""
    g = torch.Generator().manual_seed(5)
    n = 300
    means = torch.cat([torch.rand(n, 2, generator=g, dtype=torch.float64) * 2 - 1,
                       torch.rand(n, 1, generator=g, dtype=torch.float64) * 2 + 3], dim=1)
    quats = torch.randn(n, 4, generator=g, dtype=torch.float64)
    scales = torch.rand(n, 3, generator=g, dtype=torch.float64) * torch.tensor([0.5, 0.12, 0.12], dtype=torch.float64)
    opac = torch.rand(n, generator=g, dtype=torch.float64) * 0.5 + 0.5
    colors = torch.rand(n, 3, generator=g, dtype=torch.float64)
    p = {k: v.requires_grad_() for k, v in
         dict(means=means, quats=quats, scales=scales, opacities=opac, colors=colors).items()}
    vm = torch.eye(4, dtype=torch.float64)[None]
    Ks = torch.tensor([[[60.0, 0, 40], [0, 60.0, 30], [0, 0, 1]]], dtype=torch.float64)
    return p, vm, Ks, 80, 60


def test_render_with_clipping_equals_the_reference_for_large_tilted_gaussians():
    """Large, elongated, tilted Gaussians crossing both strips of many tiles, opaque enough that pixels finish
    early (live rows shrink): the cpu render equals the reference backend's (float64, 1e-9)."""
    p, vm, Ks, W, H = large_tilted_scene()
    with torch.no_grad():
        out = {b: rasterize_gaussians(p["means"], p["quats"], p["scales"], p["opacities"], p["colors"], vm, Ks, W, H,
                                      backend=b) for b in ("reference", "cpu")}
    torch.testing.assert_close(out["cpu"].render, out["reference"].render, atol=1e-9, rtol=0)
    torch.testing.assert_close(out["cpu"].alpha, out["reference"].alpha, atol=1e-9, rtol=0)
    assert (out["reference"].alpha > 0.999).float().mean() > 0.05  # pixels finish (T near 1e-4)


@pytest.mark.parametrize("kw", [dict(absgrad=True), dict(render_mode="RGB+ED")], ids=["rgb-absgrad", "rgb+ed"])
def test_gradients_with_clipping_equal_the_reference_for_large_tilted_gaussians(kw):
    """The same scene through the backward (band rows per strip, rows whose pixels all stopped in front left out;
    with |d loss / d means2d| sums, and with a 4th channel, the >3-channel path): every gradient equals the
    reference backend's (float64, 1e-8 of its largest entry)."""
    p, vm, Ks, W, H = large_tilted_scene()
    *_, ref, _ = render_and_vjp("reference", p, vm, Ks, W, H, **kw)
    *_, cpu, _ = render_and_vjp("cpu", p, vm, Ks, W, H, **kw)
    assert_grads_close(cpu, ref, torch.float64)
