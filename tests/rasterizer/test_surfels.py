"""rasterize_surfels (2DGS), reference backend: against gsplat's pure-PyTorch 2DGS projection, an
independent per-pixel oracle written from the formulas, analytic single-surfel cases, finite differences."""

import math

import pytest
import torch

from rasterizer import RasterizerInputError, rasterize_surfels
from rasterizer.reference.sh import sh_to_color
from rasterizer.surfels import project_surfels
from rasterizer.tiles import TileGrid, tile_ranges

from .scenes import random_scene

OUTPUTS = ("render", "alpha", "depth", "median_depth", "normals", "normals_world", "distortion")


def surfel_scene(n=120, width=40, height=32, n_cams=2, seed=0, spread=1.0, dtype=torch.float64, **kw):
    """random_scene with two scales per surfel (larger than the 3D scenes': surfels are flat)."""
    p, viewmats, Ks = random_scene(n=n, width=width, height=height, n_cams=n_cams, seed=seed, spread=spread,
                                   dtype=dtype, **kw)
    p["scales"] = (p["scales"].detach()[:, :2] * 3.0).requires_grad_(True)
    return p, viewmats, Ks


def render(p, viewmats, Ks, width, height, **kw):
    return rasterize_surfels(p["means"], p["quats"], p["scales"], p["opacities"], p["colors"], viewmats, Ks, width,
                             height, **kw)


# ---------------------------------------------------------------------------- projection vs gsplat

def test_projection_matches_gsplat_pytorch_2dgs():
    gs = pytest.importorskip("gsplat.cuda._torch_impl_2dgs", reason="gsplat not installed")
    p, viewmats, Ks = surfel_scene(n=400, n_cams=3, spread=2.5, width=64, height=48)
    ours = project_surfels(p["means"], p["quats"], p["scales"], viewmats, Ks, 64, 48)
    scales3 = torch.cat([p["scales"], torch.ones_like(p["scales"][:, :1])], -1)  # gsplat's CUDA uses 1 there
    radii, means2d, depths, M, normals = gs._fully_fused_projection_2dgs(p["means"], p["quats"], scales3, viewmats,
                                                                           Ks, 64, 48)
    assert torch.equal(ours.radii, radii.to(torch.int32))
    vis = (radii > 0).all(-1)
    assert vis.any() and (~vis).any(), "scene should have both culled and visible surfels"
    torch.testing.assert_close(ours.means2d[vis], means2d[vis], rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(ours.depths[vis], depths[vis], rtol=1e-14, atol=0)
    torch.testing.assert_close(ours.ray_transforms[vis], M[vis], rtol=1e-13, atol=1e-12)
    torch.testing.assert_close(ours.normals[vis], normals[vis].to(torch.float64), rtol=1e-14, atol=1e-14)
    assert float(ours.ray_transforms.detach()[~vis].abs().max()) == 0.0


# ------------------------------------------------------------------ an independent per-pixel oracle

def oracle(p, viewmats, Ks, width, height, surfel_depth="centre"):
    """Pixel by pixel, surfel by surfel, in Python floats: the formulas of the 2DGS paper / gsplat's
    CUDA forward (its running sums for distortion: 1 - T and sum w z), over each pixel's tile list."""
    proj = project_surfels(p["means"], p["quats"], p["scales"], viewmats, Ks, width, height)
    C, N = proj.depths.shape
    grid = TileGrid.for_image(width, height)
    tmin, tmax = tile_ranges(proj.means2d, proj.radii, grid)
    colors = p["colors"].detach().tolist()
    opac = p["opacities"].detach().tolist()
    outs = {k: torch.zeros(C, height, width, d, dtype=torch.float64)
            for k, d in (("render", 3), ("alpha", 1), ("depth", 1), ("median_depth", 1), ("normals", 3),
                         ("distortion", 1))}
    for c in range(C):
        depth_c = proj.depths[c].detach().tolist()
        order = sorted(range(N), key=lambda i: (float(torch.tensor(depth_c[i], dtype=torch.float32)), i))
        for py in range(height):
            for px in range(width):
                x, y = px + 0.5, py + 0.5
                tx, ty = px // 16, py // 16
                T, rgb, nrm = 1.0, [0.0] * 3, [0.0] * 3
                wz = dist = median = 0.0
                for i in order:
                    lo, hi = tmin[c, i].tolist(), tmax[c, i].tolist()
                    if not (lo[0] <= tx < hi[0] and lo[1] <= ty < hi[1]):
                        continue
                    M = proj.ray_transforms[c, i].detach().tolist()
                    hu = [x * M[2][k] - M[0][k] for k in range(3)]
                    hv = [y * M[2][k] - M[1][k] for k in range(3)]
                    cr = [hu[1] * hv[2] - hu[2] * hv[1], hu[2] * hv[0] - hu[0] * hv[2], hu[0] * hv[1] - hu[1] * hv[0]]
                    if cr[2] == 0.0:
                        continue
                    u, v = cr[0] / cr[2], cr[1] / cr[2]
                    m2 = proj.means2d[c, i].detach().tolist()
                    exact, low_pass = u * u + v * v, 2.0 * ((m2[0] - x) ** 2 + (m2[1] - y) ** 2)
                    sigma = 0.5 * min(exact, low_pass)
                    alpha = min(0.999, opac[i] * math.exp(-sigma))
                    if sigma < 0 or alpha < 1.0 / 255.0:
                        continue
                    if T * (1.0 - alpha) <= 1e-4:
                        break
                    w = alpha * T
                    z = depth_c[i]
                    if surfel_depth == "intersection" and exact <= low_pass:
                        z = u * M[2][0] + v * M[2][1] + M[2][2]
                    n = proj.normals[c, i].detach().tolist()
                    for k in range(3):
                        rgb[k] += w * colors[i][k]
                        nrm[k] += w * n[k]
                    dist += 2.0 * (w * z * (1.0 - T) - w * wz)
                    wz += w * z
                    if T > 0.5:
                        median = z
                    T *= 1.0 - alpha
                outs["render"][c, py, px] = torch.tensor(rgb, dtype=torch.float64)
                outs["normals"][c, py, px] = torch.tensor(nrm, dtype=torch.float64)
                outs["alpha"][c, py, px, 0] = 1.0 - T
                outs["depth"][c, py, px, 0] = wz / max(1.0 - T, 1e-10)
                outs["median_depth"][c, py, px, 0] = median
                outs["distortion"][c, py, px, 0] = dist
    return outs


@pytest.mark.parametrize("surfel_depth", ["centre", "intersection"])
def test_reference_matches_per_pixel_oracle(surfel_depth):
    p, viewmats, Ks = surfel_scene(n=40, width=36, height=20, n_cams=2, seed=3)
    out = render(p, viewmats, Ks, 36, 20, surfel_depth=surfel_depth)
    want = oracle(p, viewmats, Ks, 36, 20, surfel_depth)
    assert float(out.alpha.detach().max()) > 0.9 and float(out.distortion.detach().max()) > 0.0, "scene should overlap"
    assert float(out.median_depth.detach().min()) == 0.0 and float(out.median_depth.detach().max()) > 0.0
    for name, ref in want.items():
        got = getattr(out, name).detach()
        tol = 1e-9 if name != "depth" else 1e-7  # wz / alpha: alpha = 1 - T vs sum w (rounding near alpha 0)
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")


# ------------------------------------------------------------------------ analytic single surfels

def one_surfel(quat, scales=(0.2, 0.1), centre=(0.1, -0.05, 3.0), opacity=0.8, size=48):
    f = 60.0
    Ks = torch.tensor([[[f, 0, size / 2], [0, f, size / 2], [0, 0, 1.0]]], dtype=torch.float64)
    viewmats = torch.eye(4, dtype=torch.float64)[None]
    p = dict(means=torch.tensor([centre], dtype=torch.float64), quats=torch.tensor([quat], dtype=torch.float64),
             scales=torch.tensor([scales], dtype=torch.float64), opacities=torch.tensor([opacity], dtype=torch.float64),
             colors=torch.tensor([[0.2, 0.5, 0.9]], dtype=torch.float64))
    return p, viewmats, Ks, size


def test_fronto_parallel_surfel():
    p, viewmats, Ks, size = one_surfel([1.0, 0.0, 0.0, 0.0])  # normal +z: turned to face the camera (-z)
    out = render(p, viewmats, Ks, size, size)
    a = out.alpha[0, ..., 0]
    seen = a > 0
    torch.testing.assert_close(out.depth[0, ..., 0][seen], torch.full_like(a[seen], 3.0))
    torch.testing.assert_close(out.median_depth[0, ..., 0][a > 0.5], torch.full_like(a[a > 0.5], 3.0))
    assert float(out.distortion.abs().max()) == 0.0  # one surfel: no spread in depth
    n = out.normals[0][seen] / a[seen, None]
    torch.testing.assert_close(n, torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64).expand_as(n))
    # the pixel at the centre's projection sees opacity * exp(-0.5 r^2) with r the offset in sigmas
    cx, cy = 60 * 0.1 / 3 + 24, 60 * -0.05 / 3 + 24
    px, py = int(cx), int(cy)
    du, dv = (px + 0.5 - cx) * 3 / 60 / 0.2, (py + 0.5 - cy) * 3 / 60 / 0.1
    want = 0.8 * math.exp(-0.5 * (du * du + dv * dv))
    torch.testing.assert_close(a[py, px], torch.tensor(want, dtype=torch.float64))


def test_intersection_depth_is_the_ray_plane_intersection():
    half = math.radians(35) / 2  # tilted 35 degrees about x and then about y
    qx = torch.tensor([math.cos(half), math.sin(half), 0, 0], dtype=torch.float64)
    qy = torch.tensor([math.cos(half), 0, math.sin(half), 0], dtype=torch.float64)
    w1, v1 = qy[0], qy[1:]
    w2, v2 = qx[0], qx[1:]
    q = torch.cat([(w1 * w2 - v1 @ v2)[None], w1 * v2 + w2 * v1 + torch.linalg.cross(v1, v2)])
    p, viewmats, Ks, size = one_surfel(q.tolist(), scales=(0.3, 0.25), opacity=0.9)
    out = render(p, viewmats, Ks, size, size, surfel_depth="intersection")
    from rasterizer.quaternions import quat_to_rotmat

    n = quat_to_rotmat(q)[:, 2]
    centre = p["means"][0]
    seen = (out.alpha[0, ..., 0] > 0.5).nonzero()
    assert len(seen) > 20
    for py, px in seen.tolist():
        ray = torch.tensor([(px + 0.5 - size / 2) / 60, (py + 0.5 - size / 2) / 60, 1.0], dtype=torch.float64)
        z = float((n @ centre) / (n @ ray))  # the camera-space z of the ray's point on the plane
        assert abs(float(out.depth[0, py, px, 0]) - z) < 1e-12
        assert abs(float(out.median_depth[0, py, px, 0]) - z) < 1e-12
    centre_depth = render(p, viewmats, Ks, size, size).depth[0, ..., 0]
    assert torch.allclose(centre_depth[out.alpha[0, ..., 0] > 0.5], torch.tensor(3.0, dtype=torch.float64))


def test_world_normals_rotate_the_camera_normals():
    p, viewmats, Ks = surfel_scene(n=60, n_cams=3, seed=5)
    out = render(p, viewmats, Ks, 40, 32)
    back = torch.einsum("cij,chwj->chwi", viewmats[:, :3, :3], out.normals_world)
    torch.testing.assert_close(back, out.normals, rtol=1e-12, atol=1e-12)
    assert float(out.normals.detach().abs().max()) > 0.1


# ------------------------------------------------------------------ colours, SH, backgrounds, edges

def test_sh_colours_and_backgrounds():
    p, viewmats, Ks = surfel_scene(n=60, n_cams=2, seed=7, sh_degree=2)
    bg = torch.tensor([[0.1, 0.2, 0.3], [0.9, 0.8, 0.7]], dtype=torch.float64)
    out = render(p, viewmats, Ks, 40, 32, sh_degree=2, backgrounds=bg)
    proj = project_surfels(p["means"], p["quats"], p["scales"], viewmats, Ks, 40, 32)
    colours = sh_to_color(2, p["means"], p["colors"], viewmats, proj.radii)  # [C, N, 3]
    plain = rasterize_surfels(p["means"], p["quats"], p["scales"], p["opacities"], colours, viewmats, Ks, 40, 32)
    torch.testing.assert_close(out.render, plain.render + (1 - plain.alpha) * bg[:, None, None], rtol=1e-12,
                               atol=1e-12)
    split = (p["colors"][:, :1], p["colors"][:, 1:])
    again = rasterize_surfels(p["means"], p["quats"], p["scales"], p["opacities"], split, viewmats, Ks, 40, 32,
                              sh_degree=2, backgrounds=bg)
    torch.testing.assert_close(again.render, out.render, rtol=0, atol=0)


def test_no_surfels_renders_background_and_keeps_the_graph():
    p, viewmats, Ks = surfel_scene(n=0, n_cams=1)
    bg = torch.tensor([[0.3, 0.4, 0.5]], dtype=torch.float64)
    out = render(p, viewmats, Ks, 40, 32, backgrounds=bg)
    assert torch.equal(out.render, bg[:, None, None].expand(1, 32, 40, 3))
    assert float(out.alpha.detach().abs().max()) == 0.0 and torch.equal(out.meta.transmittance, torch.ones(1, 32, 40, 1,
                                                                                                 dtype=torch.float64))
    sum(getattr(out, k).sum() for k in OUTPUTS).backward()
    assert p["means"].grad is not None and p["means"].grad.shape == (0, 3)


def test_meta_shapes():
    p, viewmats, Ks = surfel_scene(n=30, n_cams=2)
    m = render(p, viewmats, Ks, 40, 32).meta
    assert m.radii.shape == (2, 30, 2) and m.radii.dtype == torch.int32
    assert m.ray_transforms.shape == (2, 30, 3, 3) and m.normals.shape == (2, 30, 3)
    assert (m.tiles_x, m.tiles_y, m.n_cameras, m.width, m.height) == (3, 2, 2, 40, 32)


# --------------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("change, match", [
    (dict(scales=torch.ones(5, 3, dtype=torch.float64)),
     r"rasterize_surfels: `scales` has shape \[5, 3\], expected \[5, 2\]"),
    (dict(scales=-torch.ones(5, 2, dtype=torch.float64)), r"rasterize_surfels: `scales` has negative values"),
    (dict(quats=torch.zeros(5, 4, dtype=torch.float64)), r"rasterize_surfels: `quats` has zero-norm rows"),
    (dict(opacities=torch.full((5,), 2.0, dtype=torch.float64)), r"`opacities` has values outside \[0, 1\]"),
    (dict(backend="cpu", tile_size=8), r"`tile_size` is 8; the cpu backend composites 16x16 tiles"),
    (dict(backend="cuda"), r"backend='cuda' needs tensors on a CUDA device"),
    (dict(backend="vulkan"), r"`backend` is 'vulkan'"),
    (dict(surfel_depth="mean"), r"`surfel_depth` is 'mean'; expected one of \('centre', 'intersection'\)"),
])
def test_bad_input_is_refused_with_a_clear_message(change, match):
    p = dict(means=torch.rand(5, 3, dtype=torch.float64) + torch.tensor([0, 0, 2.0], dtype=torch.float64),
             quats=torch.randn(5, 4, dtype=torch.float64), scales=torch.full((5, 2), 0.1, dtype=torch.float64),
             opacities=torch.full((5,), 0.5, dtype=torch.float64), colors=torch.rand(5, 3, dtype=torch.float64))
    options = {k: change.pop(k) for k in ("backend", "surfel_depth", "tile_size") if k in change}
    p.update(change)
    _, viewmats, Ks = surfel_scene(n=1)
    with pytest.raises(RasterizerInputError, match=match):
        render(p, viewmats, Ks, 40, 32, **options)


def test_gaussian_messages_still_name_rasterize_gaussians():
    from rasterizer import rasterize_gaussians

    p, viewmats, Ks = random_scene(n=5)
    with pytest.raises(RasterizerInputError, match=r"^rasterize_gaussians: `scales`"):
        rasterize_gaussians(p["means"], p["quats"], p["scales"][:, :2], p["opacities"], p["colors"], viewmats, Ks,
                            64, 48)


# ------------------------------------------------------------------------------ finite differences

@pytest.mark.parametrize("surfel_depth", ["centre", "intersection"])
def test_gradcheck_float64(surfel_depth):
    g = torch.Generator().manual_seed(11)
    n = 4
    means = torch.tensor([[0.0, 0.0, 3.0], [0.15, 0.1, 3.4], [-0.1, 0.05, 3.8], [0.05, -0.1, 2.6]],
                         dtype=torch.float64)
    quats = torch.nn.functional.normalize(torch.tensor([[1.0, 0, 0, 0]]).double() + 0.3 * torch.randn(
        n, 4, generator=g, dtype=torch.float64), dim=-1)
    scales = torch.tensor([[0.35, 0.25], [0.3, 0.3], [0.4, 0.2], [0.05, 0.08]], dtype=torch.float64)
    opac = torch.tensor([0.6, 0.7, 0.8, 0.5], dtype=torch.float64)
    colors = torch.rand(n, 3, generator=g, dtype=torch.float64)
    f = 30.0
    Ks = torch.tensor([[[f, 0, 8.0], [0, f, 8.0], [0, 0, 1.0]]], dtype=torch.float64)
    viewmats = torch.eye(4, dtype=torch.float64)[None]
    weights = [torch.rand(1, 16, 16, d, generator=g, dtype=torch.float64) for d in (3, 1, 1, 1, 3, 3, 1)]

    def loss(means, quats, scales, opac, colors):
        out = rasterize_surfels(means, quats, scales, opac, colors, viewmats, Ks, 16, 16, surfel_depth=surfel_depth)
        return sum((w * getattr(out, k)).sum() for w, k in zip(weights, OUTPUTS))

    inputs = tuple(t.clone().requires_grad_(True) for t in (means, quats, scales, opac, colors))
    assert torch.autograd.gradcheck(loss, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


# ------------------------------------------------------- the cuda wrapper's plumbing, without a GPU

def test_cuda_wrapper_plumbing_with_a_stand_in_for_gsplat(monkeypatch):
    """rasterizer.surfels.cuda with gsplat.rasterization_2dgs replaced by a stand-in that returns the
    reference's results in gsplat's layout (world normals, RGB+ED channels, 7-tuple): checks argument
    translation (three scales, RGB+ED, distloss) and the unpacking, frames and meta of the wrapper.
    The real comparison with gsplat's kernels is tests/rasterizer/test_surfels_cuda.py (GPU only)."""
    import gsplat

    from rasterizer.surfels import cuda as surfel_cuda

    p, viewmats, Ks = surfel_scene(n=50, n_cams=2, seed=9)
    bg = torch.tensor([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]], dtype=torch.float64)
    ref = render(p, viewmats, Ks, 40, 32, backgrounds=bg)
    seen = {}

    def stand_in(means, quats, scales, opacities, colors, viewmats_, Ks_, width, height, **kw):
        seen.update(kw, scales=scales)
        colours = torch.cat([ref.render, ref.depth], -1)
        meta = {"radii": ref.meta.radii, "means2d": ref.meta.means2d, "depths": ref.meta.depths,
                "ray_transforms": ref.meta.ray_transforms, "normals": ref.meta.normals,
                "opacities": ref.meta.opacities, "width": width, "height": height, "tile_size": 16, "tile_width": 3,
                "tile_height": 2, "n_cameras": 2, "gradient_2dgs": torch.zeros(2, 50, 2)}
        return colours, ref.alpha, ref.normals_world, None, ref.distortion, ref.median_depth, meta

    monkeypatch.setattr(gsplat, "rasterization_2dgs", stand_in)
    monkeypatch.setattr(surfel_cuda, "require_cuda", lambda means: None)
    out = surfel_cuda.rasterize(p["means"], p["quats"], p["scales"], p["opacities"], p["colors"], viewmats, Ks, 40,
                                32, sh_degree=None, near_plane=0.01, far_plane=1e10, backgrounds=bg, tile_size=16)
    assert seen["render_mode"] == "RGB+ED" and seen["distloss"] is True and seen["packed"] is False
    assert seen["scales"].shape == (50, 3) and torch.equal(seen["scales"][:, 2], torch.ones(50, dtype=torch.float64))
    for name in OUTPUTS:
        torch.testing.assert_close(getattr(out, name), getattr(ref, name), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.meta.transmittance, 1 - ref.alpha)
    assert out.meta.tiles_x == 3 and "gradient_2dgs" in out.meta.backend_extras


def test_cuda_wrapper_refuses_cpu_tensors():
    from rasterizer.surfels import cuda as surfel_cuda

    with pytest.raises(RuntimeError, match="CPU tensors"):
        surfel_cuda.require_cuda(torch.zeros(1, 3))
