"""The batch of ``splatforge mesh2splat``: every mesh under a folder, resumable, in parallel processes.

- **Resume**: an object with a row in ``OUT/index.jsonl`` is skipped (done, or failed with its reason; a
  done row whose .ply is gone is converted again). An object cut off by a kill has no row: it restarts
  (its work folder ``OUT/.work/<source>`` is cleared).
- **Feeds**: the workers take objects from a feed: :class:`LocalFeed` (this machine's pending objects) or,
  over several machines, :class:`recon.mesh2splat.cluster.QueueFeed` (torch.distributed's lease queue).
- **Workers**: ``workers`` >= 1 runs that many long-lived worker processes (``spawn``; ``threads`` PyTorch
  and Numba threads each), each converting one object after another, handed over a pipe: the imports
  and the kernels' loading are paid once per worker, not per object. A worker is replaced after
  :data:`WORKER_OBJECTS` objects, after an object that ran out of memory, and when it dies or is killed.
  ``workers`` 0 converts in this process (no limits: tests, debugging).
- **Limits per object** (worker processes): wall time ``time_limit`` seconds from the object's start
  (its worker is killed, the row says so) and ``memory_limit_gb`` of address space that the object may
  add to its worker's (RLIMIT_AS, set before each object: an allocation past it fails, the row says so, the
  worker is replaced); a worker that dies (a crash in a native library) gives a failed row naming its exit
  code. A worker whose batch process died stops at its next training step, or when it waits for an object.
- **Progress**: a rich bar over the objects with the elapsed time and the ETA.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from recon.core.errors import UsageError
from recon.core.lease_queue import LeaseLostError
from recon.mesh2splat.convert import base_row, convert_object, work_folder
from recon.data.splat_index import append_row, latest_rows, read_index
from recon.mesh2splat.preset import ObjectPreset
from recon.mesh2splat.sources import MESH_SUFFIXES, WORK_DIR, find_meshes, output_path, unread_meshes
from recon.outputs.files import RunLock

POLL_SECONDS = 0.2
WORKER_OBJECTS = 200
"""objects a worker process converts before it is replaced (bounds what a long-lived process accumulates)"""
STARTUP_SECONDS = 300.0
"""how long a new worker may take to start its first object (imports, kernel loading) before it is killed"""
MEMORY_SIGNS = ("MemoryError", "can't allocate memory", "Cannot allocate memory", "bad_alloc",
                "can't start new thread", "out of memory", "failed to map segment")
"""what the reason of an object that hit the memory limit contains (numpy, PyTorch, C++ libraries, threads)"""


@dataclass(frozen=True)
class BatchConfig:
    """What a batch converts and how (see the module docstring)."""

    mesh_dir: Path
    out: Path
    method: str = "3dgs"
    preset: ObjectPreset = ObjectPreset()
    workers: int = 1
    threads: int = 1
    time_limit: float = 600.0
    memory_limit_gb: float = 8.0
    device: str = "cpu"
    progress: bool = True
    limit: int | None = None  # convert at most this many of the pending objects (benchmarks)


def pending(cfg: BatchConfig) -> tuple[list[str], list[str]]:
    """(every mesh source under ``mesh_dir``, those still to convert) in sorted order."""
    sources = find_meshes(cfg.mesh_dir, cfg.out)
    rows = latest_rows(read_index(cfg.out))

    def finished(source: str) -> bool:
        row = rows.get(source)
        if row is None:
            return False
        return row.get("status") != "done" or output_path(cfg.out, source).is_file()

    todo = [s for s in sources if not finished(s)]
    return sources, todo[: cfg.limit] if cfg.limit is not None else todo


def check_batch_config(cfg: BatchConfig) -> None:
    """UsageError naming the flag for a missing mesh folder or out-of-range numbers."""
    if not Path(cfg.mesh_dir).is_dir():
        raise UsageError(f"MESH_DIR {cfg.mesh_dir}: no such folder (give the folder holding the meshes)")
    if cfg.workers < 0 or cfg.threads < 1:
        raise UsageError(f"--workers {cfg.workers} / --threads {cfg.threads}: need workers >= 0, threads >= 1")
    if not cfg.time_limit > 0 or not cfg.memory_limit_gb >= 0:
        raise UsageError(f"--time-limit {cfg.time_limit} / --memory-limit-gb {cfg.memory_limit_gb}: need a "
                         f"time limit > 0 and a memory limit >= 0 (0: none)")
    p = cfg.preset
    if p.views < 1 or p.test_views < 1 or p.size < 8 or p.steps < 1 or p.init_points < 1 or p.samples < 1:
        raise UsageError(f"--views {p.views} / --test-views {p.test_views} / --size {p.size} / --steps {p.steps} / "
                         f"--init-points {p.init_points}: need at least 1 view each, 8 pixels, 1 step, 1 point")


def run_batch(cfg: BatchConfig, log=None) -> dict:
    """Convert the pending objects of ``cfg``, appending their rows to ``OUT/index.jsonl``; returns
    {"objects", "converted", "done", "failed", "skipped", "seconds", "not_read"} of this call ("not_read":
    {suffix: count} of the files in mesh formats the batch does not convert, e.g. STL; also logged)."""
    check_batch_config(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    log = log or (lambda line: print(line, file=sys.stderr))  # stdout carries the command's JSON summary
    not_read = unread_meshes(cfg.mesh_dir, cfg.out)
    if not_read:
        listed = ", ".join(f"{n} {suffix}" for suffix, n in not_read.items())
        log(f"mesh2splat: not converting {listed} file(s) under {cfg.mesh_dir}: mesh2splat reads "
            f"{', '.join(MESH_SUFFIXES)}; convert them first (e.g. trimesh.load(path).export('mesh.ply'))")
    with RunLock(out):  # one batch writes OUT at a time (RunLockedError names the other); a killed one's is taken over
        shutil.rmtree(out / WORK_DIR, ignore_errors=True)  # half-done objects of a killed batch restart
        sources, todo = pending(cfg)
        t0 = time.perf_counter()
        counts = {"done": 0, "failed": 0}
        with ObjectProgress(cfg.progress, len(todo)) as bar:
            for row in convert_all(cfg, LocalFeed(todo)):
                append_row(out, row)
                counts[row["status"]] = counts.get(row["status"], 0) + 1
                bar.advance(row)
        shutil.rmtree(out / WORK_DIR, ignore_errors=True)
    return {"objects": len(sources), "converted": len(todo), **counts, "skipped": len(sources) - len(todo),
            "seconds": round(time.perf_counter() - t0, 2), "not_read": not_read}


class LocalFeed:
    """The objects of a batch on one machine, handed out in order (the interface of a feed: take, more,
    poll; :class:`recon.mesh2splat.cluster.QueueFeed` is the other one)."""

    def __init__(self, sources: list[str]):
        self.left = list(reversed(sources))

    def take(self) -> str | None:
        """The next object to convert; None when there is none now."""
        return self.left.pop() if self.left else None

    def more(self) -> bool:
        """Whether an object may still come (this machine's: while any is left)."""
        return bool(self.left)

    def poll(self, running: list[str]) -> None:
        """Called while ``running`` objects convert (several times a second)."""

    def is_lost(self, source: str) -> bool:
        """Whether another machine took ``source`` over (never, on one machine)."""
        return False

    def forget(self, source: str) -> None:
        """``source`` was abandoned after it was lost: no row comes for it."""


def convert_all(cfg: BatchConfig, feed):
    """Rows of the objects of ``feed`` as they finish (in this process when ``workers`` is 0, else in workers)."""
    if cfg.workers == 0:
        yield from _convert_here(cfg, feed)
        return
    yield from _WorkerPool(cfg).rows(feed)


class FeedPoll:
    """Training hook of an object converted in the batch's own process: polls the feed (rows) and stops the
    object (LeaseLostError: its row says so and the feed drops it) once another machine took it over."""

    def __init__(self, feed, source: str, every: float = 1.0):
        self.feed, self.source, self.every, self.last = feed, source, every, time.monotonic()

    def on_train_start(self, trainer) -> None:
        pass

    def on_step(self, trainer, result) -> None:
        if time.monotonic() - self.last >= self.every:
            self.feed.poll([self.source])
            self.last = time.monotonic()
        if self.feed.is_lost(self.source):
            raise LeaseLostError(f"{self.source}: another machine took this object over (its lease expired)")

    def on_train_end(self, trainer) -> None:
        pass


def _convert_here(cfg: BatchConfig, feed):
    while True:
        source = feed.take()
        if source is None:
            if not feed.more():
                return
            feed.poll([])
            time.sleep(POLL_SECONDS)
            continue
        yield convert_object(cfg.mesh_dir, cfg.out, source, cfg.preset, cfg.method, cfg.device,
                             hooks=[FeedPoll(feed, source)])


# ------------------------------------------------------------------------------------------ workers


class ParentWatch:
    """Training hook of a worker: ends the process when the batch process that started it is gone."""

    def __init__(self, parent: int, every: int = 25):
        self.parent, self.every = parent, every

    def on_train_start(self, trainer) -> None:
        pass

    def on_step(self, trainer, result) -> None:
        if trainer.step % self.every == 0 and os.getppid() != self.parent:
            os._exit(3)

    def on_train_end(self, trainer) -> None:
        pass


def address_space_bytes() -> int | None:
    """This process's virtual memory size (Linux /proc/self/statm), None where unknown."""
    try:
        pages = int(open("/proc/self/statm").read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def limit_object_memory(gb: float) -> None:
    """Let the next object add at most ``gb`` GiB to this process's address space (0: no limit): RLIMIT_AS's
    soft limit = the current size + ``gb`` (the whole ``gb`` where the size is unknown); the hard limit
    stays, so the next object's limit may be set higher again."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if gb <= 0:
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        return
    soft = (address_space_bytes() or 0) + int(gb * (1 << 30))
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def memory_failure(reason: str | None) -> bool:
    """Whether a failed object's ``reason`` is an allocation that failed (:data:`MEMORY_SIGNS`)."""
    return any(sign in (reason or "") for sign in MEMORY_SIGNS)


def memory_note(cfg: BatchConfig) -> str:
    return f" (the per-object memory limit is {cfg.memory_limit_gb:g} GiB: --memory-limit-gb)"


def warm_up(cfg: BatchConfig) -> None:
    """Convert a toy object (a procedural box at 16 pixels, 3 steps) in a scratch folder and forget it: the
    libraries a conversion loads lazily (open3d, trimesh, image codecs), the Numba kernels and the threads
    are then in place before the first object, so neither its time nor its memory limit pays for them.
    One process of this machine warms up at a time (:func:`warm_up_lock`): with a cold kernel cache the
    first compiles the kernels into it (minutes of CPU) and the others then load them (seconds) instead of
    compiling the same kernels at once."""
    import tempfile

    from recon.data.procedural_meshes import make_mesh

    toy = ObjectPreset(views=2, test_views=1, size=16, samples=1, steps=3, init_points=64, max_gaussians=64)
    with warm_up_lock(), tempfile.TemporaryDirectory(prefix="mesh2splat_warmup_") as tmp:
        make_mesh("box", 0).export(Path(tmp) / "box.ply")
        convert_object(Path(tmp), Path(tmp) / "out", "box.ply", toy, cfg.method, cfg.device)


@contextmanager
def warm_up_lock(folder: Path | None = None):
    """Hold an exclusive lock (flock) on ``mesh2splat-warm-up.lock`` in ``folder`` (default: Numba's kernel
    cache folder, the keyed folder of :mod:`rasterizer.kernel_cache`; the temporary folder when there is none)
    while the body runs: the processes sharing that cache warm up one after another. The lock goes with its
    process (a killed worker releases it); where no lock file can be made, or the file system takes no locks
    (flock's ENOLCK / EOPNOTSUPP on some network and FUSE mounts), the body runs unlocked."""
    import fcntl
    import tempfile

    from rasterizer.kernel_cache import key_numba_cache

    folder = folder or key_numba_cache() or Path(tempfile.gettempdir())
    try:
        handle = open(Path(folder) / "mesh2splat-warm-up.lock", "a")
    except OSError:
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:  # no locks on this file system: warm up unlocked (as recon.outputs.files.RunLock does)
            yield
            return
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def worker_main(conn, cfg: BatchConfig, parent: int) -> None:
    """Entry point of a worker process: warm up (:func:`warm_up`), then convert the objects handed over
    ``conn`` (a source; None: stop) one after another; for each send ("start", source) when it starts and
    ("row", row) when it ends. Stops after an object that ran out of memory (its state may be broken: the
    pool starts a fresh worker)."""
    import rasterizer  # noqa: F401  (first: sets GOMP_SPINCOUNT before torch loads)
    import torch

    torch.set_num_threads(cfg.threads)
    try:
        import numba

        numba.set_num_threads(min(cfg.threads, numba.config.NUMBA_NUM_THREADS))  # the cpu kernels' threads too
    except ImportError:  # pragma: no cover - numba is a dependency; without it the reference backend runs
        pass
    warm_up(cfg)
    limit = cfg.memory_limit_gb if cfg.device == "cpu" else 0.0  # CUDA reserves more address space than that
    while True:
        try:
            source = conn.recv()
        except (EOFError, OSError):  # the batch process is gone
            return
        if source is None:
            return
        conn.send(("start", source))
        limit_object_memory(limit)
        try:
            row = convert_object(cfg.mesh_dir, cfg.out, source, cfg.preset, cfg.method, cfg.device,
                                 hooks=[ParentWatch(parent)])
        except MemoryError as err:  # outside convert_object's own handling (a failure while failing)
            row = base_row(source, cfg.preset, cfg.method)
            row["reason"] = f"internal error: MemoryError: {err}"
        finally:
            limit_object_memory(0.0)
        out_of_memory = row["status"] == "failed" and limit > 0 and memory_failure(row["reason"])
        if out_of_memory:
            row["reason"] += memory_note(cfg)
        conn.send(("row", row))
        if out_of_memory:
            return


@dataclass
class _Worker:
    process: multiprocessing.Process
    conn: object
    source: str | None = None  # the object it converts (None: idle)
    handed: float = 0.0  # when the object was handed over
    started: float | None = None  # when the worker reported starting it
    objects: int = 0


class _WorkerPool:
    """At most ``cfg.workers`` long-lived worker processes taking objects from a feed; enforces the time
    limit and replaces workers that died, were killed or retired."""

    def __init__(self, cfg: BatchConfig):
        self.cfg = cfg
        self.ctx = multiprocessing.get_context("spawn")
        self.workers: list[_Worker] = []

    def spawn(self) -> _Worker:
        mine, theirs = self.ctx.Pipe(duplex=True)
        process = self.ctx.Process(target=worker_main, args=(theirs, self.cfg, os.getpid()), daemon=True,
                                   name="mesh2splat-worker")
        process.start()
        theirs.close()
        worker = _Worker(process, mine)
        self.workers.append(worker)
        return worker

    def hand_out(self, feed) -> None:
        """Give every idle worker (and new ones, up to ``cfg.workers``) an object of ``feed``."""
        idle = [w for w in self.workers if w.source is None]
        while idle or len(self.workers) < self.cfg.workers:
            source = feed.take()
            if source is None:
                return
            worker = idle.pop() if idle else self.spawn()
            try:
                worker.conn.send(source)
            except (OSError, ValueError):  # an idle worker that died: a fresh one takes the object
                self.retire(worker, kill=True)
                worker = self.spawn()
                worker.conn.send(source)
            worker.source, worker.handed, worker.started = source, time.perf_counter(), None

    def retire(self, worker: _Worker, kill: bool = False) -> None:
        """Stop ``worker`` (ask it to end; ``kill``: at once) and forget it."""
        if kill:
            worker.process.kill()
        else:
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
        worker.process.join(timeout=None if kill else 10)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        worker.conn.close()
        self.workers.remove(worker)

    def finished_row(self, worker: _Worker) -> dict | None:
        """The row of ``worker``'s object when it has ended (sent its row, died, or ran out of time)."""
        now = time.perf_counter()
        try:
            while worker.conn.poll():
                kind, value = worker.conn.recv()
                if kind == "start":
                    worker.started = now
                    continue
                worker.source, worker.objects = None, worker.objects + 1
                if not worker.process.is_alive() or worker.objects >= WORKER_OBJECTS or memory_failure(value["reason"]):
                    self.retire(worker)
                return value
        except (EOFError, OSError):  # ended without sending its row
            pass
        if not worker.process.is_alive():
            worker.process.join()
            reason = (f"worker process ended with exit code {worker.process.exitcode} before finishing (a crash, "
                      f"or killed: out of memory?)")
            return self.failed(worker, reason + (memory_note(self.cfg) if self.cfg.memory_limit_gb > 0 else ""),
                               now - (worker.started or worker.handed), kill=True)
        if worker.started is not None and now - worker.started > self.cfg.time_limit:
            return self.failed(worker, f"time limit exceeded ({self.cfg.time_limit:g} s per object: --time-limit)",
                               now - worker.started, kill=True)
        if worker.started is None and now - worker.handed > self.cfg.time_limit + STARTUP_SECONDS:
            return self.failed(worker, f"time limit exceeded: the worker did not start the object within "
                                       f"{STARTUP_SECONDS + self.cfg.time_limit:g} s", now - worker.handed, kill=True)
        return None

    def failed(self, worker: _Worker, reason: str, elapsed: float, kill: bool) -> dict:
        """The failed row of ``worker``'s object; the worker is killed and forgotten (its scratch folders too)."""
        source, pid = worker.source, worker.process.pid
        self.retire(worker, kill=kill)
        shutil.rmtree(work_folder(self.cfg.out, source, pid), ignore_errors=True)
        row = base_row(source, self.cfg.preset, self.cfg.method)
        row.update(reason=reason, seconds=round(elapsed, 2))
        return row

    def abandon(self, worker: _Worker, feed) -> None:
        """Kill ``worker``, whose object another machine took over (no row: that machine writes it)."""
        source, pid = worker.source, worker.process.pid
        self.retire(worker, kill=True)
        shutil.rmtree(work_folder(self.cfg.out, source, pid), ignore_errors=True)
        feed.forget(source)

    def rows(self, feed):
        """Rows of the objects of ``feed`` as they finish."""
        try:
            while True:
                self.hand_out(feed)
                busy = [w for w in self.workers if w.source is not None]
                if not busy and not feed.more():
                    return
                feed.poll([w.source for w in busy])
                time.sleep(POLL_SECONDS)
                for worker in busy:
                    if feed.is_lost(worker.source):
                        self.abandon(worker, feed)
                        continue
                    row = self.finished_row(worker)
                    if row is not None:
                        yield row
        finally:
            for worker in list(self.workers):  # done, or interrupted (Ctrl-C): no orphans
                self.retire(worker, kill=worker.source is not None)


# ------------------------------------------------------------------------------------------ progress


class ObjectProgress:
    """Rich progress bar over the objects: count, elapsed, ETA, the last object's result (no-op if disabled)."""

    def __init__(self, enabled: bool, total: int):
        self.enabled, self.total = enabled, total

    def __enter__(self) -> "ObjectProgress":
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
                TimeRemainingColumn

            self.bar = Progress(TextColumn("mesh2splat"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[last]}"))
            self.bar.__enter__()
            self.task = self.bar.add_task("objects", total=self.total, last="")
        return self

    def advance(self, row: dict) -> None:
        if not self.enabled:
            return
        if row["status"] == "done":
            last = f"{row['source']}: {row['test_psnr']} dB, {row['gaussians']:,} G, {row['seconds']:.0f} s"
        else:
            last = f"{row['source']}: failed"
        self.bar.update(self.task, advance=1, last=last)

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)


def with_preset(cfg: BatchConfig, **changes) -> BatchConfig:
    """``cfg`` with preset fields changed."""
    return dataclasses.replace(cfg, preset=dataclasses.replace(cfg.preset, **changes))
