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

Under torchrun a worker that dies (SIGKILL) makes the agent stop and restart the whole group
(``--max-restarts``); each restart round gets a fresh prefix (``TORCHELASTIC_RESTART_COUNT``) and the
run folder says which blocks are finished (their metrics.json) and where the others stand (their
checkpoints). Leases cover the worker that stops renewing while the group lives.
"""

from __future__ import annotations

import json
import time
from typing import Callable, Sequence

from recon.core.errors import SplatforgeError


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
