"""SH coefficients passed split as (sh0 [N, 1, 3], shN [N, K-1, 3]), the layout trainers keep: the same
render and gradients as the concatenated [N, K, 3] tensor, on the reference and cpu backends, and clear
errors for malformed pairs."""

import pytest
import torch

from rasterizer import RasterizerInputError, rasterize_gaussians
from rasterizer.cpu.sh import sh_to_color as cpu_sh

from .scenes import random_scene


def _render(p, colors, viewmats, Ks, backend, degree):
    return rasterize_gaussians(p["means"], p["quats"], p["scales"], p["opacities"], colors, viewmats, Ks, 40, 32,
                               sh_degree=degree, backend=backend, backgrounds=torch.ones(viewmats.shape[0], 3,
                                                                                         dtype=viewmats.dtype))


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("degree", [0, 1, 3])
def test_split_equals_concatenated(backend, degree):
    p, viewmats, Ks = random_scene(n=60, width=40, height=32, n_cams=2, sh_degree=3, seed=5)
    coeffs = p["colors"].detach()
    cot = torch.randn(2, 32, 40, 3, generator=torch.Generator().manual_seed(1), dtype=coeffs.dtype)
    full = coeffs.clone().requires_grad_(True)
    render, _, _ = _render(p, full, viewmats, Ks, backend, degree)
    (render * cot).sum().backward()
    means_grad = p["means"].grad.clone()
    p["means"].grad = None
    sh0, shN = coeffs[:, :1].clone().requires_grad_(True), coeffs[:, 1:].clone().requires_grad_(True)
    render_split, _, _ = _render(p, (sh0, shN), viewmats, Ks, backend, degree)
    (render_split * cot).sum().backward()
    assert torch.equal(render_split, render)
    assert torch.equal(p["means"].grad, means_grad)
    assert torch.equal(sh0.grad, full.grad[:, :1]) and torch.equal(shN.grad, full.grad[:, 1:])
    if degree < 3:
        assert float(shN.grad[:, (degree + 1) ** 2 - 1:].abs().max()) == 0.0  # unused coefficients


def test_cpu_sh_degree_zero_model():
    """A degree-0 model keeps shN with no coefficients."""
    p, viewmats, _ = random_scene(n=10, sh_degree=0, dtype=torch.float32)
    sh0 = p["colors"].detach().clone().requires_grad_(True)
    shN = torch.zeros(10, 0, 3, requires_grad=True)
    col = cpu_sh(0, p["means"].detach(), (sh0, shN), viewmats)
    col.sum().backward()
    assert col.shape == (1, 10, 3) and shN.grad.shape == (10, 0, 3) and sh0.grad.abs().sum() > 0


@pytest.mark.parametrize("colors, match", [
    (lambda c: (c[:, :1],), "must be a pair"),
    (lambda c: (c[:, :2], c[:, 2:]), r"colors\[0\] \(sh0\).*shape"),
    (lambda c: (c[:, :1], c[:, 1:3]), "has 3 SH coefficients"),
])
def test_bad_pairs_are_named(colors, match):
    p, viewmats, Ks = random_scene(n=20, width=40, height=32, sh_degree=3)
    with pytest.raises(RasterizerInputError, match=match):
        _render(p, colors(p["colors"].detach()), viewmats, Ks, "cpu", 3)


def test_pair_without_sh_degree_is_refused():
    p, viewmats, Ks = random_scene(n=20, width=40, height=32, sh_degree=3)
    c = p["colors"].detach()
    with pytest.raises(RasterizerInputError, match="pass sh_degree"):
        rasterize_gaussians(p["means"], p["quats"], p["scales"], p["opacities"], (c[:, :1], c[:, 1:]), viewmats, Ks,
                            40, 32)
