"""Dealing items to threads in blocks (rasterizer/cpu/schedule.py): every item exactly once."""

import numpy as np
import pytest
from numba import njit

from rasterizer.cpu.schedule import DEAL_BLOCK, dealt_block, dealt_iterations


@njit
def _visits(G, threads):
    """How often each item is visited, and by which 'thread' (Numba's contiguous split of the loop)."""
    per_thread = dealt_iterations(G, threads) // threads  # Numba gives each thread this many in a row
    seen = np.zeros(G, np.int64)
    owner = np.full(G, -1, np.int64)
    for it in range(dealt_iterations(G, threads)):
        lo, hi = dealt_block(it, G, threads)
        for g in range(lo, hi):
            seen[g] += 1
            owner[g] = it // per_thread
    return seen, owner


@pytest.mark.parametrize("G", [0, 1, DEAL_BLOCK - 1, DEAL_BLOCK, DEAL_BLOCK + 1, 5 * DEAL_BLOCK + 17, 218_475])
@pytest.mark.parametrize("threads", [1, 2, 3, 16])
def test_every_item_once_and_blocks_alternate(G, threads):
    seen, owner = _visits(G, threads)
    assert (seen == 1).all()
    blocks = owner[::DEAL_BLOCK]  # the thread of each block: dealt in turn
    np.testing.assert_array_equal(blocks, np.arange(len(blocks)) % threads)
