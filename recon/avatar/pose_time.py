"""A pose for any normalised time in [0, 1] between the captured poses (animation playback).

Captured pose k sits at time ``k / (P - 1)`` (:func:`recon.avatar.avatar_data.pose_times`). Between poses k
and k + 1 each joint's wxyz rotation is slerped along the shortest arc and the root translation lerped, with
weight ``w = t (P - 1) - k``; so time ``k / (P - 1)`` gives pose k exactly. Plain PyTorch (layer 2).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from recon.avatar.quaternions import normalize
from recon.core.errors import UsageError

POSE_TIME_MATCH = 1e-6  # a time this close to k / (P - 1) is pose k (as recon.avatar.avatar_data.TIME_MATCH)
LERP_DOT = 0.9995  # above this |cos| of the half angle slerp is replaced by a normalised lerp (no 0 / 0)


def slerp(a: Tensor, b: Tensor, w: float | Tensor) -> Tensor:
    """[..., 4] unit quaternions a fraction ``w`` in [0, 1] of the way from ``a`` to ``b`` [..., 4] along the
    shortest arc (``b`` is negated where ``a . b < 0``; q and -q are the same rotation). ``w``: one number, or
    a tensor [..., 1] (one fraction per quaternion). Component order free (wxyz or glTF's xyzw alike)."""
    a, b = normalize(a), normalize(b)
    w = torch.as_tensor(w, dtype=a.dtype, device=a.device)
    dot = (a * b).sum(-1, keepdim=True)
    b = torch.where(dot < 0, -b, b)
    dot = dot.abs().clamp(max=1.0)
    theta = torch.acos(dot)
    sin = torch.sin(theta)
    near = dot > LERP_DOT
    safe = torch.where(near, torch.ones_like(sin), sin)
    wa = torch.where(near, 1.0 - w, torch.sin((1.0 - w) * theta) / safe)
    wb = torch.where(near, w, torch.sin(w * theta) / safe)
    return normalize(wa * a + wb * b)


def pose_at_time(rotations: Tensor, translations: Tensor | None, t: float) -> tuple[Tensor, Tensor | None]:
    """The pose at normalised time ``t`` in [0, 1] of the P captured poses ``rotations`` [P, J, 4] (wxyz)
    and ``translations`` [P, 3] (or None): ([J, 4] rotations, [3] translation or None). Exact (the stored
    tensors) within ``POSE_TIME_MATCH`` of a pose's time; UsageError with no poses or ``t`` outside [0, 1]."""
    P = int(rotations.shape[0]) if rotations.dim() == 3 else 0
    if P == 0:
        raise UsageError(f"pose_at_time: no captured poses (rotations of shape {tuple(rotations.shape)}, "
                         f"expected [P >= 1, J, 4])")
    t = float(t)
    if not (math.isfinite(t) and 0.0 <= t <= 1.0):
        raise UsageError(f"pose time {t} is outside [0, 1] (the {P} captured poses span times 0 to 1)")
    x = t * (P - 1)
    nearest = int(round(x))
    if abs(t - nearest / max(P - 1, 1)) <= POSE_TIME_MATCH:  # a captured pose's time (up to rounding)
        return rotations[nearest], None if translations is None else translations[nearest]
    k = min(int(math.floor(x)), P - 2)
    w = x - k
    rot = slerp(rotations[k], rotations[k + 1], w)
    trans = None if translations is None else (1.0 - w) * translations[k] + w * translations[k + 1]
    return rot, trans
