"""The time flags of ``render``, ``export`` and ``view`` for 4D models: ``--time T`` and ``--times a:b:n``.

Times are normalised: 0 is the first frame of the capture, 1 the last (rasterizer/DESIGN.md, "4D
Gaussians"). Outside [0, 1] a 4D model has not been trained, so such times are refused.
"""

from __future__ import annotations

import math

import numpy as np

from recon.core.errors import UsageError


def check_time(t: float, flag: str = "--time") -> float:
    """``t`` as a float when it is a finite number in [0, 1]; UsageError naming ``flag`` otherwise."""
    try:
        value = float(t)
    except (TypeError, ValueError):
        raise UsageError(f"{flag} {t!r}: not a number; give a normalised time in [0, 1]") from None
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise UsageError(f"{flag} {t}: outside [0, 1]; times are normalised (0 = the first frame, 1 = the last)")
    return value


def parse_times(text: str, flag: str = "--times") -> list[float]:
    """``"a:b:n"`` -> n times evenly spaced from a to b inclusive (n = 1: [a]); a and b in [0, 1] (a > b
    plays backwards), n a whole number >= 1. UsageError naming ``flag`` and the expected form otherwise."""
    parts = str(text).split(":")
    if len(parts) != 3:
        raise UsageError(f"{flag} {text!r}: expected START:END:COUNT, e.g. 0:1:120 (120 times from 0 to 1)")
    start = check_time(parts[0], f"{flag} {text!r}: START")
    end = check_time(parts[1], f"{flag} {text!r}: END")
    try:
        count = int(parts[2])
    except ValueError:
        raise UsageError(f"{flag} {text!r}: COUNT {parts[2]!r} is not a whole number") from None
    if count < 1:
        raise UsageError(f"{flag} {text!r}: COUNT must be >= 1")
    if count == 1:
        return [start]
    return [float(v) for v in np.linspace(start, end, count)]


def resolve_times(time: float | None, times: str | None) -> list[float] | None:
    """The times asked for by ``--time`` / ``--times`` (None when neither); UsageError when both."""
    if time is not None and times is not None:
        raise UsageError("give --time T (one time) or --times START:END:COUNT (a sequence), not both")
    if time is not None:
        return [check_time(time)]
    if times is not None:
        return parse_times(times)
    return None
