"""The batch of ``splatforge mesh2splat``: every mesh under a folder, resumable, in parallel processes.

- **Resume**: an object with a row in ``OUT/index.jsonl`` is skipped (done, or failed with its reason; a
  done row whose .ply is gone is converted again). An object cut off by a kill has no row: it restarts
  (its work folder ``OUT/.work/<source>`` is cleared).
- **Workers**: ``workers`` >= 1 converts each object in a fresh process (``spawn``), at most ``workers`` at
  once, each with ``threads`` PyTorch threads; ``workers`` 0 converts in this process (no limits: tests,
  debugging).
- **Limits per object** (worker processes): wall time ``time_limit`` seconds (the process is killed, the
  row says so) and address space ``memory_limit_gb`` (RLIMIT_AS: an allocation past it fails, the row
  says so); a worker that dies (a crash in a native library) gives a failed row naming its exit code.
  A worker whose batch process died stops at its next training step (it never writes for a dead batch).
- **Progress**: a rich bar over the objects with the elapsed time and the ETA.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from recon.core.errors import UsageError
from recon.mesh2splat.convert import base_row, convert_object
from recon.data.splat_index import append_row, latest_rows, read_index
from recon.mesh2splat.preset import ObjectPreset
from recon.mesh2splat.sources import WORK_DIR, find_meshes, output_path
from recon.outputs.files import RunLock

POLL_SECONDS = 0.2


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


def run_batch(cfg: BatchConfig, log=print) -> dict:
    """Convert the pending objects of ``cfg``, appending their rows to ``OUT/index.jsonl``; returns
    {"objects", "converted", "done", "failed", "skipped", "seconds"} of this call."""
    check_batch_config(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out):  # one batch writes OUT at a time (RunLockedError names the other); a killed one's is taken over
        shutil.rmtree(out / WORK_DIR, ignore_errors=True)  # half-done objects of a killed batch restart
        sources, todo = pending(cfg)
        t0 = time.perf_counter()
        counts = {"done": 0, "failed": 0}
        with _Progress(cfg.progress, len(todo)) as bar:
            for row in convert_all(cfg, todo):
                append_row(out, row)
                counts[row["status"]] = counts.get(row["status"], 0) + 1
                bar.advance(row)
        shutil.rmtree(out / WORK_DIR, ignore_errors=True)
    return {"objects": len(sources), "converted": len(todo), **counts, "skipped": len(sources) - len(todo),
            "seconds": round(time.perf_counter() - t0, 2)}


def convert_all(cfg: BatchConfig, sources: list[str]):
    """Rows of ``sources`` as they finish (in this process when ``workers`` is 0, else in workers)."""
    if cfg.workers == 0:
        for source in sources:
            yield convert_object(cfg.mesh_dir, cfg.out, source, cfg.preset, cfg.method, cfg.device)
        return
    yield from _WorkerPool(cfg).rows(sources)


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


def _limit_memory(gb: float) -> None:
    """RLIMIT_AS of this process to ``gb`` GiB (0: unchanged)."""
    if gb > 0:
        import resource

        limit = int(gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def worker_main(conn, cfg: BatchConfig, source: str, parent: int) -> None:
    """Entry point of a worker process: convert one object, send its row through ``conn``."""
    import rasterizer  # noqa: F401  (first: sets GOMP_SPINCOUNT before torch loads)
    import torch

    _limit_memory(cfg.memory_limit_gb)
    torch.set_num_threads(cfg.threads)
    try:
        import numba

        numba.set_num_threads(min(cfg.threads, numba.config.NUMBA_NUM_THREADS))  # the cpu kernels' threads too
    except ImportError:  # pragma: no cover - numba is a dependency; without it the reference backend runs
        pass
    row = convert_object(cfg.mesh_dir, cfg.out, source, cfg.preset, cfg.method, cfg.device,
                         hooks=[ParentWatch(parent)])
    if row["status"] == "failed" and "MemoryError" in (row["reason"] or ""):
        row["reason"] += f" (the per-object memory limit is {cfg.memory_limit_gb:g} GiB: --memory-limit-gb)"
    conn.send(row)
    conn.close()


@dataclass
class _Job:
    source: str
    process: multiprocessing.Process
    conn: object
    started: float


class _WorkerPool:
    """At most ``cfg.workers`` worker processes, one object each; enforces the time limit."""

    def __init__(self, cfg: BatchConfig):
        self.cfg = cfg
        self.ctx = multiprocessing.get_context("spawn")

    def start(self, source: str) -> _Job:
        recv, send = self.ctx.Pipe(duplex=False)
        process = self.ctx.Process(target=worker_main, args=(send, self.cfg, source, os.getpid()), daemon=True,
                                   name=f"mesh2splat:{source}")
        process.start()
        send.close()
        return _Job(source, process, recv, time.perf_counter())

    def finished_row(self, job: _Job) -> dict | None:
        """The job's row when it has ended (sent its row, died, or ran out of time), else None."""
        elapsed = time.perf_counter() - job.started
        if job.conn.poll():
            try:
                row = job.conn.recv()
            except EOFError:  # ended without sending
                row = None
            if row is not None:
                job.process.join(timeout=10)
                return row
        if not job.process.is_alive():
            job.process.join()
            return self.failed(job, f"worker process ended with exit code {job.process.exitcode} before "
                                    f"finishing (a crash, or killed: out of memory?)", elapsed)
        if elapsed > self.cfg.time_limit:
            job.process.kill()
            job.process.join()
            return self.failed(job, f"time limit exceeded ({self.cfg.time_limit:g} s per object: --time-limit)",
                               elapsed)
        return None

    def failed(self, job: _Job, reason: str, elapsed: float) -> dict:
        shutil.rmtree(Path(self.cfg.out) / WORK_DIR / job.source, ignore_errors=True)
        row = base_row(job.source, self.cfg.preset, self.cfg.method)
        row.update(reason=reason, seconds=round(elapsed, 2))
        return row

    def rows(self, sources: list[str]):
        queue = list(reversed(sources))
        running: list[_Job] = []
        try:
            while queue or running:
                while queue and len(running) < self.cfg.workers:
                    running.append(self.start(queue.pop()))
                time.sleep(POLL_SECONDS)
                for job in list(running):
                    row = self.finished_row(job)
                    if row is not None:
                        running.remove(job)
                        yield row
        finally:
            for job in running:  # interrupted (Ctrl-C): no orphans
                job.process.kill()
                job.process.join()


# ------------------------------------------------------------------------------------------ progress


class _Progress:
    """Rich progress bar over the objects: count, elapsed, ETA, the last object's result (no-op if disabled)."""

    def __init__(self, enabled: bool, total: int):
        self.enabled, self.total = enabled, total

    def __enter__(self) -> "_Progress":
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
