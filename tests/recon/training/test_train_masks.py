"""Dataset masks in training: pixels outside the mask add nothing to the loss and get no gradient."""

import numpy as np
import torch
from PIL import Image

from recon.losses.image import masked_render, photometric_loss
from recon.training.trainer import TrainConfig, Trainer
from tests.recon.data.test_data_nerfstudio import H, W, make_dataset


def test_masked_render_blocks_loss_and_gradient():
    g = torch.Generator().manual_seed(0)
    render = torch.rand(8, 9, 3, generator=g, requires_grad=True)
    target = torch.rand(8, 9, 3, generator=g)
    mask = torch.zeros(8, 9, 1)
    mask[:, :4] = 1.0
    photometric_loss(masked_render(render, target, mask), target).backward()
    assert render.grad[:, 4:].abs().max() == 0 and render.grad[:, :4].abs().max() > 0
    assert masked_render(render, target, None) is render


def _masked_dataset(tmp_path, keep_columns):
    root, _ = make_dataset(tmp_path / "ns", frame_extra=lambda i: {"mask_path": f"masks/frame_{i:05d}.png"})
    (root / "masks").mkdir()
    for i in range(9):
        m = np.zeros((H, W), np.uint8)
        m[:, :keep_columns] = 255
        Image.fromarray(m, "L").save(root / "masks" / f"frame_{i:05d}.png")
    return root


def test_trainer_uses_dataset_masks(tmp_path):
    empty = Trainer(TrainConfig(data=_masked_dataset(tmp_path / "a", 0), out=tmp_path / "run_a", progress=False,
                                init_num_random=200), log=lambda *a: None)
    assert empty.images.mask(0) is not None and float(empty.images.mask(0).max()) == 0.0
    assert empty.train_step(0).loss == 0.0  # everything masked out: nothing to fit
    half = Trainer(TrainConfig(data=_masked_dataset(tmp_path / "b", W // 2), out=tmp_path / "run_b",
                               progress=False, init_num_random=200), log=lambda *a: None)
    assert half.train_step(0).loss > 0.0
