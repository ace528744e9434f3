"""The NeRF's fused Adam (issue 53) against the plain PyTorch Adam (the reference: the same groups, weight decay
and hyper-parameters, ``fused=False, foreach=False``) over several steps; an older checkpoint (``fused=None``)
loads back fused and steps on as the model it came from."""

from __future__ import annotations

import copy

import torch

from recon.models import NerfModel
from recon.nerf.space import FieldSpace
from tests.recon.nerf.test_nerf_train import SMALL
from tests.tolerances import TOL


def model_and_grads(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    model = NerfModel(SMALL, FieldSpace.box((-1.0, -1.0, -1.0), (1.0, 1.0, 1.0)), 1.0, gen)
    grads = [{n: torch.randn(p.shape, generator=gen) for n, p in model.params.items()} for _ in range(4)]
    return model, grads


def run(model, optimizer, grads) -> None:
    for step, g in enumerate(grads):
        model.set_step(step + 50, 1000)
        for n, p in model.params.items():
            p.grad = g[n].clone()
        optimizer.step()


def test_fused_adam_matches_plain_adam():
    model, grads = model_and_grads()
    assert model.cfg.weight_decay > 0  # the MLP group's decay is part of what is compared
    assert all(g["fused"] for g in model.optimizer.param_groups)
    ref = copy.deepcopy(model)
    groups = [{**{k: v for k, v in g.items() if k not in ("fused", "foreach")}} for g in ref.optimizer.param_groups]
    ref.optimizer = torch.optim.Adam(groups, fused=False, foreach=False)
    run(model, model.optimizer, grads)
    run(ref, ref.optimizer, grads)
    for n, p in model.params.items():
        q = ref.params[n]
        assert not torch.equal(p.detach(), model_and_grads()[0].params[n].detach()), n  # it moved
        torch.testing.assert_close(p.detach(), q.detach(), **TOL[torch.float32])
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(model.optimizer.state[p][key], ref.optimizer.state[q][key],
                                       **TOL[torch.float32])


def test_checkpoint_from_before_the_fused_update_loads_fused():
    model, grads = model_and_grads()
    run(model, model.optimizer, grads[:2])
    state = model.state_dict()
    for group in state["optimizer"]["param_groups"]:
        group["fused"] = None  # as saved by the unfused optimizer
    again = NerfModel.from_state_dict(copy.deepcopy(state))
    assert all(g["fused"] and g["foreach"] is None for g in again.optimizer.param_groups)
    run(model, model.optimizer, grads[2:])
    run(again, again.optimizer, grads[2:])
    for n, p in model.params.items():
        torch.testing.assert_close(again.params[n].detach(), p.detach(), rtol=0, atol=0)
