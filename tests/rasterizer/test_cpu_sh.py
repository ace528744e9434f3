"""cpu SH colours (rasterizer.cpu.sh) against the reference (rasterizer.reference.sh.sh_to_color): forward
and a random-cotangent vector-Jacobian product for every degree, both dtypes, several cameras, colours
clamped at 0 on some channels, a Gaussian at a camera centre; float64 gradcheck."""

import pytest
import torch

from rasterizer.cpu.sh import sh_to_color as cpu_sh
from rasterizer.reference.sh import sh_to_color as ref_sh
from tests.tolerances import GRAD_REL, TOL


def _inputs(dtype, n=200, K=16, C=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(n, 3, generator=g, dtype=torch.float64).to(dtype)
    coeffs = (0.6 * torch.randn(n, K, 3, generator=g, dtype=torch.float64)).to(dtype)  # some colours < 0
    viewmats = torch.eye(4, dtype=torch.float64).repeat(C, 1, 1)
    viewmats[:, :3, 3] = torch.randn(C, 3, generator=g, dtype=torch.float64) * 3
    viewmats = viewmats.to(dtype)
    means[0] = -(viewmats[0, :3, :3].T @ viewmats[0, :3, 3])  # Gaussian 0 sits at camera 0's centre
    return means, coeffs, viewmats


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_cpu_sh_matches_reference(dtype, degree):
    means, coeffs, viewmats = _inputs(dtype)
    cot = torch.randn(viewmats.shape[0], means.shape[0], 3, generator=torch.Generator().manual_seed(9),
                      dtype=torch.float64).to(dtype)
    outs = {}
    for name, fn in (("ref", ref_sh), ("cpu", cpu_sh)):
        m, c = means.clone().requires_grad_(True), coeffs.clone().requires_grad_(True)
        col = fn(degree, m, c, viewmats)
        (col * cot).sum().backward()
        outs[name] = (col.detach(), m.grad, c.grad)
    tol = TOL[dtype]
    torch.testing.assert_close(outs["cpu"][0], outs["ref"][0], rtol=tol["rtol"], atol=tol["atol"])
    assert (outs["ref"][0] == 0).any()  # the clamp is exercised
    for got, want in zip(outs["cpu"][1:], outs["ref"][1:]):
        if want is None:  # degree 0 does not depend on the direction: autograd gives no means gradient
            assert degree == 0 and float(got.abs().max()) == 0.0
            continue
        got, want = got[1:], want[1:]  # row 0: the zero-distance Gaussian, checked below
        scale = float(want.abs().max())
        assert scale > 0 and float((got - want).abs().max()) <= GRAD_REL[dtype] * scale
    # zero distance: both take F.normalize's eps path; coefficient gradients agree
    torch.testing.assert_close(outs["cpu"][2][0], outs["ref"][2][0], rtol=tol["rtol"], atol=tol["atol"])


@pytest.mark.parametrize("cameras", [1, 3])  # one camera: the kernels' own fast path (training renders one)
@pytest.mark.parametrize("degree", [1, 3])
def test_cpu_sh_zero_cotangent_pairs(degree, cameras):
    """Pairs (camera, Gaussian) with a zero cotangent (culled or hidden: the common case in training) are
    skipped; gradients still equal the reference's, exactly zero where every camera's cotangent is."""
    means, coeffs, viewmats = _inputs(torch.float64, n=120, C=cameras, seed=4)
    g = torch.Generator().manual_seed(5)
    keep = torch.rand(cameras, 120, 1, generator=g, dtype=torch.float64) < 0.5  # camera 0 zero for about half
    keep[:, :10] = False
    cot = torch.randn(cameras, 120, 3, generator=g, dtype=torch.float64) * keep
    outs = {}
    for name, fn in (("ref", ref_sh), ("cpu", cpu_sh)):
        m, c = means.clone().requires_grad_(True), coeffs.clone().requires_grad_(True)
        (fn(degree, m, c, viewmats) * cot).sum().backward()
        outs[name] = (m.grad, c.grad)
    for got, want in zip(outs["cpu"], outs["ref"]):
        got, want = got[1:], want[1:]  # row 0: the zero-distance Gaussian (see above)
        assert float((got - want).abs().max()) <= GRAD_REL[torch.float64] * float(want.abs().max())
        assert float(got[:9].abs().max()) == 0.0 and float(got[9:].abs().max()) > 0.0


@pytest.mark.parametrize("cameras", [1, 3])
def test_cpu_sh_culled_pairs(cameras):
    """radii [C, N, 2]: culled pairs (a zero radius) get colour 0 and no gradient, on both backends,
    whatever their cotangent; the others are unchanged."""
    means, coeffs, viewmats = _inputs(torch.float64, n=100, C=cameras, seed=6)
    g = torch.Generator().manual_seed(1)
    radii = torch.randint(1, 5, (cameras, 100, 2), generator=g, dtype=torch.int32)
    radii[torch.rand(cameras, 100, generator=g) < 0.5] = 0
    radii[:, 1:8] = 0  # culled in every camera
    radii[0, 9, 1] = 0  # one zero component is enough
    cot = torch.randn(cameras, 100, 3, generator=g, dtype=torch.float64)
    outs = {}
    for name, fn in (("ref", ref_sh), ("cpu", cpu_sh)):
        m, c = means.clone().requires_grad_(True), coeffs.clone().requires_grad_(True)
        col = fn(3, m, c, viewmats, radii)
        (col * cot).sum().backward()
        outs[name] = (col.detach(), m.grad, c.grad)
    culled = (radii == 0).any(-1)
    assert float(outs["cpu"][0][culled].abs().max()) == 0.0
    torch.testing.assert_close(outs["cpu"][0][~culled], ref_sh(3, means, coeffs, viewmats)[~culled])
    torch.testing.assert_close(outs["cpu"][0], outs["ref"][0])
    for got, want in zip(outs["cpu"][1:], outs["ref"][1:]):
        got, want = got[1:], want[1:]  # row 0: the zero-distance Gaussian (see above)
        assert float((got - want).abs().max()) <= GRAD_REL[torch.float64] * float(want.abs().max())
        assert float(got[:7].abs().max()) == 0.0 and float(got[7:].abs().max()) > 0.0
    for fn in (cpu_sh, ref_sh):
        with pytest.raises(ValueError, match="radii must be"):
            fn(3, means, coeffs, viewmats, radii[:, :50])
        with pytest.raises(ValueError, match="radii must be"):
            fn(3, means, coeffs, viewmats, radii.float())


def test_cpu_sh_gradcheck():
    means, coeffs, viewmats = _inputs(torch.float64, n=6, C=2, seed=3)
    means, coeffs = means[1:].clone().requires_grad_(True), coeffs[1:].clone().requires_grad_(True)
    coeffs.data[:, 0] += 2.0  # away from the clamp's kink
    assert torch.autograd.gradcheck(lambda m, c: cpu_sh(3, m, c, viewmats), (means, coeffs), eps=1e-6, atol=1e-8)


def test_cpu_sh_too_few_coefficients():
    means, coeffs, viewmats = _inputs(torch.float32, K=4)
    with pytest.raises(ValueError, match="needs 9 coefficients"):
        cpu_sh(2, means, coeffs, viewmats)
