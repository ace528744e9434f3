"""The cpu backend's radix depth sort equals torch's stable argsort (ties, negative values, -0.0, several
cameras, N = 1)."""

import numpy as np
import pytest
import torch

from rasterizer.cpu.sort import depth_order


@pytest.mark.parametrize("cameras", [1, 3])
@pytest.mark.parametrize("n", [1, 7, 5000])
def test_depth_order_matches_stable_argsort(n, cameras):
    g = torch.Generator().manual_seed(n)
    depths = torch.randn(3, n, generator=g) * 10
    depths[:, ::5] = torch.round(depths[:, ::5])  # many ties
    depths[0, :2] = torch.tensor([-0.0, 0.0])[: min(n, 2)]
    depths[1, -1] = 1e30
    depths[2, 0] = -1e-30
    depths = depths[:cameras]
    got = depth_order(np.ascontiguousarray(depths.numpy()))
    want = torch.argsort(depths, dim=1, stable=True).numpy()
    assert np.array_equal(got, want)


@pytest.mark.parametrize("cameras", [1, 3])
def test_depth_order_culled_last(cameras):
    """With radii, culled Gaussians (a zero radius) come last in index order; the others keep the order
    of the full stable sort."""
    g = torch.Generator().manual_seed(2)
    n = 3000
    depths = torch.round(torch.randn(cameras, n, generator=g) * 10)  # many ties
    radii = torch.randint(1, 9, (cameras, n, 2), generator=g, dtype=torch.int32)
    culled = torch.rand(cameras, n, generator=g) < 0.6
    radii[culled] = 0
    radii[0, 5, 1] = 0  # one zero component is enough
    got = depth_order(np.ascontiguousarray(depths.numpy()), np.ascontiguousarray(radii.numpy()))
    full = torch.argsort(depths, dim=1, stable=True)
    for c in range(cameras):
        out = (radii[c] == 0).any(-1)
        kept = full[c][~out[full[c]]].numpy()
        want = np.concatenate([kept, torch.nonzero(out).flatten().numpy()])
        assert np.array_equal(got[c], want)
