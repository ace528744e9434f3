"""The ``meshgs`` section of the training config (``--meshgs.init-per-triangle 2``; docs/avatars.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class MeshGSConfig:
    """Options of --method meshgs (Gaussians bound to a skinned template's triangles)."""

    init_per_triangle: int = 2
    """Gaussians per triangle at the start (random barycentric positions, on the surface)"""
    max_offset: float = 0.3
    """largest distance from the triangle's plane, in triangle sizes (mean edge lengths); the offset is
    max_offset * tanh(raw), so a Gaussian never leaves its triangle's slab. Spot avatar (docs/avatars.md): at
    1.0 (offset_lr 0.005) the Gaussians drifted to 4.07 % of the mesh diagonal off their planes (issue bound:
    2 %); at 0.4 one Gaussian of 42k reached 2.05 % in one pose; at 0.3 the worst is 1.54 % in every pose,
    with unseen-pose PSNR 30.31 dB (0.4: 30.68, 1.0: 31.07)"""
    init_scale: float = 0.5
    """initial in-plane standard deviation, in triangle sizes (along the normal: half of it)"""
    bary_lr: float = 0.01
    """learning rate of the barycentric logits (decays as the means' rate does)"""
    offset_lr: float = 0.001
    """learning rate of the raw normal offsets"""
    pose_mlp_width: int = 0
    """width of the optional pose-dependent correction MLP (recon/avatar/pose_mlp.py: pose -> per-Gaussian
    barycentric shift, normal offset, log-scales); 0 (default): off"""
    pose_mlp_frequencies: int = 4
    """sine / cosine frequencies of the Gaussians' rest-pose positions fed to the pose MLP"""
    pose_mlp_lr: float = 0.001
    """learning rate of the pose MLP's weights"""
    pose_mlp_reg: float = 0.01
    """weight of the mean squared raw output of the pose MLP in the loss (keeps corrections small)"""
