"""A dynamic block queue with leases on a c10d Store (the TCPStore torchrun's rendezvous already runs).

Shared by the jobs that spread work over torch.distributed workers: block training (:mod:`recon.distributed`,
a "block" is a block of the partition) and ``splatforge mesh2splat --distributed`` (:mod:`recon.mesh2splat.cluster`,
a "block" is one mesh of the batch); it lives here, below both.

Keys (under the queue's prefix): ``next`` (an atomic counter: ``store.add("next", 1)`` hands each block
out once), ``lease/<block>`` (JSON ``{"worker", "expires"}``: who trains it and until when, wall-clock
seconds), ``done/<block>`` and the counter ``ndone``. A worker claims the next unhanded block; when none
is left it re-takes a block whose lease expired (its worker stopped renewing: dead, hung or cut off from
the store) with an atomic ``compare_set`` on the lease, so exactly one worker wins it. The owner renews
its lease while it trains (:meth:`BlockQueue.renew`; False when it was taken over, and the owner must
stop). Leases compare wall clocks of different machines: keep ``lease_seconds`` well above their skew.

Renewal runs on a thread of the worker (:class:`LeaseKeeper`), every ``lease_seconds`` / 4 whatever the worker
is doing (a training step, an evaluation, a checkpoint or splat write, rendering views), so that a lease
expires only when the worker stops (dead, hung, cut off). A block whose renewal fails is *lost*: its worker
stops it at its next check (:meth:`LeaseKeeper.is_lost`, a training step of block training, the pool's poll of
mesh2splat) and publishes nothing for it (:meth:`LeaseKeeper.release` says False): the new owner's result is
the one that counts.

Under torchrun a worker that dies (SIGKILL) makes the agent stop and restart the whole group
(``--max-restarts``); each restart round gets a fresh prefix (``TORCHELASTIC_RESTART_COUNT``) and the
run folder says which blocks are finished (their metrics.json) and where the others stand (their
checkpoints). Leases cover the worker that stops renewing while the group lives.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable, Sequence

from recon.core.errors import SplatforgeError, describe


class LeaseLostError(SplatforgeError, RuntimeError):
    """Another worker took this worker's block over (its lease expired): the old owner stops that block."""


class BlockQueue:
    """Blocks ``blocks`` (ids, in hand-out order) shared by the workers through ``store``.

    ``worker`` names this worker in leases; ``clock`` returns wall-clock seconds (tests pass a fake)."""

    def __init__(self, store, blocks: Sequence[int], worker: str, lease_seconds: float,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.blocks = list(blocks)
        self.worker = worker
        self.lease_seconds = float(lease_seconds)
        self.clock = clock
        self._held: dict[int, bytes] = {}  # block -> the lease value we wrote

    # ---------------------------------------------------------------------------- keys

    def _lease_value(self) -> bytes:
        return json.dumps({"worker": self.worker, "expires": self.clock() + self.lease_seconds}).encode()

    def _get(self, key: str) -> bytes | None:
        return self.store.get(key) if self.store.check([key]) else None

    def lease(self, block: int) -> dict | None:
        """The lease of ``block`` (``{"worker", "expires"}``) or None."""
        raw = self._get(f"lease/{block}")
        return json.loads(raw) if raw else None

    def is_done(self, block: int) -> bool:
        return self.store.check([f"done/{block}"])

    def _take(self, block: int, expected: bytes) -> bool:
        new = self._lease_value()
        got = self.store.compare_set(f"lease/{block}", expected, new)
        if got == new:
            self._held[block] = new
            return True
        return False

    # ---------------------------------------------------------------------------- worker side

    def claim(self) -> int | None:
        """A block for this worker: the next one never handed out, else one whose lease expired (not
        done); None when neither exists now (others may still be training: see :meth:`all_done`)."""
        while True:
            i = self.store.add("next", 1) - 1
            if i >= len(self.blocks):
                break
            if self._take(self.blocks[i], b""):
                return self.blocks[i]
        now = self.clock()
        for block in self.blocks:
            if self.is_done(block):
                continue
            raw = self._get(f"lease/{block}")
            if raw is None:  # handed out by the counter, lease not yet written: its worker is writing it
                continue
            if json.loads(raw)["expires"] < now and self._take(block, raw):
                return block
        return None

    def renew(self, block: int) -> bool:
        """Extend this worker's lease on ``block``; False (and the block is no longer ours) when another
        worker took it over after the lease expired."""
        mine = self._held.get(block)
        if mine is None:
            return False
        new = self._lease_value()
        if self.store.compare_set(f"lease/{block}", mine, new) == new:
            self._held[block] = new
            return True
        del self._held[block]
        return False

    def finish(self, block: int) -> None:
        """Mark ``block`` finished (once: a second finish of the same block does not count twice)."""
        if self.store.compare_set(f"done/{block}", b"", self.worker.encode()) == self.worker.encode():
            self.store.add("ndone", 1)
        self._held.pop(block, None)

    def num_done(self) -> int:
        return int(self.store.add("ndone", 0))

    def all_done(self) -> bool:
        return self.num_done() >= len(self.blocks)


class LeaseKeeper:
    """The leases of one worker's running blocks of ``queue``, renewed by a thread (:meth:`start`).

    A block is *running* from :meth:`claim` to :meth:`release`. Every ``queue.lease_seconds`` / 4 the thread
    renews the running blocks' leases; a block whose renewal fails (another worker took it over after its
    lease expired) becomes *lost* (:meth:`is_lost`). An error of the thread (the store unreachable) is kept
    in :attr:`error` and raised by :meth:`check`: the worker must stop, as its leases are no longer renewed.
    With ``max_pause`` (seconds), a block whose work showed no progress (:meth:`beat`) for that long is no
    longer renewed: a hung worker gives its block up when the lease expires (renewed again, or lost, when it
    beats again). The queue is used under a lock shared with the thread (a c10d store client is one
    connection)."""

    def __init__(self, queue: BlockQueue, max_pause: float | None = None):
        self.queue = queue
        self.max_pause = max_pause
        self.beats: dict[int, float] = {}  # block -> the queue clock at its last progress
        self.running: set[int] = set()
        self.lost: set[int] = set()
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def claim(self) -> int | None:
        """:meth:`BlockQueue.claim`, the block (if any) running from now on."""
        with self._lock:
            block = self.queue.claim()
            if block is not None:
                self.running.add(block)
                self.beats[block] = self.queue.clock()
        return block

    def beat(self, block: int) -> None:
        """``block``'s work made progress (a training step, an evaluation): its lease is renewed for ``max_pause``
        more seconds."""
        with self._lock:
            self.beats[block] = self.queue.clock()

    def all_done(self) -> bool:
        with self._lock:
            return self.queue.all_done()

    def renew(self) -> None:
        """Renew the running blocks' leases (not those paused over ``max_pause``); a block whose lease was taken
        over becomes lost."""
        with self._lock:
            now = self.queue.clock()
            for block in sorted(self.running):
                if self.max_pause is not None and now - self.beats.get(block, now) > self.max_pause:
                    continue  # hung: let the lease expire
                if not self.queue.renew(block):
                    self.running.discard(block)
                    self.lost.add(block)

    def is_lost(self, block: int) -> bool:
        with self._lock:
            return block in self.lost

    def forget(self, block: int) -> None:
        """``block`` was abandoned (stopped after its lease was lost, or failed): nothing will be published."""
        with self._lock:
            self.lost.discard(block)
            self.running.discard(block)
            self.beats.pop(block, None)

    def release(self, block: int) -> bool:
        """``block``'s work ended: True when it is still this worker's (publish its result, then
        :meth:`finish` it); False when it was lost (publish nothing: the new owner's result counts)."""
        self.check()
        with self._lock:
            self.running.discard(block)
            self.beats.pop(block, None)
            if block in self.lost:
                self.lost.discard(block)
                return False
        return True

    def finish(self, block: int) -> None:
        """:meth:`BlockQueue.finish` (after :meth:`release` said True and the result was published)."""
        with self._lock:
            self.queue.finish(block)

    def start(self, name: str = "leases") -> "LeaseKeeper":
        """Start the renewal thread (:meth:`close` stops it)."""
        def keep():
            try:
                while not self._stop.wait(self.queue.lease_seconds / 4):
                    self.renew()
            except BaseException as err:  # noqa: BLE001 - a store error: the worker stops (check raises it)
                self.error = err

        self._thread = threading.Thread(target=keep, name=name, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the renewal thread (waits up to 10 s for a renewal in progress)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)

    def check(self) -> None:
        """Raise what stopped the renewal thread (RuntimeError): the leases are no longer renewed and every
        running block would go to other workers."""
        if self.error is not None:
            raise RuntimeError(f"renewing this worker's leases failed ({describe(self.error)})") from self.error
