"""The nerf method's CUDA path (issue 20): the PyTorch references on the GPU agree with the CPU kernels, and
a few training steps run on the GPU. Skipped without a CUDA device."""

from __future__ import annotations

import math

import pytest
import torch

from recon.nerf.hash_encoding import HashGridConfig, hash_encode_numba, hash_encode_reference, level_layout
from recon.nerf.marching import march_rays_numba, march_rays_reference, ray_entry
from recon.nerf.space import FieldSpace

pytestmark = pytest.mark.cuda


def test_hash_reference_on_cuda_matches_numba():
    cfg = HashGridConfig(levels=4, log2_table=10, base_res=4, max_res=40)
    res, offsets = level_layout(cfg)
    gen = torch.Generator().manual_seed(0)
    table = torch.randn(int(offsets[-1]), 2, generator=gen, dtype=torch.float64, requires_grad=True)
    x = torch.rand(500, 3, generator=gen, dtype=torch.float64)
    cpu = hash_encode_numba(x, table, res, offsets)
    table_gpu = table.detach().cuda().requires_grad_()
    gpu = hash_encode_reference(x.cuda(), table_gpu, res.cuda(), offsets.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu.detach(), rtol=0, atol=1e-9)
    g = torch.randn(cpu.shape, generator=gen, dtype=torch.float64)
    (g_cpu,) = torch.autograd.grad(cpu, table, g)
    (g_gpu,) = torch.autograd.grad(gpu, table_gpu, g.cuda())
    torch.testing.assert_close(g_gpu.cpu(), g_cpu, rtol=0, atol=1e-9)


def test_march_reference_on_cuda_matches_numba():
    gen = torch.Generator().manual_seed(1)
    src = torch.randn(32, 3, generator=gen, dtype=torch.float64)
    src = 4.0 * src / src.norm(dim=1, keepdim=True)
    d = -src + 0.3 * torch.randn(32, 3, generator=gen, dtype=torch.float64)
    d = d / d.norm(dim=1, keepdim=True)
    space = FieldSpace.box((-1.5,) * 3, (1.5,) * 3)
    grid = torch.rand(16, 16, 16, generator=gen) < 0.5
    t_near, t_far = ray_entry(src, d, space, 0.0, 1e10)
    jitter = torch.rand(32, generator=gen, dtype=torch.float64)
    dt = space.diagonal / 128
    cpu = march_rays_numba(src, d, t_near, t_far, jitter, grid, space, dt, dt, 0.0, 200)
    gpu = march_rays_reference(src.cuda(), d.cuda(), t_near.cuda(), t_far.cuda(), jitter.cuda(), grid.cuda(), space,
                               dt, dt, 0.0, 200)
    assert torch.equal(gpu[0].cpu(), cpu[0])
    torch.testing.assert_close(gpu[1].cpu(), cpu[1], rtol=0, atol=1e-12)


def test_a_few_training_steps_on_cuda(tmp_path):
    from recon.nerf.config import NerfConfig
    from recon.strategy.occupancy import OccupancyConfig
    from recon.training.trainer import TrainConfig, Trainer

    small = NerfConfig(hash_levels=4, hash_log2_table=12, hash_base_res=4, hash_max_res=64, hidden=32, geo_dim=8,
                       occupancy_resolution=32, target_samples=8192, max_rays=1024, steps_per_diagonal=512)
    cfg = TrainConfig(method="nerf", strategy="occupancy", data="procedural", data_factor=4, steps=20, save_every=0,
                      progress=False, out=tmp_path, device="cuda", nerf=small,
                      occupancy=OccupancyConfig(update_every=4, warmup_steps=8))
    trainer = Trainer(cfg, log=lambda *_: None)
    metrics = trainer.run()
    assert trainer.model.device.type == "cuda"
    assert math.isfinite(metrics["test"]["psnr"]) and metrics["steps"] == 20
