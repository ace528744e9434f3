"""Hybrid renderer core (recon.hybrid.render / shading / secondary / proxy): closed-form compositing, shadows
both ways, gradients, secondary-ray geometry, the TSDF proxy, end to end on a 3dgs model with a mesh."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("open3d")
pytest.importorskip("trimesh")

from rasterizer import Camera
from recon.hybrid.assets import (Light, Material, MeshAsset, MeshPart, PlacedAsset, Pose, AssetPath,
                                 Y_UP_TO_GROUND, load_mesh)
from recon.hybrid.raycast import MeshScene
from recon.hybrid.render import (HybridRenderer, composite, depth_limit_from_hits, primary_rays)
from recon.hybrid import optics
from recon.hybrid.shading import SHADOW_STRENGTH
from recon.models.gaussians import GaussianModel, front_of_limit, rgb_to_sh0

SPOT = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "meshes" / "spot" / "spot_triangulated.obj"
FRAME = np.eye(3)  # ground frame = world axes (e1 = x, e2 = y, up = z)
ALBEDO = 0.8
AMBIENT = 0.35


def world_asset(vertices_world, faces, material=Material(), color=(ALBEDO,) * 3, path=None) -> PlacedAsset:
    """An asset whose file-frame vertices land on ``vertices_world`` under the identity pose and FRAME."""
    v = np.asarray(vertices_world, np.float64) @ Y_UP_TO_GROUND  # A^T w, row-wise
    part = MeshPart(vertices=v, faces=np.asarray(faces, np.int32), color=np.asarray(color, np.float32))
    return PlacedAsset(MeshAsset("test", [part]), Pose(), material, path)


def quad_z(z, x0, x1, y0, y1, **kw) -> PlacedAsset:
    """A quad in the plane z = ``z`` over [x0, x1] x [y0, y1]."""
    v = [[x0, y0, z], [x1, y0, z], [x1, y1, z], [x0, y1, z]]
    return world_asset(v, [[0, 1, 2], [0, 2, 3]], **kw)


def camera(W, H, f, cx=None, cy=None, w2c=None) -> Camera:
    """Pinhole camera; default at the origin looking down +z (world = camera axes)."""
    K = [[f, 0, W / 2 if cx is None else cx], [0, f, H / 2 if cy is None else cy], [0, 0, 1]]
    return Camera.from_arrays(np.eye(4) if w2c is None else w2c, K, W, H, dtype=torch.float32)


def gaussians(means, scales, opacities, colors, quats=None) -> GaussianModel:
    """A degree-0 3dgs model: means [N, 3], per-axis scales [N, 3], opacities [N], colours [N, 3]."""
    means = torch.as_tensor(np.asarray(means, np.float32))
    N = len(means)
    op = torch.as_tensor(np.asarray(opacities, np.float32))
    params = {"means": means,
              "quats": torch.tensor([[1.0, 0, 0, 0]]).repeat(N, 1) if quats is None else torch.as_tensor(quats),
              "log_scales": torch.log(torch.as_tensor(np.asarray(scales, np.float32))),
              "logit_opacities": torch.log(op / (1 - op)),
              "sh0": rgb_to_sh0(torch.as_tensor(np.asarray(colors, np.float32)))[:, None],
              "shN": torch.zeros(N, 0, 3)}
    return GaussianModel(params, 0, 1.0)


def look_at(center, target=(0, 0, 0), up=(0, 0, 1)) -> np.ndarray:
    """[4, 4] OpenCV world-to-camera looking from ``center`` at ``target``."""
    center, target = np.asarray(center, float), np.asarray(target, float)
    fwd = target - center
    fwd /= np.linalg.norm(fwd)
    up = np.asarray(up, float) if abs(np.dot(fwd, up)) < 0.95 else np.array([0.0, 1.0, 0.0])
    right = np.cross(fwd, up)
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    R = np.stack([right, down, fwd])
    w2c = np.eye(4)
    w2c[:3, :3], w2c[:3, 3] = R, -R @ center
    return w2c


# ------------------------------------------------------------------------------------------ rays


def test_primary_rays_give_camera_z_and_pixel_centres():
    w2c = look_at([1.0, -2.0, 0.5], [0.2, 0.1, 0.0])
    cam = camera(7, 5, 6.0, 3.1, 2.4, w2c)
    o, d, zpt = primary_rays(cam)
    assert np.allclose(np.linalg.norm(d, axis=1), 1.0)
    p = o + 2.5 * d  # points at distance 2.5
    pc = p @ w2c[:3, :3].T + w2c[:3, 3]
    assert np.allclose(pc[:, 2], 2.5 * zpt)
    K = cam.K_numpy()
    uv = (pc[:, :2] / pc[:, 2:]) * [K[0, 0], K[1, 1]] + [K[0, 2], K[1, 2]]
    j, i = np.divmod(np.arange(35), 7)
    assert np.allclose(uv, np.stack([i + 0.5, j + 0.5], 1))


# ------------------------------------------------------------------------------------------ compositing


def test_gaussian_behind_quad_gives_zero_colour_and_zero_gradient():
    model = gaussians([[0.0, 0.0, 5.0]], [[0.3] * 3], [0.9], [[1.0, 0.0, 0.0]])
    wall = quad_z(3.0, -10, 10, -10, 10)
    r = HybridRenderer(model, [wall], [], FRAME, ambient=AMBIENT, background=[0.0, 0.0, 1.0])
    cam = camera(16, 12, 12.0)
    out = r.render(cam)
    assert torch.equal(out.rgb, torch.full((12, 16, 3), ALBEDO * AMBIENT, dtype=out.rgb.dtype))
    out.rgb.sum().backward()
    for name, p in model.params.items():
        assert p.grad is None or not p.grad.any(), name
    # the same Gaussian without the wall is visible and gets gradient: the test can fail
    model.zero_grad()
    free = HybridRenderer(model, [quad_z(3.0, 50, 51, 50, 51)], [], FRAME, background=[0.0, 0.0, 1.0])
    o2 = free.render(cam)
    assert (o2.rgb[..., 0] > 0.1).any()
    o2.rgb.sum().backward()
    assert model.params["means"].grad.abs().sum() > 0
    assert (out.asset_id == 0).all() and np.allclose(out.depth, 3.0, rtol=1e-5)


def test_gaussian_in_front_dims_the_mesh_by_one_minus_alpha():
    f, z, s, o = 10.0, 2.0, 0.1, 0.6
    colour = np.array([0.2, 0.9, 0.4])
    model = gaussians([[0.0, 0.0, z]], [[s] * 3], [o], [colour])
    wall = quad_z(3.0, -10, 10, -10, 10)
    r = HybridRenderer(model, [wall], [], FRAME, ambient=AMBIENT)
    out = r.render(camera(9, 9, f, 4.5, 4.5))  # pixel (4, 4)'s centre is the principal point
    rgb = out.rgb.detach().double().numpy()
    mesh = ALBEDO * AMBIENT
    var = (f * s / z) ** 2 + 0.3  # J Sigma J^T + eps2d, isotropic on the optical axis
    for (i, j) in [(4, 4), (5, 4), (5, 5), (4, 2)]:
        r2 = (i - 4) ** 2 + (j - 4) ** 2
        alpha = o * math.exp(-0.5 * r2 / var)
        assert np.allclose(rgb[j, i], alpha * colour + (1 - alpha) * mesh, atol=2e-6), (i, j)
    assert out.asset_id[4, 4] == -1 and out.asset_id[0, 0] == 0  # fragments >= 0.5 opaque hide the asset


def test_asset_mask_and_depth_follow_the_visible_surface():
    model = gaussians([[0.0, 0.0, 2.0]], [[0.1] * 3], [0.9], [[1.0, 1.0, 1.0]])
    r = HybridRenderer(model, [quad_z(3.0, -10, 10, -10, 10)], [], FRAME)
    out = r.render(camera(9, 9, 10.0, 4.5, 4.5))
    assert out.asset_id[4, 4] == -1 and abs(out.depth[4, 4] - 2.0) < 1e-4  # the opaque Gaussian in front
    assert out.asset_id[0, 0] == 0 and abs(out.depth[0, 0] - 3.0) < 1e-4  # the quad (camera z, not distance)


def test_hybrid_compositor_gradcheck_float64():
    """d(pixels)/d(Gaussian parameters) through render_front's depth limit and the compositor (reference
    backend, float64), with a mesh behind part of the image and a scene-shadow factor."""
    W, H = 6, 5
    cam = camera(W, H, 5.0)
    scene = MeshScene([quad_z(2.5, -0.2, 10, -10, 10)], FRAME)
    o, d, zpt = primary_rays(cam)
    hits = scene.first_hit(o, d)
    limit = torch.from_numpy(depth_limit_from_hits(hits.t, zpt, H, W)).double()
    assert torch.isfinite(limit).any() and (~torch.isfinite(limit)).any()
    behind = torch.where(torch.from_numpy(hits.hit)[:, None], torch.tensor([0.3, 0.5, 0.2], dtype=torch.float64),
                         torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)).reshape(H, W, 3)
    factor = torch.from_numpy(np.where(np.arange(H * W) % 3 == 0, 1 - SHADOW_STRENGTH, 1.0)).reshape(H, W, 1)
    viewmats, Ks = cam.world_to_cam[None].double(), cam.K[None].double()
    gen = torch.Generator().manual_seed(3)
    means = torch.tensor([[0.1, 0.0, 2.0], [-0.2, 0.1, 3.0], [0.0, -0.1, 2.4]], dtype=torch.float64)
    quats = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    scales = torch.tensor([[0.3, 0.2, 0.25], [0.4, 0.3, 0.3], [0.2, 0.3, 0.2]], dtype=torch.float64)
    opac = torch.tensor([0.5, 0.7, 0.6], dtype=torch.float64)
    colors = torch.rand(3, 3, generator=gen, dtype=torch.float64)

    def pixels(means, quats, scales, opac, colors):
        rgb, trans, _ = front_of_limit(means, quats, scales, opac, colors, viewmats, Ks, W, H, None, limit,
                                       backend="reference")
        return composite(rgb[0], trans[0], behind, factor)

    inputs = tuple(t.clone().requires_grad_(True) for t in (means, quats, scales, opac, colors))
    assert torch.autograd.gradcheck(pixels, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
    # the Gaussian behind the quad (z 3.0 > 2.5) gets no gradient from pixels on the quad
    out = pixels(*inputs)
    mask = torch.from_numpy(hits.hit).reshape(H, W)
    g = torch.autograd.grad(out[mask].sum(), inputs[0], retain_graph=True)[0]
    assert not g[1].any() and g[0].abs().sum() > 0


# ------------------------------------------------------------------------------------------ shadows


def shadow_setup(theta_deg=55.0):
    """Sun toward (sin t, 0, -cos t): light comes from the camera's side; floor at z = 4, an occluder
    square [-0.5, 0.5]^2 at z = 3; the camera at the origin looks down +z."""
    t = math.radians(theta_deg)
    sun = Light("sun", direction=(math.sin(t), 0.0, -math.cos(t)), intensity=1.0)
    occ = quad_z(3.0, -0.5, 0.5, -0.5, 0.5)
    cam = camera(80, 64, 32.0)
    o, d, _ = primary_rays(cam)
    tan = math.tan(t)

    def geometric_shadow(z_floor=4.0):
        """[R] bool, and [R] distance of the shadow-ray crossing to the occluder's edge (for tolerance)."""
        p = o + ((z_floor - o[:, 2]) / d[:, 2])[:, None] * d
        x, y = p[:, 0] + tan * (z_floor - 3.0), p[:, 1]
        inside = (np.abs(x) <= 0.5) & (np.abs(y) <= 0.5)
        edge = np.minimum(np.abs(np.abs(x) - 0.5), np.abs(np.abs(y) - 0.5))
        return inside, edge

    return sun, occ, cam, geometric_shadow, math.cos(t)


def test_asset_shadow_on_asset_only_where_shadow_ray_is_blocked():
    sun, occ, cam, geometric_shadow, cos = shadow_setup()
    floor = quad_z(4.0, -20, 20, -20, 20)
    model = gaussians([[0.0, 0.0, -5.0]], [[0.1] * 3], [0.5], [[1.0, 1.0, 1.0]])  # behind the camera
    r = HybridRenderer(model, [floor, occ], [sun], FRAME, ambient=AMBIENT)
    out = r.render(cam)
    rgb = out.rgb.detach().double().numpy().reshape(-1, 3)
    floor_px = out.asset_id.ravel() == 0
    lit, dark = ALBEDO * (AMBIENT + cos), ALBEDO * AMBIENT
    inside, edge = geometric_shadow()
    sure = edge > 1e-3
    shadowed = np.isclose(rgb[:, 0], dark, atol=1e-6)
    assert np.all(np.isclose(rgb[floor_px & ~shadowed, 0], lit, atol=1e-6))
    assert np.array_equal(shadowed[floor_px & sure], inside[floor_px & sure])
    assert inside[floor_px].sum() > 20 and (~inside[floor_px]).sum() > 20  # both kinds of pixels are seen
    assert np.allclose(rgb[out.asset_id.ravel() == 1, 0], lit, atol=1e-6)  # the occluder faces the sun
    off = r.render(cam, shadows=False).rgb.detach().double().numpy().reshape(-1, 3)
    assert np.allclose(off[floor_px, 0], lit, atol=1e-6)


def test_asset_shadow_on_scene_darkens_by_shadow_strength_exactly_there():
    sun, occ, cam, geometric_shadow, _ = shadow_setup()
    # the scene: one flat, wide Gaussian floor at z = 4 (facing the camera: its expected depth is 4 everywhere)
    model = gaussians([[0.0, 0.0, 4.0]], [[8.0, 8.0, 1e-3]], [0.95], [[0.7, 0.6, 0.5]])
    r = HybridRenderer(model, [occ], [sun], FRAME, ambient=AMBIENT)
    out = r.render(cam).rgb.detach().double().numpy().reshape(-1, 3)
    ref = r.render(cam, shadows=False)
    base = ref.rgb.detach().double().numpy().reshape(-1, 3)
    scene_px = ref.asset_id.ravel() < 0
    inside, edge = geometric_shadow()
    sure = scene_px & (edge > 1e-3)
    ratio = out[:, 0] / base[:, 0]
    assert np.allclose(ratio[sure & inside], 1 - SHADOW_STRENGTH, atol=1e-5)
    assert np.allclose(ratio[sure & ~inside], 1.0, atol=1e-6)
    assert (sure & inside).sum() > 20
    # gradients still flow to the scene through shadowed pixels
    rgb = r.render(cam).rgb
    rgb.sum().backward()
    assert model.params["sh0"].grad.abs().sum() > 0


def test_scene_shadow_falls_on_the_proxy_surface_where_the_ray_meets_it():
    sun, occ, cam, geometric_shadow, _ = shadow_setup()
    # the Gaussians' expected depth says z = 4, the proxy (fused over the training views) says z = 4.5: the
    # shadow is cast where the proxy is, not where this view's expected depth is
    floor = (np.array([[-50, -50, 4.5], [50, -50, 4.5], [50, 50, 4.5], [-50, 50, 4.5]]), np.array([[0, 1, 2], [0, 2, 3]]))
    model = gaussians([[0.0, 0.0, 4.0]], [[8.0, 8.0, 1e-3]], [0.95], [[0.7, 0.6, 0.5]])
    r = HybridRenderer(model, [occ], [sun], FRAME, proxy=floor, ambient=AMBIENT)
    out = r.render(cam).rgb.detach().double().numpy().reshape(-1, 3)
    ref = r.render(cam, shadows=False)
    ratio = out[:, 0] / ref.rgb.detach().double().numpy().reshape(-1, 3)[:, 0]
    scene_px = ref.asset_id.ravel() < 0
    at_proxy, edge = geometric_shadow(4.5)
    at_depth, edge4 = geometric_shadow(4.0)
    sure = scene_px & (edge > 1e-3)
    assert np.allclose(ratio[sure & at_proxy], 1 - SHADOW_STRENGTH, atol=1e-5)
    assert np.allclose(ratio[sure & ~at_proxy], 1.0, atol=1e-6)
    assert (sure & (at_proxy != at_depth) & (edge4 > 1e-3)).sum() > 10  # the two surfaces' shadows differ


def test_proxy_shadows_the_asset_but_never_the_scene():
    sun, occ, cam, geometric_shadow, cos = shadow_setup()
    # the proxy is a big occluder between the sun and everything: it darkens the asset, not the scene
    roof = (np.array([[-50, -50, -1.0], [50, -50, -1.0], [50, 50, -1.0], [-50, 50, -1.0]]),
            np.array([[0, 1, 2], [0, 2, 3]]))
    floor_g = gaussians([[0.0, 0.0, 4.0]], [[8.0, 8.0, 1e-3]], [0.95], [[0.7, 0.6, 0.5]])
    r = HybridRenderer(floor_g, [occ], [sun], FRAME, proxy=roof, ambient=AMBIENT)
    out = r.render(cam)
    rgb = out.rgb.detach().double().numpy().reshape(-1, 3)
    occ_px = out.asset_id.ravel() == 0
    assert occ_px.sum() > 10
    base = r.render(cam, shadows=False).rgb.detach().double().numpy().reshape(-1, 3)
    assert np.allclose(rgb[occ_px], base[occ_px] * AMBIENT / (AMBIENT + cos), atol=1e-6)  # asset in the roof's shadow
    inside, edge = geometric_shadow()
    scene_px = ~occ_px & (edge > 1e-3)
    assert np.allclose(rgb[scene_px & ~inside], base[scene_px & ~inside], atol=1e-6)  # roof: no scene shadow


def test_point_light_falls_off_with_distance_squared():
    light = Light("point", position=(0.0, 0.0, 1.0), intensity=2.0)
    r = HybridRenderer(gaussians([[0, 0, -5.0]], [[0.1] * 3], [0.5], [[1, 1, 1]]),
                       [quad_z(3.0, -10, 10, -10, 10)], [light], FRAME, ambient=0.0)
    out = r.render(camera(9, 9, 10.0, 4.5, 4.5))
    assert np.isclose(float(out.rgb[4, 4, 0].detach()), ALBEDO * 2.0 / 4.0, rtol=1e-5)  # n.l = 1, distance 2


# ------------------------------------------------------------------------------------------ secondary rays


class PlaneScene:
    """A scene double for secondary rays: a coloured opaque plane x = ``x0`` (trace_rays: its colour where
    the ray meets it within [t_min, t_max]), the front pass through a 3dgs model with nothing visible."""

    def __init__(self, x0, colour, half_y=False, axis=0, region=None):
        self.x0, self.colour, self.half_y = x0, torch.tensor(colour, dtype=torch.float32), half_y
        self.axis, self.region = axis, region  # the plane's normal axis; region(points) -> bool: where it is
        self.inner = gaussians([[0, 0, -50.0]], [[0.1] * 3], [0.5], [[1, 1, 1]])
        self.device = self.inner.device
        self.calls, self.times = [], []

    def render_front(self, cameras, depth_limit, *, t=None, backend="auto"):
        self.times.append(("front", t))
        return self.inner.render_front(cameras, depth_limit, t=t, backend=backend)

    def trace_rays(self, origins, dirs, t_min, t_max, *, t=None):
        self.calls.append(len(origins))
        self.times.append(("trace", t))
        a = self.axis
        s = ((0.0 if self.x0 is None else self.x0) - origins[:, a]) / dirs[:, a]
        hit = (s > t_min) & (s < t_max) & torch.isfinite(s) & (self.x0 is not None)
        if self.half_y:  # only the half y > 0 of the plane is there
            hit &= origins[:, 1] + s * dirs[:, 1] > 0
        if self.region is not None:
            hit &= self.region(origins + s[:, None] * dirs)
        rgb = torch.where(hit[:, None], self.colour[None], torch.zeros(1, 3))
        return rgb, (~hit).float()[:, None], torch.where(hit, s, torch.zeros_like(s))[:, None]


def test_mirror_shows_the_scene_where_reflection_geometry_says():
    # a mirror in the plane z = x + 3 (normal along (-1, 0, 1)) turns the camera's +z rays toward +x, where
    # the scene holds a red half plane x = 5, y > 0; elsewhere the reflection escapes to the background
    mirror = world_asset([[-2, -2, 1.0], [2, -2, 5.0], [2, 2, 5.0], [-2, 2, 1.0]], [[0, 1, 2], [0, 2, 3]],
                         material=Material("mirror", tint=(0.9, 0.9, 0.9)))
    model = PlaneScene(5.0, [1.0, 0.0, 0.0], half_y=True)
    r = HybridRenderer(model, [mirror], [], FRAME, background=[0.0, 0.0, 1.0], bounces=1)
    cam = camera(16, 16, 10.0, 8.3, 7.9)
    out = r.render(cam, time=0.3)
    assert set(model.times) == {("front", 0.3), ("trace", 0.3)}  # scene time reaches both passes
    rgb = out.rgb.detach().numpy().reshape(-1, 3)
    o, d, _ = primary_rays(cam)
    n = np.array([-1.0, 0, 1.0]) / math.sqrt(2)
    t = (3.0 - o @ [-1, 0, 1]) / (d @ [-1, 0, 1])
    p = o + t[:, None] * d
    on_mirror = (np.abs(p[:, 1]) <= 2) & (p[:, 0] >= -2) & (p[:, 0] <= 2)
    refl = d - 2 * (d @ n)[:, None] * n
    s = (5.0 - p[:, 0]) / refl[:, 0]
    sees_red = on_mirror & (s > 0) & (p[:, 1] + s * refl[:, 1] > 0)
    assert sees_red.sum() > 30 and (on_mirror & ~sees_red).sum() > 30
    assert np.allclose(rgb[sees_red], [0.9, 0.0, 0.0], atol=1e-6)
    assert np.allclose(rgb[on_mirror & ~sees_red], [0.0, 0.0, 0.9], atol=1e-6)
    assert np.allclose(rgb[~on_mirror], [0.0, 0.0, 1.0], atol=1e-6)
    assert np.array_equal(out.asset_id.ravel() == 0, on_mirror)
    assert "secondary" in out.timings


def test_bounce_limit_zero_shows_background_and_glass_splits_by_fresnel():
    glass_wall = quad_z(3.0, -10, 10, -10, 10, material=Material("glass", ior=1.5))
    model = PlaneScene(None, [1.0, 0.0, 0.0])  # an empty scene
    cam = camera(5, 5, 50.0, 2.5, 2.5)
    bg = [0.2, 0.4, 0.6]
    zero = HybridRenderer(model, [glass_wall], [], FRAME, background=bg, bounces=0).render(cam)
    assert np.allclose(zero.rgb.detach().numpy(), bg, atol=1e-6)
    # one bounce: reflected (F = 0.04) and refracted (0.96) paths both escape to the background -> 1 x bg
    one = HybridRenderer(model, [glass_wall], [], FRAME, background=bg, bounces=1).render(cam)
    assert np.allclose(one.rgb.detach().numpy(), bg, atol=1e-5)
    assert model.calls and model.calls[-1] == 2 * 25  # reflected + refracted ray per pixel


# ------------------------------------------------------------------------------------------ time


def test_keyframed_asset_moves_and_mesh_scene_is_cached_when_static():
    quad = quad_z(3.0, -0.3, 0.3, -0.3, 0.3)
    path = AssetPath((0.0, 1.0), (Pose((-1.0, 0.0, 0.0)), Pose((1.0, 0.0, 0.0))))
    moving = PlacedAsset(quad.mesh, Pose(), Material(), path)
    model = gaussians([[0, 0, -5.0]], [[0.1] * 3], [0.5], [[1, 1, 1]])
    cam = camera(32, 16, 16.0)
    r = HybridRenderer(model, [moving], [], FRAME)
    a, b = r.render(cam, time=0.0), r.render(cam, time=1.0)
    cols = lambda f: np.nonzero((f.asset_id >= 0).any(0))[0]
    assert cols(a).mean() < 16 < cols(b).mean()
    static = HybridRenderer(model, [quad], [], FRAME)
    assert static.mesh_scene(0.0) is static.mesh_scene(0.7)


# ------------------------------------------------------------------------------------------ proxy (TSDF)


def test_tsdf_round_trip_of_a_known_mesh():
    import trimesh
    from recon.geometry import mesh_extraction as mx
    from recon.hybrid.proxy import fuse_views
    from recon.geometry.mesh_metrics import chamfer_distance

    box = trimesh.creation.box(extents=[1.0, 0.6, 0.8])
    scene = MeshScene([world_asset(box.vertices, box.faces)], FRAME)
    size, f = 96, 90.0
    K = np.array([[f, 0, size / 2], [0, f, size / 2], [0, 0, 1.0]])
    n = 20
    i = np.arange(n) + 0.5
    phi, th = np.arccos(1 - 2 * i / n), np.pi * (1 + 5 ** 0.5) * i
    centres = 2.5 * np.stack([np.sin(phi) * np.cos(th), np.sin(phi) * np.sin(th), np.cos(phi)], 1)
    depths, w2cs = [], []
    for c in centres:
        w2c = look_at(c)
        o, d, zpt = primary_rays(Camera.from_arrays(w2c, K, size, size))
        t = scene.first_hit(o, d).t
        depths.append(np.where(np.isfinite(t), t * zpt, 0).reshape(size, size).astype(np.float32))
        w2cs.append(w2c)
    views = mx.DepthViews(np.full((n, size, size, 3), 0.5, np.float32), np.stack(depths),
                          np.repeat(K[None], n, 0), np.stack(w2cs))
    mesh = fuse_views(views, resolution=160)
    cd = chamfer_distance(mesh.vertices, mesh.faces, box.vertices, box.faces, samples=100_000)
    assert cd["chamfer_pct"] < 0.5, cd
    coarse = fuse_views(views, resolution=160, max_memory_gb=0.004)  # too fine for the budget: coarsened
    assert 0 < len(coarse.faces) < len(mesh.faces) / 2
    with pytest.raises(mx.MeshMemoryError):
        fuse_views(views, voxel_size=0.002, max_memory_gb=0.004)  # a given voxel size is not changed
    bigger = trimesh.creation.box(extents=[1.2, 0.75, 1.0])
    assert chamfer_distance(mesh.vertices, mesh.faces, bigger.vertices, bigger.faces, samples=100_000)[
        "chamfer_pct"] > 2


# ------------------------------------------------------------------------------------------ end to end


@pytest.mark.skipif(not SPOT.is_file(), reason="../shared/data/meshes/spot is not there (shared test data)")
def test_spot_in_a_tiny_3dgs_scene_end_to_end():
    gen = torch.Generator().manual_seed(0)
    N = 400
    means = (torch.rand(N, 3, generator=gen) * 2 - 1) * torch.tensor([2.0, 2.0, 0.05])  # a floor at z ~ 0
    model = gaussians(means.numpy(), np.full((N, 3), 0.15), np.full(N, 0.8), torch.rand(N, 3, generator=gen).numpy())
    spot = PlacedAsset(load_mesh(SPOT), Pose((0.0, 0.0, 0.0), 30.0, 0.0, 0.0, 1.0))
    sun = Light("sun", direction=tuple(np.array([0.3, 0.2, 1.0]) / np.linalg.norm([0.3, 0.2, 1.0])))
    w2c = look_at([2.5, -2.5, 1.8], [0, 0, 0.4])
    cam = camera(96, 72, 90.0, w2c=w2c)
    r = HybridRenderer(model, [spot], [sun], FRAME, background=[1.0, 1.0, 1.0])
    out = r.render(cam)
    o, d, zpt = primary_rays(cam)
    hits = r.mesh_scene().first_hit(o, d)
    hit = hits.hit.reshape(72, 96)
    assert 200 < hit.sum() < 72 * 96 // 2
    assert np.all(out.asset_id[out.asset_id >= 0] == 0) and np.all(hit[out.asset_id == 0])
    z = (hits.t * zpt).reshape(72, 96)
    seen = out.asset_id == 0
    assert seen.sum() > 0.5 * hit.sum()
    assert np.allclose(out.depth[seen], z[seen], rtol=1e-5)
    assert out.rgb.shape == (72, 96, 3) and torch.isfinite(out.rgb).all()
    assert {"rays", "raycast", "front", "shade", "scene_shadows", "composite", "total"} <= set(out.timings)
    # spot's texture reaches the picture: mesh pixels are not one flat colour
    assert out.rgb.detach().numpy()[seen].std(0).max() > 0.02
    # the floor is darkened in spot's shadow somewhere
    ref = r.render(cam, shadows=False).rgb.detach().numpy()
    darker = (out.rgb.detach().numpy().sum(-1) < ref.sum(-1) - 1e-4) & ~hit
    assert darker.sum() > 10


def test_for_run_builds_caches_proxy_and_warns_outside(tmp_path):
    from recon.hybrid.proxy import proxy_path
    from recon.run.folder import Run
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    run_dir = tmp_path / "run"
    train_model(TrainConfig(data=Path("procedural"), out=run_dir, steps=40, data_factor=2, save_every=0,
                            progress=False), log=lambda *a: None)
    run = Run.open(run_dir)
    quad = quad_z(0.0, -0.1, 0.1, -0.1, 0.1)
    far = PlacedAsset(quad.mesh, Pose((1e4, 1e4, 1e4)))
    warnings = []
    r = HybridRenderer.for_run(run, [quad, far], [Light("sun", direction=(0.0, 0.0, 1.0))], warn=warnings.append,
                               proxy_options={"resolution": 64, "max_views": 12})
    assert len(warnings) == 1 and "outside the scene's bounds" in warnings[0]
    path = proxy_path(run)
    assert path.is_file() and r.proxy is not None and len(r.proxy[1]) > 100
    assert abs(float(np.median(np.abs(r.proxy[0] @ r.frame[:, 2])))) < 3 * run.scene.extent  # near the scene
    stamp = path.stat().st_mtime_ns
    r2 = HybridRenderer.for_run(run, [quad], [], warn=warnings.append, proxy_options={"resolution": 64})
    assert path.stat().st_mtime_ns == stamp and len(r2.proxy[1]) == len(r.proxy[1])  # reused
    assert np.allclose(np.linalg.det(r.frame), 1.0)
    out = r2.render(run.cameras[0])
    assert out.rgb.shape == (run.cameras[0].height, run.cameras[0].width, 3)


def test_segment_box_cull_matches_ray_casting_a_box():
    import trimesh
    from recon.hybrid.shading import segment_meets_box

    box = trimesh.creation.box(extents=[1.0, 0.6, 0.8])
    scene = MeshScene([world_asset(box.vertices, box.faces)], FRAME)
    rng = np.random.default_rng(1)
    p = rng.uniform(-2, 2, (4000, 3))
    p = p[np.max(np.abs(p) - [0.5, 0.3, 0.4], axis=1) > 0.01]  # start outside the box
    d = rng.normal(size=(len(p), 3))
    d[::2] = -p[::2] + rng.normal(scale=0.3, size=p[::2].shape)  # half aim near the box
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    d[:50, 1:] = 0.0  # axis-aligned rays (zero components)
    d[:50, 0] = np.sign(d[:50, 0]) + (d[:50, 0] == 0)
    dist = rng.uniform(0.1, 3.0, len(p))
    dist[::7] = np.inf
    cull = segment_meets_box(p, d, dist, *scene.bounds)
    t = scene.first_hit(p, d).t
    hit = np.isfinite(t) & (t <= dist)
    assert hit.sum() > 500 and (~hit).sum() > 500 and np.array_equal(cull, hit)


def test_4d_scene_time_reaches_the_front_pass_and_the_proxy():
    from recon.data.procedural_4d import procedural_4d_scene
    from recon.hybrid.proxy import build_proxy
    from recon.models import SpaceTimeGaussians
    from recon.training.trainer import TrainConfig

    scene = procedural_4d_scene(width=32, height=32, n_train=4, n_times=6, test_time_stride=2, n_points=600)
    model = SpaceTimeGaussians.initialize(TrainConfig(method="4dgs", sh_degree=0), scene,
                                          torch.Generator().manual_seed(0))
    cam = scene.frames_train[0].camera
    r = HybridRenderer(model, [], [], FRAME)
    a, b = r.render(cam, time=0.0), r.render(cam, time=1.0)
    want_a = model.render([cam], background=torch.zeros(3), t=0.0)[0][0]
    assert torch.allclose(a.rgb, want_a, atol=1e-5)  # no asset: the scene's own render at that time
    assert (a.rgb - b.rgb).abs().max() > 1e-3
    mesh = build_proxy(model, [f.camera for f in scene.frames_train], time=0.5, resolution=32, scale=1.0)
    assert len(mesh.faces) > 0


def test_glass_slab_shifts_the_view_as_snell_says():
    """A glass slab (z in [2, 3], ior 1.5) in front of a red region (z = 5, x > 3): a pixel sees red
    where its ray, refracted in and out (Snell), meets x > 3; the red it gets is (1 - F_in)(1 - F_out)."""
    import trimesh

    ior = 1.5
    slab = trimesh.creation.box(extents=[40.0, 40.0, 1.0])
    slab.apply_translation([0, 0, 2.5])
    glass = world_asset(slab.vertices, slab.faces, material=Material("glass", ior=ior))
    model = PlaneScene(5.0, [1.0, 0.0, 0.0], axis=2, region=lambda p: p[:, 0] > 3.0)
    cam = camera(80, 6, 40.0)
    out = HybridRenderer(model, [glass], [], FRAME, background=[0.0, 0.0, 0.0], bounces=2).render(cam)
    red = out.rgb.detach().double().numpy().reshape(-1, 3)[:, 0]
    o, d, _ = primary_rays(cam)
    n = np.tile([0.0, 0.0, -1.0], (len(d), 1))
    p1 = d * (2.0 / d[:, 2:])
    d_in, _ = optics.refract(d, n, np.full(len(d), 1 / ior))
    p2 = p1 + d_in * (1.0 / d_in[:, 2:])
    x_glass = p2[:, 0] + d[:, 0] * (2.0 / d[:, 2])
    x_straight = 5.0 * d[:, 0] / d[:, 2]
    sure = np.abs(x_glass - 3.0) > 1e-3
    f_in = optics.fresnel_dielectric(-(d * n).sum(1), np.full(len(d), 1 / ior))
    want = np.where(x_glass > 3.0, (1 - f_in) ** 2, 0.0)
    assert np.allclose(red[sure], want[sure], atol=1e-5)
    # the shift decides some pixels
    assert ((x_glass > 3.0) != (x_straight > 3.0)).sum() >= 12 and (want > 0).sum() >= 12


def test_mirror_shows_a_gaussian_by_tracing_and_passes_its_gradient():
    """3dgs trace_rays behind a mirror: the camera's central ray reflects off the mirror z = x + 3 toward +x
    and meets a red Gaussian at (5, 0, 3), outside the direct view; the pixel turns red, pixels whose
    reflection misses it keep the background, and the Gaussian's colour gets gradient only through the
    mirror."""
    model = gaussians([[5.0, 0.0, 3.0]], [[0.3] * 3], [0.9], [[1.0, 0.0, 0.0]])
    mirror = world_asset([[-2, -2, 1.0], [2, -2, 5.0], [2, 2, 5.0], [-2, 2, 1.0]], [[0, 1, 2], [0, 2, 3]],
                         material=Material("mirror"))
    cam = camera(17, 17, 10.0, 8.5, 8.5)  # pixel (8, 8) looks along +z
    r = HybridRenderer(model, [mirror], [], FRAME, background=[0.0, 0.0, 1.0], bounces=1)
    rgb = r.render(cam).rgb
    assert rgb[8, 8, 0] > 0.8 and rgb[8, 8, 2] < 0.2  # red seen in the mirror (alpha 0.9 at the mean)
    assert rgb[0, 0, 0] < 1e-3 and abs(float(rgb[0, 0, 2]) - 1.0) < 1e-3  # its reflection misses: background
    no_mirror = HybridRenderer(model, [], [], FRAME, background=[0.0, 0.0, 1.0]).render(cam).rgb
    assert no_mirror[..., 0].max() < 1e-3  # not in the direct view
    rgb[8, 8, 0].backward()
    assert model.params["sh0"].grad[0, 0, 0] > 0
