"""Momentum mode's parts: the appearance module starts as the identity, the exchange averages over active
workers only (idle ones join with zeros), the teacher follows the student by EMA, the block weight rule."""

import datetime
import math

import pytest
import torch
import torch.distributed as dist

from recon.distributed.momentum import Appearance, SharedAppearance, block_weight, flat_grads


@pytest.fixture
def group_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    yield
    dist.destroy_process_group()


def test_appearance_starts_as_identity_and_learns_a_gain():
    gen = torch.Generator().manual_seed(0)
    app = Appearance(5, generator=gen)
    image = torch.rand(4, 6, 3, generator=gen)
    torch.testing.assert_close(app(image, 3), image, rtol=0, atol=0)
    opt = torch.optim.Adam(app.parameters(), lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        ((app(image, 3) - 0.7 * image) ** 2).mean().backward()
        opt.step()
    torch.testing.assert_close(app(image, 3), 0.7 * image, rtol=0, atol=0.02)


def test_exchange_steps_when_active_and_not_when_idle(group_of_one):
    shared = SharedAppearance(4, 0, 1, torch.device("cpu"), seed=0, momentum=0.9)
    before = [p.detach().clone() for p in shared.student.parameters()]
    teacher0 = [p.detach().clone() for p in shared.teacher.parameters()]
    assert shared.exchange(False, None) == 0  # idle: no step
    for a, b in zip(before, shared.student.parameters()):
        torch.testing.assert_close(a, b.detach(), rtol=0, atol=0)
    image = torch.rand(3, 3, 3)
    ((shared.student(image, 2) - 0.5) ** 2).mean().backward()
    assert flat_grads(shared.student).abs().sum() > 0
    assert shared.exchange(True, 20.0) == 1
    assert shared.running_psnr == 20.0 and shared.best_psnr == 20.0
    changed = [not torch.equal(a, b.detach()) for a, b in zip(before, shared.student.parameters())]
    assert any(changed)
    for t0, t, s in zip(teacher0, shared.teacher.parameters(), shared.student.parameters()):
        torch.testing.assert_close(t, 0.9 * t0 + 0.1 * s.detach(), rtol=0, atol=1e-7)


def test_block_weight_favours_weaker_blocks():
    assert block_weight(25.0, 25.0) == 1.0
    assert block_weight(15.0, 25.0) == pytest.approx(2 - math.exp(-0.5))
    assert block_weight(5.0, 25.0) > block_weight(15.0, 25.0) > 1.0


def _one_step(shared: SharedAppearance) -> None:
    image = torch.rand(3, 3, 3, generator=torch.Generator().manual_seed(1))
    ((shared.student(image, 2) - 0.5) ** 2).mean().backward()
    assert shared.exchange(True, 20.0) == 1


def test_a_local_module_steps_without_a_process_group():
    """The prior's module (collective=False): no all_reduce, so no process group, and the same step as one
    replica's all_reduce would give."""
    assert not dist.is_initialized()
    local = SharedAppearance(4, 0, 1, torch.device("cpu"), seed=0, collective=False)
    _one_step(local)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        grouped = SharedAppearance(4, 0, 1, torch.device("cpu"), seed=0)
        _one_step(grouped)
    finally:
        dist.destroy_process_group()
    assert local.digest() == grouped.digest()


def test_save_appearance_follows_the_checkpoints_and_the_end(tmp_path):
    from types import SimpleNamespace

    from recon.distributed.momentum import SaveAppearance

    shared = SharedAppearance(4, 0, 1, torch.device("cpu"), seed=0, collective=False)
    path = tmp_path / "appearance.pt"
    hook = SaveAppearance(shared, path)
    trainer = SimpleNamespace(step=0, cfg=SimpleNamespace(save_every=10))
    hook.on_train_start(trainer)  # a fresh run: nothing to load
    trainer.step = 9
    hook.on_step(trainer, None)
    assert not path.exists()
    _one_step(shared)
    trainer.step = 10
    hook.on_step(trainer, None)  # with the checkpoint of step 10
    saved = shared.digest()
    _one_step(shared)
    assert shared.digest() != saved
    resumed = SharedAppearance(4, 0, 1, torch.device("cpu"), seed=0, collective=False)
    SaveAppearance(resumed, path).on_train_start(SimpleNamespace(step=10, cfg=trainer.cfg))  # a resumed prior
    assert resumed.digest() == saved
    hook.on_train_end(trainer)
    fresh = SharedAppearance(4, 0, 1, torch.device("cpu"), seed=0, collective=False)
    fresh.load(path)
    assert fresh.digest() == shared.digest()
