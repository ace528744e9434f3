"""The Numba transmittance kernels against the PyTorch reference: values and gradients (sigma, t0, t1)."""

import pytest
import torch

from recon.nerf.rendering import transmittance_weights, transmittance_weights_reference
from recon.nerf.transmittance import transmittance_weights_numba


def packed_batch(dtype, seed=0, n_rays=40):
    """Packed samples of ``n_rays`` rays (some with none, some with one), sorted by ray then distance."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 12, (n_rays,), generator=g)
    counts[3], counts[4] = 0, 1
    ray = torch.repeat_interleave(torch.arange(n_rays), counts)
    S = ray.shape[0]
    steps = torch.rand(S, generator=g, dtype=torch.float64) * 0.2 + 0.01
    t0 = torch.zeros(S, dtype=torch.float64)
    start = 0
    for c in counts.tolist():  # consecutive intervals along each ray
        t0[start:start + c] = torch.cumsum(steps[start:start + c], 0) - steps[start:start + c] + 2.0
        start += c
    t1 = t0 + steps
    sigma = (torch.rand(S, generator=g, dtype=torch.float64) * 8).to(dtype)
    return sigma, t0, t1, ray, n_rays


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_values_and_gradients_match_the_reference(dtype):
    sigma, t0, t1, ray, R = packed_batch(dtype)
    g = torch.Generator().manual_seed(1)
    gw = torch.randn(sigma.shape[0], generator=g, dtype=torch.float64).to(dtype)
    gt = torch.randn(sigma.shape[0], generator=g, dtype=torch.float64).to(dtype)
    results = []
    for fn in (transmittance_weights_numba, transmittance_weights_reference):
        s, a, b = (x.clone().requires_grad_() for x in (sigma, t0, t1))
        w, T = fn(s, a, b, ray, R)
        ((w * gw).sum() + (T * gt).sum()).backward()
        results.append((w.detach(), T.detach(), s.grad, a.grad, b.grad))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    for got, want in zip(*results):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, **tol)
    w, T = results[0][:2]
    assert (w > 0).any() and (T < 0.5).any()  # the batch has opaque rays: the running sum matters


def test_weights_alone_and_gradcheck():
    """Only the weights used (autograd passes no cotangent for T), and gradcheck in float64."""
    sigma, t0, t1, ray, R = packed_batch(torch.float64, seed=2, n_rays=6)
    s1, s2 = sigma.clone().requires_grad_(), sigma.clone().requires_grad_()
    transmittance_weights_numba(s1, t0, t1, ray, R)[0].pow(2).sum().backward()
    transmittance_weights_reference(s2, t0, t1, ray, R)[0].pow(2).sum().backward()
    torch.testing.assert_close(s1.grad, s2.grad, rtol=1e-10, atol=1e-12)
    args = (sigma.clone().requires_grad_(), t0.clone().requires_grad_(), t1.clone().requires_grad_())
    assert torch.autograd.gradcheck(lambda s, a, b: transmittance_weights_numba(s, a, b, ray, R), args)


def test_the_cpu_path_takes_the_kernels_and_empty_batches_work():
    sigma, t0, t1, ray, R = packed_batch(torch.float32, seed=3)
    w, _ = transmittance_weights(sigma.requires_grad_(), t0, t1, ray, R)
    assert "_Transmittance" in type(w.grad_fn).__name__
    e = torch.zeros(0, requires_grad=True)
    w, T = transmittance_weights(e, torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64),
                                 torch.zeros(0, dtype=torch.int64), 4)
    assert w.shape == T.shape == (0,)
    w.sum().backward()
    assert e.grad.shape == (0,)
