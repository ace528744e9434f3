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
