"""Losses and metrics: SSIM of identical images is 1, PSNR formula, loss mix."""

import math

import torch

from recon.losses.image import l1_loss, photometric_loss, psnr, quick_psnr, ssim


def test_ssim_identical_is_one():
    img = torch.rand(32, 40, 3, generator=torch.Generator().manual_seed(0))
    assert abs(float(ssim(img, img)) - 1.0) < 1e-5


def test_ssim_drops_with_noise_and_is_symmetric():
    g = torch.Generator().manual_seed(1)
    a = torch.rand(2, 24, 24, 3, generator=g)
    b = (a + 0.2 * torch.randn(a.shape, generator=g)).clamp(0, 1)
    s = float(ssim(a, b))
    assert s < 0.9
    assert abs(s - float(ssim(b, a))) < 1e-6


def test_psnr_formula():
    a = torch.zeros(8, 8, 3)
    b = torch.full((8, 8, 3), 0.1)
    assert abs(psnr(a, b) - 10 * math.log10(1 / 0.01)) < 1e-5  # 20 dB (0.1 is not exact in float32)
    assert psnr(a, a) == math.inf


def test_quick_psnr_matches_psnr_of_the_clamped_render():
    g = torch.Generator().manual_seed(4)
    render = torch.rand(48, 64, 3, generator=g) * 1.4 - 0.2  # some values outside [0, 1]
    target = torch.rand(48, 64, 3, generator=g)
    assert abs(quick_psnr(render, target) - psnr(render.clamp(0, 1), target)) < 1e-4
    assert quick_psnr(target, target) == math.inf


def test_quick_psnrs_one_host_read_and_the_same_numbers(monkeypatch):
    """A step's full and masked PSNR come back in one device sync, with exactly the numbers of the separate
    float32 computations (the masked one: weighted squared error over the kept weight)."""
    import recon.losses.image as image

    g = torch.Generator().manual_seed(3)
    render, target = torch.rand(2, 8, 9, 3, generator=g) * 1.2 - 0.1, torch.rand(2, 8, 9, 3, generator=g)
    mask = (torch.rand(2, 8, 9, 1, generator=g) > 0.4).float()
    reads = []
    monkeypatch.setattr(image, "to_host", lambda t: reads.append(t) or t.tolist())
    full, masked = image.quick_psnrs(render, target, mask)
    assert len(reads) == 1
    clamped = render.clamp(0, 1)
    weight = float(mask.expand_as(render).sum())
    assert full == image.psnr_from_mse(float(torch.nn.functional.mse_loss(clamped, target)))
    assert masked == image.psnr_from_mse(float(((clamped - target).square() * mask).sum()) / weight)
    keep = mask.expand_as(render) > 0
    assert abs(masked - psnr(clamped[keep], target[keep])) < 1e-4  # the PSNR of the kept pixels alone
    assert image.quick_psnrs(render, target) == (full, None)
    assert math.isnan(image.quick_psnrs(render, target, torch.zeros_like(mask))[1])


def test_photometric_loss_mix():
    g = torch.Generator().manual_seed(2)
    a, b = torch.rand(16, 16, 3, generator=g), torch.rand(16, 16, 3, generator=g)
    expect = 0.8 * float(l1_loss(a, b)) + 0.2 * (1 - float(ssim(a, b)))
    assert abs(float(photometric_loss(a, b)) - expect) < 1e-6
    assert float(photometric_loss(a, a)) < 1e-6
