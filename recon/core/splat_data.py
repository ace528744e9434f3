"""Plain in-memory container for a Gaussian-splat model, in the project's conventions.

All arrays are numpy float32 and hold *raw* (pre-activation) parameters, the same values the trainer
optimises and the 3DGS PLY stores:

==================  ============  ===========================================================
field               shape         meaning
==================  ============  ===========================================================
``means``           [N, 3]        Gaussian centres, OpenCV world frame (x right, y down, z fwd)
``quats``           [N, 4]        rotation quaternion (w, x, y, z); need not be unit length
``log_scales``      [N, 3]        log of the per-axis standard deviations (world units)
``logit_opacities`` [N]           logit of the opacity in (0, 1)
``sh``              [N, K, 3]     real SH coefficients, degree-major, K = (degree + 1)^2,
                                  ``sh[:, 0]`` is the DC term (RGB = 0.5 + SH_C0 * DC)
``antialiased``     bool          model trained in anti-aliased (mip) mode
==================  ============  ===========================================================

File readers and writers (``recon.export.ply`` and friends) convert to and from these arrays at the
file boundary and nowhere else. This module is format-neutral (no file IO), so the model
(:mod:`recon.models`) and the exporters both build on it; :mod:`recon.export.splats` re-exports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

SH_C0 = 0.28209479177387814
"""Degree-0 real SH basis constant: RGB = 0.5 + SH_C0 * dc."""

MAX_SH_DEGREE = 3

FIELDS = ("means", "quats", "log_scales", "logit_opacities", "sh")


# --------------------------------------------------------------------------------------------- helpers


def sh_degree_for_bases(k: int) -> int:
    """SH degree d for K = (d + 1)^2 coefficients per channel; ValueError if K is not such a square."""
    d = math.isqrt(k) - 1
    if k < 1 or (d + 1) ** 2 != k:
        raise ValueError(f"SH coefficient count K={k} is not (degree + 1)^2")
    return d


def num_sh_bases(degree: int) -> int:
    """K = (degree + 1)^2 coefficients per colour channel."""
    return (degree + 1) ** 2


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function (float64 inside, input dtype out)."""
    x64 = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x64)
    pos = x64 >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x64[pos]))
    ex = np.exp(x64[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def dc_to_rgb(dc: np.ndarray) -> np.ndarray:
    """SH DC coefficients [..., 3] -> RGB (unclamped) = 0.5 + SH_C0 * dc."""
    return 0.5 + SH_C0 * np.asarray(dc, dtype=np.float64)


def rgb_to_dc(rgb: np.ndarray) -> np.ndarray:
    """RGB [..., 3] -> SH DC coefficients, inverse of :func:`dc_to_rgb`."""
    return (np.asarray(rgb, dtype=np.float64) - 0.5) / SH_C0


def normalized_quats(quats: np.ndarray) -> np.ndarray:
    """Unit quaternions [N, 4] (w, x, y, z) in float64; zero-length rows become the identity."""
    q = np.asarray(quats, dtype=np.float64)
    norm = np.linalg.norm(q, axis=-1, keepdims=True)
    bad = ~(norm[..., 0] > 0)
    out = q / np.where(norm > 0, norm, 1.0)
    out[bad] = (1.0, 0.0, 0.0, 0.0)
    return out


def _as_f32(name: str, value) -> np.ndarray:
    """Contiguous float32 copy-free view (when possible) of an array-like field."""
    try:
        return np.ascontiguousarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"SplatData.{name}: cannot convert to float32 array ({exc})") from None


# --------------------------------------------------------------------------------------------- container


@dataclass(eq=False)
class SplatData:
    """A Gaussian-splat model: raw parameters as float32 numpy arrays (see the module docstring).

    Shapes are checked on construction (``ValueError`` on mismatch); values are not (use
    :meth:`drop_nonfinite`).
    """

    means: np.ndarray  # [N, 3] OpenCV world
    quats: np.ndarray  # [N, 4] wxyz, raw
    log_scales: np.ndarray  # [N, 3]
    logit_opacities: np.ndarray  # [N]
    sh: np.ndarray  # [N, K, 3] degree-major
    antialiased: bool = False

    def __post_init__(self) -> None:
        for name in FIELDS:
            setattr(self, name, _as_f32(name, getattr(self, name)))
        self.antialiased = bool(self.antialiased)
        self.validate()

    # ----------------------------------------------------------------------------------- checks

    def validate(self) -> None:
        """Check shapes and the SH degree; raises ``ValueError`` naming the offending field."""
        n = self.means.shape[0] if self.means.ndim >= 1 else -1
        expected = {
            "means": (n, 3),
            "quats": (n, 4),
            "log_scales": (n, 3),
            "logit_opacities": (n,),
        }
        for name, shape in expected.items():
            arr = getattr(self, name)
            if arr.shape != shape:
                raise ValueError(f"SplatData.{name}: shape {arr.shape}, expected {shape}")
        if self.sh.ndim != 3 or self.sh.shape[0] != n or self.sh.shape[2] != 3:
            raise ValueError(f"SplatData.sh: shape {self.sh.shape}, expected ({n}, K, 3)")
        try:
            degree = sh_degree_for_bases(self.sh.shape[1])
        except ValueError as exc:
            raise ValueError(f"SplatData.sh: {exc}") from None
        if degree > MAX_SH_DEGREE:
            raise ValueError(f"SplatData.sh: SH degree {degree} > {MAX_SH_DEGREE} is not supported")

    def finite_mask(self) -> np.ndarray:
        """Boolean [N]: True where every parameter of the splat is finite (no NaN / Inf)."""
        mask = np.isfinite(self.logit_opacities)
        for name in ("means", "quats", "log_scales"):
            mask &= np.isfinite(getattr(self, name)).all(axis=1)
        mask &= np.isfinite(self.sh).all(axis=(1, 2))
        return mask

    def drop_nonfinite(self) -> tuple["SplatData", int]:
        """(model without splats holding NaN/Inf, number of splats dropped). Returns self if none."""
        mask = self.finite_mask()
        dropped = int(mask.size - np.count_nonzero(mask))
        return (self if dropped == 0 else self.subset(mask)), dropped

    # ----------------------------------------------------------------------------------- views

    def __len__(self) -> int:
        return int(self.means.shape[0])

    @property
    def num_splats(self) -> int:
        """N."""
        return len(self)

    @property
    def sh_degree(self) -> int:
        """SH degree d, from K = (d + 1)^2."""
        return sh_degree_for_bases(self.sh.shape[1])

    def subset(self, idx) -> "SplatData":
        """New model with the splats selected by ``idx`` (boolean mask [N], or integer indices)."""
        idx = np.asarray(idx)
        if idx.dtype == bool and idx.shape != (len(self),):
            raise ValueError(f"subset: boolean mask of shape {idx.shape}, expected ({len(self)},)")
        return SplatData(
            means=self.means[idx],
            quats=self.quats[idx],
            log_scales=self.log_scales[idx],
            logit_opacities=self.logit_opacities[idx],
            sh=self.sh[idx],
            antialiased=self.antialiased,
        )

    def with_sh_degree(self, degree: int) -> "SplatData":
        """Copy with SH truncated (or zero-padded) to ``degree``."""
        k = num_sh_bases(degree)
        sh = np.zeros((len(self), k, 3), dtype=np.float32)
        keep = min(k, self.sh.shape[1])
        sh[:, :keep] = self.sh[:, :keep]
        return SplatData(self.means, self.quats, self.log_scales, self.logit_opacities, sh,
                         self.antialiased)

    def copy(self) -> "SplatData":
        """Deep copy."""
        return SplatData(*(getattr(self, f).copy() for f in FIELDS), antialiased=self.antialiased)

    # ----------------------------------------------------------------------------------- torch

    def to_torch(self, device=None, dtype=None) -> dict:
        """Dict of torch tensors keyed by field name (``means``, ``quats``, ``log_scales``,
        ``logit_opacities``, ``sh``), same shapes, float32 unless ``dtype`` is given. Always copies: a model
        built from them (``from_splat_data``) trains its own parameters, never this record's arrays (sharing them
        let one block's training move the Gaussians the next block started from)."""
        import torch

        dtype = dtype or torch.float32
        return {f: torch.tensor(getattr(self, f), dtype=dtype, device=device) for f in FIELDS}

    @classmethod
    def from_torch(cls, tensors: Mapping, antialiased: bool = False) -> "SplatData":
        """Build from a mapping with the five field names (torch tensors or arrays; detached,
        moved to the CPU and cast to float32). Extra keys are ignored."""
        missing = [f for f in FIELDS if f not in tensors]
        if missing:
            raise KeyError(f"from_torch: missing field(s) {missing}")

        def to_np(x):
            if hasattr(x, "detach"):
                x = x.detach().to("cpu").float().numpy()
            return x

        return cls(**{f: to_np(tensors[f]) for f in FIELDS}, antialiased=antialiased)


# --------------------------------------------------------------------------------------------- factories


def empty_splats(sh_degree: int = 0, antialiased: bool = False) -> SplatData:
    """A model with N = 0 splats (valid in memory; writers refuse it)."""
    k = num_sh_bases(sh_degree)
    z = np.zeros
    return SplatData(z((0, 3)), z((0, 4)), z((0, 3)), z((0,)), z((0, k, 3)), antialiased)


def random_splats(n: int, sh_degree: int = 3, seed: int = 0, antialiased: bool = False,
                  extent: float = 10.0) -> SplatData:
    """Random but plausible model for tests and benchmarks.

    means uniform in [-extent, extent]^3, random unnormalised quats, log scales in [-6, 1],
    logit opacities in [-5, 5], DC in [-1.5, 1.5], higher SH in [-0.5, 0.5].
    """
    rng = np.random.default_rng(seed)
    k = num_sh_bases(sh_degree)
    sh = rng.uniform(-0.5, 0.5, size=(n, k, 3))
    sh[:, 0] = rng.uniform(-1.5, 1.5, size=(n, 3))
    return SplatData(
        means=rng.uniform(-extent, extent, size=(n, 3)),
        quats=rng.normal(size=(n, 4)) * rng.uniform(0.5, 2.0, size=(n, 1)),
        log_scales=rng.uniform(-6.0, 1.0, size=(n, 3)),
        logit_opacities=rng.uniform(-5.0, 5.0, size=n),
        sh=sh,
        antialiased=antialiased,
    )
