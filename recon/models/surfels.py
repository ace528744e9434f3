"""2D Gaussian surfels (2DGS, Huang et al., SIGGRAPH 2024): the "2dgs" method.

Same parameters, learning rates, optimiser, initialisation, checkpoints and strategies as the 3DGS model
(:class:`recon.models.gaussians.GaussianModel`, which this class extends) except:

=====================  ===========  ==========================================================
name                   shape        meaning
=====================  ===========  ==========================================================
``log_scales``         [N, 2]       log standard deviations along the two tangents (the first two
                                    columns of the rotation of ``quats``; its third is the normal)
=====================  ===========  ==========================================================

Rendering goes through :func:`rasterizer.rasterize_surfels`; ``meta`` carries the 3D path's
densification keys (``means2d``, ``radii``, ``width``, ``height``) plus the surfel outputs the losses
and renders read: ``depth``, ``median_depth``, ``normals`` (camera frame, alpha-weighted),
``normals_world``, ``distortion``, ``alpha``, ``Ks``, ``ray_transforms`` and ``depths`` (per surfel).
The geometry losses and their config section are in :mod:`recon.losses.surfels`.

Densification (adaptive density control): ``d loss / d means2d`` is zero for surfels wider than a
pixel (only the low-pass fallback reads means2d; rasterizer/DESIGN.md "2D surfels"), so the signal is
gsplat's 2DGS surrogate from the ray transforms, ``(dL/dM_u[2], dL/dM_v[2]) z`` (:meth:`screen_gradient`);
splits sample children in the surfel's plane (:func:`recon.strategy.ops.split` with two scales).
MCMC densification is not supported (refused by :meth:`check_config`): tried with the 3DGS rules (noise
in the tangent plane, the same relocation formula), 600 steps on the procedural scene at 64 x 64 reached
23.5 dB against 30.4 dB with ADC (3DGS: MCMC 33.1, ADC 33.5), so it needs its own work first.

Export (splats.ply, Inria layout): a third log-scale :data:`FLAT_LOG_SCALE` along the normal, so that
3DGS viewers show flat discs (the 2DGS authors' suggestion); reading a splat file back takes the first
two scales.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from rasterizer import Camera, rasterize_surfels
from recon.core.errors import ConfigValueError
from recon.core.schedule import schedule_scaler
from recon.models.base import register_model
from recon.models.gaussians import GaussianModel, LearningRates
from recon.core.splat_data import SplatData
from recon.losses.surfels import distortion_loss, normal_consistency_loss

FLAT_SCALE = 1e-6
"""the third scale written to splat files (world units): flat for a 3DGS viewer, positive for its log"""
FLAT_LOG_SCALE = math.log(FLAT_SCALE)


@register_model("2dgs")
class SurfelModel(GaussianModel):
    """2D Gaussian surfels with their optimiser (method "2dgs"; see the module docstring).

    Attributes as :class:`GaussianModel` (``antialiased`` is ignored: surfels have their own low-pass
    fallback), plus ``surfel_depth``: "intersection" or "centre", the depth the rasterizer composites
    (CUDA tensors always use "centre", the only one gsplat's kernels have).
    """

    SCALE_DIMS = 2
    config_sections = ("surfels",)
    RANDOM_TRAIN_BACKGROUND = True  # "auto" trains on random backgrounds when images have alpha (trainer)

    def __init__(self, params: dict[str, Tensor], sh_degree: int, extent: float, antialiased: bool = False,
                 lrs: LearningRates | None = None, surfel_depth: str = "intersection"):
        super().__init__(params, sh_degree, extent, antialiased, lrs)
        if surfel_depth not in ("intersection", "centre"):
            raise ValueError(f"surfel_depth must be 'intersection' or 'centre', got {surfel_depth!r}")
        self.surfel_depth = surfel_depth

    # ---------------------------------------------------------------------------- construction

    @classmethod
    def check_config(cls, cfg) -> None:
        """Refuse what surfels do not support: MCMC densification, anti-aliased (mip) mode, absolute
        gradients (AbsGS)."""
        if cfg.strategy != "adc":
            raise ConfigValueError(f"--strategy {cfg.strategy}: --method 2dgs trains with adaptive density control "
                                   "only (MCMC relocation is not implemented for surfels); use --strategy adc")
        if cfg.antialiased:
            raise ConfigValueError("--antialiased: not available with --method 2dgs (surfels have their own "
                                   "low-pass fallback); leave it off")
        if cfg.adc.absgrad:
            raise ConfigValueError("--adc.absgrad: not available with --method 2dgs (the surfel rasterizer "
                                   "has no absolute screen-space gradients); leave it off")

    @classmethod
    def initialize(cls, cfg, scene, generator: torch.Generator, log=print) -> "SurfelModel":
        """As :meth:`GaussianModel.initialize` (two scales each), with ``cfg.surfels.depth``."""
        model = super().initialize(cfg, scene, generator, log)
        model.surfel_depth = cfg.surfels.depth
        return model

    @classmethod
    def from_splat_data(cls, data: SplatData, extent: float = 1.0, lrs: LearningRates | None = None) -> "SurfelModel":
        """Surfels from a splat file: the first two scales (the tangents of the rotation), the third dropped."""
        t = data.to_torch()
        sh = t["sh"]
        params = {"means": t["means"], "quats": t["quats"], "log_scales": t["log_scales"][:, :2],
                  "logit_opacities": t["logit_opacities"], "sh0": sh[:, :1], "shN": sh[:, 1:]}
        return cls(params, data.sh_degree, extent, data.antialiased, lrs)

    # ---------------------------------------------------------------------------- rendering

    def render(self, cameras: Sequence[Camera], sh_degree: int | None = None, background: Tensor | None = None,
               *, t: float | None = None, absgrad: bool = False, backend: str = "auto") -> tuple[Tensor, Tensor, dict]:
        """Render into cameras of one size (``t`` ignored: static scene; ``absgrad`` is not available).

        Returns (render [C, H, W, 3], alpha [C, H, W, 1], meta): see the module docstring for meta."""
        if absgrad:
            raise ValueError("SurfelModel.render: absgrad is not available for surfels")
        viewmats, Ks, W, H, degree, bg = self.render_inputs(cameras, sh_degree, background)
        cuda = backend == "cuda" or (backend == "auto" and self.device.type == "cuda")
        out = rasterize_surfels(
            self.params["means"], self.params["quats"], self.scales, self.opacities,
            (self.params["sh0"], self.params["shN"]), viewmats, Ks, W, H, sh_degree=degree, backgrounds=bg,
            backend=backend, surfel_depth="centre" if cuda else self.surfel_depth)
        m = out.meta
        meta = {"means2d": m.means2d, "radii": m.radii, "width": W, "height": H, "n_cameras": m.n_cameras,
                "depths": m.depths, "ray_transforms": m.ray_transforms, "Ks": Ks, "alpha": out.alpha,
                "depth": out.depth, "median_depth": out.median_depth, "normals": out.normals,
                "normals_world": out.normals_world, "distortion": out.distortion,
                "backend_extras": m.backend_extras}
        return out.render, out.alpha, meta

    def render_front(self, cameras: Sequence[Camera], depth_limit: Tensor, *, t: float | None = None,
                     backend: str = "auto") -> tuple[Tensor, Tensor, Tensor]:
        """See :meth:`SceneModel.render_front`: ``rasterize_surfels(..., depth_limit=...)``, a surfel cut
        where its ray-splat intersection depth reaches the limit. Returns (rgb [C, H, W, 3] premultiplied,
        transmittance [C, H, W, 1], expected depth [C, H, W, 1] camera z of the surfels in front, with the
        model's ``surfel_depth``; 0 where nothing is in front). The cuda backend has no depth limit: CUDA
        tensors use the reference backend ("auto"); CPU tensors the cpu one."""
        if backend == "auto":
            backend = "reference" if self.device.type == "cuda" else "cpu"
        viewmats, Ks, W, H, degree, _ = self.render_inputs(cameras, None, None)
        out = rasterize_surfels(
            self.params["means"], self.params["quats"], self.scales, self.opacities,
            (self.params["sh0"], self.params["shN"]), viewmats, Ks, W, H, sh_degree=degree, backend=backend,
            surfel_depth=self.surfel_depth, depth_limit=depth_limit.to(self.device))
        depth = torch.where(out.alpha > 0, out.depth, torch.zeros_like(out.depth))
        return out.render, out.meta.transmittance, depth

    TRACER = ("build_surfel_accel", "trace_surfels")
    """Secondary rays (:meth:`GaussianModel.trace_rays`) meet each surfel at the ray's exact intersection with
    its plane, the 2D Gaussian evaluated there in its tangent frame (no low-pass term: a ray has no pixel
    footprint): :func:`rasterizer.tracing.trace_surfels`."""

    @torch.no_grad()
    def render_depth(self, cameras: Sequence[Camera], kind: str, background: Tensor | None = None):
        """Mesh extraction's seam (recon.geometry.mesh_extraction.render_depth): (rgb [C, H, W, 3], depth [C, H, W, 1],
        alpha [C, H, W, 1]), depth the median depth (``kind`` "median", the 2DGS paper's choice for TSDF fusion)
        or the expected depth ("expected"), camera-space z, 0 where nothing is seen."""
        rgb, depth, alpha, _ = self.render_geometry(cameras, kind, background)
        return rgb, depth, alpha

    @torch.no_grad()
    def render_geometry(self, cameras: Sequence[Camera], kind: str, background: Tensor | None = None):
        """:meth:`render_depth` and the rendered world-frame normals [C, H, W, 3] (``normals_world``, not
        normalised) of the same single render: (rgb, depth, alpha, normals_world). The geometry benchmark's
        seam (scripts/bench_geometry.py), for methods that render normals."""
        render, alpha, meta = self.render(cameras, background=background)
        return render, meta["median_depth" if kind == "median" else "depth"], alpha, meta["normals_world"]

    def screen_gradient(self, meta: dict, absgrad: bool = False) -> Tensor | None:
        """[C, N, 2] gsplat's 2DGS densification signal after backward, in pixels: the cuda backend's
        ``gradient_2dgs``, else ``(dL/dM_u[2], dL/dM_v[2]) z`` from ``meta["ray_transforms"].grad`` (M_u[2]
        = z x_pix, so this is the gradient of the projected centre with the depth held), z = centre depth."""
        if absgrad:
            raise ValueError("SurfelModel.screen_gradient: absgrad is not available for surfels")
        extra = meta.get("backend_extras", {}).get("gradient_2dgs")
        if extra is not None:
            return extra.grad
        grad = meta["ray_transforms"].grad
        if grad is None:
            return None
        return grad[..., :2, 2] * meta["depths"].detach()[..., None]

    # ---------------------------------------------------------------------------- losses and outputs

    def loss_terms(self, meta: dict, step: int, cfg) -> dict[str, Tensor]:
        """The 2DGS geometry losses switched on at this step: ``distortion`` (``dist_lambda`` x the mean
        distortion, from ``dist_start_iter``) and ``normal`` (``normal_lambda`` x normal consistency with
        the normals of the ``normal_depth`` depth, from ``normal_start_iter``), start steps x the run's
        steps_scaler (``cfg.surfels``; recon/losses/surfels.py)."""
        sc = cfg.surfels.scaled(schedule_scaler(cfg))
        terms = {}
        if sc.dist_lambda > 0 and step >= sc.dist_start_iter:
            terms["distortion"] = sc.dist_lambda * distortion_loss(meta["distortion"])
        if sc.normal_lambda > 0 and step >= sc.normal_start_iter:
            depth = meta["depth" if sc.normal_depth == "expected" else "median_depth"]
            terms["normal"] = sc.normal_lambda * normal_consistency_loss(meta["normals"], depth, meta["alpha"],
                                                                         meta["Ks"])
        return terms

    def extra_outputs(self, meta: dict) -> dict[str, Tensor]:
        """Median depth [C, H, W, 1] and unit world normals [C, H, W, 3] (0 where nothing is seen)."""
        n = meta["normals_world"]
        unit = n / n.norm(dim=-1, keepdim=True).clamp(min=1e-8)
        return {"depth": meta["median_depth"], "normals": torch.where(meta["alpha"] > 1e-4, unit, torch.zeros_like(n))}

    # ---------------------------------------------------------------------------- IO

    def to_splat_data(self) -> SplatData:
        """Export record in the Inria layout: the two log-scales plus :data:`FLAT_LOG_SCALE` along the normal."""
        p = self.params
        flat = p["log_scales"].new_full((len(self), 1), FLAT_LOG_SCALE)
        return SplatData.from_torch({"means": p["means"], "quats": p["quats"],
                                     "log_scales": torch.cat([p["log_scales"].detach(), flat], dim=1),
                                     "logit_opacities": p["logit_opacities"], "sh": self.sh},
                                    antialiased=self.antialiased)

    def state_dict(self) -> dict:
        """:meth:`GaussianModel.state_dict` plus ``surfel_depth``."""
        return {**super().state_dict(), "surfel_depth": self.surfel_depth}

    @classmethod
    def from_state_dict(cls, state: dict, device: torch.device | str = "cpu") -> "SurfelModel":
        model = super().from_state_dict(state, device)
        model.surfel_depth = state.get("surfel_depth", "intersection")
        return model
