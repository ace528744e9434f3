"""cpu input checks: the same counts on the serial path (small arrays) and the parallel one (large)."""

import numpy as np
import pytest

from rasterizer.cpu.checks import PARALLEL_MIN, count_non_finite, count_outside, count_zero_rows


@pytest.mark.parametrize("n", [1000, PARALLEL_MIN + 12345])
def test_count_non_finite_both_paths(n):
    x = np.random.default_rng(0).random(n).astype(np.float32)
    x[[3, n // 2, n - 1]] = [np.nan, np.inf, -np.inf]
    assert count_non_finite(x) == 3


def test_value_checks():
    q = np.ones((5, 4), np.float32)
    q[2] = 0.0
    q[4, 1:] = 0.0  # not all zero
    assert count_zero_rows(q) == 1
    assert count_outside(np.array([-0.1, 0.0, 0.5, 1.0, 1.2, np.nan]), 0.0, 1.0) == 2
