"""Bad input: a clear error naming the argument, or a correct (possibly empty) render."""

import pytest
import torch

from rasterizer import RasterizerInputError, rasterize_gaussians

from .scenes import random_scene

BACKENDS = ["reference", "cpu"]


def call(p, viewmats, Ks, W=32, H=24, **kw):
    return rasterize_gaussians(p["means"], p["quats"], p["scales"], p["opacities"], p["colors"], viewmats, Ks,
                               W, H, **kw)


@pytest.fixture
def scene():
    return random_scene(n=30, width=32, height=24)


@pytest.mark.parametrize("name", ["means", "quats", "scales", "opacities", "colors"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_parameters_are_named(scene, name, bad):
    p, viewmats, Ks = scene
    with torch.no_grad():
        p[name].view(-1)[4] = bad
    with pytest.raises(RasterizerInputError, match=f"`{name}`.*NaN or Inf"):
        call(p, viewmats, Ks)


def test_zero_quaternion(scene):
    p, viewmats, Ks = scene
    with torch.no_grad():
        p["quats"][3] = 0
    with pytest.raises(RasterizerInputError, match=r"`quats` has zero-norm rows \[3\]"):
        call(p, viewmats, Ks)


@pytest.mark.parametrize("name,shape", [("means", (30, 2)), ("quats", (30, 3)), ("scales", (29, 3)),
                                         ("opacities", (30, 1)), ("colors", (30,))])
def test_wrong_shapes_are_named(scene, name, shape):
    p, viewmats, Ks = scene
    p[name] = torch.rand(shape, dtype=torch.float64)
    with pytest.raises(RasterizerInputError, match=f"`{name}`"):
        call(p, viewmats, Ks)


def test_wrong_dtype_and_values(scene):
    p, viewmats, Ks = scene
    with pytest.raises(RasterizerInputError, match="`scales` has dtype"):
        call({**p, "scales": p["scales"].float()}, viewmats, Ks)
    with pytest.raises(RasterizerInputError, match="`means` must be a floating-point"):
        call({**p, "means": p["means"].long()}, viewmats, Ks)
    with pytest.raises(RasterizerInputError, match="`opacities` has values outside"):
        call({**p, "opacities": p["opacities"] * 3}, viewmats, Ks)
    with pytest.raises(RasterizerInputError, match="`scales` has negative"):
        call({**p, "scales": -p["scales"]}, viewmats, Ks)
    with pytest.raises(RasterizerInputError, match="`width` must be a positive int"):
        call(p, viewmats, Ks, W=0)
    with pytest.raises(RasterizerInputError, match="`Ks` has shape"):
        call(p, viewmats, Ks[:, :2])
    with pytest.raises(RasterizerInputError, match="`render_mode` is 'RGBD'"):
        call(p, viewmats, Ks, render_mode="RGBD")
    with pytest.raises(RasterizerInputError, match="`colors` has 1 SH coefficients per channel, sh_degree=1"):
        call({**p, "colors": p["colors"][:, None, :]}, viewmats, Ks, sh_degree=1)


def test_cuda_backend_refuses_cpu_tensors(scene):
    p, viewmats, Ks = scene
    with pytest.raises(RasterizerInputError, match="backend='cuda' needs tensors on a CUDA device"):
        call(p, viewmats, Ks, backend="cuda")


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_gaussians_renders_background(backend, scene):
    _, viewmats, Ks = scene
    empty = {k: torch.zeros((0,) + s, dtype=torch.float64, requires_grad=True)
             for k, s in (("means", (3,)), ("quats", (4,)), ("scales", (3,)), ("opacities", ()), ("colors", (3,)))}
    bg = torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64)
    render, alpha, meta = call(empty, viewmats, Ks, backgrounds=bg, backend=backend)
    assert render.shape == (1, 24, 32, 3) and torch.allclose(render, bg[:, None, None, :].expand_as(render))
    assert (alpha == 0).all() and meta["radii"].shape == (1, 0, 2)
    render.sum().backward()  # still differentiable: zero gradients, no crash
    assert empty["means"].grad is not None and empty["means"].grad.shape == (0, 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_behind_camera_is_empty(backend, scene):
    p, viewmats, Ks = scene
    with torch.no_grad():
        p["means"][:, 2] *= -1
    render, alpha, meta = call(p, viewmats, Ks, backend=backend)
    assert (render == 0).all() and (alpha == 0).all() and (meta["radii"] == 0).all()
    (render.sum() + alpha.sum()).backward()
    assert (p["means"].grad == 0).all()


def test_huge_gaussian_matches_reference(scene):
    """A Gaussian much larger than the image (and one straddling the near plane) renders correctly."""
    p, viewmats, Ks = scene
    with torch.no_grad():
        p["scales"][0] = torch.tensor([50.0, 40.0, 30.0])
        p["means"][1] = torch.tensor([0.0, 0.0, 0.02])
        p["scales"][1] = torch.tensor([0.5, 0.5, 0.5])
    outs = [call(p, viewmats, Ks, backend=b) for b in BACKENDS]
    torch.testing.assert_close(outs[1][0], outs[0][0])
    torch.testing.assert_close(outs[1][1], outs[0][1])
    assert outs[1][1].min() > 0.2  # the huge Gaussian covers the whole image
