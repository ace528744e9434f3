"""One tolerance table for kernel-vs-reference comparisons, keyed by dtype.

The cpu kernels compute in float64 internally; the reference computes in the storage dtype, so
float32 comparisons carry float32 rounding of the reference.
"""

import torch

TOL = {
    torch.float64: dict(rtol=1e-9, atol=1e-11),
    torch.float32: dict(rtol=1e-4, atol=2e-5),
}

# Gradients pass through divisions by (1 - alpha) (up to 1000x) and sums over many pixels: in float32
# the reference's own rounding error grows with both, so compare relative to the largest entry.
GRAD_REL = {torch.float64: 1e-8, torch.float32: 2e-3}

# Rendering flips at discrete thresholds (alpha >= 1/255, T <= 1e-4) can differ between float32
# implementations at a handful of pixels; this bounds the fraction of pixels that may differ > atol.
FLOAT32_FLIP_FRACTION = 1e-3
