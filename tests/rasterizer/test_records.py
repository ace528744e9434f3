"""The typed seam: Splats (project -> composite), Composited, RenderOutput / RenderMeta (what
rasterize_gaussians returns), and that the existing tuple / dict-style uses keep working."""

import importlib

import pytest
import torch

from rasterizer import TileGrid, rasterize_gaussians
from rasterizer.records import Composited, RenderMeta, RenderOutput, Splats

from .scenes import random_scene

PARAMS = ("means", "quats", "scales", "opacities", "colors")


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_render_output_is_typed_and_still_a_tuple(backend):
    p, viewmats, Ks = random_scene(n=60, width=24, height=20, n_cams=2, seed=2)
    out = rasterize_gaussians(*(p[k] for k in PARAMS), viewmats, Ks, 24, 20, backend=backend, absgrad=True)
    assert isinstance(out, RenderOutput) and isinstance(out.meta, RenderMeta)
    render, alpha, meta = out  # the existing call sites unpack it
    assert render is out.render and alpha is out.alpha and out[0] is render
    assert meta["radii"] is meta.radii and meta["means2d"] is meta.means2d and meta.get("width") == 24
    assert meta.radii.shape == (2, 60, 2) and meta.depths.shape == (2, 60)
    assert meta.transmittance.shape == (2, 20, 24, 1)
    assert (meta.tiles_x, meta.tiles_y, meta.n_cameras, meta.height) == (2, 2, 2, 20)
    assert "conics" in meta and "backend_extras" not in meta and meta.get("nothing", 5) == 5
    with pytest.raises(KeyError):
        meta["nothing"]
    (render.sum() + alpha.sum()).backward()
    assert meta.means2d.grad is not None and meta.absgrad is meta.means2d.absgrad
    assert meta.absgrad.shape == (2, 60, 2) and (meta.absgrad > 0).any()


def test_empty_render_has_the_same_record():
    p, viewmats, Ks = random_scene(n=0, width=24, height=20)
    out = rasterize_gaussians(*(p[k] for k in PARAMS), viewmats, Ks, 24, 20, backend="cpu")
    assert out.meta.conics.shape == (1, 0, 3) and (out.meta.transmittance == 1).all()
    assert out.meta.tiles_x == 2 and sorted(out.meta.keys())[:3] == ["compensations", "conics", "depths"]


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_backends_composite_splats(backend):
    """A backend's composite takes the Splats record and returns Composited; the same splats give the
    same pictures on both backends."""
    from rasterizer.reference import project

    p, viewmats, Ks = random_scene(n=80, width=30, height=20, seed=6)
    proj = project(p["means"], p["quats"], p["scales"], None, viewmats, Ks, 30, 20, eps2d=0.3, near_plane=0.01,
                   far_plane=1e10, opacities=p["opacities"], antialiased=False)
    splats = Splats(proj.means2d, proj.conics, p["opacities"][None], p["colors"][None], proj.depths, proj.radii)
    assert (splats.n_cameras, splats.n_splats) == (1, 80)
    out = importlib.import_module(f"rasterizer.{backend}").composite(splats, 30, 20, TileGrid.for_image(30, 20))
    ref = importlib.import_module("rasterizer.reference").composite(splats, 30, 20, TileGrid.for_image(30, 20))
    assert isinstance(out, Composited) and out.render.shape == (1, 20, 30, 3)
    torch.testing.assert_close(out.render, ref.render, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(out.transmittance, ref.transmittance, rtol=1e-9, atol=1e-11)


def test_gsplat_meta_becomes_a_render_meta():
    """The cuda backend's meta (gsplat's dict) maps to the same fields; the rest stays readable."""
    from rasterizer.cuda import typed_meta

    t = torch.zeros(1, 5, 2)
    gsplat_meta = {"radii": t.int(), "means2d": t, "depths": t[..., 0], "conics": torch.zeros(1, 5, 3),
                   "opacities": t[..., 0], "width": 32, "height": 16, "tile_size": 16, "tile_width": 2,
                   "tile_height": 1, "n_cameras": 1, "isect_ids": torch.arange(3), "camera_ids": None}
    T = torch.ones(1, 16, 32, 1)
    meta = typed_meta(gsplat_meta, T)
    assert (meta.tiles_x, meta.tiles_y, meta.width) == (2, 1, 32) and meta.transmittance is T
    assert meta.compensations is None and meta["isect_ids"] is gsplat_meta["isect_ids"]
    assert "camera_ids" in meta and "tile_width" not in meta
