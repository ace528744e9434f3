"""glTF animation samplers evaluated at given times (glTF 2.0, "Animations" and Appendix C "Interpolation").

A sampler holds K keyframe times ``t_k`` (seconds, strictly increasing) and values: [K, C] for ``STEP`` and
``LINEAR``, [K, 3, C] for ``CUBICSPLINE`` (in-tangent ``a_k``, value ``v_k``, out-tangent ``b_k``). At a time
``t`` with ``t_k <= t < t_(k+1)``, ``dt = t_(k+1) - t_k`` and ``s = (t - t_k) / dt``:

- ``STEP``: ``v_k``;
- ``LINEAR``: ``(1 - s) v_k + s v_(k+1)``; rotations (unit quaternions) are slerped along the shortest arc
  (:func:`recon.avatar.pose_time.slerp`);
- ``CUBICSPLINE``: the cubic Hermite spline ``(2s^3 - 3s^2 + 1) v_k + dt (s^3 - 2s^2 + s) b_k
  + (-2s^3 + 3s^2) v_(k+1) + dt (s^3 - s^2) a_(k+1)``; rotations are normalised afterwards.

Before the first keyframe the first value holds, after the last the last value. Float64 numpy in and out;
the component order of quaternions does not matter here (glTF's xyzw are sampled as they are). Layer 2.
"""

from __future__ import annotations

import numpy as np
import torch

from recon.avatar.pose_time import slerp

INTERPOLATIONS = ("STEP", "LINEAR", "CUBICSPLINE")


def keyframe_segments(times: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(k [T] int, s [T] in [0, 1], dt [T]) of sample times ``t`` [T] on keyframe ``times`` [K]: the segment
    [t_k, t_(k+1)] holding each sample (k clamped to 0..K-2; s = 0 before the first keyframe, 1 after the
    last). One keyframe: k = 0, s = 0, dt = 1."""
    if len(times) < 2:
        return np.zeros(len(t), dtype=np.int64), np.zeros(len(t)), np.ones(len(t))
    k = np.clip(np.searchsorted(times, t, side="right") - 1, 0, len(times) - 2)
    dt = times[k + 1] - times[k]
    s = np.clip((t - times[k]) / dt, 0.0, 1.0)
    return k, s, dt


def sample_step(times: np.ndarray, values: np.ndarray, t: np.ndarray) -> np.ndarray:
    """[T, C] ``values`` [K, C] held from each keyframe to the next (the last from its time on)."""
    k = np.clip(np.searchsorted(times, t, side="right") - 1, 0, len(times) - 1)
    return values[k]


def sample_linear(times: np.ndarray, values: np.ndarray, t: np.ndarray, rotation: bool) -> np.ndarray:
    """[T, C] ``values`` [K, C] interpolated linearly, or by shortest-arc slerp when ``rotation``."""
    if len(times) < 2:
        return np.repeat(values[:1], len(t), axis=0)
    k, s, _ = keyframe_segments(times, t)
    if rotation:
        a, b = torch.from_numpy(values[k]), torch.from_numpy(values[k + 1])
        return slerp(a, b, torch.from_numpy(s)[:, None]).numpy()
    return (1 - s)[:, None] * values[k] + s[:, None] * values[k + 1]


def sample_cubic(times: np.ndarray, values: np.ndarray, t: np.ndarray, rotation: bool) -> np.ndarray:
    """[T, C] the cubic Hermite spline of ``values`` [K, 3, C] (in-tangent, value, out-tangent per keyframe;
    module docstring), rotations normalised."""
    if len(times) < 2:
        out = np.repeat(values[:1, 1], len(t), axis=0)
    else:
        k, s, dt = keyframe_segments(times, t)
        s, dt = s[:, None], dt[:, None]
        s2, s3 = s * s, s * s * s
        out = ((2 * s3 - 3 * s2 + 1) * values[k, 1] + dt * (s3 - 2 * s2 + s) * values[k, 2]
               + (-2 * s3 + 3 * s2) * values[k + 1, 1] + dt * (s3 - s2) * values[k + 1, 0])
    if rotation:
        out = out / np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
    return out


def sample(interpolation: str, times: np.ndarray, values: np.ndarray, t: np.ndarray, rotation: bool) -> np.ndarray:
    """[T, C] a sampler (``interpolation`` one of INTERPOLATIONS) at the times ``t`` [T]."""
    if interpolation == "STEP":
        return sample_step(times, values, t)
    if interpolation == "LINEAR":
        return sample_linear(times, values, t, rotation)
    if interpolation == "CUBICSPLINE":
        return sample_cubic(times, values, t, rotation)
    raise ValueError(f"sample: interpolation {interpolation!r} is not one of {INTERPOLATIONS}")
