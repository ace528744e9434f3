"""What each torchrun process does (``python -m recon.distributed``; see recon/distributed/README.md).

1. Join the process group: nccl when the training device is CUDA, else gloo; every collective and store
   wait has the timeout ``--timeout-seconds`` (a dead peer is an error naming it, never a hang).
2. Refuse a config that differs between workers (a digest compared with all_reduce MIN / MAX).
3. Rank 0 locks the job folder (``OUT/.lock``, :class:`recon.outputs.files.RunLock`: a second job on it is
   refused, on every rank), checks ``OUT/config.yaml`` against this config (a rerun must be the same
   run), writes the partition (``--blocks auto``: made here; a file: checked against the dataset) to
   ``OUT/blocks.json`` and publishes the unfinished blocks.
   With ``--prior-steps N`` rank 0 then trains the whole scene N steps (``OUT/prior``) while the others wait,
   and each block starts from that prior (:mod:`recon.distributed.prior`).
4. Every rank takes blocks from the :class:`recon.core.lease_queue.BlockQueue` and trains each with
   :class:`recon.training.trainer.Trainer` (the block's scene handed in, its own folder ``OUT/blocks/block_NNN``
   with checkpoints every ``--save-every`` steps, its own seed ``seed + 1000 x id``); a thread renews its
   lease (:class:`recon.core.lease_queue.LeaseKeeper`, through evaluations and saves too), and a block whose
   lease was taken over stops at its next step and is not marked done. Idle ranks wait on the store,
   re-taking expired leases, until all blocks are done.
5. A barrier, then rank 0 merges (:mod:`recon.distributed.merge`).

The block count and each block's training never depend on the worker count, and each worker runs with
``--threads`` threads (default 1), so 1, 2 or 3 workers give the same merged model bit for bit on a CPU.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

import torch

from recon.outputs import files as rf
from recon.distributed.merge import block_dir, merge_run, run_finished
from recon.distributed.partition import Partition, PartitionConfig, check_blocks, partition_scene, block_scene, write_partition
from recon.core.lease_queue import BlockQueue, LeaseKeeper, LeaseLostError
from recon.core.process_group import backend_for, barrier, free_port, init_group  # noqa: F401 (free_port: tests)
from recon.core.errors import DamagedFileError, RunFolderError, RunLockedError, SplatforgeError, UsageError
from recon.training.trainer import (ConfigMismatchError, TrainConfig, Trainer, TrainingHook, check_resumable,
                                    load_training_scene, resolve_device, resumed_config, stored_config)

BLOCKS_FILE = "blocks.json"
BLOCK_SEED_STRIDE = 1000


class WorkerConfigMismatchError(SplatforgeError, ValueError):
    """The workers of one job were started with different configurations."""


@dataclass
class BlockOptions:
    """Flags of block training (besides the training flags of ``splatforge train``)."""

    blocks: str = "auto"
    """"auto" (partition here, by the split flags) or a blocks.json from `splatforge partition`"""
    lease_seconds: float = 120.0
    """a block whose worker has not renewed its lease for this long is taken over"""
    timeout_seconds: float = 600.0
    """timeout of every collective and store wait"""
    max_pause_seconds: float = 1800.0
    """a block whose training made no progress (no step, no evaluation) for this long has its lease no longer
    renewed: a hung worker gives the block up once the lease expires"""
    threads: int = 1
    """PyTorch and Numba threads per worker"""
    poll_seconds: float = 0.5
    """how often an idle worker looks at the queue"""
    consistency: Literal["independent", "momentum"] = "independent"
    """independent blocks (dynamic queue), or Momentum-GS mode: all workers in lock-step with a shared
    appearance module, gradient all-reduce, EMA teacher and block weighting (recon/distributed/momentum.py)"""
    consistency_weight: float = 1.0
    """momentum mode: weight of the teacher consistency loss"""
    momentum: float = 0.9
    """momentum mode: EMA factor of the teacher"""
    appearance_lr: float = 1e-3
    """momentum mode: Adam learning rate of the appearance module (embeddings and MLP)"""
    finetune_steps: int = 0
    """after the merge, train the merged model this many steps on the whole scene (rank 0; no densification)"""
    prior_steps: int = 0
    """CityGaussian's coarse global model: worker 0 first trains the whole scene this many steps (RUN/prior); each
    block then refines the prior's Gaussians of its expanded box for --steps steps without densification
    (recon/distributed/prior.py). The job's total: prior + blocks x --steps steps"""
    prior_context: Literal["frozen", "none"] = "frozen"
    """with --prior-steps: "frozen" keeps the prior's other Gaussians in each block, unchanged (the scene around
    it); "none" gives a block only the Gaussians of its expanded box"""
    max_gaussians_per_block: Optional[int] = None
    """cap on each block's Gaussians (each worker's memory); default: --max-gaussians. The merged model may hold
    more than one worker could"""
    split: PartitionConfig = field(default_factory=PartitionConfig)


# flags that take one value each and belong to BlockOptions (the rest are TrainConfig's)
BLOCK_FLAGS = ("--blocks", "--lease-seconds", "--timeout-seconds", "--max-pause-seconds", "--threads", "--poll-seconds", "--finetune-steps",
               "--max-gaussians-per-block", "--prior-steps", "--prior-context",
               "--consistency", "--consistency-weight", "--momentum", "--appearance-lr",
               "--blocks-xy", "--overlap", "--max-images-per-block", "--max-points-per-block",
               "--min-images-per-block", "--visibility", "--percentile")


def split_flags(argv: list[str], names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(flags among ``names`` with their values, the other arguments) of ``argv``; each named flag takes
    one value (``--name value`` or ``--name=value``)."""
    mine, rest, i = [], [], 0
    while i < len(argv):
        a = argv[i]
        name = a.split("=", 1)[0]
        if name in names:
            if "=" in a:
                mine.append(a)
            elif i + 1 < len(argv):
                mine += [a, argv[i + 1]]
                i += 1
            else:
                raise UsageError(f"{a} needs a value")
        else:
            rest.append(a)
        i += 1
    return mine, rest


def parse_args(argv: list[str]) -> tuple[BlockOptions, TrainConfig]:
    """BlockOptions and TrainConfig from the command line (an optional preset name first, as ``train``)."""
    import tyro

    from recon.training.presets import PRESETS

    mine, rest = split_flags(list(argv), BLOCK_FLAGS)
    base = TrainConfig()
    if rest and rest[0] in PRESETS:
        base, rest = PRESETS[rest[0]][0], rest[1:]
    opts = tyro.cli(BlockOptions, args=mine, config=(tyro.conf.OmitArgPrefixes,), prog="python -m recon.distributed")
    cfg = tyro.cli(TrainConfig, default=base, args=rest, prog="python -m recon.distributed")
    return opts, cfg


# ------------------------------------------------------------------------------------------ process group


def config_digest(opts: BlockOptions, cfg: TrainConfig) -> list[int]:
    """4 int64 words of sha256 over the job's configuration (block options + stored training config)."""
    text = json.dumps({"blocks": dataclasses.asdict(opts), "train": rf.config_to_dict(stored_config(cfg))},
                      sort_keys=True, default=str)
    h = hashlib.sha256(text.encode()).digest()
    return [int.from_bytes(h[i:i + 7], "little") for i in range(0, 28, 7)]


def check_same_config(digest: list[int], rank: int, world: int, device: torch.device) -> None:
    """WorkerConfigMismatchError on every rank when the ranks' digests differ (naming the ranks that
    differ from rank 0); all_reduce only, so it works on gloo and nccl alike."""
    import torch.distributed as dist

    lo = torch.tensor(digest, dtype=torch.int64, device=device)
    hi = lo.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    if torch.equal(lo, hi):
        return
    table = torch.zeros(world, len(digest), dtype=torch.int64, device=device)
    table[rank] = torch.tensor(digest, dtype=torch.int64, device=device)
    dist.all_reduce(table)  # an all_gather of equal-sized rows that gloo and nccl both do
    odd = [r for r in range(world) if not torch.equal(table[r], table[0])]
    raise WorkerConfigMismatchError(
        f"workers {odd} were started with another configuration than worker 0 (flags or config differ); "
        f"start every worker with the same command")


# ------------------------------------------------------------------------------------------ the job


class LeaseHook(TrainingHook):
    """Stops the block (LeaseLostError) at its next step, or at the evaluation before its metrics.json is
    written, once another worker took it over (the renewals are the :class:`recon.core.lease_queue.LeaseKeeper`
    thread's, through evaluations and saves alike); raises the keeper's error when renewing failed; and stops
    at a step boundary after SIGTERM (torchrun stopping the group: the trainer saves a checkpoint)."""

    def __init__(self, keeper: LeaseKeeper, block: int, stop_flag: dict):
        self.keeper, self.block, self.stop = keeper, block, stop_flag

    def check_lease(self) -> None:
        """Raise when the lease is lost (or renewing failed); else the block made progress (the keeper's beat)."""
        self.keeper.check()
        self.keeper.beat(self.block)
        if self.keeper.is_lost(self.block):
            raise LeaseLostError(f"block {self.block}: another worker took it over (lease expired)")

    def on_step(self, trainer, result) -> None:
        if self.stop.get("signal"):
            raise KeyboardInterrupt  # the trainer saves this step's checkpoint and re-raises
        self.check_lease()

    def on_evaluate(self, trainer, test) -> None:
        self.check_lease()  # the final evaluation comes just before metrics.json (the block's result)


class StopHook(TrainingHook):
    """Stops at a step boundary after SIGTERM (momentum mode: no leases)."""

    def __init__(self, stop_flag: dict):
        self.stop = stop_flag

    def on_step(self, trainer, result) -> None:
        if self.stop.get("signal"):
            raise KeyboardInterrupt


def block_finished(out: Path, block: int, steps: int) -> bool:
    """Whether block ``block`` of job folder ``out`` finished training ``steps`` steps (merge.run_finished)."""
    return run_finished(block_dir(out, block), steps)


def block_config(cfg: TrainConfig, out: Path, block: int, max_gaussians: int | None = None) -> TrainConfig:
    """Block ``block``'s training config: its folder, its seed, its Gaussian cap (``max_gaussians``, None: the
    config's), no progress bar (workers share a terminal)."""
    return dataclasses.replace(cfg, out=block_dir(out, block), seed=cfg.seed + BLOCK_SEED_STRIDE * block,
                               progress=False, viewer=False, overwrite=False,
                               max_gaussians=cfg.max_gaussians if max_gaussians is None else max_gaussians)


class Job:
    """One worker's part of a block training job (see the module docstring)."""

    def __init__(self, opts: BlockOptions, cfg: TrainConfig):
        self.opts, self.cfg = opts, cfg
        self.out = Path(cfg.out)
        self.timeout = datetime.timedelta(seconds=opts.timeout_seconds)
        self.stop = {}
        self.lock = None
        self.block_seconds: dict[int, float] = {}
        self.rank = int(os.environ.get("RANK", 0))
        self.prior = None

    def log(self, line: str) -> None:
        print(f"[worker {self.rank}] {line}", flush=True)

    def check_options(self) -> None:
        from recon.models.base import model_class

        if getattr(model_class(self.cfg.method), "SPLAT_FILE_IS_SLICE", False):
            raise UsageError(f"--method {self.cfg.method}: block training merges splat files, which hold only one "
                             f"time of this method; train it without --blocks")
        if (self.opts.threads < 1 or self.opts.lease_seconds <= 0 or self.opts.timeout_seconds <= 0
                or not self.opts.max_pause_seconds > 0):
            raise UsageError("--threads must be >= 1, --lease-seconds, --timeout-seconds and --max-pause-seconds > 0")
        if self.opts.consistency == "momentum" and not 0 <= self.opts.momentum < 1:
            raise UsageError(f"--momentum {self.opts.momentum}: must be in [0, 1)")
        if not self.opts.appearance_lr > 0:
            raise UsageError(f"--appearance-lr {self.opts.appearance_lr}: must be > 0")
        if self.opts.consistency_weight < 0:
            raise UsageError(f"--consistency-weight {self.opts.consistency_weight}: must be >= 0")
        if self.opts.finetune_steps < 0:
            raise UsageError(f"--finetune-steps {self.opts.finetune_steps}: must be >= 0")
        if self.opts.prior_steps < 0:
            raise UsageError(f"--prior-steps {self.opts.prior_steps}: must be >= 0")
        if self.opts.max_gaussians_per_block is not None and self.opts.max_gaussians_per_block < 1:
            raise UsageError(f"--max-gaussians-per-block {self.opts.max_gaussians_per_block}: must be >= 1")
        self.opts.split.check()

    def run(self) -> dict | None:
        import torch.distributed as dist

        self.check_options()
        set_threads(self.opts.threads)
        self.device = resolve_device(self.cfg.device)
        if self.device.type == "cuda":
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(self.device)
        store, self.rank, self.world = init_group(self.device, self.timeout)
        signal.signal(signal.SIGTERM, lambda *_: self.stop.__setitem__("signal", True))
        try:
            check_same_config(config_digest(self.opts, self.cfg), self.rank, self.world, self.device)
            self.store = dist.PrefixStore("queue/", store)
            self.scene = load_training_scene(self.cfg)
            self.setup_folder()
            self.part = Partition.read(self.out / BLOCKS_FILE)
            pending = json.loads(self.store.get("pending"))
            self.prior = self.train_prior() if self.opts.prior_steps and pending else None
            queue = BlockQueue(self.store, pending, f"rank{self.rank}@{socket.gethostname()}:{os.getpid()}",
                               self.opts.lease_seconds)
            if self.opts.consistency == "momentum":
                self.train_rounds(pending)
            else:
                self.train_blocks(queue)
            self.write_stats()
            barrier(self.timeout, self.device)
            if self.rank == 0:
                return self.merge(bool(pending))
            return None
        finally:
            if self.lock is not None:
                self.lock.release()
            dist.destroy_process_group()

    # ---------------------------------------------------------------------------- rank 0 set-up

    def setup_folder(self) -> None:
        """Rank 0: lock, check and write the folder, publish the plan; the others wait for it (its
        error, if any, is raised on every rank)."""
        if self.rank == 0:
            try:
                self.prepare_folder()
                self.store.set("setup", "ok")
            except Exception as err:  # noqa: BLE001 - every failure is told to the waiting ranks, then raised here
                from recon.core.errors import describe

                self.store.set("setup", json.dumps({"type": type(err).__name__, "message": describe(err)}))
                raise
        else:
            self.store.wait(["setup"], self.timeout)
            status = self.store.get("setup").decode()
            if status != "ok":
                err = json.loads(status)
                known = {"RunLockedError": RunLockedError, "ConfigMismatchError": ConfigMismatchError}
                if err["type"] in known:
                    raise known[err["type"]](err["message"])
                raise RunFolderError(f"worker 0 could not prepare {self.out} ({err['type']}: {err['message']})")

    def prepare_folder(self) -> None:
        from recon.outputs.paths import ensure_writable_folder
        from recon.distributed.partition import PartitionError

        ensure_writable_folder(self.out, "--out")
        self.lock = rf.RunLock(self.out).acquire()
        if self.lock.stale:
            self.log(f"{self.lock.path}: taking over the lock left by pid {self.lock.stale.get('pid', '?')}")
        if self.cfg.overwrite and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
            self.clear_folder()
        config_file = self.out / rf.CONFIG_FILE
        if config_file.is_file() and not self.cfg.overwrite:
            saved = rf.read_config_dict(config_file)
            check_resumable(saved, self.cfg, self.out)
            self.cfg = resumed_config(saved, self.cfg)  # options left at today's default: the run's own values
        rf.write_config(self.out, stored_config(self.cfg))
        target = self.out / BLOCKS_FILE
        if self.opts.blocks == "auto":
            if target.is_file() and not self.cfg.overwrite:
                part = Partition.read(target)
            else:
                part = partition_scene(self.scene, self.opts.split, source=str(self.cfg.data))
        else:
            part = Partition.read(Path(self.opts.blocks))
            if target.is_file() and Path(self.opts.blocks).resolve() != target.resolve():
                if Partition.read(target).to_dict()["blocks"] != part.to_dict()["blocks"]:
                    raise PartitionError(f"--blocks {self.opts.blocks}: {self.out} was trained with other blocks "
                                         f"({target}); use another --out, or the same partition")
        part.check_dataset(self.scene, str(target if self.opts.blocks == "auto" else self.opts.blocks))
        check_blocks(part, PartitionConfig(min_images_per_block=1), str(self.opts.blocks))
        if not target.is_file() or Path(self.opts.blocks).resolve() != target.resolve():
            write_partition(part, target, self.scene)
        pending = [b.id for b in part.blocks if not block_finished(self.out, b.id, self.cfg.steps)]
        self.store.set("pending", json.dumps(pending))
        done = len(part.blocks) - len(pending)
        self.log(f"{len(part.blocks)} blocks, {done} finished before, {len(pending)} to train on {self.world} "
                 f"worker(s) ({backend_for(self.device)})")

    def clear_folder(self) -> None:
        """--overwrite (first round only: a torchrun restart resumes): remove the blocks' and the prior's folders,
        the merged outputs and an automatic partition."""
        import shutil

        from recon.distributed.prior import prior_dir

        shutil.rmtree(self.out / "blocks", ignore_errors=True)
        shutil.rmtree(prior_dir(self.out), ignore_errors=True)
        for name in (rf.SPLATS_FILE, rf.METRICS_FILE) + ((BLOCKS_FILE, "blocks.png") if self.opts.blocks == "auto" else ()):
            (self.out / name).unlink(missing_ok=True)

    # ---------------------------------------------------------------------------- training

    def train_prior(self):
        """--prior-steps: worker 0 trains the whole-scene prior in RUN/prior (resumed, or skipped once finished)
        while the others wait (recon/distributed/prior.py); returns its Gaussians (every worker reads them)."""
        from recon.distributed.prior import (PRIOR_KEY, PriorProgress, prior_config, prior_dir, prior_finished,
                                             wait_for_prior)
        from recon.export import read_splats

        if self.rank == 0:
            try:
                if not prior_finished(self.out, self.opts.prior_steps):
                    self.log(f"training the prior: {self.opts.prior_steps} steps on the whole scene")
                    self.prior_trainer(prior_config(self.cfg, self.out, self.opts.prior_steps),
                                       [PriorProgress(self.store), StopHook(self.stop)]).run()
                self.store.set(PRIOR_KEY, "ok")
            except Exception as err:  # noqa: BLE001 - told to the waiting ranks, then raised here
                from recon.core.errors import describe

                self.store.set(PRIOR_KEY, json.dumps({"type": type(err).__name__, "message": describe(err)}))
                raise
        else:
            wait_for_prior(self.store, self.opts.timeout_seconds, self.opts.poll_seconds, self.log,
                           stopped=lambda: bool(self.stop.get("signal")))
        return read_splats(prior_dir(self.out) / rf.SPLATS_FILE)

    def prior_trainer(self, cfg: TrainConfig, hooks: list) -> Trainer:
        """The prior's trainer: a plain one, or in momentum mode one that trains through an appearance module
        of its own (no exchange: worker 0 alone), kept in RUN/prior/appearance.pt for the rounds to start from
        (recon/distributed/momentum.py)."""
        log = lambda line: self.log(f"prior: {line}")  # noqa: E731
        if self.opts.consistency != "momentum":
            return Trainer(cfg, scene=self.scene, device=self.device, log=log, hooks=hooks)
        from recon.distributed.momentum import APPEARANCE_FILE, MomentumTrainer, SaveAppearance

        shared = self.appearance_module(collective=False)
        trainer = MomentumTrainer(cfg, scene=self.scene, device=self.device, log=log,
                                  hooks=hooks + [SaveAppearance(shared, Path(cfg.out) / APPEARANCE_FILE)])
        trainer.shared, trainer.image_index = shared, self.image_index()
        return trainer

    def image_index(self) -> dict:
        """Training image name -> its row in the appearance module (the whole scene's training images)."""
        return {f.name: i for i, f in enumerate(self.scene.frames_train)}

    def appearance_module(self, collective: bool = True):
        """The appearance module of momentum mode from the job's flags (``collective=False``: the prior's, no
        exchange)."""
        from recon.distributed.momentum import SharedAppearance

        return SharedAppearance(len(self.scene.frames_train), self.rank, self.world, self.device, self.cfg.seed,
                                lr=self.opts.appearance_lr, momentum=self.opts.momentum,
                                weight=self.opts.consistency_weight, collective=collective)

    def train_blocks(self, queue: BlockQueue) -> None:
        """Claim and train blocks until every block of the queue is done; the leases of the block being
        trained are renewed by a :class:`recon.core.lease_queue.LeaseKeeper` thread. A block lost to another
        worker stops and is not marked done here (its new owner finishes it)."""
        keeper = LeaseKeeper(queue, self.opts.max_pause_seconds).start("block-leases")
        try:
            while True:
                block = keeper.claim()
                if block is None:
                    if keeper.all_done():
                        return
                    if self.stop.get("signal"):
                        raise KeyboardInterrupt
                    keeper.check()
                    time.sleep(self.opts.poll_seconds)
                    continue
                try:
                    self.train_block(keeper, block)
                except LeaseLostError as err:
                    self.log(str(err))
                    keeper.forget(block)
                    continue
                if keeper.release(block):
                    keeper.finish(block)
                else:
                    self.log(f"block {block}: another worker took it over (lease expired) as it finished; "
                             f"its result is that worker's")
        finally:
            keeper.close()

    def train_rounds(self, pending: list[int]) -> None:
        """Momentum mode: lock-step rounds over the unfinished blocks with the shared appearance module
        (see :mod:`recon.distributed.momentum`), from the last finished round's module, else the prior's; rank 0
        saves the module after each round."""
        from recon.distributed.momentum import APPEARANCE_FILE
        from recon.distributed.prior import prior_dir

        names = self.image_index()
        self.shared = self.appearance_module()
        saved = self.out / APPEARANCE_FILE
        prior = prior_dir(self.out) / APPEARANCE_FILE
        if saved.is_file():
            self.shared.load(saved)
        elif self.prior is not None and prior.is_file():
            self.shared.load(prior)
            self.log(f"the blocks start from the prior's appearance module ({prior})")
        rounds = -(-len(pending) // self.world)
        for r in range(rounds):
            k = r * self.world + self.rank
            if k < len(pending):
                self.train_block(None, pending[k], names)
            else:
                self.log(f"round {r + 1}/{rounds}: no block left for this worker; joining the exchange")
                for _ in range(self.cfg.steps):
                    self.shared.exchange(False, None)
            if self.rank == 0:
                self.shared.save(saved)
        self.appearance_digest = self.shared.digest()

    def train_block(self, keeper: LeaseKeeper | None, block_id: int, image_index: dict | None = None) -> None:
        """Train block ``block_id`` into its folder; ``keeper`` holds its lease (None: momentum mode, no leases)."""
        block = next(b for b in self.part.blocks if b.id == block_id)
        cfg = block_config(self.cfg, self.out, block_id, self.opts.max_gaussians_per_block)
        scene = block_scene(self.part, self.scene, block)
        t0 = time.perf_counter()
        self.log(f"block {block_id}: {len(scene.frames_train)} images, "
                 f"{0 if scene.points is None else len(scene.points):,} points")
        log = lambda line: self.log(f"block {block_id}: {line}")  # noqa: E731
        model, hooks = None, [StopHook(self.stop) if keeper is None else LeaseHook(keeper, block_id, self.stop)]
        if self.prior is not None:  # refine the prior's Gaussians (recon/distributed/prior.py)
            from recon.distributed.prior import FrozenContext, block_start, refine_config
            from recon.models.base import model_class

            cfg = refine_config(cfg)
            start, trained = block_start(self.prior, self.part, block, self.opts.prior_context)
            hooks += [] if trained is None else [FrozenContext(trained)]
            model = model_class(cfg.method).from_splat_data(start, extent=scene.extent, lrs=cfg.lr)
        if keeper is None:  # momentum mode: lock-step, so an unfinished block starts over
            from recon.distributed.momentum import MomentumTrainer

            trainer = MomentumTrainer(dataclasses.replace(cfg, overwrite=True), log=log, scene=scene, model=model,
                                      device=self.device, hooks=hooks)
            trainer.shared, trainer.image_index = self.shared, image_index
        else:
            trainer = Trainer(cfg, log=log, hooks=hooks, scene=scene, model=model, device=self.device)
        metrics = trainer.run()
        psnr = metrics["test"]["psnr"]
        self.block_seconds[block_id] = round(time.perf_counter() - t0, 3)
        self.log(f"block {block_id}: done in {time.perf_counter() - t0:.1f} s, {metrics['num_gaussians']:,} "
                 f"Gaussians, block test PSNR {'n/a' if psnr is None else format(psnr, '.2f')}")

    def write_stats(self) -> None:
        """``OUT/workers/rank_R.json``: the blocks this worker trained (seconds each, set-up and evaluation
        included), its peak resident memory and device."""
        import resource

        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        stats = {"rank": self.rank, "world_size": self.world, "host": socket.gethostname(), "pid": os.getpid(),
                 "consistency": self.opts.consistency, "appearance_digest": getattr(self, "appearance_digest", None),
                 "device": str(self.device), "backend": backend_for(self.device), "threads": self.opts.threads,
                 "blocks": self.block_seconds, "peak_rss_mib": round(peak_kib / 1024, 1),
                 "peak_cuda_mib": round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
                 if self.device.type == "cuda" else None}
        (self.out / "workers").mkdir(exist_ok=True)
        rf.write_json(self.out / "workers" / f"rank_{self.rank}.json", stats)

    def merge(self, trained_now: bool) -> dict:
        """Rank 0: merge (again only when blocks were trained now or the merged files are missing)."""
        if not trained_now and (self.out / rf.METRICS_FILE).is_file() and (self.out / rf.SPLATS_FILE).is_file():
            try:
                metrics = rf.read_metrics(self.out / rf.METRICS_FILE, "merging the blocks again")
                self.log("every block was finished before; the merged model is up to date")
                return metrics
            except DamagedFileError as err:
                self.log(f"{err}")
        from recon.distributed.prior import prior_dir

        prior = prior_dir(self.out) / rf.SPLATS_FILE if self.opts.prior_steps else None
        return merge_run(self.out, self.part, self.scene, self.cfg, self.device, self.log, self.opts.finetune_steps,
                         self.opts.consistency, prior)


def set_threads(n: int) -> None:
    """PyTorch's and Numba's thread counts (the rasterizer's cpu kernels use Numba's)."""
    torch.set_num_threads(n)
    try:
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry of ``python -m recon.distributed`` (one worker); user errors are one line and status 2."""
    from recon.core.errors import is_user_error, describe, report_bug

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts, cfg = parse_args(argv)
        Job(opts, cfg).run()
    except KeyboardInterrupt:
        print(f"[worker {os.environ.get('RANK', '0')}] stopped; rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - user errors are one line, anything else a bug report
        if is_user_error(err):
            print(f"splatforge train --blocks (worker {os.environ.get('RANK', '0')}): error: {describe(err)}",
                  file=sys.stderr, flush=True)
            return 2
        report_bug("train --blocks", err)
        return 1
    return 0
