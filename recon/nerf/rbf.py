"""A layer of Gaussian radial-basis neurons in feature space (Gaussian RBFNet / GNF, Bouzidi et al. 2025,
arXiv 2503.06762): the decoder that replaces an MLP on top of a feature grid.

The layer (K neurons, D input features, O outputs):

    z_kd(f)  = s_kd (f_d - c_kd)            s_kd = exp(rho_kd): the neuron's precision per feature (> 0)
    phi_k(f) = exp(-sum_d z_kd^2)           a Gaussian bump around the learned centre c_k [D]
    y_o(f)   = sum_k W_ok phi_k(f) + b_o    the linear read-out

Parameters: ``centres`` c [K, D], ``log_precision`` rho [K, D] (diagonal precision, stored as a log so it
stays positive), ``weight`` W [O, K], ``bias`` b [O]. Count: 2 K D + K O + O.

Gradients (what the Numba kernel writes by hand; with g_k = sum_o dL/dy_o W_ok and t_k = -2 g_k phi_k):

    dL/df_d      =  sum_k t_k z_kd s_kd
    dL/dc_kd     = -t_k z_kd s_kd
    dL/drho_kd   =  t_k z_kd^2                      (dz/drho = z)
    dL/dW_ok     =  dL/dy_o phi_k,   dL/db_o = dL/dy_o

Initialisation (:func:`init_rbf`): the paper learns the centres as features; we place them by k-means over a
sample of the input features when one is given (``init_centres``: the field passes the features of random
points of its freshly initialised grid, whose values are uniform in [-FEATURE_INIT, FEATURE_INIT]), else
uniformly in that range, and set each neuron's precision from the spacing of the
centres: s = sqrt(q0) / h in every feature, with h the mean distance from a centre to its nearest other
centre, so q = q0 at a neighbouring centre (q0 = 1/2 by default: bumps overlap at exp(-1/2) of their height;
the image fitter asks for more local neurons, recon/image/rbf_fit.py);
read-out weights N(0, 1/K) and bias 0.

Three implementations with one signature, ``rbf_forward(f, centres, log_precision, weight, bias)``:

- :func:`rbf_reference`: the formula as written, in chunks of samples (the specification; any device);
- :func:`rbf_matmul`: the same quadratic form expanded into matrix products
  (q = f^2 (s^2)^T - 2 f (s^2 c)^T + sum_d s^2 c^2), for GPUs and large batches; autograd gradients;
- :func:`rbf_numba`: the fused CPU kernel (:mod:`recon.nerf.rbf_kernels`), forward and hand-written backward.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from rasterizer.cpu import KERNEL_LOCK
from recon.nerf.blas_threads import one_blas_thread
from rasterizer.cpu.launch import kernel_array
from rasterizer.cpu.schedule import thread_count

REFERENCE_CHUNK = 4096  # samples per chunk of the reference ([chunk, K, D] intermediate)
FEATURE_INIT = 0.1  # grids feeding an RBF layer start uniform in [-FEATURE_INIT, FEATURE_INIT] (an MLP's: 1e-4)
KMEANS_ITERATIONS = 10
NEIGHBOUR_Q = 0.5  # q of a neuron at its nearest neighbour's centre, at initialisation (precision_from_spacing)


def rbf_reference(f: Tensor, centres: Tensor, log_precision: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """[N, O] outputs of the layer for features ``f`` [N, D] (the formula of the module docstring)."""
    s = torch.exp(log_precision)
    out = []
    for lo in range(0, f.shape[0], REFERENCE_CHUNK):
        z = s[None] * (f[lo:lo + REFERENCE_CHUNK, None, :] - centres[None])  # [n, K, D]
        phi = torch.exp(-(z * z).sum(-1))  # [n, K]
        out.append(phi @ weight.T + bias)
    return torch.cat(out) if out else f.new_zeros(0, weight.shape[0])


def rbf_matmul(f: Tensor, centres: Tensor, log_precision: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """:func:`rbf_reference` through matrix products (no [N, K, D] intermediate); q clamped at 0 against
    rounding (it is a sum of squares)."""
    s2 = torch.exp(2.0 * log_precision)  # [K, D]
    q = (f * f) @ s2.T - 2.0 * (f @ (s2 * centres).T) + (s2 * centres * centres).sum(1)[None]
    return torch.exp(-q.clamp(min=0.0)) @ weight.T + bias


class _RbfNumba(torch.autograd.Function):
    """Autograd wrapper of :mod:`recon.nerf.rbf_kernels` (gradients to all five inputs)."""

    @staticmethod
    def forward(ctx, f, centres, log_precision, weight, bias, keep):
        from recon.nerf.rbf_kernels import rbf_forward_kernel

        dt = centres.dtype
        fn = f.detach().to(dt).contiguous()
        s = torch.exp(log_precision.detach()).contiguous()
        out = torch.empty(fn.shape[0], weight.shape[0], dtype=dt)
        phi = torch.empty(fn.shape[0] if keep else 0, centres.shape[0], dtype=dt)
        with KERNEL_LOCK, one_blas_thread():
            rbf_forward_kernel(fn.numpy(), kernel_array(centres), s.numpy(), kernel_array(weight.to(dt)),
                               kernel_array(bias.to(dt)), thread_count(), phi.numpy(), out.numpy())
        ctx.save_for_backward(fn, centres, s, weight, phi)
        ctx.in_dtype = f.dtype
        return out

    @staticmethod
    def backward(ctx, grad_out):
        from recon.nerf.rbf_kernels import rbf_backward_kernel

        fn, centres, s, weight, phi = ctx.saved_tensors
        dt = centres.dtype
        g = grad_out.detach().to(dt).contiguous()
        grad_f = torch.empty_like(fn)
        grad_c = torch.empty_like(centres)
        grad_rho = torch.empty_like(centres)
        grad_w = torch.empty(weight.shape, dtype=dt)
        with KERNEL_LOCK, one_blas_thread():
            rbf_backward_kernel(fn.numpy(), kernel_array(centres), s.numpy(), kernel_array(weight.to(dt)), phi.numpy(),
                                g.numpy(), thread_count(), grad_f.numpy(), grad_c.numpy(), grad_rho.numpy(),
                                grad_w.numpy())
        return grad_f.to(ctx.in_dtype), grad_c, grad_rho, grad_w.to(weight.dtype), g.sum(0).to(weight.dtype), None


def rbf_numba(f: Tensor, centres: Tensor, log_precision: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """:func:`rbf_reference` through the Numba kernels (CPU tensors, float32 or float64)."""
    if any(t.device.type != "cpu" for t in (f, centres, log_precision, weight, bias)):
        raise ValueError("rbf_numba: CPU tensors only (use rbf_matmul or rbf_reference on other devices)")
    if centres.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"rbf_numba: float32 or float64 parameters, got {centres.dtype}")
    keep = torch.is_grad_enabled() and any(t.requires_grad for t in (f, centres, log_precision, weight, bias))
    return _RbfNumba.apply(f, centres, log_precision, weight, bias, keep)  # keep: phi [N, K] for a backward


BACKENDS = {"reference": rbf_reference, "matmul": rbf_matmul, "numba": rbf_numba}


def rbf_forward(f: Tensor, centres: Tensor, log_precision: Tensor, weight: Tensor, bias: Tensor,
                backend: str = "auto") -> Tensor:
    """The layer with ``backend`` "numba" (CPU), "matmul", "reference" or "auto" (= matmul: on the 2-core CPU
    its matrix products ran forward + backward 2-3x faster than the Numba kernels at a NeRF step's 65,536
    samples, scripts/bench_fields.py)."""
    if backend in ("auto", "torch"):
        backend = "matmul"
    try:
        fn = BACKENDS[backend]
    except KeyError:
        raise ValueError(f"rbf_forward: unknown backend {backend!r} (auto, numba, matmul, reference)") from None
    return fn(f, centres, log_precision, weight, bias)


# ------------------------------------------------------------------------------------------ initialisation


def kmeans(points: Tensor, k: int, generator: torch.Generator | None = None,
           iterations: int = KMEANS_ITERATIONS) -> Tensor:
    """[k, D] centres of ``points`` [N, D] by Lloyd's k-means from a random draw of k points (an empty
    cluster keeps its centre)."""
    n = points.shape[0]
    idx = torch.randperm(n, generator=generator)[:k]
    if n < k:
        idx = torch.cat([idx, torch.randint(n, (k - n,), generator=generator)])
    centres = points[idx].clone()
    for _ in range(iterations):
        nearest = torch.cdist(points, centres).argmin(1)
        sums = torch.zeros_like(centres).index_add_(0, nearest, points)
        counts = torch.bincount(nearest, minlength=k).to(points.dtype)[:, None]
        centres = torch.where(counts > 0, sums / counts.clamp(min=1), centres)
    return centres


def precision_from_spacing(centres: Tensor, neighbour_q: float = NEIGHBOUR_Q) -> Tensor:
    """[K, D] log precisions: s = sqrt(neighbour_q) / h with h the mean distance from a centre to its nearest
    other centre (in all D features together), so that q = s^2 |f - c|^2 = ``neighbour_q`` at a neighbouring
    centre (default 1/2: bumps overlap at exp(-1/2) of their height); one neuron alone gets h = 1.

    The precision is the same in every feature: q sums over the D features, so a per-feature spacing
    (h / sqrt(D), what this function used until stop 60) makes q = D / 2 at a neighbour, and with the 32
    features of a hash grid every neuron's bump was exp(-16) wide of the next one: at initialisation the
    largest activation of a typical sample was about 1e-19 and no gradient reached the grid (lego: 11.7 dB
    after 300 steps)."""
    k, d = centres.shape
    if k > 1:
        dist = torch.cdist(centres, centres)
        dist.fill_diagonal_(float("inf"))
        h = float(dist.min(1).values.mean())
    else:
        h = 1.0
    h = max(h, 1e-3)
    return torch.full((k, d), math.log(math.sqrt(neighbour_q) / h), dtype=centres.dtype)


def init_centres(d: int, k: int, generator: torch.Generator | None = None, sample: Tensor | None = None) -> Tensor:
    """[k, d] centres: k-means over ``sample`` [N, d] when given, else uniform in [-FEATURE_INIT, FEATURE_INIT]^d."""
    if sample is not None and sample.shape[0] >= 1:
        return kmeans(sample.detach().float(), k, generator)
    return (torch.rand(k, d, generator=generator) * 2.0 - 1.0) * FEATURE_INIT


class RBFLayer(nn.Module):
    """K Gaussian RBF neurons on D features with an O-wide linear read-out (see the module docstring)."""

    def __init__(self, d_in: int, neurons: int, d_out: int, generator: torch.Generator | None = None,
                 backend: str = "auto", sample: Tensor | None = None, neighbour_q: float = NEIGHBOUR_Q):
        super().__init__()
        self.backend = backend
        centres = init_centres(d_in, neurons, generator, sample)
        self.centres = nn.Parameter(centres)
        self.log_precision = nn.Parameter(precision_from_spacing(centres, neighbour_q))
        self.weight = nn.Parameter(torch.randn(d_out, neurons, generator=generator) / math.sqrt(neurons))
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, f: Tensor) -> Tensor:
        """[N, O] outputs for features ``f`` [N, D] (:meth:`resolved_backend`)."""
        return rbf_forward(f, self.centres, self.log_precision, self.weight, self.bias, self.resolved_backend(f))

    def resolved_backend(self, f: Tensor) -> str:
        """The layer's backend for features ``f``: "auto" is the Numba kernels for CPU tensors in float32 / float64
        (the fields' heads; at a NeRF step's 65,536 samples and 256 neurons, forward + backward 1.2-1.5x faster
        than the matrix products in PyTorch: scripts/bench_fields.py's ``layer``), else :func:`rbf_forward`'s."""
        cpu = f.device.type == "cpu" and self.centres.device.type == "cpu"
        if self.backend == "auto" and cpu and self.centres.dtype in (torch.float32, torch.float64):
            return "numba"
        return self.backend
