"""Block training's leases: renewed by the keeper thread (recon.core.lease_queue.LeaseKeeper, mesh2splat's too)
through pauses without training steps; a block whose lease another worker took over stops and publishes
nothing (no metrics.json, not marked done by the old owner)."""

import time

import pytest
import torch.distributed as dist

from recon.core.lease_queue import BlockQueue, LeaseKeeper, LeaseLostError
from recon.distributed.merge import run_finished
from recon.distributed.worker import BlockOptions, Job, LeaseHook
from recon.training.trainer import TrainConfig, Trainer, TrainingHook
from tests.distributed.test_queue import Clock


def test_renewals_go_on_through_a_pause_longer_than_the_lease_with_no_steps():
    store = dist.HashStore()
    a = BlockQueue(store, [0], "a", 0.4)
    b = BlockQueue(store, [0], "b", 0.4)
    keeper = LeaseKeeper(a)
    assert keeper.claim() == 0
    hook = LeaseHook(keeper, 0, {})
    hook.on_step(None, None)
    keeper.start()
    try:
        time.sleep(1.5)  # an evaluation or a save of almost four leases: no step, no renewal from the loop
        assert b.claim() is None, "the lease expired during the pause: another worker took the block"
        hook.on_step(None, None)  # still ours
        assert a.lease(0)["worker"] == "a" and a.lease(0)["expires"] > time.time()
    finally:
        keeper.close()


def take_over(keeper: LeaseKeeper, other: BlockQueue, clock: Clock, block: int) -> None:
    """The owner's lease expires (it paused, cut off from the store), ``other`` takes the block over, and the
    owner's keeper learns it at its next renewal."""
    clock.now += 1000
    assert other.claim() == block
    keeper.renew()  # what the keeper thread does every lease_seconds / 4
    assert keeper.is_lost(block)


class TakeOverAtTheFinalEvaluation(TrainingHook):
    """The lease is lost while the trainer evaluates the finished block (before metrics.json is written)."""

    def __init__(self, keeper, other, clock):
        self.keeper, self.other, self.clock = keeper, other, clock

    def on_evaluate(self, trainer, test):
        take_over(self.keeper, self.other, self.clock, 0)


def test_a_block_lost_during_its_final_evaluation_writes_no_metrics(tmp_path):
    from tests.recon.data.test_data_nerfstudio import make_dataset

    root, _ = make_dataset(tmp_path / "ns")
    store, clock = dist.HashStore(), Clock()
    keeper = LeaseKeeper(BlockQueue(store, [0], "a", 10, clock))
    other = BlockQueue(store, [0], "b", 10, clock)
    assert keeper.claim() == 0
    cfg = TrainConfig(data=root, out=tmp_path / "block_000", progress=False, init_num_random=200, steps=3,
                      save_every=0, eval_every=0)
    hooks = [TakeOverAtTheFinalEvaluation(keeper, other, clock), LeaseHook(keeper, 0, {})]
    with pytest.raises(LeaseLostError, match="block 0"):
        Trainer(cfg, log=lambda *_: None, hooks=hooks).run()
    assert not run_finished(cfg.out, 3)  # metrics.json, the block's result, was not written
    assert not keeper.release(0)


@pytest.mark.parametrize("when", ["mid-training", "as it finished"])
def test_a_lost_block_is_not_marked_done_by_its_old_owner(when, tmp_path):
    store, clock = dist.HashStore(), Clock()
    mine = BlockQueue(store, [0], "a", 10, clock)
    other = BlockQueue(store, [0], "b", 10, clock)
    job = Job(BlockOptions(poll_seconds=0.01), TrainConfig(out=tmp_path / "run"))
    job.log = lambda line: None
    trained, marked = [], []
    finish = mine.finish
    mine.finish = lambda block: (marked.append(block), finish(block))

    def train_block(keeper, block):
        trained.append(block)
        take_over(keeper, other, clock, block)
        other.finish(block)  # the new owner trains and finishes it meanwhile
        if when == "mid-training":  # stops at its next step; else it was lost after its last step
            LeaseHook(keeper, block, {}).on_step(None, None)

    job.train_block = train_block
    job.train_blocks(mine)
    assert trained == [0] and mine.all_done()
    assert marked == [], "the old owner marked a block it lost as done"


def test_a_hung_block_is_no_longer_renewed_and_goes_to_another_worker():
    """With max_pause, a block whose work shows no progress (no step, no evaluation) for that long is not renewed:
    its lease expires and another worker takes it; the hung worker, going on, finds it lost at its next renewal."""
    store, clock = dist.HashStore(), Clock()
    keeper = LeaseKeeper(BlockQueue(store, [0], "a", 10, clock), max_pause=100)
    other = BlockQueue(store, [0], "b", 10, clock)
    assert keeper.claim() == 0
    hook = LeaseHook(keeper, 0, {})
    for _ in range(30):  # training: a step every 5 s, renewals every 2.5 s, for 150 s (more than max_pause)
        clock.now += 2.5
        keeper.renew()
        if _ % 2:
            hook.on_step(None, None)
        assert other.claim() is None
    for _ in range(44):  # hung for 110 s: renewed until the pause passes max_pause (100 s), then not
        clock.now += 2.5
        keeper.renew()
    assert other.claim() is None  # the last renewal (at 100 s) holds for 10 s more
    clock.now += 5.1
    assert other.claim() == 0  # expired: taken over
    hook.on_step(None, None)  # the hung worker goes on: its next renewal finds the block taken
    keeper.renew()
    with pytest.raises(LeaseLostError, match="block 0"):
        hook.on_step(None, None)


def test_without_max_pause_a_silent_block_keeps_its_lease():
    """mesh2splat's keeper (no max_pause) renews whatever the work does (its worker processes have time limits)."""
    store, clock = dist.HashStore(), Clock()
    keeper = LeaseKeeper(BlockQueue(store, [0], "a", 10, clock))
    other = BlockQueue(store, [0], "b", 10, clock)
    assert keeper.claim() == 0
    for _ in range(200):
        clock.now += 2.5
        keeper.renew()
        assert other.claim() is None
