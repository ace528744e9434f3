"""3D Gaussian splatting model: parameters, their Adam groups, initialisation, rendering, IO.

Parameters (raw, pre-activation; conventions in rasterizer/CONVENTIONS.md):

=====================  ===========  ==========================================================
name                   shape        meaning
=====================  ===========  ==========================================================
``means``              [N, 3]       centres in the world frame (OpenCV habits, world units)
``quats``              [N, 4]       rotation (w, x, y, z), not necessarily unit length
``log_scales``         [N, 3]       log of the per-axis standard deviations
``logit_opacities``    [N]          logit of the opacity
``sh0``                [N, 1, 3]    SH DC coefficients (RGB = 0.5 + SH_C0 * sh0 before the max(., 0))
``shN``                [N, K-1, 3]  higher SH coefficients, degree-major, K = (sh_degree + 1)^2
=====================  ===========  ==========================================================

One ``torch.optim.Adam`` holds one group per parameter (group ``name`` = parameter name), with the 3DGS
learning rates. Densification strategies change the number of Gaussians through
:func:`resize_optimizer_state` (via :meth:`GaussianModel.update_params`), the single place that keeps
Adam's moments aligned with resized parameters.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Callable, ClassVar, Sequence

import numpy as np
import torch
from torch import Tensor

from rasterizer import Camera, rasterize_gaussians, stack_cameras
from recon.core.splat_data import SH_C0, SplatData
from recon.core.learning_rates import LearningRates  # noqa: F401  (re-exported)
from recon.models.base import GaussianRows, SceneModel, check_state_method, register_model

PARAM_NAMES = ("means", "quats", "log_scales", "logit_opacities", "sh0", "shN")
EXACT_KNN_MAX_POINTS = 30_000  # above this, nearest neighbours are searched along a Morton order
KNN_WINDOW = 24  # candidates on each side in the Morton order (approximate kNN)


# ------------------------------------------------------------------------------------------ helpers


def front_of_limit(means: Tensor, quats: Tensor | None, scales: Tensor | None, opacities: Tensor, colors,
                   viewmats: Tensor, Ks: Tensor, W: int, H: int, sh_degree: int, depth_limit: Tensor,
                   antialiased: bool = False, backend: str = "auto", covars: Tensor | None = None
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """(rgb [C, H, W, 3] premultiplied, transmittance [C, H, W, 1], expected depth [C, H, W, 1]) of the
    Gaussians in front of ``depth_limit`` [C, H, W] (see :meth:`SceneModel.render_front`)."""
    if backend == "auto":
        backend = "reference" if means.device.type == "cuda" else "cpu"
    render, alpha, meta = rasterize_gaussians(
        means, quats, scales, opacities, colors, viewmats, Ks, W, H, sh_degree=sh_degree, render_mode="RGB+ED",
        rasterize_mode="antialiased" if antialiased else "classic", covars=covars, backend=backend,
        depth_limit=depth_limit.to(means.device))
    depth = torch.where(alpha > 0, render[..., 3:4], torch.zeros_like(alpha))
    return render[..., :3], meta.transmittance, depth


def ray_arguments(origins, dirs, t_min, t_max, like: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The rays of :meth:`SceneModel.trace_rays` (tensors or arrays) as ``like``'s dtype and device."""
    conv = lambda x: torch.as_tensor(x).to(device=like.device, dtype=like.dtype)  # noqa: E731
    return conv(origins), conv(dirs), conv(t_min), conv(t_max)


class TraceCache:
    """The tracer's acceleration structure (:func:`rasterizer.tracing.build_gaussian_accel`) kept while the
    parameters it was built from are unchanged: it keeps a copy of those tensors and compares the values
    (``torch.equal``, about 1 ms for 200k Gaussians; version counters are not enough: the fused Adam step
    updates parameters without bumping them), plus an extra key (a 4D slice's time)."""

    def __init__(self):
        self.saved, self.extra, self.accel = None, None, None

    def get(self, tensors: Sequence[Tensor], extra, build: Callable[[], object]):
        current = [x.detach() for x in tensors]
        same = (self.saved is not None and extra == self.extra and len(current) == len(self.saved)
                and all(a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
                        for a, b in zip(current, self.saved)))
        if not same:
            self.accel = build()
            self.saved, self.extra = [x.clone() for x in current], extra
        return self.accel


def rgb_to_sh0(rgb: Tensor) -> Tensor:
    """RGB [..., 3] in [0, 1] -> SH DC coefficients [..., 3] (inverse of 0.5 + SH_C0 * dc)."""
    return (rgb - 0.5) / SH_C0


def knn_mean_distance(points: Tensor, k: int = 3) -> Tensor:
    """[P] mean distance of each point to its ``k`` nearest other points (float32, CPU or GPU).

    Exact (chunked ``cdist``) up to EXACT_KNN_MAX_POINTS points; above that the neighbours are searched
    among the KNN_WINDOW points on each side in a Morton (z-order) sort, an approximation that is good
    for initial scales. Returns ones when there are fewer than two points.
    """
    P = points.shape[0]
    if P < 2:
        return torch.ones(P, dtype=points.dtype, device=points.device)
    k = min(k, P - 1)
    pts = points.float()
    if P <= EXACT_KNN_MAX_POINTS:
        out = []
        for chunk in torch.split(pts, 2048):
            d = torch.cdist(chunk, pts)
            out.append(d.topk(k + 1, dim=1, largest=False).values[:, 1:].mean(dim=1))
        return torch.cat(out)
    order = torch.argsort(_morton_codes(pts))
    sorted_pts = pts[order]
    offsets = [o for o in range(-KNN_WINDOW, KNN_WINDOW + 1) if o != 0]
    idx = torch.arange(P, device=pts.device)
    cand = torch.stack([(idx + o).clamp(0, P - 1) for o in offsets], dim=1)  # [P, 2w]
    d = (sorted_pts[cand] - sorted_pts[:, None]).norm(dim=-1)
    d = torch.where(cand == idx[:, None], torch.full_like(d, float("inf")), d)
    mean_d = d.topk(k, dim=1, largest=False).values.mean(dim=1)
    out = torch.empty_like(mean_d)
    out[order] = mean_d
    return out


def _morton_codes(points: Tensor, bits: int = 10) -> Tensor:
    """[P] int64 z-order codes of points quantised to a 2^bits grid over their bounding box."""
    lo, hi = points.min(0).values, points.max(0).values
    q = ((points - lo) / (hi - lo).clamp(min=1e-12) * (2**bits - 1)).long()
    code = torch.zeros(points.shape[0], dtype=torch.long, device=points.device)
    for b in range(bits):
        for axis in range(3):
            code |= ((q[:, axis] >> b) & 1) << (3 * b + axis)
    return code


def resize_optimizer_state(
    optimizer: torch.optim.Optimizer,
    old: Tensor,
    new: torch.nn.Parameter,
    fn_state: Callable[[str, Tensor], Tensor],
) -> None:
    """Swap parameter ``old`` for ``new`` inside ``optimizer``, mapping its per-element state.

    ``fn_state(key, value)`` receives each tensor state of ``old`` whose shape equals the parameter's
    (Adam: ``exp_avg``, ``exp_avg_sq``) and returns the state for ``new`` (same trailing dims,
    ``new.shape[0]`` rows). Scalar state (Adam's ``step``) is kept. This is the one place where the
    optimizer state is resized when Gaussians are added, removed or reset.
    """
    for group in optimizer.param_groups:
        for i, p in enumerate(group["params"]):
            if p is not old:
                continue
            state = optimizer.state.pop(old, {})
            new_state = {}
            for key, value in state.items():
                if torch.is_tensor(value) and value.shape == old.shape:
                    value = fn_state(key, value)
                    if value.shape != new.shape:
                        raise RuntimeError(f"optimizer state {key!r}: shape {tuple(value.shape)} after resize, "
                                           f"parameter is {tuple(new.shape)}")
                new_state[key] = value
            group["params"][i] = new
            if new_state:
                optimizer.state[new] = new_state
            return
    raise KeyError("resize_optimizer_state: parameter not found in optimizer")


# ------------------------------------------------------------------------------------------ model


@register_model("3dgs")
class GaussianModel(GaussianRows, SceneModel):
    """3D Gaussians with their optimiser (method "3dgs"; the :class:`SceneModel` interface).

    Attributes:
        params: dict name -> ``torch.nn.Parameter`` (see the module docstring for shapes).
        sh_degree: maximum SH degree stored (K = (sh_degree + 1)^2 coefficients per channel).
        extent: scene extent (world units) scaling the means learning rate and size thresholds.
        antialiased: render in anti-aliased (mip) mode.
        optimizer: Adam with one group per parameter.
    """

    SCALE_DIMS: ClassVar[int] = 3  # columns of ``log_scales`` (2 for surfels, :mod:`recon.models.surfels`)

    def __init__(self, params: dict[str, Tensor], sh_degree: int, extent: float, antialiased: bool = False,
                 lrs: LearningRates | None = None):
        missing = [n for n in PARAM_NAMES if n not in params]
        if missing:
            raise KeyError(f"{type(self).__name__}: missing parameter(s) {missing}")
        if not 0 <= sh_degree <= 3:
            raise ValueError(f"sh_degree must be in 0..3, got {sh_degree}")
        self.sh_degree = int(sh_degree)
        self.extent = float(extent)
        self.antialiased = bool(antialiased)
        self.lrs = lrs or LearningRates()
        self.params = {n: torch.nn.Parameter(params[n].detach().float().contiguous()) for n in PARAM_NAMES}
        self._check_shapes()
        self.optimizer = self._make_optimizer()

    def _make_optimizer(self) -> torch.optim.Adam:
        """Adam with one group per parameter. ``fused=True``: one kernel per group instead of about ten
        elementwise passes (measured 81 -> 7 ms per step for 120k Gaussians with SH degree 3 on 2 CPU
        cores); same update rule, rounding differs in the last bits."""
        return torch.optim.Adam(
            [{"params": [self.params[n]], "lr": self._base_lr(n), "name": n} for n in PARAM_NAMES],
            eps=self.lrs.eps, fused=True)

    def _load_optimizer_state(self, state: dict) -> None:
        """Load Adam's moments and step counts; the implementation flags stay this build's (a saved
        ``fused=None`` from an older checkpoint would otherwise switch the fused update off)."""
        self.optimizer.load_state_dict(state)
        for group in self.optimizer.param_groups:
            group.update(fused=True, foreach=None)

    # ---------------------------------------------------------------------------- construction

    @classmethod
    def initialize(cls, cfg, scene, generator: torch.Generator, log=print) -> "GaussianModel":
        """Initial Gaussians for training config ``cfg`` (:class:`recon.training.trainer.TrainConfig`): from the scene's
        points (``init_type`` "sfm"), else ``init_num_random`` random ones in the box the cameras look at
        (:func:`recon.models.init_region.random_init_region`; ``log`` gets one line saying where and why)."""
        from recon.models.init_region import random_init_region

        mcmc = cfg.strategy == "mcmc"
        kw = dict(init_opacity=cfg.init_opacity if cfg.init_opacity is not None else (0.5 if mcmc else 0.1),
                  init_scale=cfg.init_scale if cfg.init_scale is not None else (0.1 if mcmc else 1.0),
                  antialiased=cfg.antialiased, lrs=cfg.lr, generator=generator)
        extent = scene.extent
        if cfg.init_type == "sfm" and scene.points is not None and len(scene.points) > 0:
            points = torch.as_tensor(scene.points, dtype=torch.float32)
            colors = None if scene.point_colors is None else torch.as_tensor(scene.point_colors).float() / 255.0
            if mcmc and len(points) > cfg.max_gaussians:
                keep = torch.randperm(len(points), generator=generator)[: cfg.max_gaussians]
                points, colors = points[keep], None if colors is None else colors[keep]
            return cls.from_points(points, colors, cfg.sh_degree, extent, **kw)
        n = min(cfg.init_num_random, cfg.max_gaussians) if mcmc else cfg.init_num_random
        region = random_init_region(scene.frames_train, scene.source_format, extent, cfg.init_box)
        why = "" if cfg.init_type == "random" or cfg.init_box else " (the dataset has no points)"
        log(region.describe(n) + why)
        return cls.random_in_box(n, region.center, region.half, cfg.sh_degree, extent, **kw)

    @classmethod
    def from_points(cls, points: Tensor, colors: Tensor | None, sh_degree: int, extent: float, *,
                    init_opacity: float = 0.1, init_scale: float = 1.0, antialiased: bool = False,
                    lrs: LearningRates | None = None, generator: torch.Generator | None = None) -> "GaussianModel":
        """Gaussians at ``points`` [P, 3] (world), colours [P, 3] in [0, 1] (random when None).

        Scales are isotropic: ``init_scale`` x the mean distance to the 3 nearest neighbours (as 3DGS);
        quaternions random (as gsplat); opacity ``init_opacity``; higher SH zero.
        """
        points = torch.as_tensor(points, dtype=torch.float32)
        P = points.shape[0]
        if P == 0:
            raise ValueError("GaussianModel.from_points: no points to initialise from")
        if colors is None:
            colors = torch.rand(P, 3, generator=generator)
        colors = torch.as_tensor(colors, dtype=torch.float32)
        dist = knn_mean_distance(points).clamp(min=1e-7)
        log_scales = torch.log(dist * init_scale)[:, None].repeat(1, cls.SCALE_DIMS)
        K = (sh_degree + 1) ** 2
        params = {
            "means": points,
            "quats": torch.rand(P, 4, generator=generator),
            "log_scales": log_scales,
            "logit_opacities": torch.full((P,), math.log(init_opacity / (1 - init_opacity))),
            "sh0": rgb_to_sh0(colors)[:, None, :],
            "shN": torch.zeros(P, K - 1, 3),
        }
        return cls(params, sh_degree, extent, antialiased, lrs)

    @classmethod
    def random_in_box(cls, n: int, center: Sequence[float], half_size: float | Sequence[float], sh_degree: int,
                      extent: float, *, generator: torch.Generator | None = None, **kw) -> "GaussianModel":
        """``n`` Gaussians uniform in the box ``center`` [3] +- ``half_size`` (a number: a cube; or [3] per axis)."""
        c = torch.as_tensor(np.asarray(center, dtype=np.float32))
        half = torch.as_tensor(np.asarray(half_size, dtype=np.float32))
        pts = c + (torch.rand(n, 3, generator=generator) * 2 - 1) * half
        return cls.from_points(pts, None, sh_degree, extent, generator=generator, **kw)

    @classmethod
    def from_splat_data(cls, data: SplatData, extent: float = 1.0, lrs: LearningRates | None = None) -> "GaussianModel":
        """Model holding a loaded splat file's parameters (e.g. to evaluate or render it)."""
        t = data.to_torch()
        sh = t["sh"]
        params = {"means": t["means"], "quats": t["quats"], "log_scales": t["log_scales"],
                  "logit_opacities": t["logit_opacities"], "sh0": sh[:, :1], "shN": sh[:, 1:]}
        return cls(params, data.sh_degree, extent, data.antialiased, lrs)

    # ---------------------------------------------------------------------------- views

    @property
    def scales(self) -> Tensor:
        """[N, 3] activated scales."""
        return torch.exp(self.params["log_scales"])

    @property
    def sh(self) -> Tensor:
        """[N, K, 3] all SH coefficients (sh0 then shN)."""
        return torch.cat([self.params["sh0"], self.params["shN"]], dim=1)

    def to(self, device: torch.device | str) -> "GaussianModel":
        """Move parameters and optimizer state to ``device`` (rebuilds the optimizer, keeping state)."""
        device = torch.device(device)
        if device == self.device:
            return self
        state = self.optimizer.state_dict()
        moved = {n: p.detach().to(device) for n, p in self.params.items()}
        self.params = {n: torch.nn.Parameter(t) for n, t in moved.items()}
        self.optimizer = self._make_optimizer()
        self._load_optimizer_state(state)
        return self

    # ---------------------------------------------------------------------------- rendering

    def render_inputs(self, cameras: Sequence[Camera], sh_degree: int | None, background: Tensor | None):
        """(viewmats [C,4,4], Ks [C,3,3] on the model's device, W, H, SH degree used (capped at the model's),
        backgrounds [C,3] or None): what every render of this model family passes to its rasterizer."""
        viewmats, Ks, W, H = stack_cameras(list(cameras))
        dev = self.device
        viewmats, Ks = viewmats.to(dev, torch.float32), Ks.to(dev, torch.float32)
        degree = self.sh_degree if sh_degree is None else min(int(sh_degree), self.sh_degree)
        bg = None
        if background is not None:
            bg = torch.as_tensor(background, dtype=torch.float32, device=dev)
            bg = bg.expand(viewmats.shape[0], 3) if bg.dim() == 1 else bg
        return viewmats, Ks, W, H, degree, bg

    def render(self, cameras: Sequence[Camera], sh_degree: int | None = None, background: Tensor | None = None,
               *, t: float | None = None, absgrad: bool = False, backend: str = "auto") -> tuple[Tensor, Tensor, dict]:
        """Render into cameras of one size.

        Args:
            cameras: C cameras (same width/height).
            sh_degree: active SH degree (<= ``self.sh_degree``); default all.
            background: [3] or [C, 3] RGB in [0, 1] behind the Gaussians, or None (black).
            t: normalised time; ignored (static scene).
        Returns:
            (render [C, H, W, 3], alpha [C, H, W, 1], meta) from :func:`rasterize_gaussians`.
        """
        viewmats, Ks, W, H, degree, bg = self.render_inputs(cameras, sh_degree, background)
        return rasterize_gaussians(
            self.params["means"], self.params["quats"], self.scales, self.opacities,
            (self.params["sh0"], self.params["shN"]), viewmats, Ks, W, H,
            sh_degree=degree, backgrounds=bg, render_mode="RGB",
            rasterize_mode="antialiased" if self.antialiased else "classic", backend=backend, absgrad=absgrad)

    def render_front(self, cameras: Sequence[Camera], depth_limit: Tensor, *, t: float | None = None,
                     backend: str = "auto") -> tuple[Tensor, Tensor, Tensor]:
        """See :meth:`SceneModel.render_front`: ``rasterize_gaussians(..., depth_limit=...)`` (the cuda
        backend has no depth limit: CUDA tensors use the reference backend)."""
        viewmats, Ks, W, H, degree, _ = self.render_inputs(cameras, None, None)
        return front_of_limit(self.params["means"], self.params["quats"], self.scales, self.opacities,
                              (self.params["sh0"], self.params["shN"]), viewmats, Ks, W, H, degree, depth_limit,
                              self.antialiased, backend)

    TRACER: ClassVar[tuple[str, str]] = ("build_gaussian_accel", "trace_gaussians")
    """The :mod:`rasterizer.tracing` (acceleration builder, tracer) pair of this model family (surfels: theirs)."""

    def trace_rays(self, origins: Tensor, dirs: Tensor, t_min: Tensor, t_max: Tensor, *,
                   t: float | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """See :meth:`SceneModel.trace_rays`: the family's :data:`TRACER`, for 3D Gaussians
        :func:`rasterizer.tracing.trace_gaussians` (every Gaussian met, evaluated where its response along the
        ray peaks, composited in that order; SH at the ray direction). The grid of the cpu backend is cached
        until the parameters change. ``t`` is ignored (static scene); anti-aliased (mip) runs trace their
        plain opacities (a ray has no pixel footprint)."""
        import rasterizer.tracing as tracing

        build, trace = (getattr(tracing, name) for name in self.TRACER)
        p = self.params
        origins, dirs, t_min, t_max = ray_arguments(origins, dirs, t_min, t_max, p["means"])
        accel = None
        if self.device.type == "cpu":
            cache = self.__dict__.setdefault("_trace_cache", TraceCache())
            accel = cache.get([p["means"], p["quats"], p["log_scales"], p["logit_opacities"]], None,
                              lambda: build(p["means"], p["quats"], self.scales, self.opacities))
        return trace(p["means"], p["quats"], self.scales, self.opacities, (p["sh0"], p["shN"]), origins,
                     dirs, t_min, t_max, sh_degree=self.sh_degree, accel=accel)

    # ---------------------------------------------------------------------------- optimisation

    def _base_lr(self, name: str) -> float:
        lr = getattr(self.lrs, name)
        return lr * self.extent if name == "means" else lr

    def means_lr(self, step: int, total_steps: int) -> float:
        """Exponentially decayed means learning rate: ``lr0 extent ratio^(step / total_steps)``."""
        t = min(max(step / max(total_steps, 1), 0.0), 1.0)
        return self._base_lr("means") * self.lrs.means_final_ratio ** t

    def set_step(self, step: int, total_steps: int) -> None:
        """Apply the learning-rate schedule for ``step`` (only the means decay)."""
        for group in self.optimizer.param_groups:
            if group["name"] == "means":
                group["lr"] = self.means_lr(step, total_steps)

    def update_params(self, fn_param: Callable[[str, Tensor], Tensor],
                      fn_state: Callable[[str, str, Tensor], Tensor], names: Sequence[str] = PARAM_NAMES) -> None:
        """Replace parameters ``names`` by ``fn_param(name, old_data)`` and map their Adam state with
        ``fn_state(name, key, value)`` (see :func:`resize_optimizer_state`)."""
        for name in names:
            old = self.params[name]
            new = torch.nn.Parameter(fn_param(name, old.detach()).contiguous())
            resize_optimizer_state(self.optimizer, old, new, lambda key, v, _n=name: fn_state(_n, key, v))
            self.params[name] = new
        self._check_shapes()

    def _check_shapes(self) -> None:
        N = self.params["means"].shape[0]
        K = (self.sh_degree + 1) ** 2
        expect = {"means": (N, 3), "quats": (N, 4), "log_scales": (N, self.SCALE_DIMS), "logit_opacities": (N,),
                  "sh0": (N, 1, 3), "shN": (N, K - 1, 3)}
        for n, shape in expect.items():
            if tuple(self.params[n].shape) != shape:
                raise ValueError(f"{type(self).__name__}.{n}: shape {tuple(self.params[n].shape)}, expected {shape}")

    # ---------------------------------------------------------------------------- IO

    def to_splat_data(self) -> SplatData:
        """Export container (numpy float32, raw parameters) for recon.export.write_splats."""
        p = self.params
        return SplatData.from_torch({"means": p["means"], "quats": p["quats"], "log_scales": p["log_scales"],
                                     "logit_opacities": p["logit_opacities"], "sh": self.sh},
                                    antialiased=self.antialiased)

    def state_dict(self) -> dict:
        """Plain checkpoint dict: the method name, parameters (CPU tensors), optimizer state, sh_degree,
        extent, flags."""
        return {"method": self.method, "params": {n: p.detach().cpu() for n, p in self.params.items()},
                "optimizer": self.optimizer.state_dict(), "sh_degree": self.sh_degree, "extent": self.extent,
                "antialiased": self.antialiased, "lrs": asdict(self.lrs)}

    @classmethod
    def from_state_dict(cls, state: dict, device: torch.device | str = "cpu") -> "GaussianModel":
        """Rebuild a model (and its optimizer state) saved by :meth:`state_dict`; ValueError when ``state``
        holds another method's model (checkpoints without a method name are 3dgs ones)."""
        check_state_method(cls, state)
        model = cls(state["params"], state["sh_degree"], state["extent"], state["antialiased"],
                    LearningRates(**state.get("lrs", {})))
        model._load_optimizer_state(state["optimizer"])
        return model.to(device)
