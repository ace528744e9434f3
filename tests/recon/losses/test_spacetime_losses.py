"""4dgs regularisers: opacity entropy, velocity consistency with space-time neighbours, and their config."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from recon.losses.spacetime import (NeighborLists, SpaceTimeConfig, nearest_neighbors, opacity_entropy,
                                    velocity_consistency)


def test_opacity_entropy_values_and_gradient_direction():
    assert float(opacity_entropy(torch.tensor([0.5]))) == pytest.approx(math.log(2))
    assert float(opacity_entropy(torch.tensor([0.0, 1.0]))) == pytest.approx(0.0, abs=1e-4)
    o = torch.tensor([0.3, 0.8], requires_grad=True)
    opacity_entropy(o).backward()
    assert o.grad[0] > 0 and o.grad[1] < 0  # descent pushes 0.3 down and 0.8 up


def test_velocity_consistency_by_hand():
    v = torch.tensor([[1.0, 0, 0], [3.0, 0, 0], [0.0, 2.0, 0]])
    nbrs = torch.tensor([[1, 2], [0, 2], [0, 1]])
    # v0 - mean(v1, v2) = (1 - 1.5, -1, 0): |.|_1 = 1.5; v1: (3 - 0.5, -1, 0): 3.5; v2: (-2, 2, 0): 4
    assert float(velocity_consistency(v, nbrs)) == pytest.approx((1.5 + 3.5 + 4.0) / 3)
    same = torch.ones(3, 3)
    assert float(velocity_consistency(same, nbrs)) == 0.0


def test_nearest_neighbors_in_scaled_space_time():
    pts = np.array([[0, 0, 0, 0], [0.1, 0, 0, 0], [0, 0, 0, 0.05], [5, 5, 5, 0]], dtype=float)
    idx = nearest_neighbors(pts, 2)
    assert idx.shape == (4, 2) and set(idx[0]) == {1, 2} and 3 not in idx[0]
    scaled = pts.copy()
    scaled[:, 3] *= 5.0  # time 0.05 -> 0.25: now farther than the 0.1 in x
    assert nearest_neighbors(scaled, 1)[0, 0] == 1
    assert nearest_neighbors(pts[:2], 3).shape == (2, 3)  # fewer points than k: repeated


def test_neighbor_lists_recompute_when_due_or_resized():
    cfg = SpaceTimeConfig(knn_every=10, velocity_neighbors=2)
    lists = NeighborLists()
    means = torch.rand(20, 4, generator=torch.Generator().manual_seed(0))
    first = lists.get(means, 0, cfg)
    assert lists.get(means * 0 + 1, 5, cfg) is first  # not due yet
    assert lists.get(means[:15], 6, cfg).shape == (15, 2)  # count changed
    assert lists.get(means[:15], 16, cfg) is not first and lists.step == 16


def test_4dgs_trains_with_both_regularisers_and_checks_their_config(tmp_path):
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model
    from recon.core.errors import ConfigValueError

    cfg = TrainConfig(data=Path("procedural-4d"), out=tmp_path / "run", method="4dgs", steps=30, save_every=0,
                      progress=False, data_factor=2,
                      spacetime=SpaceTimeConfig(entropy_lambda=0.001, velocity_lambda=0.05, knn_every=10))
    metrics = train_model(cfg, log=lambda *a: None)
    assert math.isfinite(metrics["test"]["psnr"])
    with pytest.raises(ConfigValueError, match="--spacetime.velocity-lambda -1.0: must be >= 0"):
        train_model(TrainConfig(data=Path("procedural-4d"), out=tmp_path / "bad", method="4dgs", steps=1,
                                spacetime=SpaceTimeConfig(velocity_lambda=-1.0)), log=lambda *a: None)


def test_regularisers_enter_the_loss(tmp_path):
    from recon.data.procedural_4d import procedural_4d_scene
    from recon.models.spacetime import SpaceTimeGaussians
    from recon.training.trainer import TrainConfig

    scene = procedural_4d_scene(width=32, height=32, n_times=4)
    cfg = TrainConfig(data=Path("procedural-4d"), method="4dgs",
                      spacetime=SpaceTimeConfig(entropy_lambda=0.5, velocity_lambda=0.5))
    model = SpaceTimeGaussians.initialize(cfg, scene, torch.Generator().manual_seed(0), log=lambda *a: None)
    with torch.no_grad():  # tilt the Gaussians in time (at initialisation none moves: zero velocities)
        model.params["quats_left"].add_(0.3 * torch.randn(model.params["quats_left"].shape,
                                                          generator=torch.Generator().manual_seed(1)))
    terms = model.loss_terms({}, 0, cfg)
    assert set(terms) == {"opacity_entropy", "velocity_consistency"}
    sum(terms.values()).backward()
    assert model.params["logit_opacities"].grad.abs().sum() > 0 and model.params["quats_left"].grad.abs().sum() > 0
    assert model.loss_terms({}, 0, TrainConfig(method="4dgs")) == {}
