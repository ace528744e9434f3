"""The cuda backend (gsplat kernels) against the reference backend. Runs only where CUDA is available."""

import pytest
import torch

from rasterizer import rasterize_gaussians

from .scenes import random_scene

pytestmark = pytest.mark.cuda


def _run(backend, p, viewmats, Ks, device, **kw):
    leaves = {k: v.detach().to(device).requires_grad_(True) for k, v in p.items()}
    render, alpha, meta = rasterize_gaussians(leaves["means"], leaves["quats"], leaves["scales"], leaves["opacities"],
                                              leaves["colors"], viewmats.to(device), Ks.to(device), 64, 48,
                                              backend=backend, **kw)
    (render.square().sum() + alpha.sum()).backward()
    return render.detach().cpu(), alpha.detach().cpu(), {k: v.grad.cpu() for k, v in leaves.items()}


@pytest.mark.parametrize("kw", [dict(), dict(rasterize_mode="antialiased"), dict(render_mode="RGB+ED")],
                         ids=["classic", "antialiased", "rgb+ed"])
def test_cuda_matches_reference(kw):
    p, viewmats, Ks = random_scene(n=300, width=64, height=48, n_cams=2, dtype=torch.float32, seed=4)
    ref = _run("reference", p, viewmats, Ks, "cpu", **kw)
    cuda = _run("cuda", p, viewmats, Ks, "cuda", **kw)
    # gsplat computes in float32 with fast-math exp: compare with float32-level tolerances
    assert (cuda[0] - ref[0]).abs().mean() < 1e-4 and (cuda[0] - ref[0]).abs().max() < 2e-2
    assert (cuda[1] - ref[1]).abs().max() < 2e-2
    for name in ("means", "quats", "scales", "opacities", "colors"):
        err = (cuda[2][name] - ref[2][name]).norm() / ref[2][name].norm()
        assert err < 1e-2, f"{name} gradient relative error {err:.3g}"


def test_auto_picks_cuda_for_cuda_tensors():
    p, viewmats, Ks = random_scene(n=50, width=64, height=48, dtype=torch.float32)
    leaves = [v.detach().cuda() for v in p.values()]
    render, _, meta = rasterize_gaussians(*leaves, viewmats.cuda(), Ks.cuda(), 64, 48, backend="auto")
    assert render.is_cuda and meta["radii"].shape == (1, 50, 2)
    assert meta.tiles_x == 4 and meta.transmittance.shape == (1, 48, 64, 1)


def test_depth_limit_is_refused_on_cuda_and_works_on_the_reference_there():
    from rasterizer import RasterizerInputError

    p, viewmats, Ks = random_scene(n=50, width=64, height=48, dtype=torch.float32)
    leaves = [v.detach().cuda() for v in p.values()]
    limit = torch.full((1, 48, 64), 4.0, device="cuda")
    with pytest.raises(RasterizerInputError, match="`depth_limit` is not supported by the cuda backend"):
        rasterize_gaussians(*leaves, viewmats.cuda(), Ks.cuda(), 64, 48, backend="cuda", depth_limit=limit)
    out = rasterize_gaussians(*leaves, viewmats.cuda(), Ks.cuda(), 64, 48, backend="reference", depth_limit=limit)
    assert out.meta.transmittance.is_cuda




@pytest.mark.parametrize("kw", [dict(), dict(rasterize_mode="antialiased"), dict(render_mode="RGB+ED"),
                                dict(sh_degree=2), dict(absgrad=True)],
                         ids=["classic", "antialiased", "rgb+ed", "sh2", "absgrad"])
def test_both_cuda_pipelines_render_alike(kw, monkeypatch):
    """rasterizer.cuda's "seam" pipeline (gsplat's projection, SH and rasterize_to_pixels as separate steps) and
    its "fused" one (gsplat's rasterization) give the same render, alpha, gradients and densification signals."""
    import rasterizer.cuda as cuda

    p, viewmats, Ks = random_scene(n=400, width=64, height=48, n_cams=2, dtype=torch.float32, seed=7,
                                   sh_degree=kw.get("sh_degree"))
    results = {}
    for pipeline in ("fused", "seam"):
        monkeypatch.setattr(cuda, "PIPELINE", pipeline)
        leaves = {k: v.detach().cuda().requires_grad_(True) for k, v in p.items()}
        render, alpha, meta = rasterize_gaussians(leaves["means"], leaves["quats"], leaves["scales"],
                                                  leaves["opacities"], leaves["colors"], viewmats.cuda(), Ks.cuda(),
                                                  64, 48, backend="cuda", **kw)
        (render.square().sum() + alpha.sum()).backward()
        results[pipeline] = (render.detach().cpu(), alpha.detach().cpu(), {k: v.grad.cpu() for k, v in leaves.items()},
                             meta.means2d.grad.cpu(), meta.radii.cpu(), meta.absgrad)
        assert meta.transmittance.shape == (2, 48, 64, 1)
    fused, seam = results["fused"], results["seam"]
    assert (seam[0] - fused[0]).abs().max() < 1e-4 and (seam[1] - fused[1]).abs().max() < 1e-4
    for name, g in fused[2].items():
        err = (seam[2][name] - g).norm() / g.norm().clamp_min(1e-12)
        assert err < 1e-4, f"{name} gradient relative error {err:.3g}"
    assert torch.allclose(seam[3], fused[3], rtol=1e-4, atol=1e-7) and torch.equal(seam[4], fused[4])
    if kw.get("absgrad"):
        assert seam[5] is not None and torch.allclose(seam[5].cpu(), fused[5].cpu(), rtol=1e-4, atol=1e-7)
