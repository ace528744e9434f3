"""Layer 6: training. May import layers 1-5 (recon.core, recon.export, recon.nerf, recon.losses,
recon.outputs, recon.data, recon.models, recon.geometry, recon.image, recon.strategy) and rasterizer.

- ``trainer.py``: :class:`TrainConfig` (config.yaml) and the training loop (checkpoints, resume, outputs);
- ``evaluation.py``: test-view PSNR / SSIM / LPIPS and the side-by-side renders;
- ``presets.py``: named configurations (``splatforge train mcmc ...``);
- ``supersample.py``: rendering at N x the resolution, box-reduced;
- ``tensorboard.py``: the ``--logger tensorboard`` training hook.
"""
