"""The coarse prior before the blocks (recon/distributed/prior.py): each block's start, the frozen context,
the refinement config and the waiting workers."""

import json

import numpy as np
import pytest
import torch

from recon.distributed.partition import Block, Partition
from recon.distributed.prior import (PRIOR_KEY, PRIOR_STEP_KEY, FrozenContext, block_start, prior_finished,
                                     refine_config, wait_for_prior)
from recon.core.errors import RunFolderError
from recon.models.gaussians import GaussianModel
from recon.core.splat_data import SplatData
from recon.training.trainer import TrainConfig


def splats(n=10, seed=0) -> SplatData:
    rng = np.random.default_rng(seed)
    return SplatData(means=rng.uniform(-1, 1, (n, 3)).astype(np.float32),
                     quats=np.tile(np.float32([1, 0, 0, 0]), (n, 1)),
                     log_scales=np.full((n, 3), -3.0, np.float32), logit_opacities=np.zeros(n, np.float32),
                     sh=rng.uniform(0, 1, (n, 1, 3)).astype(np.float32))


class _Part:
    """A partition's ground projection only: x, y of the points."""

    def ground(self, points):
        return np.asarray(points)[:, :2]


def block(expanded) -> Block:
    return Block(0, [[-9, -9], [9, 9]], expanded, expanded, [], [], 0)


def test_block_start_frozen_keeps_every_gaussian_and_masks_the_others():
    prior = splats()
    b = block([[0.0, -1.0], [1.0, 1.0]])  # x >= 0
    start, trained = block_start(prior, _Part(), b, "frozen")
    assert start is prior and trained.dtype == bool
    np.testing.assert_array_equal(trained, prior.means[:, 0] >= 0)
    start, trained = block_start(prior, _Part(), b, "none")
    assert trained is None and len(start.means) == int((prior.means[:, 0] >= 0).sum())
    np.testing.assert_array_equal(start.means, prior.means[prior.means[:, 0] >= 0])


def test_frozen_context_zeroes_the_gradients_of_the_others():
    model = GaussianModel.from_splat_data(splats())
    trained = np.zeros(10, bool)
    trained[[1, 4, 7]] = True

    class T:  # what the hook reads of a trainer
        pass

    t = T()
    t.model = model
    FrozenContext(trained).on_train_start(t)
    loss = sum(((p + 1.0) ** 2).sum() for p in model.params.values())
    loss.backward()
    for name, p in model.params.items():
        g = p.grad.reshape(10, -1)
        assert (g[~torch.from_numpy(trained)] == 0).all(), name
        assert g.numel() == 0 or (g[torch.from_numpy(trained)] != 0).any(), name  # shN of degree 0 is empty


def test_refine_config_turns_densification_off_and_keeps_the_learning_rates():
    cfg = TrainConfig()
    r = refine_config(cfg)
    assert r.adc.refine_stop_iter == 0 and r.mcmc.refine_stop_iter == 0 and r.mcmc.noise_lr == 0.0
    assert r.lr == cfg.lr and r.steps == cfg.steps


def test_prior_finished_reads_its_metrics(tmp_path):
    assert not prior_finished(tmp_path, 30)
    (tmp_path / "prior").mkdir()
    (tmp_path / "prior" / "metrics.json").write_text(json.dumps({"steps": 20}))
    assert not prior_finished(tmp_path, 30)
    (tmp_path / "prior" / "metrics.json").write_text(json.dumps({"steps": 30}))
    assert prior_finished(tmp_path, 30)
    (tmp_path / "prior" / "metrics.json").write_text("{broken")
    assert not prior_finished(tmp_path, 30)


class FakeStore:
    """The c10d store calls wait_for_prior makes (check, get), over a dict; ``script`` runs at each check."""

    def __init__(self, script=lambda store: None):
        self.data, self.script, self.checks = {}, script, 0

    def check(self, keys):
        self.checks += 1
        self.script(self)
        return all(k in self.data for k in keys)

    def get(self, key):
        return self.data[key].encode()


def test_waiting_workers_see_the_prior_done_or_failed():
    def done_after_three(store):
        store.data[PRIOR_STEP_KEY] = str(store.checks)
        if store.checks >= 5:
            store.data[PRIOR_KEY] = "ok"

    wait_for_prior(FakeStore(done_after_three), timeout_seconds=5, poll_seconds=0.001, log=lambda _: None)
    failed = FakeStore(lambda s: s.data.setdefault(PRIOR_KEY, json.dumps({"type": "DataFormatError",
                                                                          "message": "bad image"})))
    with pytest.raises(RunFolderError, match="could not train the prior .DataFormatError: bad image"):
        wait_for_prior(failed, timeout_seconds=5, poll_seconds=0.001, log=lambda _: None)


def test_a_stalled_worker_0_is_an_error_not_a_hang():
    stalled = FakeStore(lambda s: s.data.setdefault(PRIOR_STEP_KEY, "12"))
    with pytest.raises(RunFolderError, match="no progress on the prior for 0 s .last step 12"):
        wait_for_prior(stalled, timeout_seconds=0.05, poll_seconds=0.01, log=lambda _: None)
    with pytest.raises(KeyboardInterrupt):
        wait_for_prior(FakeStore(), timeout_seconds=5, poll_seconds=0.001, stopped=lambda: True)


def test_a_model_built_from_a_record_does_not_share_its_arrays():
    """Training a block's model must not move the prior it started from (the next block starts from it too)."""
    prior = splats()
    before = prior.means.copy()
    model = GaussianModel.from_splat_data(prior)
    with torch.no_grad():
        for p in model.params.values():
            p.add_(1.0)
    np.testing.assert_array_equal(prior.means, before)
