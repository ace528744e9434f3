"""Input checks of ``rasterize_surfels`` (messages name it; shared checks in ``rasterizer.validate``)."""

from __future__ import annotations

import math

from .. import validate as V
from .composite import SURFEL_DEPTHS

SURFEL_BACKENDS = ("auto", "reference", "cpu", "cuda")


def check_surfels(means, quats, scales, opacities) -> int:
    """means [N, 3], quats [N, 4] (no zero rows), scales [N, 2] (>= 0), opacities [N] in [0, 1]; returns N."""
    V.check_tensor("means", means, (None, 3))
    N, dt, dev = means.shape[0], means.dtype, means.device
    V.check_tensor("quats", quats, (N, 4), dt, dev)
    V.check_tensor("scales", scales, (N, 2), dt, dev)
    if N and V.any_zero_rows(quats):
        rows = (quats.detach().norm(dim=-1) == 0).nonzero()[:5, 0].tolist()
        V._fail("quats", f"has zero-norm rows {rows}: a rotation needs a non-zero quaternion (w, x, y, z)")
    if N and V.any_outside(scales, 0.0, math.inf):
        V._fail("scales", "has negative values: pass activated scales (two per surfel), e.g. exp(log_scales)")
    V.check_tensor("opacities", opacities, (N,), dt, dev)
    if N and V.any_outside(opacities, 0.0, 1.0):
        V._fail("opacities", "has values outside [0, 1]: pass activated opacities, e.g. sigmoid(logits)")
    return N


def check_options(surfel_depth: str, backend: str, tile_size) -> None:
    V.check_choice("surfel_depth", surfel_depth, SURFEL_DEPTHS)
    V.check_choice("backend", backend, SURFEL_BACKENDS)
    if not isinstance(tile_size, int) or isinstance(tile_size, bool) or tile_size <= 0:
        V._fail("tile_size", f"must be a positive int, got {tile_size!r}")
