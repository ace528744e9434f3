"""recon.hybrid.optics: reflection, Snell refraction with total internal reflection, Fresnel terms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from recon.hybrid.optics import fresnel_dielectric, fresnel_schlick, glass_eta, reflect, refract


def incoming(angles_deg, azimuth=0.3):
    """Unit directions at the given angles of incidence onto the plane z = 0 (normal +z facing them)."""
    a = np.radians(np.asarray(angles_deg, np.float64))
    d = np.stack([np.sin(a) * np.cos(azimuth), np.sin(a) * np.sin(azimuth), -np.cos(a)], -1)
    n = np.broadcast_to(np.array([0.0, 0.0, 1.0]), d.shape)
    return d, n


def test_reflect_mirror_law():
    d, n = incoming([0, 10, 45, 80, 89.9])
    r = reflect(d, n)
    np.testing.assert_allclose(np.linalg.norm(r, axis=-1), 1.0, atol=1e-15)
    np.testing.assert_allclose(r[:, :2], d[:, :2], atol=1e-15)  # tangential part kept
    np.testing.assert_allclose(r[:, 2], -d[:, 2], atol=1e-15)  # normal part flipped
    np.testing.assert_allclose(reflect(r, -n), d, atol=1e-15)


@pytest.mark.parametrize("ior", [1.33, 1.5, 2.4])
def test_glass_bends_by_snell(ior):
    angles = [0.0, 5, 20, 35, 60, 85]
    d, n = incoming(angles)
    t, tir = refract(d, n, 1.0 / ior)  # entering glass
    assert not tir.any()
    np.testing.assert_allclose(np.linalg.norm(t, axis=-1), 1.0, atol=1e-14)
    sin_i = np.linalg.norm(np.cross(d, n), axis=-1)
    sin_t = np.linalg.norm(np.cross(t, -n), axis=-1)
    np.testing.assert_allclose(sin_t * ior, sin_i, rtol=1e-12, atol=1e-15)  # n1 sin_i = n2 sin_t
    assert (t[:, 2] < 0).all()  # continues through the surface
    # in the plane of incidence: t, d and n coplanar
    np.testing.assert_allclose(np.einsum("ri,ri->r", np.cross(d, n), t), 0.0, atol=1e-14)
    # a second, parallel interface (a slab): leaving at the exit face restores the direction
    out, tir_out = refract(t, n, ior)
    assert not tir_out.any()
    np.testing.assert_allclose(out, d, atol=1e-13)


def test_total_internal_reflection_beyond_critical_angle():
    ior = 1.5
    critical = math.degrees(math.asin(1 / ior))  # 41.81 degrees
    angles = [critical - 1, critical - 0.01, critical + 0.01, critical + 5, 80]
    d, n = incoming(angles)
    t, tir = refract(d, n, ior)  # inside the glass, leaving into air
    assert tir.tolist() == [False, False, True, True, True]
    np.testing.assert_allclose(t[tir], reflect(d, n)[tir], atol=1e-15)
    R = fresnel_dielectric(-np.einsum("ri,ri->r", d, n), ior)
    np.testing.assert_allclose(R[tir], 1.0)
    assert (R[~tir] < 1).all()
    np.testing.assert_allclose(fresnel_schlick(-np.einsum("ri,ri->r", d, n), ior)[tir], 1.0)


def test_fresnel_energy_terms_in_unit_interval():
    cos = np.linspace(0, 1, 201)
    for eta in (1 / 1.5, 1 / 1.33, 1.5, 2.4, 1.0):
        for f in (fresnel_dielectric, fresnel_schlick):
            R = f(cos, eta)
            assert np.isfinite(R).all() and (R >= 0).all() and (R <= 1).all()
    # normal incidence: ((n1 - n2) / (n1 + n2))^2 for both
    for f in (fresnel_dielectric, fresnel_schlick):
        np.testing.assert_allclose(f(np.array([1.0]), 1 / 1.5), 0.04, rtol=1e-12)
    # grazing incidence reflects everything; index matching reflects nothing
    np.testing.assert_allclose(fresnel_dielectric(np.array([0.0]), 1 / 1.5), 1.0)
    np.testing.assert_allclose(fresnel_dielectric(cos[1:], 1.0), 0.0, atol=1e-15)
    # reciprocity of the exact formula: same R from both sides along the same light path
    d, n = incoming([30.0])
    t, _ = refract(d, n, 1 / 1.5)
    np.testing.assert_allclose(fresnel_dielectric(np.array([np.cos(np.radians(30))]), 1 / 1.5),
                               fresnel_dielectric(np.array([-t[0, 2]]), 1.5), rtol=1e-12)


def test_torch_inputs_and_glass_eta():
    d, n = (torch.from_numpy(x.copy()) for x in incoming([30.0, 60.0]))
    t, tir = refract(d, n, glass_eta(torch.tensor([True, False]), 1.5))
    assert isinstance(t, torch.Tensor) and tir.tolist() == [False, True]
    np.testing.assert_allclose(t[0].numpy(), refract(d[:1].numpy(), n[:1].numpy(), 1 / 1.5)[0][0], atol=1e-15)
    R = fresnel_dielectric(torch.tensor([1.0, 0.5]), torch.tensor([1 / 1.5, 1.5]))
    assert isinstance(R, torch.Tensor) and 0 <= float(R.min()) and float(R.max()) <= 1
    assert glass_eta(np.array([True, False]), 2.0).tolist() == [0.5, 2.0]
