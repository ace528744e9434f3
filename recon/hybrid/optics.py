"""Ray optics at mesh surfaces for secondary rays: mirror reflection, refraction (Snell's law with total
internal reflection) and Fresnel reflectance (exact for unpolarised light at a dielectric interface, and
Schlick's approximation).

Conventions (as :class:`recon.hybrid.raycast.Hits`): ``d`` [..., 3] unit ray directions, ``n`` [..., 3] unit
normals facing the incoming ray (``dot(d, n) <= 0``); ``eta`` = n_incident / n_transmitted, the ratio of
refractive indices across the interface (entering glass of index 1.5 from air: 1 / 1.5; leaving it: 1.5;
:func:`glass_eta` picks it from the hit's ``front`` flag). Functions take numpy arrays or torch tensors
(the result is of the same kind; torch keeps gradients, though :mod:`recon.hybrid` treats the assets as
fixed).
"""

from __future__ import annotations

import numpy as np


def _xp(x):
    import torch

    return torch if isinstance(x, torch.Tensor) else np


def _dot(a, b):
    """Row-wise dot product [..., 1]."""
    return (a * b).sum(-1)[..., None]


def reflect(d, n):
    """Mirror reflection of directions ``d`` about normals ``n``: d - 2 (d . n) n ([..., 3], unit in, unit out)."""
    return d - 2.0 * _dot(d, n) * n


def glass_eta(front, ior):
    """eta [...] for a ray hitting glass of index ``ior``: 1 / ior entering (``front`` True), ior leaving."""
    xp = _xp(front)
    one = xp.ones_like(front, dtype=xp.float64)
    return xp.where(front, one / ior, one * ior)


def refract(d, n, eta):
    """Refraction by Snell's law: (directions [..., 3], tir [...] bool).

    cos_i = -d . n, sin_t^2 = eta^2 (1 - cos_i^2); where sin_t^2 > 1 the ray is totally internally
    reflected (``tir`` True) and the returned direction is the mirror reflection; elsewhere it is
    eta d + (eta cos_i - cos_t) n with cos_t = sqrt(1 - sin_t^2), unit, in the plane of d and n, and
    sin_t = eta sin_i exactly. ``eta`` is a number or [...] (see the module docstring)."""
    xp = _xp(d)
    eta = eta if np.isscalar(eta) else eta[..., None]
    cos_i = -_dot(d, n)
    sin2_t = eta * eta * (1.0 - cos_i * cos_i)
    tir = sin2_t > 1.0
    cos_t = (xp.clip(1.0 - sin2_t, 0.0, None) if xp is np else xp.clamp(1.0 - sin2_t, min=0.0)) ** 0.5
    t = eta * d + (eta * cos_i - cos_t) * n
    out = xp.where(tir, reflect(d, n), t)
    return out, tir[..., 0]


def fresnel_dielectric(cos_i, eta):
    """Exact Fresnel reflectance [...] of unpolarised light at a dielectric interface, in [0, 1]:
    (r_s^2 + r_p^2) / 2 with r_s = (eta cos_i - cos_t) / (eta cos_i + cos_t), r_p = (cos_i - eta cos_t) /
    (cos_i + eta cos_t); 1 under total internal reflection. ``cos_i`` [...] = -d . n >= 0."""
    xp = _xp(cos_i)
    cos_i = xp.clip(cos_i, 0.0, 1.0) if xp is np else xp.clamp(cos_i, 0.0, 1.0)
    sin2_t = eta * eta * (1.0 - cos_i * cos_i)
    tir = sin2_t >= 1.0
    cos_t = (xp.clip(1.0 - sin2_t, 0.0, None) if xp is np else xp.clamp(1.0 - sin2_t, min=0.0)) ** 0.5
    rs = (eta * cos_i - cos_t) / xp.where(tir, 1.0, eta * cos_i + cos_t) if xp is np else \
        (eta * cos_i - cos_t) / xp.where(tir, xp.ones_like(cos_i), eta * cos_i + cos_t)
    den_p = cos_i + eta * cos_t
    safe = den_p > 0
    rp = (cos_i - eta * cos_t) / (xp.where(safe, den_p, 1.0) if xp is np else
                                  xp.where(safe, den_p, xp.ones_like(den_p)))
    r = 0.5 * (rs * rs + rp * rp)
    r = xp.where(safe, r, 1.0) if xp is np else xp.where(safe, r, xp.ones_like(r))
    return xp.where(tir, 1.0, r) if xp is np else xp.where(tir, xp.ones_like(r), r)


def fresnel_schlick(cos_i, eta):
    """Schlick's approximation [...] of :func:`fresnel_dielectric`: R0 + (1 - R0) (1 - c)^5 with
    R0 = ((eta - 1) / (eta + 1))^2 and c = cos_i entering a denser medium (eta <= 1), cos_t leaving it;
    1 under total internal reflection. In [0, 1]."""
    xp = _xp(cos_i)
    cos_i = xp.clip(cos_i, 0.0, 1.0) if xp is np else xp.clamp(cos_i, 0.0, 1.0)
    r0 = ((eta - 1.0) / (eta + 1.0)) ** 2
    sin2_t = eta * eta * (1.0 - cos_i * cos_i)
    tir = sin2_t >= 1.0
    cos_t = (xp.clip(1.0 - sin2_t, 0.0, None) if xp is np else xp.clamp(1.0 - sin2_t, min=0.0)) ** 0.5
    c = xp.where(eta <= 1.0, cos_i, cos_t) if not np.isscalar(eta) else (cos_i if eta <= 1.0 else cos_t)
    r = r0 + (1.0 - r0) * (1.0 - c) ** 5
    return xp.where(tir, 1.0, r) if xp is np else xp.where(tir, xp.ones_like(r), r)
