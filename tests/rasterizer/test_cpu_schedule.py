"""Dealing items to threads in blocks, and claiming them one at a time (rasterizer/cpu/schedule.py): every item
exactly once."""

import numpy as np
import pytest
from numba import njit, prange

from rasterizer.cpu.schedule import DEAL_BLOCK, claim, dealt_block, dealt_iterations


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


@njit(parallel=True)
def _claimed(n, threads, rounds, counter):
    """Each of ``threads`` parallel iterations claims items from ``counter`` until none is left; returns who took
    each item."""
    taker = np.full(n, -1, np.int64)
    for w in prange(threads):
        while True:
            item = claim(counter)
            if item >= n:
                break
            x = 0.0
            for k in range(rounds):  # some work, so that the threads overlap
                x += k * 1e-9
            taker[item] = w + int(x * 0)
    return taker


@pytest.mark.parametrize("n, threads", [(0, 2), (1, 2), (37, 2), (1000, 3), (5, 8)])
def test_claim_gives_every_item_to_exactly_one_thread(n, threads):
    """claim is an atomic fetch-and-add: in parallel, every item is taken once, by some thread, and the counter
    ends at n plus one failed claim per thread."""
    counter = np.zeros(1, np.int64)
    taker = _claimed(n, threads, 2000, counter)
    assert (taker >= 0).all() and (taker < threads).all()
    assert counter[0] == n + threads


def test_claim_counts_from_the_start_value():
    @njit
    def take_three(counter):
        return claim(counter), claim(counter), claim(counter)

    counter = np.array([5], np.int64)
    assert take_three(counter) == (5, 6, 7) and counter[0] == 8
