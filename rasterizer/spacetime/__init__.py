"""4D (space-time) Gaussians: slicing at a time into the 3D Gaussians ``rasterize_gaussians`` renders.

Modules, one math step each: :mod:`.rotation` (R = L(q_l) R(q_r)), :mod:`.covariance` (Sigma4 and
its conditioning on time), :mod:`.slicing` (:func:`slice_gaussians_4d`, culling, the
:class:`SlicedGaussians` record), :mod:`.rotor` (4D-Rotor's 8-component rotors <-> two quaternions),
:mod:`.harmonics` (Yang et al.'s 4D spherindrical harmonics). Conventions: rasterizer/DESIGN.md,
"4D Gaussians".
"""

from .covariance import (TimeConditioned, condition_on_time, condition_on_time_reference, covariance_4d,
                         temporal_factor)
from .harmonics import spherindrical_to_color
from .rotation import left_matrix, normalize_quats, right_matrix, rotmat4_from_quats
from .rotor import (ROTOR_COMPONENTS, quats_to_rotor, rotor_constraint, rotor_from_4drotor_halves,
                    rotor_to_4drotor_halves, rotor_to_quats, rotor_to_rotmat4)
from .slicing import CULL_THRESHOLD, SlicedGaussians, slice_gaussians_4d

__all__ = ["slice_gaussians_4d", "SlicedGaussians", "CULL_THRESHOLD", "condition_on_time",
           "condition_on_time_reference", "TimeConditioned", "covariance_4d", "temporal_factor", "rotmat4_from_quats",
           "left_matrix", "right_matrix", "normalize_quats", "ROTOR_COMPONENTS", "rotor_to_quats", "quats_to_rotor",
           "rotor_to_rotmat4", "rotor_constraint", "rotor_from_4drotor_halves", "rotor_to_4drotor_halves",
           "spherindrical_to_color"]
