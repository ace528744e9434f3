"""The no-grad CPU image render draws Gaussians whose tile lists would exceed cpu/image_sum.MAX_TILE_ENTRIES in
contiguous chunks, summed (issue 52: a .gimg of a million large Gaussians held gigabytes of tile lists): the
chunked render equals the one-pass render up to float summation order, every Gaussian counted once."""

from __future__ import annotations

import numpy as np
import torch

from rasterizer.cpu import image_sum as CS
from rasterizer.image import rasterize_image_gaussians


def _model(n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    means = torch.rand(n, 2, generator=g) * 2.2 - 1.1  # some outside the image
    chol = torch.stack([torch.rand(n, generator=g) * 0.3 + 0.01, torch.randn(n, generator=g) * 0.05,
                        torch.rand(n, generator=g) * 0.3 + 0.01], 1)
    return means, chol, torch.rand(n, 3, generator=g)


def test_box_entries_are_what_binning_counts():
    means, chol, colors = _model()
    one = rasterize_image_gaussians(means, colors, 61, 45, cholesky=chol, prefilter_variance=0.1)
    boxes = np.asarray(CS.pixel_boxes(one.meta.means2d.numpy(), one.meta.extents.numpy(), 61, 45))
    counts = np.zeros((1, (-(-61 // CS.TS)) * (-(-45 // CS.TS)) + 1), np.int64)
    CS.count_tiles(boxes, 0, len(boxes), -(-61 // CS.TS), counts[0])
    assert CS.box_entries(boxes).sum() == counts.sum() > 0


def test_entry_chunks_cover_every_gaussian_in_order_within_the_budget():
    entries = np.array([3, 0, 5, 9, 1, 1, 2, 20, 0, 4])
    ranges = CS.entry_chunks(entries, 6)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(entries)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(entries[lo:hi].sum() <= 6 or hi == lo + 1 for lo, hi in ranges)


def test_a_render_over_the_tile_list_budget_is_drawn_in_chunks_and_equals_one_pass(monkeypatch):
    means, chol, colors = _model()
    with torch.no_grad():
        one = rasterize_image_gaussians(means, colors, 61, 45, cholesky=chol, prefilter_variance=0.1).render
        calls = []
        forward = CS.forward_render
        monkeypatch.setattr(CS, "forward_render", lambda *a: calls.append(len(a[0])) or forward(*a))
        monkeypatch.setattr(CS, "MAX_TILE_ENTRIES", 40)
        chunked = rasterize_image_gaussians(means, colors, 61, 45, cholesky=chol, prefilter_variance=0.1).render
    assert len(calls) > 5 and sum(calls) == len(means)  # every Gaussian in exactly one chunk
    torch.testing.assert_close(chunked, one, rtol=1e-5, atol=1e-6)
