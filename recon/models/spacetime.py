"""4D Gaussians (method "4dgs"): two-quaternion space-time Gaussians with static SH colour.

Parameters (raw, pre-activation; the slicing conventions are rasterizer/DESIGN.md, "4D Gaussians"):

=====================  ===========  ==========================================================
name                   shape        meaning
=====================  ===========  ==========================================================
``means4``             [N, 4]       (x, y, z) world centre and t, the normalised time in [0, 1]
``log_scales4``        [N, 4]       log of the standard deviations along the 4 rotated axes
``quats_left``         [N, 4]       left isoclinic quaternion (w, x, y, z), any non-zero norm
``quats_right``        [N, 4]       right isoclinic quaternion; R = L(q_l) R(q_r)
``logit_opacities``    [N]          logit of the 4D opacity (before the temporal factor)
``sh0``                [N, 1, 3]    SH DC coefficients (the 3DGS colour convention)
``shN``                [N, K-1, 3]  higher SH coefficients, degree-major
``logit_foreground``   [N]          logit of the Gaussian's foreground value (the segmentation target,
                                    ``--spacetime.seg-weight``; 0 where a model or file has none)
=====================  ===========  ==========================================================

Colour is static SH (4D-Rotor's model). Rendering slices the Gaussians at each camera's time with
:func:`rasterizer.spacetime.slice_gaussians_4d` (culling those whose temporal factor is below 1/255) and
renders the slice with ``rasterize_gaussians(covars=...)``. The densification signal is mapped back to all
N Gaussians: ``meta["means2d"]`` is a :class:`SlicedScreenMeans` whose ``.grad`` / ``.absgrad`` scatter
the sliced screen-space gradients through the kept indices ([C, N, 2], zero for culled Gaussians), and
``meta["radii"]`` is [C, N, 2] with zeros for culled ones; so the 3DGS statistics of
:class:`recon.strategy.adc.ADCStrategy` apply unchanged. The strategies are ``recon.strategy.METHOD_STRATEGIES["4dgs"]``
(ADC in 4D, :mod:`recon.strategy.adc4d`; MCMC in 4D, :mod:`recon.strategy.mcmc4d`).

The export record (:meth:`SpaceTimeGaussians.to_splat_data`) is the 3D slice at one time (default the
middle, 0.5): what splats.ply holds for a 4D run (``SPLAT_FILE_IS_SLICE``). The 4D model itself is
:meth:`SpaceTimeGaussians.to_spacetime_data`, written as splats4d.ply (a ply4d file,
recon/export/PLY4D.md) when a run ends and kept in its checkpoints; :class:`recon.run.folder.Run` reads it for
``eval``, ``render``, ``export`` and the viewer.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Callable, ClassVar, Sequence

import numpy as np
import torch
from torch import Tensor

from rasterizer import Camera, rasterize_gaussians, stack_cameras
from rasterizer.spacetime import slice_gaussians_4d
from recon.core.errors import UsageError
from recon.models.base import GaussianRows, SceneModel, register_model
from recon.losses.spacetime import NeighborLists
from recon.models.gaussians import (LearningRates, TraceCache, front_of_limit, knn_mean_distance, ray_arguments,
                                    resize_optimizer_state, rgb_to_sh0)
from recon.core.spacetime_data import SpaceTimeData
from recon.core.splat_data import SplatData

PARAM_NAMES = ("means4", "log_scales4", "quats_left", "quats_right", "logit_opacities", "sh0", "shN",
               "logit_foreground")
LR_OF = {"means4": "means", "log_scales4": "log_scales", "quats_left": "quats", "quats_right": "quats",
         "logit_opacities": "logit_opacities", "sh0": "sh0", "shN": "shN",
         "logit_foreground": "logit_opacities"}  # parameter -> LearningRates field
# initial temporal standard deviation (normalised time). Measured on procedural-4d at 48 px (8 cameras x 12
# times, 1,500 points, 200 steps, SH 1, one seed): 0.2 -> 16.8 dB, 0.35 -> 18.4, 0.5 -> 19.4, 1.0 -> 20.0.
# Short-lived Gaussians leave the static parts thin at most times; 0.5 keeps the start localised in time.
INIT_TIME_SCALE = 0.5
DEFAULT_TIME = 0.5  # the time rendered when none is given (the middle of the span)


class SlicedScreenMeans:
    """Screen-space means of all N 4D Gaussians for C renders of slices: ``.grad`` / ``.absgrad`` [C, N, 2]
    scatter the gradients of each render's sliced ``means2d`` [C_i, N_i, 2] through its kept ``indices``
    [N_i] (rows of culled Gaussians are zero); None before backward."""

    def __init__(self, parts: list[tuple[Tensor, Tensor]], n: int):
        self.parts, self.n = parts, int(n)
        self.shape = (sum(m.shape[0] for m, _ in parts), self.n, 2)

    def _scatter(self, attribute: str) -> Tensor | None:
        grads = [getattr(m, attribute, None) for m, _ in self.parts]
        if all(g is None for g, (m, _) in zip(grads, self.parts) if m.shape[1] > 0) and \
                any(m.shape[1] > 0 for m, _ in self.parts):
            return None  # before backward (an all-culled slice has no gradient to wait for: zeros)
        device = self.parts[0][0].device
        out = torch.zeros(self.shape, dtype=torch.float32, device=device)
        row = 0
        for (m, idx), g in zip(self.parts, grads):
            if g is not None:
                out[row:row + m.shape[0]].index_copy_(1, idx, g.to(out.dtype))
            row += m.shape[0]
        return out

    @property
    def grad(self) -> Tensor | None:
        return self._scatter("grad")

    @property
    def absgrad(self) -> Tensor | None:
        return self._scatter("absgrad")


def camera_times(t, count: int) -> list[float]:
    """``count`` times from ``t``: None (:data:`DEFAULT_TIME`), a number, or one per camera."""
    if t is None:
        return [DEFAULT_TIME] * count
    if isinstance(t, (int, float)) or (torch.is_tensor(t) and t.dim() == 0):
        return [float(t)] * count
    times = [DEFAULT_TIME if v is None else float(v) for v in t]
    if len(times) != count:
        raise ValueError(f"render: {len(times)} times for {count} cameras")
    return times


@register_model("4dgs")
class SpaceTimeGaussians(GaussianRows, SceneModel):
    """4D Gaussians with their optimiser (method "4dgs"; the :class:`SceneModel` interface).

    Attributes:
        params: name -> ``torch.nn.Parameter`` (shapes in the module docstring).
        sh_degree: SH degree stored; extent: scene extent (world units; the spatial part of the means
            learning rate and the size thresholds); antialiased: render in mip mode; optimizer: Adam,
            one group per parameter (learning rates from :class:`LearningRates`: ``means4`` takes
            ``means`` x extent, both quaternions ``quats``, ``log_scales4`` ``log_scales``).
    """

    ROWS: ClassVar[str] = "means4"

    SPLAT_FILE_IS_SLICE: ClassVar[bool] = True  # splats.ply holds one time's slice; the model is in checkpoints
    config_sections = ("spacetime",)

    def __init__(self, params: dict[str, Tensor], sh_degree: int, extent: float, antialiased: bool = False,
                 lrs: LearningRates | None = None):
        missing = [n for n in PARAM_NAMES if n not in params and n != "logit_foreground"]
        if missing:
            raise KeyError(f"SpaceTimeGaussians: missing parameter(s) {missing}")
        if "logit_foreground" not in params:  # checkpoints and ply4d files from before the segmentation target
            params = {**params, "logit_foreground": torch.zeros(len(params["means4"]))}
        if not 0 <= sh_degree <= 3:
            raise ValueError(f"sh_degree must be in 0..3, got {sh_degree}")
        self.sh_degree, self.extent, self.antialiased = int(sh_degree), float(extent), bool(antialiased)
        self.lrs = lrs or LearningRates()
        self.params = {n: torch.nn.Parameter(params[n].detach().float().contiguous()) for n in PARAM_NAMES}
        self._check_shapes()
        self.optimizer = self._make_optimizer()
        self._neighbors = NeighborLists()  # the velocity consistency's (recomputed when due)
        self.renders_segmentation = False  # render each Gaussian's foreground value too (meta["segmentation"])
        self.time_lr_scale = 1.0  # --spacetime.time-lr-scale (configure)

    @classmethod
    def uses_segmentation(cls, cfg) -> bool:
        """``--spacetime.seg-weight`` > 0: the views' segmentations are a training target."""
        return cfg.spacetime.seg_weight > 0

    def configure(self, cfg) -> None:
        """``--spacetime.seg-weight`` > 0: renders carry the foreground channel the segmentation target needs."""
        self.renders_segmentation = self.uses_segmentation(cfg)
        self.time_lr_scale = float(cfg.spacetime.time_lr_scale)

    def step(self) -> None:
        """Adam's step, with the temporal centre's and temporal log-scale's moves scaled by ``time_lr_scale``
        (``--spacetime.time-lr-scale``; Adam's move is linear in the learning rate, so this is those columns'
        own learning rate; their moments are Adam's own)."""
        scale = self.time_lr_scale
        if scale == 1.0:
            self.optimizer.step()
            return
        with torch.no_grad():
            before = {n: self.params[n][:, 3].clone() for n in ("means4", "log_scales4")}
        self.optimizer.step()
        with torch.no_grad():
            for n, old in before.items():
                col = self.params[n][:, 3]
                col.copy_(old + scale * (col - old))

    def loss_terms(self, meta: dict, step: int, cfg) -> dict[str, Tensor]:
        """The optional 4D-Rotor regularisers of ``cfg.spacetime`` (recon/losses/spacetime.py): opacity entropy
        and velocity consistency with nearest neighbours in space-time (weights 0: none); and the segmentation
        target (``seg_weight``: L1 of the rendered foreground against the views' segmentations,
        ``meta["segmentations"]``: float [H, W] in [0, 1] or None per view, decoded by the trainer's images)."""
        from rasterizer.spacetime import condition_on_time
        from recon.losses.spacetime import opacity_entropy, segmentation_l1, velocity_consistency

        sc = cfg.spacetime
        terms = {}
        if sc.seg_weight > 0 and "segmentation" in meta and meta.get("segmentations"):
            seg = segmentation_l1(meta["segmentation"], meta["segmentations"])
            if seg is not None:
                terms["segmentation"] = sc.seg_weight * seg
        if sc.entropy_lambda > 0:
            terms["opacity_entropy"] = sc.entropy_lambda * opacity_entropy(self.opacities)
        if sc.velocity_lambda > 0 and len(self) > 1:
            neighbors = self._neighbors.get(self.params["means4"], step, sc)
            velocities = condition_on_time(self.params["quats_left"], self.params["quats_right"], self.scales).velocities
            terms["velocity_consistency"] = sc.velocity_lambda * velocity_consistency(velocities, neighbors)
        return terms

    def _make_optimizer(self) -> torch.optim.Adam:
        return torch.optim.Adam([{"params": [self.params[n]], "lr": self._base_lr(n), "name": n} for n in PARAM_NAMES],
                                eps=self.lrs.eps, fused=True)

    # ---------------------------------------------------------------------------- construction

    @classmethod
    def initialize(cls, cfg, scene, generator: torch.Generator, log=print) -> "SpaceTimeGaussians":
        """Initial 4D Gaussians: the scene's points (``init_type`` "sfm") at their times
        (``scene.point_times``) or at times uniform over [0, 1]; else ``init_num_random`` random ones in
        the box the cameras look at (:func:`recon.models.init_region.random_init_region`), times uniform.
        UsageError when the training frames carry no time."""
        from recon.models.init_region import random_init_region

        if not any(f.time is not None for f in scene.frames_train):
            raise UsageError(f"--method 4dgs: the training frames of {scene.root or scene.source_format} carry no "
                             f"time; train a dynamic dataset (D-NeRF, procedural-4d) or use --method 3dgs")
        mcmc = cfg.strategy == "mcmc"  # defaults as 3dgs: opacity 0.5 and scale 0.1 for MCMC
        kw = dict(init_opacity=cfg.init_opacity if cfg.init_opacity is not None else (0.5 if mcmc else 0.1),
                  init_scale=cfg.init_scale if cfg.init_scale is not None else (0.1 if mcmc else 1.0),
                  antialiased=cfg.antialiased, lrs=cfg.lr, generator=generator)
        if cfg.init_type == "sfm" and scene.points is not None and len(scene.points) > 0:
            points = torch.as_tensor(scene.points, dtype=torch.float32)
            times = getattr(scene, "point_times", None)
            times = (torch.rand(len(points), generator=generator) if times is None
                     else torch.as_tensor(times, dtype=torch.float32))
            colors = None if scene.point_colors is None else torch.as_tensor(scene.point_colors).float() / 255.0
            if mcmc and len(points) > cfg.max_gaussians:
                keep = torch.randperm(len(points), generator=generator)[: cfg.max_gaussians]
                points, times, colors = points[keep], times[keep], None if colors is None else colors[keep]
            return cls.from_points(points, times, colors, cfg.sh_degree, scene.extent, **kw)
        n = min(cfg.init_num_random, cfg.max_gaussians) if mcmc else cfg.init_num_random
        region = random_init_region(scene.frames_train, scene.source_format, scene.extent, cfg.init_box)
        log(region.describe(n) + ", times uniform over [0, 1]")
        c = torch.as_tensor(np.asarray(region.center, dtype=np.float32))
        half = torch.as_tensor(np.asarray(region.half, dtype=np.float32))
        points = c + (torch.rand(n, 3, generator=generator) * 2 - 1) * half
        return cls.from_points(points, torch.rand(n, generator=generator), None, cfg.sh_degree, scene.extent, **kw)

    @classmethod
    def from_points(cls, points: Tensor, times: Tensor, colors: Tensor | None, sh_degree: int, extent: float, *,
                    init_opacity: float = 0.1, init_scale: float = 1.0, antialiased: bool = False,
                    lrs: LearningRates | None = None, generator: torch.Generator | None = None
                    ) -> "SpaceTimeGaussians":
        """4D Gaussians at ``points`` [P, 3] and ``times`` [P]: spatial scales ``init_scale`` x the mean
        distance to the 3 nearest points, temporal scale :data:`INIT_TIME_SCALE`, identity rotation (no
        velocity), opacity ``init_opacity``, colours [P, 3] in [0, 1] (random when None)."""
        points = torch.as_tensor(points, dtype=torch.float32)
        P = points.shape[0]
        if P == 0:
            raise ValueError("SpaceTimeGaussians.from_points: no points to initialise from")
        colors = torch.rand(P, 3, generator=generator) if colors is None else torch.as_tensor(colors).float()
        dist = knn_mean_distance(points).clamp(min=1e-7)
        log_scales4 = torch.cat([torch.log(dist * init_scale)[:, None].repeat(1, 3),
                                 torch.full((P, 1), math.log(INIT_TIME_SCALE))], dim=1)
        identity = torch.tensor([1.0, 0.0, 0.0, 0.0]).repeat(P, 1)
        K = (sh_degree + 1) ** 2
        params = {"means4": torch.cat([points, torch.as_tensor(times, dtype=torch.float32)[:, None]], dim=1),
                  "log_scales4": log_scales4, "quats_left": identity, "quats_right": identity.clone(),
                  "logit_opacities": torch.full((P,), math.log(init_opacity / (1 - init_opacity))),
                  "sh0": rgb_to_sh0(colors)[:, None, :], "shN": torch.zeros(P, K - 1, 3),
                  "logit_foreground": torch.zeros(P)}
        return cls(params, sh_degree, extent, antialiased, lrs)

    @classmethod
    def from_splat_data(cls, data, extent: float = 1.0) -> "SpaceTimeGaussians":
        """Not possible: a splat file holds 3D Gaussians (one time's slice of a 4D run)."""
        raise UsageError("a 3D splat file cannot hold a 4dgs model (a 4dgs run's splats.ply is its 3D slice at "
                         "t = 0.5): give the run's 4D file (RUN/splats4d.ply, or a file written by `splatforge "
                         "export RUN --format ply4d`), or leave --splats out to use the run's own 4D model")

    @classmethod
    def from_spacetime_data(cls, data: SpaceTimeData, extent: float = 1.0) -> "SpaceTimeGaussians":
        """The model of a :class:`SpaceTimeData` record (a ply4d file read back); ``extent`` scales the
        learning rates only."""
        params = {"means4": data.means4, "log_scales4": data.log_scales4, "quats_left": data.quats_left,
                  "quats_right": data.quats_right, "logit_opacities": data.logit_opacities,
                  "sh0": data.sh[:, :1], "shN": data.sh[:, 1:]}
        if data.logit_foreground is not None:  # else zeros (a file from before, or of a model without it)
            params["logit_foreground"] = data.logit_foreground
        return cls({n: torch.as_tensor(np.ascontiguousarray(v)) for n, v in params.items()}, data.sh_degree,
                   extent, data.antialiased)

    def to_spacetime_data(self) -> SpaceTimeData:
        """The 4D model as a :class:`SpaceTimeData` record (what splats4d.ply / a ply4d export holds); the
        foreground logit only when it is not all zeros (a model trained with ``--spacetime.seg-weight``)."""
        p = {n: v.detach().float().cpu().numpy() for n, v in self.params.items()}
        fg = p["logit_foreground"] if np.any(p["logit_foreground"]) else None
        return SpaceTimeData(p["means4"], p["log_scales4"], p["quats_left"], p["quats_right"],
                             p["logit_opacities"], np.concatenate([p["sh0"], p["shN"]], axis=1), self.antialiased,
                             logit_foreground=fg)

    # ---------------------------------------------------------------------------- views

    @property
    def scales(self) -> Tensor:
        """[N, 4] activated scales (x, y, z, t axes before the rotation). ``opacities``: the 4D opacities
        (before the temporal factor)."""
        return torch.exp(self.params["log_scales4"])

    def subset(self, index: Tensor) -> "SpaceTimeGaussians":
        """A new model of the Gaussians ``index`` ([K] int64 on the model's device), detached, with a fresh
        optimiser (for rendering a selection: the viewer's opacity filter and crop box)."""
        params = {n: p.detach().index_select(0, index) for n, p in self.params.items()}
        return type(self)(params, self.sh_degree, self.extent, self.antialiased, self.lrs)

    def to(self, device: torch.device | str) -> "SpaceTimeGaussians":
        device = torch.device(device)
        if device == self.device:
            return self
        state = self.optimizer.state_dict()
        self.params = {n: torch.nn.Parameter(p.detach().to(device)) for n, p in self.params.items()}
        self.optimizer = self._make_optimizer()
        self._load_optimizer_state(state)
        return self

    def _load_optimizer_state(self, state: dict) -> None:
        groups = state["param_groups"]
        if len(groups) == len(PARAM_NAMES) - 1:  # saved before logit_foreground: its group starts fresh
            used = sum(len(g["params"]) for g in groups)
            groups = groups + [{**groups[PARAM_NAMES.index("logit_opacities")], "params": [used],
                                "name": "logit_foreground", "lr": self._base_lr("logit_foreground")}]
            state = {**state, "param_groups": groups}
        self.optimizer.load_state_dict(state)
        for group in self.optimizer.param_groups:
            group.update(fused=True, foreach=None)

    # ---------------------------------------------------------------------------- rendering

    def slice(self, times: float | Sequence[float]):
        """:func:`slice_gaussians_4d` of the model at one time (a SlicedGaussians) or several (a list)."""
        p = self.params
        t = times if isinstance(times, (int, float)) else torch.tensor(list(times), dtype=torch.float32,
                                                                       device=self.device)
        return slice_gaussians_4d(p["means4"], p["quats_left"], p["quats_right"], self.scales, self.opacities, t)

    def render(self, cameras: Sequence[Camera], sh_degree: int | None = None, background: Tensor | None = None,
               *, t=None, absgrad: bool = False, backend: str = "auto") -> tuple[Tensor, Tensor, dict]:
        """Render into cameras of one size, each at its time.

        Args:
            cameras: C cameras (same width/height).
            sh_degree: active SH degree (<= ``self.sh_degree``); default all.
            background: [3] or [C, 3] RGB in [0, 1], or None (black).
            t: normalised time: one number for all cameras, a sequence of C (one per camera), or None
                (:data:`DEFAULT_TIME`).
        Returns:
            (rgb [C, H, W, 3], alpha [C, H, W, 1], meta): meta has ``means2d`` (a
            :class:`SlicedScreenMeans`, gradients [C, N, 2] after backward), ``radii`` [C, N, 2] int32
            (0 for culled Gaussians), ``width``, ``height``, ``num_sliced`` (Gaussians kept per render), and
            with :attr:`renders_segmentation` ``segmentation`` [C, H, W, 1]: the foreground values composited
            (a second, one-channel pass over the same slice; black background).
        """
        cameras = list(cameras)
        viewmats, Ks, W, H = stack_cameras(cameras)
        dev = self.device
        viewmats, Ks = viewmats.to(dev, torch.float32), Ks.to(dev, torch.float32)
        C = viewmats.shape[0]
        degree = self.sh_degree if sh_degree is None else min(int(sh_degree), self.sh_degree)
        bg = None
        if background is not None:
            bg = torch.as_tensor(background, dtype=torch.float32, device=dev)
            bg = bg.expand(C, 3) if bg.dim() == 1 else bg
        times = camera_times(t, C)
        groups: dict[float, list[int]] = {}  # one slice per distinct time, rendered into its cameras
        for c, time in enumerate(times):
            groups.setdefault(time, []).append(c)
        unique = list(groups)
        slices = self.slice(unique[0]) if len(unique) == 1 else self.slice(unique)
        slices = [slices] if len(unique) == 1 else slices
        order, rgbs, alphas, parts, radii_parts, segs = [], [], [], [], [], []
        sh = (self.params["sh0"], self.params["shN"])
        for time, s in zip(unique, slices):
            cams = groups[time]
            index = torch.tensor(cams, device=dev)
            rgb, alpha, meta = rasterize_gaussians(
                s.means, None, None, s.opacities, s.gather(sh), viewmats[index], Ks[index], W, H,
                sh_degree=degree, backgrounds=None if bg is None else bg[index], render_mode="RGB",
                rasterize_mode="antialiased" if self.antialiased else "classic", covars=s.covars, backend=backend,
                absgrad=absgrad)
            if self.renders_segmentation:
                fg = torch.sigmoid(self.params["logit_foreground"]).index_select(0, s.indices)[:, None]
                seg, _, _ = rasterize_gaussians(
                    s.means, None, None, s.opacities, fg, viewmats[index], Ks[index], W, H,
                    backgrounds=torch.zeros(len(cams), 1, device=dev), render_mode="RGB",
                    rasterize_mode="antialiased" if self.antialiased else "classic", covars=s.covars, backend=backend)
                segs.append(seg)
            order += cams
            rgbs.append(rgb)
            alphas.append(alpha)
            parts.append((meta.means2d, s.indices))
            radii = torch.zeros((len(cams), len(self), 2), dtype=meta.radii.dtype, device=dev)
            radii_parts.append(radii.index_copy_(1, s.indices, meta.radii))
        inverse = torch.argsort(torch.tensor(order, device=dev))
        if len(unique) == 1:
            rgb, alpha, radii = rgbs[0], alphas[0], radii_parts[0]
        else:
            rgb, alpha = torch.cat(rgbs)[inverse], torch.cat(alphas)[inverse]
            radii = torch.cat(radii_parts)[inverse]
            parts = _reorder_parts(parts, order)
        meta = {"means2d": SlicedScreenMeans(parts, len(self)), "radii": radii, "width": W, "height": H,
                "num_sliced": [len(s) for s in slices]}
        if segs:
            meta["segmentation"] = segs[0] if len(unique) == 1 else torch.cat(segs)[inverse]
        return rgb, alpha, meta

    def render_front(self, cameras: Sequence[Camera], depth_limit: Tensor, *, t=None,
                     backend: str = "auto") -> tuple[Tensor, Tensor, Tensor]:
        """See :meth:`SceneModel.render_front`: the slice at time ``t`` (one number; None:
        :data:`DEFAULT_TIME`) rendered with ``depth_limit``."""
        viewmats, Ks, W, H = stack_cameras(list(cameras))
        dev = self.device
        s = self.slice(camera_times(t, 1)[0])
        sh = (self.params["sh0"], self.params["shN"])
        return front_of_limit(s.means, None, None, s.opacities, s.gather(sh), viewmats.to(dev, torch.float32),
                              Ks.to(dev, torch.float32), W, H, self.sh_degree, depth_limit, self.antialiased,
                              backend, covars=s.covars)

    def trace_rays(self, origins: Tensor, dirs: Tensor, t_min: Tensor, t_max: Tensor, *,
                   t: float | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """See :meth:`SceneModel.trace_rays`: the slice at time ``t`` (None: :data:`DEFAULT_TIME`) traced by
        :func:`rasterizer.tracing.trace_gaussians` with its covariances (differentiable through the slicing).
        The cpu grid is cached per parameter version and time."""
        from rasterizer.tracing import build_gaussian_accel, trace_gaussians

        time = camera_times(t, 1)[0]
        s = self.slice(time)
        origins, dirs, t_min, t_max = ray_arguments(origins, dirs, t_min, t_max, s.means)
        accel = None
        if self.device.type == "cpu":
            cache = self.__dict__.setdefault("_trace_cache", TraceCache())
            names = ("means4", "log_scales4", "quats_left", "quats_right", "logit_opacities")
            geometry = [self.params[n] for n in names]
            accel = cache.get(geometry, time,
                              lambda: build_gaussian_accel(s.means, None, None, s.opacities, s.covars))
        return trace_gaussians(s.means, None, None, s.opacities, s.gather((self.params["sh0"], self.params["shN"])),
                               origins, dirs, t_min, t_max, sh_degree=self.sh_degree, covars=s.covars, accel=accel)

    # ---------------------------------------------------------------------------- optimisation

    def _base_lr(self, name: str) -> float:
        lr = getattr(self.lrs, LR_OF[name])
        return lr * self.extent if name == "means4" else lr

    def means_lr(self, step: int, total_steps: int) -> float:
        """Exponentially decayed means learning rate: ``lr0 extent ratio^(step / total_steps)``."""
        t = min(max(step / max(total_steps, 1), 0.0), 1.0)
        return self._base_lr("means4") * self.lrs.means_final_ratio ** t

    def set_step(self, step: int, total_steps: int) -> None:
        for group in self.optimizer.param_groups:
            if group["name"] == "means4":
                group["lr"] = self.means_lr(step, total_steps)

    def update_params(self, fn_param: Callable[[str, Tensor], Tensor],
                      fn_state: Callable[[str, str, Tensor], Tensor], names: Sequence[str] = PARAM_NAMES) -> None:
        for name in names:
            old = self.params[name]
            new = torch.nn.Parameter(fn_param(name, old.detach()).contiguous())
            resize_optimizer_state(self.optimizer, old, new, lambda key, v, _n=name: fn_state(_n, key, v))
            self.params[name] = new
        self._check_shapes()

    def _check_shapes(self) -> None:
        N = self.params["means4"].shape[0]
        K = (self.sh_degree + 1) ** 2
        expect = {"means4": (N, 4), "log_scales4": (N, 4), "quats_left": (N, 4), "quats_right": (N, 4),
                  "logit_opacities": (N,), "sh0": (N, 1, 3), "shN": (N, K - 1, 3), "logit_foreground": (N,)}
        for n, shape in expect.items():
            if tuple(self.params[n].shape) != shape:
                raise ValueError(f"SpaceTimeGaussians.{n}: shape {tuple(self.params[n].shape)}, expected {shape}")

    # ---------------------------------------------------------------------------- IO

    def to_splat_data(self, t: float = DEFAULT_TIME) -> SplatData:
        """The 3D Gaussians of the slice at time ``t`` as an export record: sliced means, the conditional
        covariance as (rotation, scales) by eigen-decomposition, opacity x temporal factor, SH."""
        with torch.no_grad():
            s = self.slice(float(t))
            covars = s.covars.double().cpu()
            evals, evecs = torch.linalg.eigh(covars)
            evecs = evecs * torch.where(torch.linalg.det(evecs) < 0, -1.0, 1.0)[:, None, None]  # proper rotations
            quats = rotmats_to_quats(evecs)
            opac = s.opacities.double().clamp(1e-7, 1 - 1e-7)
            sh = torch.cat(s.gather((self.params["sh0"], self.params["shN"])), dim=1)
            return SplatData.from_torch({"means": s.means, "quats": torch.as_tensor(quats),
                                         "log_scales": 0.5 * torch.log(evals.clamp(min=1e-30)),
                                         "logit_opacities": torch.logit(opac), "sh": sh},
                                        antialiased=self.antialiased)

    def state_dict(self) -> dict:
        return {"method": self.method, "params": {n: p.detach().cpu() for n, p in self.params.items()},
                "optimizer": self.optimizer.state_dict(), "sh_degree": self.sh_degree, "extent": self.extent,
                "antialiased": self.antialiased, "lrs": asdict(self.lrs)}

    @classmethod
    def from_state_dict(cls, state: dict, device: torch.device | str = "cpu") -> "SpaceTimeGaussians":
        """Rebuild a model saved by :meth:`state_dict`; ValueError for another method's checkpoint."""
        held = state.get("method") or ("3dgs" if "means" in state.get("params", {}) else "unknown")
        if held != cls.method:
            raise ValueError(f"the checkpoint holds a {held!r} model, not --method {cls.method} (4D Gaussians); "
                             f"a run cannot change its method: train 4D into a new --out")
        model = cls(state["params"], state["sh_degree"], state["extent"], state["antialiased"],
                    LearningRates(**state.get("lrs", {})))
        model._load_optimizer_state(state["optimizer"])
        return model.to(device)


def rotmats_to_quats(R: Tensor) -> Tensor:
    """Unit quaternions [N, 4] (w, x, y, z), w >= 0, of rotation matrices [N, 3, 3] (vectorised
    Shepperd's method: each row from the largest of 4w^2, 4x^2, 4y^2, 4z^2; the same values as
    :func:`rasterizer.quaternions.rotmat_to_quat`)."""
    r = R.reshape(-1, 9).unbind(-1)
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = r
    t = torch.stack([1 + r00 + r11 + r22, 1 + r00 - r11 - r22, 1 - r00 + r11 - r22, 1 - r00 - r11 + r22], -1)
    candidates = torch.stack([
        torch.stack([t[:, 0], r21 - r12, r02 - r20, r10 - r01], -1),
        torch.stack([r21 - r12, t[:, 1], r01 + r10, r02 + r20], -1),
        torch.stack([r02 - r20, r01 + r10, t[:, 2], r12 + r21], -1),
        torch.stack([r10 - r01, r02 + r20, r12 + r21, t[:, 3]], -1)], 1)  # [N, 4 candidates, 4]
    best = t.argmax(-1)
    q = candidates[torch.arange(R.shape[0]), best]
    q = q / q.norm(dim=-1, keepdim=True)
    return torch.where(q[:, :1] < 0, -q, q)


def _reorder_parts(parts: list[tuple[Tensor, Tensor]], order: list[int]) -> list[tuple[Tensor, Tensor]]:
    """The (means2d, indices) of each render split into one-camera parts, in camera order (renders of
    several cameras at one time hold them in ``order``'s order)."""
    flat = []
    for means2d, idx in parts:
        flat += [(means2d, idx, k) for k in range(means2d.shape[0])]
    by_camera = [None] * len(order)
    for (means2d, idx, k), c in zip(flat, order):
        by_camera[c] = (_CameraRow(means2d, k), idx)
    return by_camera


class _CameraRow:
    """Row ``k`` of a render's ``means2d`` [C_i, N_i, 2] as a one-camera view of its ``.grad`` / ``.absgrad``."""

    def __init__(self, means2d: Tensor, k: int):
        self.means2d, self.k = means2d, k
        self.shape = (1,) + tuple(means2d.shape[1:])
        self.device = means2d.device

    @property
    def grad(self) -> Tensor | None:
        g = self.means2d.grad
        return None if g is None else g[self.k:self.k + 1]

    @property
    def absgrad(self) -> Tensor | None:
        g = getattr(self.means2d, "absgrad", None)
        return None if g is None else g[self.k:self.k + 1]
