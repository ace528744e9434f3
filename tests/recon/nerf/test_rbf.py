"""The Gaussian RBF layer: the Numba kernels and the matmul path against the reference, forward and backward;
the initialisation."""

import math

import pytest
import torch

from recon.nerf.rbf import (RBFLayer, init_centres, kmeans, precision_from_spacing, rbf_matmul, rbf_numba,
                            rbf_reference)


def _inputs(dtype, n=300, d=7, k=11, o=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    f = torch.randn(n, d, generator=g, dtype=dtype) * 0.7
    c = torch.randn(k, d, generator=g, dtype=dtype) * 0.7
    rho = torch.randn(k, d, generator=g, dtype=dtype) * 0.3 - 0.5
    w = torch.randn(o, k, generator=g, dtype=dtype)
    b = torch.randn(o, generator=g, dtype=dtype)
    return [t.requires_grad_(True) for t in (f, c, rho, w, b)]


def _value_and_grads(fn, inputs, seed=1):
    out = fn(*inputs)
    g = torch.Generator().manual_seed(seed)
    upstream = torch.randn(out.shape, generator=g, dtype=out.dtype)
    grads = torch.autograd.grad((out * upstream).sum(), inputs)
    return out.detach(), grads


def test_reference_is_the_formula():
    f, c, rho, w, b = (t.detach() for t in _inputs(torch.float64, n=5, d=3, k=2, o=1))
    s = torch.exp(rho)
    for n in range(5):
        phi = [math.exp(-sum(float(s[k, d] * (f[n, d] - c[k, d])) ** 2 for d in range(3))) for k in range(2)]
        expect = sum(float(w[0, k]) * phi[k] for k in range(2)) + float(b[0])
        assert float(rbf_reference(f, c, rho, w, b)[n, 0]) == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("fn", [rbf_numba, rbf_matmul], ids=["numba", "matmul"])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-4)])
def test_matches_reference_forward_and_backward(fn, dtype, tol):
    inputs = _inputs(dtype)
    ref_out, ref_grads = _value_and_grads(rbf_reference, inputs)
    out, grads = _value_and_grads(fn, inputs)
    scale = ref_out.abs().max()
    assert (out - ref_out).abs().max() <= tol * scale
    for name, a, r in zip(("f", "centres", "log_precision", "weight", "bias"), grads, ref_grads):
        assert a.shape == r.shape and a.dtype == r.dtype, name
        assert (a - r).abs().max() <= tol * max(1.0, float(r.abs().max())), name


def test_gradcheck_numba():
    inputs = _inputs(torch.float64, n=6, d=3, k=4, o=2)
    assert torch.autograd.gradcheck(rbf_numba, inputs)


def test_numba_rejects_other_dtypes():
    f, c, rho, w, b = (t.detach().half() for t in _inputs(torch.float32, n=3))
    with pytest.raises(ValueError, match="float32 or float64"):
        rbf_numba(f, c, rho, w, b)


def test_kmeans_finds_separated_clusters():
    g = torch.Generator().manual_seed(0)
    truth = torch.tensor([[0.0, 0.0], [5.0, 5.0], [-5.0, 5.0]])
    pts = torch.cat([t + 0.05 * torch.randn(200, 2, generator=g) for t in truth])
    centres = kmeans(pts, 3, torch.Generator().manual_seed(3))
    dist = torch.cdist(truth, centres).min(1).values
    assert float(dist.max()) < 0.05


def test_precision_from_spacing():
    centres = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    rho = precision_from_spacing(centres)  # nearest distance 1 for all three: q = 1/2 there
    assert torch.allclose(rho, torch.full((3, 2), math.log(math.sqrt(0.5))))
    rho8 = precision_from_spacing(centres, neighbour_q=8.0)
    assert torch.allclose(rho8, torch.full((3, 2), math.log(math.sqrt(8.0))))


def test_neighbouring_neurons_overlap_in_many_features():
    """q at a neighbouring centre is the asked-for value whatever the feature count (the per-feature spacing
    used before stop 60 gave q = D / 2: exp(-16) with a hash grid's 32 features, and no gradient)."""
    g = torch.Generator().manual_seed(0)
    for d in (2, 16, 32):
        centres = torch.randn(64, d, generator=g)
        s2 = torch.exp(2.0 * precision_from_spacing(centres))
        dist = torch.cdist(centres, centres)
        dist.fill_diagonal_(float("inf"))
        q_nearest = (s2[:, 0] * dist.min(1).values ** 2).median()
        assert 0.2 < float(q_nearest) < 0.8


def test_nerf_rbf_heads_are_active_at_initialisation():
    """A fresh RBF field's density head answers random points with activations that carry a gradient."""
    from recon.nerf.config import FieldConfig, NerfConfig
    from recon.nerf.field import build_field

    g = torch.Generator().manual_seed(0)
    field = build_field(NerfConfig(), FieldConfig(encoding="dense", decoder="rbf"), g)
    feats = field.encode(torch.rand(2048, 3, generator=g)).float()
    head = field.density_mlp
    s2 = torch.exp(2.0 * head.log_precision.detach())
    q = ((feats[:, None, :] - head.centres.detach()[None]) ** 2 * s2[None]).sum(-1)
    strongest = torch.exp(-q).max(1).values
    assert float(strongest.median()) > 0.1


def test_layer_fits_a_1d_function():
    """One layer of 16 neurons on a 1-feature input learns sin(3x) on [-1, 1] (the decoder can learn)."""
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 256)[:, None]
    y = torch.sin(3 * x)
    layer = RBFLayer(1, 16, 1, torch.Generator().manual_seed(0), sample=x)
    opt = torch.optim.Adam(layer.parameters(), lr=1e-2)
    for _ in range(400):
        opt.zero_grad()
        loss = ((layer(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 1e-3
    assert init_centres(1, 16, sample=x).shape == (16, 1)


def test_layer_auto_takes_the_numba_kernels_on_the_cpu():
    """A field's head with backend "auto" runs the Numba kernels on CPU tensors (the colour head of an RBF NeRF;
    the matrix products were 1.2-1.5x slower) and gives the reference's values and gradients."""
    f, c, rho, w, b = _inputs(torch.float32)
    layer = RBFLayer(f.shape[1], c.shape[0], w.shape[0])
    with torch.no_grad():
        for p, v in zip(layer.parameters(), (c, rho, w, b)):
            p.copy_(v)
    assert layer.resolved_backend(f) == "numba"
    out = layer(f)
    assert "RbfNumba" in type(out.grad_fn).__name__
    ref = rbf_reference(f, c, rho, w, b)
    assert (out - ref).abs().max() <= 2e-4 * max(1.0, float(ref.abs().max()))
    (g,) = torch.autograd.grad(out.sum(), f)
    (g_ref,) = torch.autograd.grad(ref.sum(), f)
    assert (g - g_ref).abs().max() <= 2e-4 * max(1.0, float(g_ref.abs().max()))
    assert RBFLayer(3, 2, 1, backend="matmul").resolved_backend(f) == "matmul"  # an explicit choice is kept
    with torch.no_grad():  # no backward to come: the activations are not kept, the outputs are the same
        assert torch.equal(layer(f), out.detach())
