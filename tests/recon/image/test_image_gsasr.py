"""GSASR's Gaussian layout (sigmas (sigma_x, sigma_y, rho), corner-aligned coords, dmax window) renders through
rasterize_image_gaussians where and how wide GSASR's renderer puts it (recon/image/gsasr.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rasterizer.image import ImageInputError, rasterize_image_gaussians
from recon.image.gsasr import from_gsasr


def gsasr_render(sigmas, coords, colors, h, w, dmax):
    """GSASR's renderer as its documentation in recon/image/gsasr.py states it, written out per pixel."""
    out = np.zeros((h, w, colors.shape[1]))
    for i in range(h):
        for j in range(w):
            x, y = 2.0 * j / (w - 1) - 1.0, 2.0 * i / (h - 1) - 1.0
            for (sx, sy, rho), (cx, cy), c in zip(sigmas, coords, colors):
                dx, dy = x - cx, y - cy
                if abs(dx) > dmax or abs(dy) > dmax:
                    continue
                q = dx * dx / (sx * sx) - 2 * rho * dx * dy / (sx * sy) + dy * dy / (sy * sy)
                out[i, j] += c * math.exp(-q / (2 * (1 - rho * rho)))
    return out


@pytest.mark.parametrize("w, h, dmax", [(41, 41, 0.31), (41, 31, 0.31), (40, 32, None)])  # no pixel on the window edge
def test_matches_gsasr_renderer(w, h, dmax):
    sigmas = torch.tensor([[0.10, 0.05, 0.3], [0.04, 0.08, -0.5], [0.2, 0.2, 0.0]], dtype=torch.float64)
    coords = torch.tensor([[0.5, -0.25], [-0.6, 0.3], [0.0, 0.0]], dtype=torch.float64)
    colors = torch.tensor([[1.0, 0.2], [0.5, 0.9], [0.1, 0.3]], dtype=torch.float64)
    expected = gsasr_render(sigmas.numpy(), coords.numpy(), colors.numpy(), h, w, 10.0 if dmax is None else dmax)
    got = rasterize_image_gaussians(**from_gsasr(sigmas, coords, colors, dmax, width=w, height=h),
                                    backend="reference").render
    if dmax is None:  # no fixed window: splatforge cuts at 3 sigma, GSASR nowhere
        np.testing.assert_allclose(got.numpy(), expected, atol=0.012)
    elif w == h:
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9, atol=1e-12)
    else:  # the window matches on one axis only: see gsasr.py; everywhere else exact
        inside = np.abs(got.numpy() - expected) < 1e-9
        assert inside.mean() > 0.99


def test_renders_where_and_how_wide():
    """A single GSASR Gaussian at coords (0.5, -0.25), sigma_x 0.1, sigma_y 0.05: its centre of mass lies at
    pixel ((x + 1)(w - 1) / 2, (y + 1)(h - 1) / 2) and its spread is sigma (w - 1) / 2 pixels per axis."""
    w, h = 201, 161
    sigmas = torch.tensor([[0.1, 0.05, 0.0]], dtype=torch.float64)
    coords = torch.tensor([[0.5, -0.25]], dtype=torch.float64)
    img = rasterize_image_gaussians(**from_gsasr(sigmas, coords, torch.ones(1, 1, dtype=torch.float64), 1.0,
                                                 width=w, height=h), backend="cpu").render[..., 0]
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    total = img.sum()
    cx, cy = float((img * xs).sum() / total), float((img * ys).sum() / total)
    assert cx == pytest.approx(1.5 * (w - 1) / 2, abs=1e-3) and cy == pytest.approx(0.75 * (h - 1) / 2, abs=1e-3)
    sx = math.sqrt(float((img * (xs - cx) ** 2).sum() / total))
    sy = math.sqrt(float((img * (ys - cy) ** 2).sum() / total))
    assert sx == pytest.approx(0.1 * (w - 1) / 2, rel=1e-3) and sy == pytest.approx(0.05 * (h - 1) / 2, rel=1e-3)
    assert float(img.max()) == pytest.approx(1.0, abs=1e-3)  # colours are not normalised (no 1 / (2 pi sx sy))


def test_bad_layout_refused():
    with pytest.raises(ImageInputError, match=r"sigmas.*\[N, 3\]"):
        from_gsasr(torch.ones(2, 2), torch.zeros(2, 2), torch.ones(2, 3), 0.1, width=8, height=8)
    with pytest.raises(ImageInputError, match="dmax"):
        from_gsasr(torch.ones(2, 3) * 0.1, torch.zeros(2, 2), torch.ones(2, 3), 0.0, width=8, height=8)
