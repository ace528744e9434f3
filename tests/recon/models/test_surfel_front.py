"""2DGS scenes composited with inserted meshes (issue 21): ``SurfelModel.render_front`` through
``rasterize_surfels(..., depth_limit=...)``: a surfel behind the mesh hit gives nothing (no colour, no
gradient), one in front dims the mesh by exactly 1 - alpha; no limit is the plain render."""

from __future__ import annotations

import math

import pytest
import torch

from rasterizer import Camera
from recon.models import SurfelModel
from recon.models.gaussians import rgb_to_sh0

SIZE = 32


def camera() -> Camera:
    K = torch.tensor([[40.0, 0.0, SIZE / 2], [0.0, 40.0, SIZE / 2], [0.0, 0.0, 1.0]])
    return Camera(torch.eye(4), K, SIZE, SIZE)


def surfels(zs=(3.0,), xs=(0.0,), opacity=0.8, depth="intersection") -> SurfelModel:
    """Fronto-parallel-ish surfels (tilted 20 degrees about x) at camera depths ``zs``."""
    n = len(zs)
    half = math.radians(20) / 2
    params = {"means": torch.tensor([[x, 0.0, z] for x, z in zip(xs, zs)]),
              "quats": torch.tensor([[math.cos(half), math.sin(half), 0.0, 0.0]] * n),
              "log_scales": torch.log(torch.full((n, 2), 0.25)),
              "logit_opacities": torch.logit(torch.full((n,), opacity)),
              "sh0": rgb_to_sh0(torch.tensor([[0.9, 0.3, 0.1], [0.1, 0.4, 0.9]][:n]))[:, None, :],
              "shN": torch.zeros(n, 0, 3)}
    return SurfelModel(params, 0, 1.0, surfel_depth=depth)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_no_limit_is_the_plain_render(backend):
    m = surfels((3.0, 4.0), (0.1, -0.1))
    rgb, alpha, meta = m.render([camera()], backend=backend)
    with torch.no_grad():
        f_rgb, f_T, f_depth = m.render_front([camera()], torch.full((1, SIZE, SIZE), math.inf), backend=backend)
    torch.testing.assert_close(f_rgb, rgb.detach())
    torch.testing.assert_close(f_T, 1.0 - alpha.detach(), rtol=0, atol=1e-6)
    seen = alpha.detach() > 0
    torch.testing.assert_close(f_depth[seen], meta["depth"].detach()[seen])
    assert float(alpha.detach().max()) > 0.5


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_behind_gives_nothing_and_in_front_dims_by_one_minus_alpha(backend):
    """Front surfel at z 3, back one at z 4.5, mesh at z 3.8 everywhere: the back surfel has no colour and
    no gradient, the result is the front surfel alone, and the mesh is seen through exactly 1 - alpha."""
    both = surfels((3.0, 4.5), (0.1, -0.1))
    front = surfels((3.0,), (0.1,))
    limit = torch.full((1, SIZE, SIZE), 3.8)
    rgb, T, depth = both.render_front([camera()], limit, backend=backend)
    alone, alpha, meta = front.render([camera()], backend=backend)
    torch.testing.assert_close(rgb.detach(), alone.detach())
    torch.testing.assert_close(T.detach(), 1.0 - alpha.detach(), rtol=0, atol=1e-6)
    mesh = torch.tensor([0.2, 0.8, 0.5])
    pixel = rgb + T * mesh
    torch.testing.assert_close(pixel.detach(), alone.detach() + (1.0 - alpha.detach()) * mesh, rtol=0, atol=1e-6)
    assert bool((depth[alpha > 0.01] < 3.8).all())
    pixel.sum().backward()
    for name, p in both.params.items():
        if p.grad is None or p.grad.numel() == 0:
            continue
        assert bool((p.grad[1] == 0).all()), f"{name}: the surfel behind the mesh got a gradient"
        assert bool((p.grad[0] != 0).any()), f"{name}: the surfel in front got no gradient"
    behind_all = surfels((4.5,), (0.0,))
    rgb_b, T_b, depth_b = behind_all.render_front([camera()], limit, backend=backend)
    assert bool((rgb_b == 0).all()) and bool((T_b == 1).all()) and bool((depth_b == 0).all())


def test_cpu_and_reference_agree_with_a_cut():
    m = surfels((3.0, 3.6), (0.15, -0.1))
    x = torch.arange(SIZE, dtype=torch.float32) / SIZE
    limit = (3.0 + 0.8 * x)[None, None, :].expand(1, SIZE, SIZE).contiguous()
    ref = m.render_front([camera()], limit, backend="reference")
    cpu = m.render_front([camera()], limit, backend="cpu")
    for a, b in zip(cpu, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
