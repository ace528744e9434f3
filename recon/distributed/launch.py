"""``splatforge train --blocks auto|blocks.json --workers N [train flags]``: check the inputs, then start
torchrun (``python -m torch.distributed.run --standalone``) with N workers of ``python -m recon.distributed``.

The same job by hand, or over several machines (torchrun's rendezvous flags; every node runs it):

    torchrun --standalone --nproc_per_node=N -m recon.distributed --data DIR --blocks blocks.json --out RUN
    torchrun --nnodes=2 --nproc_per_node=N --rdzv_backend=c10d --rdzv_endpoint=HOST:29400 --rdzv_id=job1 \\
        -m recon.distributed --data DIR --blocks blocks.json --out RUN   # RUN on a shared file system
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from recon.core.errors import UsageError

LAUNCH_FLAGS = ("--workers", "--max-restarts")


def parse_launch_flags(flags: list[str]) -> tuple[int, int]:
    """(workers, max_restarts) from ``--workers N --max-restarts R`` (defaults 1 and 0)."""
    values = {"--workers": 1, "--max-restarts": 0}
    it = iter(flags)
    for a in it:
        name, _, value = a.partition("=")
        value = value or next(it)
        try:
            values[name] = int(value)
        except ValueError:
            raise UsageError(f"{name} {value}: must be an integer") from None
    if values["--workers"] < 1:
        raise UsageError(f"--workers {values['--workers']}: must be >= 1")
    if values["--max-restarts"] < 0:
        raise UsageError(f"--max-restarts {values['--max-restarts']}: must be >= 0")
    return values["--workers"], values["--max-restarts"]


def preflight(argv: list[str]) -> None:
    """Refuse, as one line before any worker starts, what the workers would refuse: bad flags, a blocks
    file from another dataset or with an empty block, a run folder another job holds."""
    from recon.outputs import files as rf
    from recon.distributed.partition import Partition, PartitionConfig, check_blocks
    from recon.distributed.worker import Job, parse_args
    from recon.training.trainer import load_training_scene

    opts, cfg = parse_args(argv)
    Job(opts, cfg).check_options()
    if opts.blocks != "auto":
        part = Partition.read(Path(opts.blocks))
        part.check_dataset(load_training_scene(cfg), opts.blocks)
        check_blocks(part, PartitionConfig(min_images_per_block=1), opts.blocks)
    if Path(cfg.out).is_dir() and (Path(cfg.out) / rf.LOCK_FILE).exists():
        rf.RunLock(Path(cfg.out)).acquire().release()  # RunLockedError naming the holder


def torchrun_command(workers: int, max_restarts: int, argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={workers}",
            f"--max-restarts={max_restarts}", "-m", "recon.distributed", *argv]


def train_blocks(args: list[str]) -> None:
    """``splatforge train --blocks ...``: preflight, then torchrun; exits with its status."""
    from recon.distributed.worker import split_flags

    launch_flags, rest = split_flags(list(args), LAUNCH_FLAGS)
    workers, max_restarts = parse_launch_flags(launch_flags)
    preflight(rest)
    cmd = torchrun_command(workers, max_restarts, rest)
    print(f"starting {workers} worker(s): {shlex.join(cmd)}", flush=True)
    status = subprocess.call(cmd)
    if status != 0:
        raise SystemExit(status)
