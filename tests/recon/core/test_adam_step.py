"""adam_step: torch.optim.Adam(fused=True)'s update without its per-group Python, bit-identical to step()."""

from __future__ import annotations

import copy

import torch

from recon.core.adam_step import adam_step, plain_fused_adam


def two_optimizers(**kw):
    """Two identical Adams over identical parameters (groups with different learning rates, one parameter
    that never gets a gradient), the second a deep copy of the first."""
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in ((7, 3), (7, 4), (7,), (5, 1, 3), (2,))]
    groups = [{"params": [params[0]], "lr": 1e-3}, {"params": [params[1], params[2]], "lr": 3e-2},
              {"params": [params[3]], "lr": 0.5}, {"params": [params[4]], "lr": 1e-2}]
    a = torch.optim.Adam(groups, eps=1e-15, fused=True, **kw)
    b_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    where = {id(p): i for i, p in enumerate(params)}
    b_groups = [{**grp, "params": [b_params[where[id(p)]] for p in grp["params"]]} for grp in groups]
    b = torch.optim.Adam(b_groups, eps=1e-15, fused=True, **kw)
    return (a, params), (b, b_params)


def give_grads(params, step):
    g = torch.Generator().manual_seed(100 + step)
    for i, p in enumerate(params[:-1]):  # the last parameter never has a gradient
        p.grad = torch.randn(p.shape, generator=g) * (i + 1)


def run_both(steps, **kw):
    (a, pa), (b, pb) = two_optimizers(**kw)
    for step in range(steps):
        give_grads(pa, step)
        give_grads(pb, step)
        a.step()
        adam_step(b)
        if step == 1:  # a learning-rate change between steps (the means schedule) is taken
            a.param_groups[0]["lr"] = b.param_groups[0]["lr"] = 2e-3
    return (a, pa), (b, pb)


def test_adam_step_equals_step_bit_for_bit():
    (a, pa), (b, pb) = run_both(4)
    assert plain_fused_adam(b)
    for x, y in zip(pa, pb):
        assert torch.equal(x, y)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sorted(sa["state"]) == sorted(sb["state"]) == [0, 1, 2, 3]  # no state for the parameter without grads
    for i in sa["state"]:
        for key in ("step", "exp_avg", "exp_avg_sq"):
            va, vb = sa["state"][i][key], sb["state"][i][key]
            assert va.dtype == vb.dtype and va.shape == vb.shape and torch.equal(va, vb), (i, key)


def test_adam_step_with_weight_decay_equals_step():
    (_, pa), (_, pb) = run_both(3, weight_decay=0.1)
    for x, y in zip(pa, pb):
        assert torch.equal(x, y)


def test_adam_step_resumes_a_loaded_state():
    (a, pa), (b, pb) = run_both(2)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    for step in (5, 6):
        give_grads(pa, step)
        give_grads(pb, step)
        a.step()
        adam_step(b)
    for x, y in zip(pa, pb):
        assert torch.equal(x, y)


def test_other_optimisers_and_flags_take_their_own_step():
    (_, pa), _ = two_optimizers()
    assert not plain_fused_adam(torch.optim.Adam(pa, amsgrad=True, fused=True))
    assert not plain_fused_adam(torch.optim.Adam(pa))  # not fused
    assert not plain_fused_adam(torch.optim.AdamW(pa, fused=True))
    assert not plain_fused_adam(torch.optim.SGD(pa, lr=0.1))
    hooked = torch.optim.Adam(pa, fused=True)
    calls = []
    hooked.register_step_post_hook(lambda *a: calls.append(1))
    assert not plain_fused_adam(hooked)
    give_grads(pa, 0)
    adam_step(hooked)  # through step(): the hook runs
    assert calls == [1]
    (a, pa), (b, pb) = run_both(3, amsgrad=True)  # the fallback: step() itself
    for x, y in zip(pa, pb):
        assert torch.equal(x, y)


def test_a_torch_without_the_private_kernel_takes_step(monkeypatch):
    """The direct call uses torch's private ``_fused_adam_``: where a torch release lacks it, every step goes
    through ``optimizer.step()`` with the same result."""
    import recon.core.adam_step as module

    monkeypatch.setattr(module, "FUSED_ADAM", None)
    (a, pa), (b, pb) = run_both(3)
    assert not plain_fused_adam(b)
    for x, y in zip(pa, pb):
        assert torch.equal(x, y)
