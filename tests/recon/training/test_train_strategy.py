"""Densification strategies against a hand-made model: clone/split/prune counts, optimizer state shapes."""

import math

import torch

from recon.models.gaussians import GaussianModel
from recon.strategy import ADCStrategy, MCMCStrategy, ops
from recon.strategy.mcmc import relocation_values


def make_model(n=10, extent=1.0):
    g = torch.Generator().manual_seed(0)
    params = {"means": torch.randn(n, 3, generator=g), "quats": torch.randn(n, 4, generator=g),
              "log_scales": torch.full((n, 3), math.log(0.005)), "logit_opacities": torch.zeros(n),
              "sh0": torch.zeros(n, 1, 3), "shN": torch.zeros(n, 15, 3)}
    model = GaussianModel(params, 3, extent)
    # one optimizer step so Adam holds state for every parameter
    loss = sum(p.square().sum() for p in model.params.values())
    loss.backward()
    model.step()
    model.zero_grad()
    return model


def assert_state_consistent(model):
    n = len(model)
    for group in model.optimizer.param_groups:
        (p,) = group["params"]
        assert p is model.params[group["name"]]
        assert p.shape[0] == n
        for key in ("exp_avg", "exp_avg_sq"):
            assert model.optimizer.state[p][key].shape == p.shape, (group["name"], key)


def fake_meta(n, grads, width=100, height=80):
    means2d = torch.zeros(1, n, 2, requires_grad=True)
    means2d.grad = grads[None].clone()
    return {"means2d": means2d, "radii": torch.ones(1, n, 2, dtype=torch.int32), "width": width, "height": height}


def test_adc_clone_split_prune_counts():
    model = make_model(10)
    with torch.no_grad():
        model.params["log_scales"][5:8] = math.log(0.05)  # large (> 1% of extent): split
        model.params["logit_opacities"][9] = -8.0  # transparent: pruned
    strat = ADCStrategy(refine_start_iter=0, refine_every=1, reset_every=1000)
    state = strat.initialize_state(model)
    grads = torch.zeros(10, 2)
    grads[[0, 1, 5, 6]] = 1e-3  # NDC-equivalent 1e-3 * 50 >> 2e-4: 0, 1 small (clone), 5, 6 large (split)
    means_before = model.params["means"].detach().clone()
    info = strat.step_post_backward(model, fake_meta(10, grads), state, step=1)
    assert info["cloned"] == 2 and info["split"] == 2 and info["pruned"] == 1
    assert len(model) == 10 + 2 + 2 - 1
    assert_state_consistent(model)
    assert state["grad2d"].shape == (len(model),) and float(state["count"].sum()) == 0
    # clones keep their parents' means; split children are new and smaller
    assert torch.equal(model.params["means"][7], means_before[0])
    assert torch.allclose(model.params["log_scales"][-1], torch.full((3,), math.log(0.05 / 1.6)))


def test_split_and_duplicate_zero_new_state():
    model = make_model(6)
    mask = torch.tensor([True, False, False, True, False, False])
    assert ops.duplicate(model, mask) == 2
    assert len(model) == 8
    st = model.optimizer.state[model.params["means"]]["exp_avg"]
    assert torch.all(st[-2:] == 0) and torch.any(st[:6] != 0)
    assert ops.split(model, torch.cat([mask, torch.zeros(2, dtype=torch.bool)])) == 2
    assert len(model) == 10
    assert_state_consistent(model)


def test_opacity_reset_and_large_prune():
    model = make_model(5)
    with torch.no_grad():
        model.params["logit_opacities"][:] = 3.0
        model.params["log_scales"][2] = math.log(0.5)  # > 10% of extent
    strat = ADCStrategy(refine_start_iter=0, refine_every=10, reset_every=10)
    state = strat.initialize_state(model)
    info = strat.step_post_backward(model, fake_meta(5, torch.zeros(5, 2)), state, step=20)
    assert info["pruned"] == 1 and info["reset"] == 1
    assert float(model.opacities.detach().max()) <= 0.01 + 1e-6
    assert torch.all(model.optimizer.state[model.params["logit_opacities"]]["exp_avg"] == 0)
    assert_state_consistent(model)


def test_adc_respects_max_gaussians():
    model = make_model(10)
    strat = ADCStrategy(refine_start_iter=0, refine_every=1, max_gaussians=12)
    state = strat.initialize_state(model)
    strat.step_post_backward(model, fake_meta(10, torch.full((10, 2), 1e-3)), state, step=1)
    assert len(model) <= 12


def test_mcmc_relocate_and_add():
    torch.manual_seed(0)
    model = make_model(20)
    with torch.no_grad():
        model.params["logit_opacities"][:4] = -10.0  # dead
    strat = MCMCStrategy(cap_max=22, refine_start_iter=0, refine_every=1)
    info = strat.step_post_backward(model, {}, strat.initialize_state(model), step=1, lr=1e-4)
    assert info["relocated"] == 4 and info["added"] == 1
    assert len(model) == 21 and float(model.opacities.detach().min()) > strat.min_opacity - 1e-6
    assert_state_consistent(model)
    info = strat.step_post_backward(model, {}, {}, step=2, lr=1e-4)
    assert len(model) == 22  # capped


def test_relocation_preserves_single_copy():
    o, s = torch.tensor([0.3, 0.8]), torch.ones(2, 3)
    new_o, new_s = relocation_values(o, s, torch.tensor([1, 1]))
    assert torch.allclose(new_o, o) and torch.allclose(new_s, s, atol=1e-5)
    new_o, new_s = relocation_values(o, s, torch.tensor([2, 3]))
    assert torch.allclose(1 - (1 - new_o) ** torch.tensor([2.0, 3.0]), o, atol=1e-6)
    assert bool((new_s < 1).all())


def test_scaled_schedule_keeps_proportions():
    s = ADCStrategy().scaled(0.1)
    assert (s.refine_start_iter, s.refine_stop_iter, s.reset_every, s.refine_every) == (50, 1500, 300, 20)
    assert MCMCStrategy().scaled(0.5).refine_stop_iter == 12500
