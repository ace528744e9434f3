"""rasterize_image_gaussians: the cpu kernel against the reference (float64, 1e-9, forward and backward), the
reference against finite differences, the window rules, scale-awareness, alpha mode and bad inputs."""

import math

import pytest
import torch

from rasterizer.image import ImageInputError, rasterize_image_gaussians
from rasterizer.image.geometry import cholesky_to_covars

from ..tolerances import GRAD_REL, TOL


def random_gaussians(n, channels=3, dtype=torch.float64, seed=0, spread=1.1, size=0.1):
    """n Gaussians, some partly or wholly outside the image, some thin and rotated."""
    g = torch.Generator().manual_seed(seed)
    means = (torch.rand(n, 2, generator=g, dtype=dtype) * 2 - 1) * spread
    chol = torch.rand(n, 3, generator=g, dtype=dtype) * size
    chol[:, 1] -= size / 2
    chol[:, 0] += 0.004
    chol[:, 2] += 0.004
    colors = torch.rand(n, channels, generator=g, dtype=dtype)
    return means, chol, colors


def render_and_grads(backend, means, chol, colors, width, height, weights, **kw):
    leaves = [t.clone().requires_grad_(True) for t in (means, chol, colors)]
    out = rasterize_image_gaussians(leaves[0], leaves[2], width, height, cholesky=leaves[1], backend=backend, **kw)
    grads = torch.autograd.grad((out.render * weights).sum(), leaves)
    return (out.render.detach(),) + grads


@pytest.mark.parametrize("window", [None, 0.07], ids=["ellipse", "fixed"])
@pytest.mark.parametrize("channels", [3, 1, 5])
def test_cpu_matches_reference_float64(window, channels):
    means, chol, colors = random_gaussians(400, channels, seed=channels)
    W, H = 45, 38  # not multiples of the 16-pixel tile
    weights = torch.rand(H, W, channels, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ref = render_and_grads("reference", means, chol, colors, W, H, weights, window=window)
    cpu = render_and_grads("cpu", means, chol, colors, W, H, weights, window=window)
    assert ref[0].abs().max() > 0.5  # the scene is not empty
    torch.testing.assert_close(cpu[0], ref[0], **TOL[torch.float64])
    for a, b in zip(cpu[1:], ref[1:]):
        assert b.abs().max() > 0
        assert float((a - b).abs().max()) <= GRAD_REL[torch.float64] * float(b.abs().max())


def test_cpu_matches_reference_float32():
    means, chol, colors = (t.float() for t in random_gaussians(300, 3, seed=7))
    weights = torch.rand(40, 50, 3, generator=torch.Generator().manual_seed(2))
    ref = render_and_grads("reference", means, chol, colors, 50, 40, weights)
    cpu = render_and_grads("cpu", means, chol, colors, 50, 40, weights)
    torch.testing.assert_close(cpu[0], ref[0], rtol=1e-4, atol=1e-4)
    for a, b in zip(cpu[1:], ref[1:]):
        assert float((a - b).abs().max()) <= GRAD_REL[torch.float32] * float(b.abs().max())


def test_reference_gradcheck():
    means, chol, colors = random_gaussians(6, 2, seed=3, spread=0.6, size=0.3)
    means, chol, colors = (t.clone().requires_grad_(True) for t in (means, chol, colors))
    opac = torch.rand(6, dtype=torch.float64).requires_grad_(True)

    def f(m, l, c, o):
        return rasterize_image_gaussians(m, c, 9, 7, cholesky=l, opacities=o, backend="reference").render

    # the 3-sigma cut-off is a discontinuity: keep every pixel clear of it by checking a smooth case (window large)
    def g(m, l, c, o):
        return rasterize_image_gaussians(m, c, 9, 7, cholesky=l, opacities=o, backend="reference", window=3.0).render

    assert torch.autograd.gradcheck(g, (means, chol, colors, opac), eps=1e-6, atol=1e-6)
    assert f(means, chol, colors, opac).abs().sum() > 0


def test_one_gaussian_values_and_window():
    """A single isotropic Gaussian: exact values at pixel centres, zero beyond 3 sigma."""
    W = H = 40
    sigma_px = 3.0
    mean_px = torch.tensor([17.3, 21.6], dtype=torch.float64)
    means = (mean_px / torch.tensor([W / 2, H / 2]) - 1)[None]
    chol = torch.tensor([[sigma_px * 2 / W, 0.0, sigma_px * 2 / H]], dtype=torch.float64)
    colors = torch.tensor([[2.0]], dtype=torch.float64)
    for backend in ("reference", "cpu"):
        img = rasterize_image_gaussians(means, colors, W, H, cholesky=chol, backend=backend).render[..., 0]
        ys, xs = torch.meshgrid(torch.arange(H, dtype=torch.float64) + 0.5, torch.arange(W, dtype=torch.float64) + 0.5,
                                indexing="ij")
        d2 = ((xs - mean_px[0]) ** 2 + (ys - mean_px[1]) ** 2) / sigma_px**2
        want = torch.where(d2 <= 9.0, 2.0 * torch.exp(-0.5 * d2), torch.zeros_like(d2))
        torch.testing.assert_close(img, want.to(img.dtype), rtol=1e-12, atol=1e-12)
        fixed = rasterize_image_gaussians(means, colors, W, H, cholesky=chol, backend=backend, window=0.1).render
        inside = ((xs - mean_px[0]).abs() <= 2.0) & ((ys - mean_px[1]).abs() <= 2.0)  # w W / 2 = 2 pixels
        assert bool((fixed[..., 0] > 0).eq(inside).all())


def test_scale_awareness_keeps_integrals_and_positions():
    """Rendering at k times the size: a Gaussian stays at the same normalised place and its sum over pixels
    grows by k^2 (continuous coordinates), for both backends."""
    means, chol, colors = random_gaussians(50, 3, seed=5, spread=0.7, size=0.05)
    sums = {}
    for k in (1, 3):
        img = rasterize_image_gaussians(means, colors, 40 * k, 30 * k, cholesky=chol, backend="cpu").render
        sums[k] = img.sum()
    assert abs(float(sums[3] / sums[1]) - 9.0) < 0.09


def test_prefilter_keeps_integral_and_zero_is_exact():
    means, chol, colors = random_gaussians(40, 3, seed=6, spread=0.6, size=0.08)
    base = rasterize_image_gaussians(means, colors, 64, 48, cholesky=chol, backend="cpu").render
    same = rasterize_image_gaussians(means, colors, 64, 48, cholesky=chol, backend="cpu", prefilter_variance=0.0).render
    assert torch.equal(base, same)
    blurred = rasterize_image_gaussians(means, colors, 64, 48, cholesky=chol, backend="cpu",
                                        prefilter_variance=2.0).render
    assert abs(float(blurred.sum() / base.sum()) - 1.0) < 0.02
    assert float(blurred.max()) < float(base.max())


def test_covars_and_cholesky_agree():
    means, chol, colors = random_gaussians(30, 3, seed=8)
    cov = cholesky_to_covars(chol)
    mats = torch.stack([cov[:, 0], cov[:, 1], cov[:, 1], cov[:, 2]], -1).view(-1, 2, 2)
    a = rasterize_image_gaussians(means, colors, 32, 32, cholesky=chol, backend="cpu").render
    b = rasterize_image_gaussians(means, colors, 32, 32, covars=mats, backend="cpu").render
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_alpha_mode_cpu_matches_reference_and_orders_by_depth():
    means, chol, colors = random_gaussians(200, 3, seed=9)
    opac = torch.rand(200, dtype=torch.float64) * 0.9
    depths = torch.rand(200, dtype=torch.float64)
    outs = {}
    for backend in ("reference", "cpu"):
        leaves = [t.clone().requires_grad_(True) for t in (means, chol, colors, opac)]
        out = rasterize_image_gaussians(leaves[0], leaves[2], 40, 30, cholesky=leaves[1], opacities=leaves[3],
                                        mode="alpha", depths=depths, backend=backend,
                                        backgrounds=torch.ones(3, dtype=torch.float64))
        grads = torch.autograd.grad(out.render.square().sum() + out.alpha.sum(), leaves)
        outs[backend] = (out.render.detach(), out.alpha.detach()) + grads
    for a, b in zip(outs["cpu"], outs["reference"]):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-9)
    # two overlapping opaque Gaussians: the nearer colour wins
    m = torch.zeros(2, 2, dtype=torch.float64)
    ch = torch.full((2, 3), 0.3, dtype=torch.float64)
    ch[:, 1] = 0
    col = torch.tensor([[1.0, 0, 0], [0, 1.0, 0]], dtype=torch.float64)
    for near in (0, 1):
        d = torch.tensor([0.0, 1.0], dtype=torch.float64) if near == 0 else torch.tensor([1.0, 0.0], dtype=torch.float64)
        px = rasterize_image_gaussians(m, col, 16, 16, cholesky=ch, opacities=torch.full((2,), 0.99, dtype=torch.float64),
                                       mode="alpha", depths=d, backend="cpu").render[8, 8]
        assert int(px.argmax()) == near


def test_sum_mode_opacities_multiply_colours():
    means, chol, colors = random_gaussians(20, 3, seed=10)
    o = torch.rand(20, dtype=torch.float64)
    a = rasterize_image_gaussians(means, colors, 20, 20, cholesky=chol, opacities=o, backend="cpu").render
    b = rasterize_image_gaussians(means, colors * o[:, None], 20, 20, cholesky=chol, backend="cpu").render
    torch.testing.assert_close(a, b)


def test_no_gaussians_gives_zeros():
    z = torch.zeros(0, 2)
    out = rasterize_image_gaussians(z, torch.zeros(0, 3), 8, 6, cholesky=torch.zeros(0, 3), backend="cpu")
    assert out.render.shape == (6, 8, 3) and float(out.render.abs().sum()) == 0.0


@pytest.mark.parametrize("kw, match", [
    (dict(mode="blend"), "mode"),
    (dict(mode="alpha"), "depths"),
    (dict(window=0.0), "window"),
    (dict(prefilter_variance=-1.0), "prefilter"),
    (dict(backgrounds=torch.ones(3)), "backgrounds"),
    (dict(backend="metal"), "backend"),
])
def test_bad_arguments_are_named(kw, match):
    means, chol, colors = (t.float() for t in random_gaussians(5))
    with pytest.raises(ImageInputError, match=match):
        rasterize_image_gaussians(means, colors, 10, 10, cholesky=chol, **kw)


def test_bad_shapes_and_values():
    means, chol, colors = (t.float() for t in random_gaussians(5))
    with pytest.raises(ImageInputError, match="cholesky"):
        rasterize_image_gaussians(means, colors, 10, 10)
    with pytest.raises(ImageInputError, match="colors"):
        rasterize_image_gaussians(means, colors[:3], 10, 10, cholesky=chol)
    with pytest.raises(ImageInputError, match="width"):
        rasterize_image_gaussians(means, colors, 0, 10, cholesky=chol)
    bad = means.clone()
    bad[2, 0] = math.nan
    with pytest.raises(ImageInputError, match="NaN"):
        rasterize_image_gaussians(bad, colors, 10, 10, cholesky=chol)


@pytest.mark.cuda
def test_cuda_matches_reference():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    means, chol, colors = (t.float() for t in random_gaussians(300, 3, seed=11))
    ref = rasterize_image_gaussians(means, colors, 64, 48, cholesky=chol, backend="reference").render
    cuda = rasterize_image_gaussians(means.cuda(), colors.cuda(), 64, 48, cholesky=chol.cuda(), backend="cuda").render
    torch.testing.assert_close(cuda.cpu(), ref, rtol=1e-4, atol=1e-4)
    opac, depths = torch.rand(300) * 0.9, torch.rand(300)
    ref = rasterize_image_gaussians(means, colors, 64, 48, cholesky=chol, opacities=opac, mode="alpha", depths=depths,
                                    backend="reference").render
    cuda = rasterize_image_gaussians(means.cuda(), colors.cuda(), 64, 48, cholesky=chol.cuda(), opacities=opac.cuda(),
                                     mode="alpha", depths=depths.cuda(), backend="cuda").render
    assert (cuda.cpu() - ref).abs().mean() < 1e-3


def test_reference_chunks_cover_every_gaussian_once_and_bound_the_pairs():
    from rasterizer.image.reference import chunks

    g = torch.Generator().manual_seed(3)
    counts = torch.randint(0, 50, (1000,), generator=g)
    counts[17] = 400  # one Gaussian with more pairs than the limit
    for limit in (1, 64, 100, 333, int(counts.sum()), 10**9):
        ranges = chunks(counts, limit)
        assert ranges[0][0] == 0 and ranges[-1][1] == 1000
        assert all(a < b for a, b in ranges) and all(r[1] == s[0] for r, s in zip(ranges, ranges[1:]))
        for a, b in ranges:
            assert int(counts[a:b].sum()) <= limit + int(counts[a:b].max())
    assert chunks(counts[:0], 10) == []


def test_reference_render_does_not_depend_on_the_chunking(monkeypatch):
    import rasterizer.image.reference as R

    g = torch.Generator().manual_seed(5)
    means = torch.rand(300, 2, generator=g, dtype=torch.float64) * 2 - 1
    chol = torch.tensor([0.08, 0.01, 0.06], dtype=torch.float64).repeat(300, 1)
    colors = torch.rand(300, 3, generator=g, dtype=torch.float64)
    whole = rasterize_image_gaussians(means, colors, 40, 30, cholesky=chol, backend="reference").render
    monkeypatch.setattr(R, "PAIRS_PER_CHUNK", 500)
    pieces = rasterize_image_gaussians(means, colors, 40, 30, cholesky=chol, backend="reference").render
    torch.testing.assert_close(pieces, whole, rtol=1e-12, atol=1e-12)
