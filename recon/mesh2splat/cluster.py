"""``splatforge mesh2splat ... --distributed``: one batch spread over the processes of a torch.distributed job
(several machines: torchrun's rendezvous, ``OUT`` and ``MESH_DIR`` on a shared file system).

Every rank runs the command with the same flags; each converts objects in its own ``--workers`` processes
(limits and all, :mod:`recon.mesh2splat.batch`), taking them from the lease queue of block training
(:class:`recon.core.lease_queue.BlockQueue` on the job's c10d store; an "object" is a block there):

1. Rank 0 takes ``OUT/.lock``, clears ``OUT/.work``, lists the pending objects (resume: the index's rows, as
   a one-machine batch) and publishes them on the store (an error there is published too, and every rank
   stops with it); the others read them.
2. Every rank's workers claim objects (:class:`QueueFeed`); a thread of the rank renews the leases of its
   running objects, so that an object of a rank that stopped renewing (dead, hung, cut off) goes to another
   rank once its lease expired. The rank that lost it abandons it (kills its worker; drops its row).
3. A finished object's row goes onto the store (:class:`RowChannel`) before the object is marked done;
   **rank 0 alone writes** ``OUT/index.jsonl``, draining the rows while its own workers convert, and
   after every object is done.
4. A barrier; rank 0 removes ``OUT/.work`` and the command writes ``OUT/report/``.

A rank killed mid-batch: torchrun stops the job; the rows rank 0 had not written yet are lost and those
objects are converted again by the next run (resume is the index's, as on one machine).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import time
from pathlib import Path

import torch

from recon.core.errors import UsageError, describe
from recon.core.lease_queue import BlockQueue, LeaseKeeper
from recon.core.process_group import barrier, init_group
from recon.data.splat_index import append_row
from recon.mesh2splat.batch import (POLL_SECONDS, BatchConfig, ObjectProgress, check_batch_config, convert_all,
                                    pending)
from recon.mesh2splat.sources import WORK_DIR
from recon.outputs.files import RunLock

STORE_PREFIX = "mesh2splat/"


class RowChannel:
    """Index rows from every rank to rank 0 through the store: ``rows/<k>`` (JSON), ``k`` from the counter
    ``nrows``."""

    def __init__(self, store):
        self.store = store

    def publish(self, row: dict) -> None:
        k = self.store.add("nrows", 1) - 1
        self.store.set(f"rows/{k}", json.dumps(row))

    def count(self) -> int:
        """Rows announced so far (a row's key is set just after its number is taken)."""
        return int(self.store.add("nrows", 0))

    def row(self, k: int) -> dict | None:
        """Row ``k``, None while it is not on the store yet."""
        key = f"rows/{k}"
        return json.loads(self.store.get(key)) if self.store.check([key]) else None


class IndexWriter:
    """Rank 0: appends the channel's rows to ``OUT/index.jsonl`` in the order they came, once each."""

    def __init__(self, out: Path, channel: RowChannel, bar: ObjectProgress):
        self.out, self.channel, self.bar = Path(out), channel, bar
        self.written = 0
        self.counts = {"done": 0, "failed": 0}

    def drain(self) -> None:
        while (row := self.channel.row(self.written)) is not None:
            append_row(self.out, row)
            self.counts[row["status"]] = self.counts.get(row["status"], 0) + 1
            self.bar.advance(row)
            self.written += 1


class QueueFeed:
    """A feed (see :class:`recon.mesh2splat.batch.LocalFeed`) over the lease queue: objects ``todo`` by index.

    Leases: the queue's :class:`recon.core.lease_queue.LeaseKeeper` (the one block training uses) holds the
    objects handed out by :meth:`take` until :meth:`finish`; its thread (:meth:`keep_leases`) renews their
    leases every ``lease_seconds`` / 4 whatever the rank is doing (rendering views in this process, a worker's
    long step), so a lease expires only when the rank stops. An object whose renewal fails was taken over by
    another rank: it is *lost* (:meth:`is_lost`); the pool kills its worker, the in-process conversion stops
    at its next training step (:class:`recon.mesh2splat.batch.FeedPoll`), and :meth:`finish` drops its row:
    the new owner's row is the one that counts. :meth:`poll` lets rank 0's ``writer`` drain the rows."""

    def __init__(self, queue: BlockQueue, todo: list[str], channel: RowChannel, writer: IndexWriter | None = None):
        self.queue, self.todo, self.channel, self.writer = queue, todo, channel, writer
        self.keeper = LeaseKeeper(queue)
        self.index = {source: i for i, source in enumerate(todo)}
        self.next_claim = 0.0

    @property
    def keeper_error(self) -> BaseException | None:
        """What stopped the keeper thread (re-raised by :meth:`poll`)."""
        return self.keeper.error

    def take(self) -> str | None:
        """The next object; once the queue has handed every object out, a claim (which then scans all the
        leases for an expired one) is tried at most every ``lease_seconds`` / 4, up to 5 s."""
        if time.monotonic() < self.next_claim:
            return None
        i = self.keeper.claim()
        if i is None:
            self.next_claim = time.monotonic() + min(5.0, self.queue.lease_seconds / 4)
            return None
        return self.todo[i]

    def more(self) -> bool:
        return not self.keeper.all_done()

    def renew(self) -> None:
        """Renew the running objects' leases; an object whose lease was taken over becomes lost."""
        self.keeper.renew()

    def is_lost(self, source: str) -> bool:
        return self.keeper.is_lost(self.index[source])

    def forget(self, source: str) -> None:
        """``source`` was abandoned (its worker killed after the lease was lost): no row will come."""
        self.keeper.forget(self.index[source])

    def keep_leases(self) -> "QueueFeed":
        """Start the keeper thread (:meth:`close` stops it)."""
        self.keeper.start("mesh2splat-leases")
        return self

    def close(self) -> None:
        self.keeper.close()

    def check_keeper(self) -> None:
        """Raise what stopped the keeper thread: leases no longer renewed, every running object would go to other
        ranks (raised from :meth:`poll` and, before anything is published, :meth:`finish`)."""
        if self.keeper.error is not None:
            raise RuntimeError(f"mesh2splat: renewing this rank's leases failed ({describe(self.keeper.error)})") \
                from self.keeper.error

    def poll(self, running: list[str]) -> None:
        """Drain rank 0's rows (see :meth:`check_keeper`)."""
        self.check_keeper()
        if self.writer is not None:
            self.writer.drain()

    def finish(self, row: dict) -> bool:
        """Publish ``row``, then mark its object done; False (nothing published) when the object was lost to
        another rank, which publishes its own row."""
        self.check_keeper()  # an object that failed because the keeper stopped is not recorded as failed
        block = self.index[row["source"]]
        if not self.keeper.release(block):
            return False
        self.channel.publish(row)
        self.keeper.finish(block)
        return True


def publish_error(store, err: BaseException, world: int, wait: float = 30.0) -> None:
    """Rank 0: put ``err`` on the store as "pending" and wait (up to ``wait`` s) until the other ranks read it:
    rank 0 hosts the store when started by hand, and its end would cut them off before they can say why."""
    store.set("pending", json.dumps({"error": describe(err)}))
    end = time.monotonic() + wait
    while int(store.add("pending_read", 0)) < world - 1 and time.monotonic() < end:
        time.sleep(POLL_SECONDS)


def publish_pending(store, cfg: BatchConfig, world: int) -> tuple[int, list[str]]:
    """Rank 0: (objects under MESH_DIR, the pending ones) put on the store as "pending"; an error while
    listing them is put there instead (the other ranks raise it too) and raised."""
    try:
        check_batch_config(cfg)
        sources, todo = pending(cfg)
    except Exception as err:
        publish_error(store, err, world)
        raise
    store.set("pending", json.dumps({"objects": len(sources), "todo": todo}))
    return len(sources), todo


def read_pending(store) -> tuple[int, list[str]]:
    """Other ranks: what rank 0 published (waits for it: the store's timeout)."""
    info = json.loads(store.get("pending"))
    store.add("pending_read", 1)
    if "error" in info:
        raise UsageError(f"rank 0 stopped the batch: {info['error']}")
    return info["objects"], info["todo"]


def run_distributed(cfg: BatchConfig, lease_seconds: float = 120.0, timeout_seconds: float = 600.0) -> dict:
    """This rank's part of a distributed batch (module docstring); returns {"rank", "world_size",
    "objects", "converted" (by this rank), "done", "failed" (this rank's), "skipped", "seconds"} and on rank 0
    "written" (rows written to the index by this run)."""
    if not lease_seconds > 0 or not timeout_seconds > 0:
        raise UsageError(f"--lease-seconds {lease_seconds} / --timeout-seconds {timeout_seconds}: must be > 0")
    timeout = datetime.timedelta(seconds=timeout_seconds)
    cpu = torch.device("cpu")  # the group only carries the store and a barrier: gloo whatever trains the objects
    store, rank, world = init_group(cpu, timeout)
    store = torch.distributed.PrefixStore(STORE_PREFIX, store)
    out, lock, t0 = Path(cfg.out), None, time.perf_counter()
    try:
        if rank == 0:
            if Path(cfg.mesh_dir).is_dir():
                out.mkdir(parents=True, exist_ok=True)
            try:
                lock = RunLock(out).acquire() if out.is_dir() else None
                shutil.rmtree(out / WORK_DIR, ignore_errors=True)  # half-done objects of a killed batch restart
            except Exception as err:
                publish_error(store, err, world)
                raise
            objects, todo = publish_pending(store, cfg, world)
        else:
            objects, todo = read_pending(store)
        queue = BlockQueue(torch.distributed.PrefixStore("queue/", store), range(len(todo)),
                           f"rank{rank}@{socket.gethostname()}:{os.getpid()}", lease_seconds)
        channel = RowChannel(store)
        counts = {"done": 0, "failed": 0}
        with ObjectProgress(cfg.progress and rank == 0, len(todo)) as bar:
            writer = IndexWriter(out, channel, bar) if rank == 0 else None
            feed = QueueFeed(queue, todo, channel, writer).keep_leases()
            try:
                for row in convert_all(cfg, feed):
                    row["worker"] = f"rank{rank}@{socket.gethostname()}"
                    if feed.finish(row):
                        counts[row["status"]] += 1
            finally:
                feed.close()
            while writer is not None and (writer.written < channel.count() or not queue.all_done()):
                writer.drain()
                time.sleep(POLL_SECONDS)
        barrier(timeout, cpu)
        if rank == 0:
            shutil.rmtree(out / WORK_DIR, ignore_errors=True)
        result = {"rank": rank, "world_size": world, "objects": objects, "converted": sum(counts.values()),
                  **counts, "skipped": objects - len(todo), "seconds": round(time.perf_counter() - t0, 2)}
        if writer is not None:
            result["written"] = writer.written
        return result
    finally:
        if lock is not None:
            lock.release()
        torch.distributed.destroy_process_group()
