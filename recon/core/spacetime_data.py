"""Plain in-memory container for a 4D (space-time) Gaussian model, the 4D sibling of :class:`SplatData`.

All arrays are numpy float32 and hold raw (pre-activation) parameters, the values ``--method 4dgs``
optimises (:mod:`recon.models.spacetime`) and the ply4d file stores (recon/export/PLY4D.md):

=====================  ============  ==========================================================
field                  shape         meaning
=====================  ============  ==========================================================
``means4``             [N, 4]        (x, y, z) centre, OpenCV world; t, the normalised time in [0, 1]
``log_scales4``        [N, 4]        log of the standard deviations along the 4 rotated axes
``quats_left``         [N, 4]        left isoclinic quaternion (w, x, y, z), any non-zero norm
``quats_right``        [N, 4]        right isoclinic quaternion; R = L(q_l) R(q_r)
``logit_opacities``    [N]           logit of the 4D opacity (before the temporal factor)
``sh``                 [N, K, 3]     static SH colour, degree-major, K = (degree + 1)^2
``antialiased``        bool          trained in anti-aliased (mip) mode
``duration``           float | None  seconds the normalised span [0, 1] lasts (captured videos), None unknown
``logit_foreground``   [N] | None    logit of each Gaussian's foreground value (4dgs ``--spacetime.seg-weight``),
                                     None for a model without one (read as zeros)
=====================  ============  ==========================================================

Format-neutral (no file IO), like :mod:`recon.core.splat_data`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recon.core.splat_data import MAX_SH_DEGREE, sh_degree_for_bases

FIELDS4 = ("means4", "log_scales4", "quats_left", "quats_right", "logit_opacities", "sh")


@dataclass
class SpaceTimeData:
    """N 4D Gaussians (fields in the module docstring); arrays are converted to float32 and checked."""

    means4: np.ndarray
    log_scales4: np.ndarray
    quats_left: np.ndarray
    quats_right: np.ndarray
    logit_opacities: np.ndarray
    sh: np.ndarray
    antialiased: bool = False
    duration: float | None = None
    logit_foreground: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in self._arrays():
            setattr(self, name, np.ascontiguousarray(np.asarray(getattr(self, name), dtype=np.float32)))
        self.validate()

    def _arrays(self) -> tuple[str, ...]:
        """The names of the arrays held: :data:`FIELDS4`, and ``logit_foreground`` when present."""
        return FIELDS4 + (("logit_foreground",) if self.logit_foreground is not None else ())

    def validate(self) -> None:
        """ValueError naming the field whose shape disagrees with the others."""
        n = self.means4.shape[0] if self.means4.ndim == 2 else -1
        expect = {"means4": (n, 4), "log_scales4": (n, 4), "quats_left": (n, 4), "quats_right": (n, 4),
                  "logit_opacities": (n,), **({"logit_foreground": (n,)} if self.logit_foreground is not None else {})}
        for name, shape in expect.items():
            if getattr(self, name).shape != shape:
                raise ValueError(f"SpaceTimeData.{name}: shape {getattr(self, name).shape}, expected {shape}")
        if self.sh.ndim != 3 or self.sh.shape[0] != n or self.sh.shape[2] != 3:
            raise ValueError(f"SpaceTimeData.sh: shape {self.sh.shape}, expected [{n}, K, 3]")
        if sh_degree_for_bases(self.sh.shape[1]) > MAX_SH_DEGREE:
            raise ValueError(f"SpaceTimeData.sh: degree above {MAX_SH_DEGREE}")
        if self.duration is not None and not (np.isfinite(self.duration) and self.duration > 0):
            raise ValueError(f"SpaceTimeData.duration: {self.duration} is not a positive number of seconds")

    def __len__(self) -> int:
        return int(self.means4.shape[0])

    @property
    def sh_degree(self) -> int:
        return sh_degree_for_bases(self.sh.shape[1])

    def finite_mask(self) -> np.ndarray:
        """[N] bool: rows whose every value is finite."""
        ok = np.ones(len(self), dtype=bool)
        for name in self._arrays():
            a = getattr(self, name)
            ok &= np.isfinite(a.reshape(len(self), -1)).all(axis=1)
        return ok

    def subset(self, idx) -> "SpaceTimeData":
        fg = None if self.logit_foreground is None else self.logit_foreground[idx]
        return SpaceTimeData(*(getattr(self, n)[idx] for n in FIELDS4), antialiased=self.antialiased,
                             duration=self.duration, logit_foreground=fg)

    def drop_nonfinite(self) -> tuple["SpaceTimeData", int]:
        """(the rows without NaN/Inf, how many were dropped)."""
        ok = self.finite_mask()
        return (self, 0) if ok.all() else (self.subset(ok), int((~ok).sum()))

    def with_sh_degree(self, degree: int) -> "SpaceTimeData":
        """SH truncated to ``degree`` (<= the current degree)."""
        if not 0 <= degree <= self.sh_degree:
            raise ValueError(f"SH degree {degree} is not in 0..{self.sh_degree}")
        parts = [getattr(self, n) for n in FIELDS4[:-1]] + [self.sh[:, :(degree + 1) ** 2]]
        return SpaceTimeData(*parts, antialiased=self.antialiased, duration=self.duration,
                             logit_foreground=self.logit_foreground)
