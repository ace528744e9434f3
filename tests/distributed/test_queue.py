"""The block queue on a c10d store: each block handed out once, leases renewed, expired leases re-taken."""

import torch.distributed as dist

from recon.core.lease_queue import BlockQueue


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_blocks_are_handed_out_once_then_none():
    store, clock = dist.HashStore(), Clock()
    a = BlockQueue(store, [3, 1, 2], "a", 10, clock)
    b = BlockQueue(store, [3, 1, 2], "b", 10, clock)
    got = [a.claim(), b.claim(), a.claim()]
    assert got == [3, 1, 2]
    assert b.claim() is None and not a.all_done()
    for q, blk in ((a, 3), (b, 1), (a, 2)):
        q.finish(blk)
    assert a.all_done() and b.num_done() == 3


def test_expired_lease_is_taken_over_once_and_the_old_owner_learns_it():
    store, clock = dist.HashStore(), Clock()
    a = BlockQueue(store, [0, 1], "a", 10, clock)
    b = BlockQueue(store, [0, 1], "b", 10, clock)
    c = BlockQueue(store, [0, 1], "c", 10, clock)
    assert a.claim() == 0 and b.claim() == 1
    clock.now += 5
    assert a.renew(0) and c.claim() is None  # renewed: nothing to take
    clock.now += 8  # b's lease (until 1010) expired, a's (until 1015) not
    assert c.claim() == 1
    assert b.claim() is None  # the winner holds it now; nobody else gets it
    assert not b.renew(1)  # b was cut off: its renewal fails, it must stop
    assert c.renew(1) and a.lease(1)["worker"] == "c"
    c.finish(1)
    b.finish(1)  # a late finish of the same block does not count twice
    a.finish(0)
    assert a.all_done() and a.num_done() == 2


def test_finished_blocks_are_not_retaken_after_their_lease_expires():
    store, clock = dist.HashStore(), Clock()
    a = BlockQueue(store, [0], "a", 10, clock)
    b = BlockQueue(store, [0], "b", 10, clock)
    assert a.claim() == 0
    a.finish(0)
    clock.now += 100
    assert b.claim() is None and b.all_done()
