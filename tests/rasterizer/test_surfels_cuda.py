"""rasterize_surfels: the cuda backend (gsplat's rasterization_2dgs) against the reference backend.
Runs only where CUDA is available (skipped otherwise, see tests/conftest.py)."""

import pytest
import torch

from rasterizer import RasterizerInputError, rasterize_surfels

from .test_surfels import OUTPUTS, surfel_scene

pytestmark = pytest.mark.cuda


def _run(backend, p, viewmats, Ks, device, weights, **kw):
    leaves = {k: v.detach().to(device).requires_grad_(True) for k, v in p.items()}
    out = rasterize_surfels(leaves["means"], leaves["quats"], leaves["scales"], leaves["opacities"], leaves["colors"],
                            viewmats.to(device), Ks.to(device), 64, 48, backend=backend, **kw)
    loss = sum((w.to(device) * getattr(out, k)).sum() for w, k in zip(weights, OUTPUTS) if k != "median_depth")
    loss.backward()
    images = {k: getattr(out, k).detach().cpu() for k in OUTPUTS}
    return images, {k: v.grad.cpu() for k, v in leaves.items()}, out.meta


@pytest.mark.parametrize("kw", [dict(), dict(backgrounds=True)], ids=["plain", "backgrounds"])
def test_cuda_matches_reference(kw):
    p, viewmats, Ks = surfel_scene(n=300, width=64, height=48, n_cams=2, seed=4, dtype=torch.float32)
    if kw.get("backgrounds"):
        kw = dict(backgrounds=torch.tensor([[0.2, 0.4, 0.6], [1.0, 0.5, 0.0]]))
    g = torch.Generator().manual_seed(0)
    weights = [torch.rand(2, 48, 64, d, generator=g) for d in (3, 1, 1, 1, 3, 3, 1)]
    ref, ref_grads, ref_meta = _run("reference", p, viewmats, Ks, "cpu", weights, **kw)
    kw_cuda = {k: v.cuda() for k, v in kw.items()}
    cuda, cuda_grads, cuda_meta = _run("cuda", p, viewmats, Ks, "cuda", weights, **kw_cuda)
    assert torch.equal(cuda_meta.radii.cpu(), ref_meta.radii)
    # gsplat computes in float32 with fast-math exp: float32-level tolerances
    for name in ("render", "alpha", "normals", "normals_world", "depth", "distortion"):
        err = (cuda[name] - ref[name]).abs()
        assert float(err.mean()) < 1e-4 and float(err.max()) < 2e-2, \
            f"{name}: mean {err.mean():.3g} max {err.max():.3g}"
    # median depth jumps where T_i crosses 0.5: allow a few pixels to pick a neighbour in depth order
    off = (cuda["median_depth"] - ref["median_depth"]).abs() > 1e-3
    assert float(off.float().mean()) < 0.01
    for name in ("means", "quats", "scales", "opacities", "colors"):
        err = (cuda_grads[name] - ref_grads[name]).norm() / ref_grads[name].norm()
        assert err < 1e-2, f"{name} gradient relative error {err:.3g}"


def test_auto_picks_cuda_and_intersection_depth_is_refused_there():
    p, viewmats, Ks = surfel_scene(n=50, width=64, height=48, dtype=torch.float32)
    leaves = [v.detach().cuda() for v in p.values()]
    out = rasterize_surfels(*leaves, viewmats.cuda(), Ks.cuda(), 64, 48)
    assert out.render.is_cuda and out.meta.radii.shape == (2, 50, 2) and out.normals.shape == (2, 48, 64, 3)
    with pytest.raises(RasterizerInputError, match="not supported by the cuda backend"):
        rasterize_surfels(*leaves, viewmats.cuda(), Ks.cuda(), 64, 48, surfel_depth="intersection")
    ref = rasterize_surfels(*leaves, viewmats.cuda(), Ks.cuda(), 64, 48, backend="reference",
                            surfel_depth="intersection")
    assert ref.depth.is_cuda
