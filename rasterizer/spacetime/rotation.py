"""4D rotations from two unit quaternions: R = L(q_l) R(q_r) (Yang et al., ICLR 2024).

A space-time point (x, y, z, t) is the quaternion v = x + y i + z j + t k; the rotation is
v -> q_l v q_r, whose matrix is ``L(q_l) @ R(q_r)`` with L(q) the matrix of v -> q v and R(q) the
matrix of v -> v q (the matrices printed in Yang et al.'s paper). Quaternions are (w, x, y, z) and
need not be unit: they are normalised here as ``q / max(|q|, 1e-12)`` (rasterizer/CONVENTIONS.md), so
q_l = q_r = (1, 0, 0, 0) is the identity, and (q_l, q_r) and (-q_l, -q_r) give the same rotation.

Yang et al.'s released code builds ``flip(L(q_l) @ R(q_r)^T)`` instead (the transposed right factor,
and the axis order reversed); its checkpoints need a conversion of the quaternions before they are
used here (not written yet: nothing reads them).
"""

from __future__ import annotations

import torch
from torch import Tensor

# entry [i][k] of L(q) is LEFT_SIGN[i][k] * q[LEFT_INDEX[i][k]]; the same for R(q)
LEFT_INDEX = ((0, 1, 2, 3), (1, 0, 3, 2), (2, 3, 0, 1), (3, 2, 1, 0))
LEFT_SIGN = ((1, -1, -1, -1), (1, 1, -1, 1), (1, 1, 1, -1), (1, -1, 1, 1))
RIGHT_INDEX = LEFT_INDEX
RIGHT_SIGN = ((1, -1, -1, -1), (1, 1, 1, -1), (1, -1, 1, 1), (1, 1, -1, 1))


def normalize_quats(quats: Tensor) -> Tensor:
    """[..., 4] quaternions divided by max(|q|, 1e-12) (a zero quaternion stays zero)."""
    norm2 = (quats * quats).sum(-1, keepdim=True)
    return quats * torch.rsqrt(norm2.clamp_min(1e-24))


def _signed_matrix(q: Tensor, index, sign) -> Tensor:
    idx = torch.tensor(index, device=q.device).reshape(-1)
    sgn = torch.tensor(sign, dtype=q.dtype, device=q.device).reshape(-1)
    return (q[..., idx] * sgn).reshape(q.shape[:-1] + (4, 4))


def left_matrix(q: Tensor) -> Tensor:
    """[..., 4, 4] matrix of v -> q v (quaternion product, q used as given: not normalised)."""
    return _signed_matrix(q, LEFT_INDEX, LEFT_SIGN)


def right_matrix(q: Tensor) -> Tensor:
    """[..., 4, 4] matrix of v -> v q (quaternion product, q used as given: not normalised)."""
    return _signed_matrix(q, RIGHT_INDEX, RIGHT_SIGN)


def _bilinear_table() -> Tensor:
    """[16, 16] float64 B with vec(L(a) R(p)) = B @ vec(a p^T) (row-major vec): each entry of the 4x4
    rotation is a signed sum of four products a_m p_n, read off the L and R tables."""
    table = torch.zeros(16, 16, dtype=torch.float64)
    for i in range(4):
        for j in range(4):
            for k in range(4):
                m, n = LEFT_INDEX[i][k], RIGHT_INDEX[k][j]
                table[4 * i + j, 4 * m + n] += LEFT_SIGN[i][k] * RIGHT_SIGN[k][j]
    return table


BILINEAR = _bilinear_table()


def rotmat4_from_unit_quats(unit_left: Tensor, unit_right: Tensor) -> Tensor:
    """[N, 4, 4] = L(q_l) R(q_r) for quaternions used as given ([N, 4] each; pass unit ones): the 16
    products q_l[m] q_r[n] times the constant table :data:`BILINEAR` (one small matrix product; no
    batched 4x4 matmul, which PyTorch runs slowly for millions of tiny matrices)."""
    n = unit_left.shape[0]
    products = (unit_left[:, :, None] * unit_right[:, None, :]).reshape(n, 16)
    table = BILINEAR.to(device=unit_left.device, dtype=unit_left.dtype)
    return (products @ table.T).reshape(n, 4, 4)


def rotmat4_from_quats(quats_left: Tensor, quats_right: Tensor) -> Tensor:
    """4D rotation matrices [N, 4, 4] (acting on column vectors (x, y, z, t)) from left and right
    quaternions [N, 4] (w, x, y, z), any non-zero norm (normalised here)."""
    return rotmat4_from_unit_quats(normalize_quats(quats_left), normalize_quats(quats_right))
