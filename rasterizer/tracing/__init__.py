"""Tracing primitives along arbitrary rays (secondary rays: reflection, refraction); see :mod:`.api`.
Imports nothing from recon or viewer."""

from .api import (build_gaussian_accel, build_surfel_accel, candidates_cpu, trace_gaussians,
                  trace_surfels)
from .reference import candidates_reference

__all__ = ["trace_gaussians", "trace_surfels", "build_gaussian_accel", "build_surfel_accel", "candidates_cpu",
           "candidates_reference"]
