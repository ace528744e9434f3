"""Joining a torch.distributed process group the way torchrun starts its workers, and a barrier that names
the missing ranks: shared by block training (:mod:`recon.distributed`) and ``splatforge mesh2splat
--distributed`` (:mod:`recon.mesh2splat.cluster`)."""

from __future__ import annotations

import datetime
import os
import socket

import torch


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def init_group(device: torch.device, timeout: datetime.timedelta):
    """Join torchrun's process group (env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; a single process
    without them); returns (this restart round's store, rank, world_size)."""
    import torch.distributed as dist

    if "RANK" not in os.environ:  # started by hand, not by torchrun: a group of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
    store.set_timeout(timeout)
    # torchrun keeps its store over restarts (--max-restarts): each round's keys get their own prefix, else
    # the new round's gloo ranks would read the dead round's addresses
    store = dist.PrefixStore(f"splatforge/round{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/", store)
    dist.init_process_group(backend_for(device), store=store, rank=rank, world_size=world, timeout=timeout)
    return store, rank, world


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def barrier(timeout: datetime.timedelta, device: torch.device) -> None:
    """A barrier that ends in an error naming the missing ranks after ``timeout`` (gloo's monitored
    barrier; nccl's barrier under the group's timeout)."""
    import torch.distributed as dist

    if device.type == "cuda":
        dist.barrier(device_ids=[device.index or 0])
    else:
        dist.monitored_barrier(timeout=timeout)
