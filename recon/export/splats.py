"""File-boundary helpers shared by the splat formats: :class:`SplatFileError`, regular-file checks,
8-bit alpha logits and the write-time model check.

The in-memory record (:class:`SplatData`, ``SH_C0`` and the SH/quaternion helpers) lives in the
format-neutral :mod:`recon.core.splat_data`; it is re-exported here so ``recon.export.splats`` imports keep
working.
"""

from __future__ import annotations

import os
import stat

import numpy as np

from recon.core.splat_data import (  # noqa: F401  (re-exported)
    FIELDS,
    MAX_SH_DEGREE,
    SH_C0,
    SplatData,
    dc_to_rgb,
    empty_splats,
    normalized_quats,
    num_sh_bases,
    random_splats,
    rgb_to_dc,
    sh_degree_for_bases,
    sigmoid,
)
from recon.core.errors import SplatforgeError

ALPHA_EPS = 1e-4
"""Alphas read from 8-bit files are clamped into [ALPHA_EPS, 1 - ALPHA_EPS] before the logit."""


class SplatFileError(SplatforgeError, ValueError):
    """A splat file (or a model about to be written to one) is unusable.

    The message always names the file and the problem, e.g. ``"scene.spz: truncated SPZ data ..."``.
    """

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class ModelKindError(SplatFileError):
    """A 4D model file (ply4d) given where only 3D Gaussians are possible, or a 3D one where a 4D model is
    needed; the message names the file and what to do."""


# --------------------------------------------------------------------------------------------- helpers


def read_regular_file(path: str | os.PathLike) -> bytes:
    """The bytes of a regular file, at most its size on disk (a FIFO or device such as /dev/zero
    would otherwise be read without end). FileNotFoundError when missing, SplatFileError otherwise."""
    require_regular_file(path)
    with open(path, "rb") as f:
        return f.read(os.fstat(f.fileno()).st_size)


def require_regular_file(path: str | os.PathLike) -> None:
    """SplatFileError unless ``path`` (followed through links) is a regular file; checked before
    opening, since opening a FIFO blocks. FileNotFoundError when it does not exist."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise SplatFileError(path, "not a regular file (a device, FIFO or socket); "
                                   "give the path of a saved model file")


def logit_clamped(alpha: np.ndarray, eps: float = ALPHA_EPS) -> np.ndarray:
    """logit(alpha) with alpha clamped into [eps, 1 - eps] (8-bit alphas 0 and 255 stay finite)."""
    a = np.clip(np.asarray(alpha, dtype=np.float64), eps, 1.0 - eps)
    return np.log(a) - np.log1p(-a)


def require_writable(path: str | os.PathLike, data: SplatData) -> None:
    """Refuse (SplatFileError naming ``path``) to write an empty model or one holding NaN/Inf."""
    if len(data) == 0:
        raise SplatFileError(path, "refusing to write an empty model (0 splats)")
    bad = len(data) - int(np.count_nonzero(data.finite_mask()))
    if bad:
        raise SplatFileError(path, f"{bad} splat(s) hold NaN/Inf values; drop them first "
                                   f"(SplatData.drop_nonfinite)")
