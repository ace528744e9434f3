"""4D-Rotor Gaussian Splatting's 8-component rotors <-> the two quaternions of :mod:`.rotation`.

A rotor is r = (s, b_xy, b_xz, b_xw, b_yz, b_yw, b_zw, p) here (:data:`ROTOR_COMPONENTS`; w is the time
axis t), a rotation when |r| = 1 and s p - b_xy b_zw + b_xz b_yw - b_xw b_yz = 0
(:func:`rotor_constraint`). 4D-Rotor's code (github.com/weify627/4D-Rotor-Gaussians,
nerfstudio/utils/general_utils.py) stores it as two [N, 4] halves in another order,
(s, b_xy, b_xz, b_yz) and (b_xw, b_yw, b_zw, p): :func:`rotor_from_4drotor_halves` and
:func:`rotor_to_4drotor_halves` convert. Its matrix, :func:`rotor_to_rotmat4` (written out here from
that code's ``build_rotation_from_rotor8``, as the transposed matrix it returns), equals
L(q_l) R(q_r) for the quaternions of :func:`rotor_to_quats`, a linear map:

    q_l = (s - p, -(b_xy + b_zw), -(b_xz - b_yw), -(b_xw + b_yz))
    q_r = (s + p, -(b_xy - b_zw), -(b_xz + b_yw), -(b_xw - b_yz))

|q_l|^2 = |r|^2 - 2 c and |q_r|^2 = |r|^2 + 2 c with c the constraint, so a unit rotor satisfying it
gives unit quaternions. 4D-Rotor makes its raw parameters a rotation by moving r along its dual until
c = 0 and then normalising; in quaternion terms that rescales q_l and q_r, so normalising each
quaternion (what :func:`rotor_to_quats` and the slicing do) gives the same rotation from the raw
parameters. The inverse, :func:`quats_to_rotor`, is r = (A^T q_l + B^T q_r) / 2 for the 4x8 matrices
A, B of the map above (A A^T = B B^T = 2 I, A B^T = 0).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..validate import RasterizerInputError
from .rotation import normalize_quats

ROTOR_COMPONENTS = ("s", "b_xy", "b_xz", "b_xw", "b_yz", "b_yw", "b_zw", "p")
# 4D-Rotor's storage: rotors1 = (s, b_xy, b_xz, b_yz), rotors2 = (b_xw, b_yw, b_zw, p)
_FROM_4DROTOR = (0, 1, 2, 4, 3, 5, 6, 7)  # ours[k] = theirs[_FROM_4DROTOR[k]]
_TO_4DROTOR = (0, 1, 2, 4, 3, 5, 6, 7)    # the permutation is its own inverse

# rows: q_l (4), then q_r (4); columns: the rotor components in ROTOR_COMPONENTS order
_ROTOR_TO_QUATS = (
    (1, 0, 0, 0, 0, 0, 0, -1),
    (0, -1, 0, 0, 0, 0, -1, 0),
    (0, 0, -1, 0, 0, 1, 0, 0),
    (0, 0, 0, -1, -1, 0, 0, 0),
    (1, 0, 0, 0, 0, 0, 0, 1),
    (0, -1, 0, 0, 0, 0, 1, 0),
    (0, 0, -1, 0, 0, -1, 0, 0),
    (0, 0, 0, -1, 1, 0, 0, 0),
)


def _table(x: Tensor) -> Tensor:
    return torch.tensor(_ROTOR_TO_QUATS, dtype=x.dtype, device=x.device)


def _check_last_dim(func: str, name: str, x, size: int) -> None:
    if not isinstance(x, Tensor) or x.dim() == 0 or x.shape[-1] != size or not x.is_floating_point():
        got = f"{x.dtype} {list(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise RasterizerInputError(f"{func}: `{name}` must be a floating-point tensor [..., {size}], got {got}")


def rotor_from_4drotor_halves(rotors1: Tensor, rotors2: Tensor) -> Tensor:
    """[N, 8] rotors (ROTOR_COMPONENTS order) from 4D-Rotor's two stored halves [N, 4] each."""
    theirs = torch.cat([rotors1, rotors2], dim=-1)
    return theirs[..., list(_FROM_4DROTOR)]


def rotor_to_4drotor_halves(rotors: Tensor) -> tuple[Tensor, Tensor]:
    """4D-Rotor's two halves (s, b_xy, b_xz, b_yz), (b_xw, b_yw, b_zw, p) from [N, 8] rotors."""
    theirs = rotors[..., list(_TO_4DROTOR)]
    return theirs[..., :4], theirs[..., 4:]


def rotor_constraint(rotors: Tensor) -> Tensor:
    """[...] s p - b_xy b_zw + b_xz b_yw - b_xw b_yz: zero for a rotor that is a rotation."""
    s, bxy, bxz, bxw, byz, byw, bzw, p = rotors.unbind(-1)
    return s * p - bxy * bzw + bxz * byw - bxw * byz


def rotor_to_rotmat4(rotors: Tensor) -> Tensor:
    """[..., 4, 4] matrix of rotors [..., 8] (ROTOR_COMPONENTS order, used as given) as 4D-Rotor builds
    it (Sigma4 = M S S^T M^T there). Orthonormal only for a unit rotor satisfying the constraint."""
    _check_last_dim("rotor_to_rotmat4", "rotors", rotors, 8)
    s, xy, xz, xw, yz, yw, zw, p = rotors.unbind(-1)
    sq = [v * v for v in (s, xy, xz, xw, yz, yw, zw, p)]
    ss, xy2, xz2, xw2, yz2, yw2, zw2, pp = sq
    base = ss - pp
    entries = [
        base - xy2 - xz2 - xw2 + yz2 + yw2 + zw2,
        2 * (xy * s - xz * yz - xw * yw + zw * p),
        2 * (xy * yz + xz * s - xw * zw - yw * p),
        2 * (xy * yw + xz * zw + xw * s + yz * p),

        -2 * (xy * s + xz * yz + xw * yw + zw * p),
        base - xy2 + xz2 + xw2 - yz2 - yw2 + zw2,
        2 * (-xy * xz + xw * p + yz * s - yw * zw),
        2 * (-xy * xw - xz * p + yz * zw + yw * s),

        2 * (xy * yz - xz * s - xw * zw + yw * p),
        -2 * (xy * xz + xw * p + yw * zw + yz * s),
        base + xy2 - xz2 + xw2 - yz2 + yw2 - zw2,
        2 * (xy * p - xz * xw - yw * yz + zw * s),

        2 * (xy * yw + xz * zw - xw * s - yz * p),
        2 * (-xy * xw + xz * p + yz * zw - yw * s),
        -2 * (xy * p + xz * xw + yz * yw + zw * s),
        base + xy2 + xz2 - xw2 + yz2 - yw2 - zw2,
    ]
    return torch.stack(entries, dim=-1).reshape(rotors.shape[:-1] + (4, 4))


def rotor_to_quats(rotors: Tensor) -> tuple[Tensor, Tensor]:
    """(q_l, q_r), unit [..., 4] each, of rotors [..., 8] (ROTOR_COMPONENTS order, any norm): the
    rotation 4D-Rotor renders from these raw parameters (its constraint projection and
    normalisation included). A rotor whose q_l or q_r is zero has no such rotation:
    RasterizerInputError (a ValueError)."""
    _check_last_dim("rotor_to_quats", "rotors", rotors, 8)
    quats = rotors @ _table(rotors).T
    q_l, q_r = quats[..., :4], quats[..., 4:]
    for name, q in (("left", q_l), ("right", q_r)):
        zero = (q.detach() == 0).all(-1)
        if bool(zero.any()):
            rows = zero.reshape(-1).nonzero()[:5, 0].tolist()
            raise RasterizerInputError(f"rotor_to_quats: rotors {rows} (flattened rows) have a zero {name} quaternion, "
                             "i.e. |r|^2 = 2 |constraint|: no rotation is near them")
    return normalize_quats(q_l), normalize_quats(q_r)


def quats_to_rotor(quats_left: Tensor, quats_right: Tensor) -> Tensor:
    """[..., 8] unit rotor (ROTOR_COMPONENTS order, satisfying the constraint) of the rotation
    L(q_l) R(q_r); quaternions [..., 4], any non-zero norm (normalised here). (q_l, q_r) and
    (-q_l, -q_r) give r and -r, the same rotation."""
    _check_last_dim("quats_to_rotor", "quats_left", quats_left, 4)
    _check_last_dim("quats_to_rotor", "quats_right", quats_right, 4)
    quats = torch.cat([normalize_quats(quats_left), normalize_quats(quats_right)], dim=-1)
    return 0.5 * (quats @ _table(quats))
