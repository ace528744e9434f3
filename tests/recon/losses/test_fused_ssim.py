"""Fused CPU SSIM (recon.losses.ssim) against the PyTorch specification (recon.losses.image.ssim), forward and
backward, including image borders (zero padding) and batched cameras."""

import pytest
import torch

from recon.losses.ssim import can_fuse, fused_photometric_loss, fused_ssim
from recon.losses.image import photometric_loss, photometric_loss_reference, ssim
from tests.tolerances import GRAD_REL, TOL


def _pair(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(shape, generator=g, dtype=torch.float64).to(dtype)
    b = (a + 0.15 * torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)).clamp(0, 1)
    return a, b


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", [(17, 23, 3), (2, 9, 30, 3), (5, 4, 1), (40, 12, 4)])
def test_forward_and_gradient_match_reference(dtype, shape):
    a, b = _pair(shape, dtype)
    a_ref = a.clone().requires_grad_(True)
    a_fused = a.clone().requires_grad_(True)
    cot = 0.7  # upstream gradient
    ref = ssim(a_ref, b)
    out = fused_ssim(a_fused, b)
    (ref * cot).backward()
    (out * cot).backward()
    tol = TOL[dtype]
    assert abs(out.item() - ref.item()) < tol["atol"] * 10
    scale = float(a_ref.grad.abs().max())
    assert scale > 0
    assert float((a_fused.grad - a_ref.grad).abs().max()) <= GRAD_REL[dtype] * scale


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape,lam", [((17, 23, 3), 0.2), ((2, 9, 30, 3), 0.5), ((40, 12, 4), 0.0), ((5, 4, 1), 1.0)])
def test_photometric_loss_matches_reference(dtype, shape, lam):
    """The fused L1 + SSIM loss: value and gradient of photometric_loss_reference (torch's l1_loss and the
    plain ssim), pixels with a = b included (sign 0: no L1 gradient there)."""
    a, b = _pair(shape, dtype, seed=7)
    b.view(-1)[::5] = a.view(-1)[::5]  # equal values: l1_loss's gradient is 0 there
    a_ref = a.clone().requires_grad_(True)
    a_fused = a.clone().requires_grad_(True)
    ref = photometric_loss_reference(a_ref, b, lam)
    out = fused_photometric_loss(a_fused, b, lam)
    (ref * 0.7).backward()
    (out * 0.7).backward()
    assert abs(out.item() - ref.item()) < TOL[dtype]["atol"] * 10
    scale = float(a_ref.grad.abs().max())
    assert scale > 0
    assert float((a_fused.grad - a_ref.grad).abs().max()) <= GRAD_REL[dtype] * scale


def test_gradcheck_float64():
    a, b = _pair((6, 7, 2), torch.float64, seed=3)
    a.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: fused_ssim(t, b), (a,), eps=1e-6, atol=1e-7)


def test_identical_images_and_loss_uses_fused_path():
    a, _ = _pair((12, 14, 3), torch.float32)
    assert abs(float(fused_ssim(a, a)) - 1.0) < 1e-5
    b = a.flip(0)
    assert can_fuse(a, b)
    expect = 0.8 * float((a - b).abs().mean()) + 0.2 * (1 - float(ssim(a, b)))
    assert abs(float(photometric_loss(a, b)) - expect) < 1e-5
    assert photometric_loss(a.requires_grad_(True), b).grad_fn.name() == "FusedPhotometricLossBackward"
    for t in (a.detach(), a.detach().double()):  # a render equal to its target (all masked out) costs exactly 0
        assert float(fused_photometric_loss(t, t)) == 0.0 == float(photometric_loss_reference(t, t))


def test_bad_inputs():
    a = torch.rand(4, 4, 3)
    with pytest.raises(ValueError, match="shapes differ"):
        fused_ssim(a, torch.rand(4, 5, 3))
    with pytest.raises(ValueError, match="expected an image"):
        fused_ssim(torch.rand(4, 3), torch.rand(4, 3))
    assert not can_fuse(a, a.clone().requires_grad_(True))


def test_waits_for_the_rasterizers_public_kernel_lock():
    """fused_ssim launches Numba parallel kernels, so it takes the lock the rasterizer's cpu backend
    exports for that (rasterizer.cpu.KERNEL_LOCK): while another thread holds it, SSIM waits."""
    import threading

    from rasterizer.cpu import KERNEL_LOCK

    a, b = _pair((9, 11, 3), torch.float64)
    fused_ssim(a, b)  # compiled before the timing below
    done = threading.Event()
    with KERNEL_LOCK:
        worker = threading.Thread(target=lambda: (fused_ssim(a, b), done.set()))
        worker.start()
        assert not done.wait(0.5), "fused_ssim ran while KERNEL_LOCK was held"
    worker.join(30)
    assert done.is_set()


def test_row_bands_do_not_change_results():
    """The kernels cut each camera's rows into bands (one per thread), each recomputing the horizontal pass of
    the rows around its ends: any band count gives the same map partials, row sums and gradient."""
    import numpy as np

    from recon.losses.ssim import N_PARTIALS, gaussian_taps, ssim_backward_kernel, ssim_forward_kernel

    a, b = _pair((2, 50, 9, 3), torch.float64, seed=5)
    C, H, W, D = a.shape
    x, y = a.reshape(C, H, W * D).numpy(), b.reshape(C, H, W * D).numpy()
    g = gaussian_taps(11, 1.5, np.float64)
    results = []
    for bands in (1, 2, 3):
        partials = np.empty((N_PARTIALS, C, H, W * D))
        sums = np.empty(C * H)
        grad = np.empty_like(x)
        ssim_forward_kernel(x, y, g, D, bands, partials, sums, np.empty(0))
        ssim_backward_kernel(partials, x, y, g, D, bands, 0.5, grad, 0.0)
        results.append((partials, sums, grad))
    for partials, sums, grad in results[1:]:
        np.testing.assert_allclose(partials, results[0][0], rtol=0, atol=1e-13)
        np.testing.assert_allclose(sums, results[0][1], rtol=0, atol=1e-12)
        np.testing.assert_allclose(grad, results[0][2], rtol=0, atol=1e-13)
