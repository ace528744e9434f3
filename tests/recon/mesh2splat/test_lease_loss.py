"""``mesh2splat --distributed``: leases are renewed by the rank's keeper thread whatever the rank is doing, and
an object whose lease another rank took over is abandoned (worker killed, in-process conversion stopped) and
its row dropped, so that only the new owner's row reaches the index."""

import multiprocessing
import time

import pytest
import torch.distributed as dist

from recon.core.lease_queue import BlockQueue, LeaseLostError
from recon.mesh2splat.batch import BatchConfig, FeedPoll, LocalFeed, _Worker, _WorkerPool
from recon.mesh2splat.cluster import QueueFeed, RowChannel


def feeds(lease: float, todo=("a.obj", "b.obj")):
    store = dist.HashStore()
    make = lambda name: QueueFeed(BlockQueue(store, range(len(todo)), name, lease), list(todo), RowChannel(store))
    return make("rank0"), make("rank1"), RowChannel(store)


def test_the_keeper_thread_renews_leases_while_the_rank_does_not_poll():
    a, b, _ = feeds(lease=2.0, todo=("a.obj",))  # renewed every 0.5 s: a stall under 1.5 s is tolerated
    assert a.take() == "a.obj"
    a.keep_leases()
    try:
        time.sleep(4.5)  # over two leases without a poll (a long render in this process)
        assert b.take() is None and not a.is_lost("a.obj")
    finally:
        a.close()


def test_a_store_error_in_the_keeper_thread_stops_the_rank_at_its_next_poll():
    a, _, _ = feeds(lease=0.2, todo=("a.obj",))
    assert a.take() == "a.obj"

    def broken(block):
        raise RuntimeError("store timed out")

    a.queue.renew = broken
    a.keep_leases()
    try:
        deadline = time.monotonic() + 10
        while a.keeper_error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(RuntimeError, match="renewing this rank's leases failed.*store timed out"):
            a.poll(["a.obj"])
        with pytest.raises(RuntimeError, match="renewing this rank's leases failed"):  # nothing published
            a.finish({"source": "a.obj", "status": "failed"})
        assert a.channel.count() == 0
    finally:
        a.close()


def test_a_lost_object_is_dropped_and_only_the_new_owners_row_counts():
    a, b, channel = feeds(lease=0.2, todo=("a.obj",))
    assert a.take() == "a.obj"
    time.sleep(0.45)  # rank0 stopped renewing (hung): its lease expired
    b.next_claim = 0.0
    assert b.take() == "a.obj"
    a.renew()
    assert a.is_lost("a.obj")
    assert not a.finish({"source": "a.obj", "status": "done"}) and channel.count() == 0
    assert b.finish({"source": "a.obj", "status": "done"}) and channel.count() == 1
    assert a.more() is False and not a.is_lost("a.obj")


def test_in_process_conversion_stops_at_its_next_step_once_lost():
    a, b, _ = feeds(lease=0.2, todo=("a.obj",))
    hook = FeedPoll(a, a.take())
    hook.on_step(None, None)  # still ours
    time.sleep(0.45)
    b.next_claim = 0.0
    assert b.take() == "a.obj"
    a.renew()
    with pytest.raises(LeaseLostError, match="a.obj"):
        hook.on_step(None, None)
    hook_local = FeedPoll(LocalFeed(["x.obj"]), "x.obj")
    hook_local.on_step(None, None)  # one machine: never lost


class FakeProcess:
    """Stands in for a worker process that converts its object forever."""

    pid, exitcode = 424242, None

    def __init__(self):
        self.alive = True

    def is_alive(self):
        return self.alive

    def kill(self):
        self.alive = False

    def join(self, timeout=None):
        pass


class LosingFeed(LocalFeed):
    """One object, lost to another machine after a few polls."""

    def __init__(self):
        super().__init__(["a.obj"])
        self.polls, self.forgotten = 0, []

    def poll(self, running):
        self.polls += 1
        assert self.polls < 30, "the pool kept converting an object it lost"

    def is_lost(self, source):
        return self.polls >= 3 and source not in self.forgotten

    def forget(self, source):
        self.forgotten.append(source)

    def more(self):
        return bool(self.left) or not self.forgotten


def test_the_pool_kills_the_worker_of_a_lost_object_and_yields_no_row(tmp_path, monkeypatch):
    pool = _WorkerPool(BatchConfig(mesh_dir=tmp_path, out=tmp_path / "out", workers=1, progress=False))
    made, their_ends = [], []

    def spawn():
        mine, theirs = multiprocessing.Pipe(duplex=True)
        their_ends.append(theirs)  # the worker's end stays open: it never answers
        worker = _Worker(FakeProcess(), mine)
        pool.workers.append(worker)
        made.append(worker)
        return worker

    monkeypatch.setattr(pool, "spawn", spawn)
    feed = LosingFeed()
    rows = list(pool.rows(feed))
    assert rows == [] and feed.forgotten == ["a.obj"]
    assert len(made) == 1 and not made[0].process.alive and pool.workers == []
