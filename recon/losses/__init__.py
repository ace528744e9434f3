"""Layer 2: losses and image metrics. May import layer 1 (recon.core) and rasterizer.

- ``image.py``: the photometric loss (L1 + SSIM), PSNR, loss masks (``masked_render``);
- ``ssim.py``: fused SSIM on the CPU (Numba), checked against ``image.ssim``;
- ``lpips.py``: LPIPS from local weights;
- ``surfels.py``: the 2DGS distortion and normal-consistency losses (``SurfelConfig``);
- ``spacetime.py``: the 4D-Rotor regularisers (``SpaceTimeConfig``).
"""
