"""Neural implicit surface (NeuS / NeuS2): the "neus" method.

A :class:`NerfModel` whose field is a signed distance field (:class:`recon.nerf.neus_field.NeusField`; its grid
and decoder are the nerf method's choices, ``--field.encoding hash|dense|triplane``, ``--field.decoder mlp|rbf``,
the hash grid and MLPs by default)
rendered with NeuS's unbiased opacity (:mod:`recon.nerf.neus`). Everything else is the nerf method's: the
scene space (Blender scenes in their box, captures contracted: :func:`recon.models.nerf.scene_space`), rays
drawn across all training images, ray marching through the occupancy grid, the compositing over the
trainer's background, the learning-rate schedule, checkpoints, render / eval / viewer paths.

What differs:

- samples: per section [t0, t1] the SDF, its features and finite-difference gradient at the midpoint
  (``--neus.gradient``: tetrahedral, 4 field evaluations; central, 7), then ``alpha = neus_alpha(...)`` and ``w_i = alpha_i prod_{j<i}(1 - alpha_j)``
  (:func:`recon.nerf.rendering.alpha_weights`); the colour net sees the unit normal;
- rendering without gradients (:attr:`NeusModel.fast_render`): alpha from the SDF alone (1 evaluation per
  section, the cosine from the neighbouring sections' SDFs: :func:`recon.nerf.neus.slope_cos`), then the
  gradient, exact alpha and colour only for sections of transmittance > :data:`EARLY_STOP` and weight >
  :data:`FAST_WEIGHT` (:meth:`NeusModel._fast_sections`); training is unchanged;
- loss: the nerf method's mean squared error plus ``--neus.eikonal-weight`` x the eikonal loss on the
  training samples' gradients (:meth:`NeusModel.loss_terms`);
- progressive levels: ``--neus.start-levels`` grid levels at step 0, one more every ``--neus.level-every``
  steps (:meth:`NeusModel.set_step`; the steps of a sequence's earlier frames count too:
  :attr:`NeusModel.level_offset`); the finite-difference step follows the finest active level;
- the learned variance (sharpness) has its own Adam group at ``--nerf.lr x --neus.variance-lr-scale``;
- occupancy: a cell's value is the NeuS opacity of crossing the cell head-on at one random point in it
  (:func:`recon.nerf.neus.step_alpha` with the cell's diagonal), so cells the zero level set may cross stay
  marched, whatever the sharpness;
- the mesh: :meth:`NeusModel.sdf_volume` (the SDF on a grid over the box; ``splatforge mesh`` runs marching
  cubes on its zero level set) and :meth:`NeusModel.surface_colors` (the colour net seen along -normal).
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Callable

import torch
from torch import Tensor

from recon.models.base import register_model
from recon.models.nerf import (ADAM_BETAS, ADAM_EPS, EARLY_STOP, NO_GRAD_SAMPLES, NerfModel, loaded_nerf_config,
                               scene_space)
from recon.nerf.config import FieldConfig, NerfConfig, NeusConfig
from recon.nerf.field import encoding_backend, field_grid_config
from recon.nerf.neus import (FIELD_POINTS, eikonal_loss, neus_alpha, neus_alpha_from_slope, ray_neighbours,
                             slope_cos, step_alpha)
from recon.nerf.neus_field import NeusField, unit_normals
from recon.nerf.rendering import alpha_weights
from recon.nerf.space import FieldSpace, to_unit

FD_CHUNK = NO_GRAD_SAMPLES // 7  # samples per no-gradient evaluation (up to 7 field points each)
MESH_SLOPE = 3.0  # the mesh's narrow band: |grad SDF| taken to stay under 3 (a distance field: 1; the eikonal term
# holds a trained field near 1 at its surface; the steepest 128^3 grid edge of a 150-step field: 2.3)
FAST_WEIGHT = 1e-4  # rendering without gradients: sections of smaller (estimated) weight are dropped
MAX_STEP_FACTOR = 16.0  # --neus.sharp-step: the marching step is at most this many nerf steps
ONE_PASS_POINTS = NO_GRAD_SAMPLES  # training batches of at most this many field points (sections x the gradient
# scheme's points per section) take one pass (render_rays); larger ones would not hold their graph


@register_model("neus")
class NeusModel(NerfModel):
    """NeuS (method "neus"; see the module docstring). ``neus``: :class:`NeusConfig`."""

    COUNT_NAME = "occupied grid cells"
    fast_render = True  # without gradients: one SDF evaluation per section, gradient/colour where it matters
    config_sections = ("nerf", "field", "neus")
    FRAME_BY_FRAME = True  # dynamic data trains frame by frame (recon.training.frame_sequence)

    def __init__(self, cfg: NerfConfig, space: FieldSpace, extent: float = 1.0,
                 generator: torch.Generator | None = None, field_cfg: FieldConfig | None = None,
                 neus_cfg: NeusConfig | None = None):
        self.neus = neus_cfg or NeusConfig()
        self.level_offset = 0  # steps trained before this run (a sequence's earlier frames): progressive levels
        super().__init__(cfg, space, extent, generator, field_cfg)

    def _build_field(self, generator: torch.Generator | None) -> NeusField:
        """The SDF field on the grid ``--field.encoding`` asks for (:func:`recon.nerf.field.field_grid_config`, as
        the nerf method's) with the ``--field.decoder`` heads."""
        n, f = self.neus, self.field_cfg
        return NeusField(field_grid_config(self.cfg, f), 2.0 if self.space.contracted else 1.0, n.geo_hidden,
                         self.cfg.geo_dim, self.cfg.hidden, self.cfg.color_layers, n.init_radius, n.init_variance,
                         n.fd_cells, generator, encoding_backend(self.cfg), self.cfg.encoding_mlp, f.decoder,
                         f.rbf_neurons, f.rbf_backend, n.gradient)

    def _make_optimizer(self) -> torch.optim.Adam:
        """Adam: the hash table (no weight decay), the MLPs (``nerf.weight_decay``), the variance (its own rate);
        fused, as the nerf method's (a resumed run loads it fused: ``NerfModel._load_optimizer_state``)."""
        groups = {"table": [], "mlp": [], "variance": []}
        for name, p in self.params.items():
            groups[name if name in ("table", "variance") else "mlp"].append(p)
        return torch.optim.Adam(
            [{"params": groups["table"], "lr": self.cfg.lr, "weight_decay": 0.0, "name": "table"},
             {"params": groups["mlp"], "lr": self.cfg.lr, "weight_decay": self.cfg.weight_decay, "name": "mlp"},
             {"params": groups["variance"], "lr": self.cfg.lr * self.neus.variance_lr_scale, "weight_decay": 0.0,
              "name": "variance", "lr_scale": self.neus.variance_lr_scale}], betas=ADAM_BETAS, eps=ADAM_EPS,
            fused=True)

    @classmethod
    def initialize(cls, cfg, scene, generator: torch.Generator, log=print) -> "NeusModel":
        space = scene_space(cfg.nerf, scene, log)
        if cfg.field != FieldConfig():
            log(f"neus: field encoding {cfg.field.encoding}, decoder {cfg.field.decoder}")
        return cls(cfg.nerf, space, scene.extent, generator, cfg.field, cfg.neus)

    # ---------------------------------------------------------------------------- coordinates

    def configure(self, cfg) -> None:
        """``--neus.sharp-step`` from the training config: a run resumed from before the option keeps the nerf step
        it was trained with (its config gets 0, recon.training.trainer.LEGACY_VALUES)."""
        self.neus = replace(self.neus, sharp_step=float(cfg.neus.sharp_step))

    @property
    def dt_min(self) -> float:
        """World marching step: the nerf method's (box diagonal / ``steps_per_diagonal``) or, while the surface
        is blurry, ``--neus.sharp-step`` / s in normalised units (s: :meth:`NeusField.sharpness`; at most
        :data:`MAX_STEP_FACTOR` nerf steps), whichever is longer. NeuS's opacity of a section is exact for an SDF
        linear along it, so a band of width ~ 4 / s needs only a few sections: a 150-step field of s = 25 marches
        ~6x fewer sections than at the nerf step, and a sharp one (s > sharp_step x steps_per_diagonal /
        (2 sqrt 3 k), 150 for the box defaults) the nerf step alone. Occupancy updates scale by the same step."""
        base = super().dt_min
        if self.neus.sharp_step <= 0:
            return base
        s = float(self.field.sharpness().detach())
        return min(max(base, self.neus.sharp_step / (s * self.norm_per_world)), MAX_STEP_FACTOR * base)

    @property
    def norm_per_world(self) -> float:
        """Normalised units per world unit inside the box / the contracted space's inner cube."""
        return (2.0 / self.space.size[0]) if not self.space.contracted else 1.0 / self.space.size[0]

    def normalised(self, x: Tensor) -> Tensor:
        """[N, 3] float64 normalised positions (the field's frame) of world points ``x`` [N, 3]."""
        return self.field.from_unit(to_unit(x.double(), self.space).clamp(0.0, 1.0))

    # ---------------------------------------------------------------------------- rendering

    def _section_geometry(self, o: Tensor, d: Tensor, ray: Tensor, t0: Tensor, t1: Tensor
                          ) -> tuple[Tensor, Tensor, Tensor]:
        """(midpoints [S, 3], unit directions [S, 3], lengths [S]) of the sections ``ray``/``t0``/``t1`` [S] of
        rays ``o``/``d`` [R, 3], float64, in the field's normalised coordinates."""
        oo, dd = o[ray], d[ray]
        x0 = self.normalised(oo + t0[:, None] * dd)
        x1 = self.normalised(oo + t1[:, None] * dd)
        xm = self.normalised(oo + (0.5 * (t0 + t1))[:, None] * dd)
        seg = x1 - x0
        dist = seg.norm(dim=1)
        dirs = torch.where(dist[:, None] > 0, seg / dist.clamp(min=1e-12)[:, None], dd)
        return xm, dirs, dist

    @torch.no_grad()
    def _fast_alpha(self, o: Tensor, d: Tensor, ray: Tensor, t0: Tensor, t1: Tensor) -> Tensor:
        """[S] opacity of the sections ``ray``/``t0``/``t1`` [S] from one SDF evaluation each (the cosine from
        the neighbouring sections: :func:`recon.nerf.neus.slope_cos`), :data:`NO_GRAD_SAMPLES` at a time."""
        sdf, xm, dist = [], [], []
        for s in range(0, ray.shape[0], NO_GRAD_SAMPLES):
            e = s + NO_GRAD_SAMPLES
            x, _, length = self._section_geometry(o, d, ray[s:e], t0[s:e], t1[s:e])
            sdf.append(self.field.sdf(x.float())[0])
            xm.append(x)
            dist.append(length)
        sdf, xm, dist = torch.cat(sdf), torch.cat(xm), torch.cat(dist)
        cos = slope_cos(sdf, xm, *ray_neighbours(ray, t0, t1))
        return neus_alpha_from_slope(sdf, cos, dist.to(sdf.dtype), self.field.sharpness())

    @torch.no_grad()
    def _fast_sections(self, o: Tensor, d: Tensor, ray: Tensor, t0: Tensor, t1: Tensor, n_rays: int
                       ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """(ray, t0, t1, alpha, features, gradient) of the sections that matter (the render path without
        gradients): :meth:`_fast_alpha` for all, then :meth:`_sections` (exact alpha, features, gradient) for
        those with transmittance above :data:`EARLY_STOP` and weight above :data:`FAST_WEIGHT` only."""
        weights, trans = alpha_weights(self._fast_alpha(o, d, ray, t0, t1), ray, n_rays)
        keep = (trans > EARLY_STOP) & (weights > FAST_WEIGHT)
        ray, t0, t1 = ray[keep], t0[keep], t1[keep]
        if ray.shape[0] == 0:  # nothing but empty space
            dev, dt = self.device, self.field.table.dtype
            return (ray, t0, t1, torch.zeros(0, device=dev, dtype=dt),
                    torch.zeros(0, self.cfg.geo_dim, device=dev, dtype=dt), torch.zeros(0, 3, device=dev, dtype=dt))
        return (ray, t0, t1, *self._sections_no_grad(o, d, ray, t0, t1))

    def _sections(self, o: Tensor, d: Tensor, ray: Tensor, t0: Tensor, t1: Tensor
                  ) -> tuple[Tensor, Tensor, Tensor]:
        """(alpha [S], geometry features [S, F], SDF gradient [S, 3]) of the sections ``ray``/``t0``/``t1``
        [S] of rays ``o``/``d`` [R, 3] (differentiable when gradients are enabled)."""
        xm, dirs, dist = self._section_geometry(o, d, ray, t0, t1)
        sdf, feats, grad = self.field.sdf_and_gradient(xm.float())
        alpha = neus_alpha(sdf, grad, dirs.to(sdf.dtype), dist.to(sdf.dtype), self.field.sharpness())
        return alpha, feats, grad

    def _sections_no_grad(self, o, d, ray, t0, t1) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`_sections` without gradients, :data:`FD_CHUNK` samples at a time."""
        parts = [self._sections(o, d, ray[s:s + FD_CHUNK], t0[s:s + FD_CHUNK], t1[s:s + FD_CHUNK])
                 for s in range(0, ray.shape[0], FD_CHUNK)]
        return tuple(torch.cat([p[i] for p in parts]) for i in range(3))

    @staticmethod
    def _alive(alpha: Tensor, ray: Tensor, n_rays: int) -> Tensor:
        """[S] bool: the sections in front of transmittance :data:`EARLY_STOP` on their rays (opacities
        ``alpha`` [S] of sections sorted by ray, ``ray`` [S]; nerfacc's early stop)."""
        with torch.no_grad():
            return alpha_weights(alpha, ray, n_rays)[1] > EARLY_STOP

    def render_rays(self, origins: Tensor, dirs: Tensor, background: Tensor, jitter: Tensor | None = None,
                    t_min: Tensor | None = None, t_max: Tensor | None = None, median: bool = True) -> dict:
        """As :meth:`NerfModel.render_rays` (``median``: whether "median_depth" is computed) with NeuS's opacity
        (module docstring); with gradients enabled, ``train_meta["gradients"]`` [S, 3] holds the SDF gradients of
        the coloured samples (the eikonal term). Without gradients and with :attr:`fast_render` (the default),
        :meth:`_fast_sections` picks the sections that are coloured (``fast_render = False``: the training path's 7
        evaluations for every section)."""
        dev = self.device
        R = origins.shape[0]
        o, d, ray, t0, t1 = self._march_rays(origins, dirs, jitter, t_min, t_max)
        samples = int(ray.shape[0])
        grad_on = torch.is_grad_enabled()
        grad = torch.zeros(0, 3, device=dev)
        if samples and not grad_on and self.fast_render:
            ray, t0, t1, alpha, feats, grad = self._fast_sections(o, d, ray, t0, t1, R)
            rgb = self.field.color(feats, d[ray].float(), unit_normals(grad))
        elif samples:
            one_pass = grad_on and samples * FIELD_POINTS[self.field.gradient] <= ONE_PASS_POINTS  # once, then cut
            with torch.set_grad_enabled(one_pass):
                alpha, feats, grad = (self._sections if one_pass else self._sections_no_grad)(o, d, ray, t0, t1)
            alive = self._alive(alpha.detach(), ray, R)
            ray, t0, t1, alpha, feats, grad = (a[alive] for a in (ray, t0, t1, alpha, feats, grad))
            if grad_on and not one_pass:  # too many samples to hold their graph: the alive ones again, with it
                alpha, feats, grad = self._sections(o, d, ray, t0, t1)
            rgb = self.field.color(feats, d[ray].float(), unit_normals(grad))
        else:
            alpha = torch.zeros(0, device=dev, requires_grad=grad_on)
            rgb = torch.zeros(0, 3, device=dev)
        weights, _ = alpha_weights(alpha, ray, R)
        out = self._ray_outputs(weights, rgb, t0, t1, ray, R, background, samples, median)
        if grad_on:
            out["train_meta"] = {"gradients": grad}
        return out

    # ---------------------------------------------------------------------------- training

    def loss_terms(self, meta: dict, step: int, cfg) -> dict[str, Tensor]:
        """{"eikonal": ``neus.eikonal_weight`` x mean((|grad| - 1)^2)} over the step's coloured samples."""
        grads = meta.get("gradients")
        if grads is None or self.neus.eikonal_weight == 0:
            return {}
        return {"eikonal": self.neus.eikonal_weight * eikonal_loss(grads)}

    def set_step(self, step: int, total_steps: int) -> None:
        """The nerf schedule, and the active grid levels: ``start_levels + (level_offset + step) // level_every``."""
        super().set_step(step, total_steps)
        self.field.set_active_levels(self.neus.start_levels + (self.level_offset + step) // self.neus.level_every)

    @torch.no_grad()
    def update_occupancy(self, decay: float, threshold: float, fraction: float) -> None:
        """Re-estimate the occupancy grid; a cell's value is the NeuS opacity of crossing it (module docstring)."""
        cell = math.sqrt(3.0) * 2.0 * self.field.k / self.grid.resolution  # the cell's diagonal, normalised

        def density(u: Tensor) -> Tensor:
            sdf, _ = self.field.sdf(self.field.from_unit(u.to(self.device)))
            return step_alpha(sdf, cell, self.field.sharpness()) / self.dt_min

        self.grid.update(density, self.dt_min, decay, threshold, fraction)

    # ---------------------------------------------------------------------------- mesh and baking

    @torch.no_grad()
    def sdf_function(self) -> tuple[Callable[[Tensor], Tensor], tuple[float, float, float], float]:
        """(sdf of points in the meshed cube [N, 3] in [0, 1]^3 -> [N], centre, side): the cube marching cubes
        runs in (the box; a contracted capture: its inner cube) and its world centre and side, so that world =
        centre + (v - 0.5) side."""
        inner = 0.5 if self.space.contracted else 1.0  # share of the unit cube that is meshed

        def fn(v: Tensor) -> Tensor:
            u = 0.5 + (v.to(self.device, torch.float32) - 0.5) * inner
            return self.field.sdf(self.field.from_unit(u))[0]

        lo, size = self.space.lo, self.space.size
        if self.space.contracted:
            return fn, tuple(lo), 2.0 * size[0]
        return fn, tuple(l + 0.5 * s for l, s in zip(lo, size)), float(size[0])

    def mesh_slope(self) -> float:
        """A bound on |grad| of :meth:`sdf_function`'s field per unit of the meshed cube: :data:`MESH_SLOPE` x the
        normalised units per cube unit (2: the box's [-1, 1], a capture's inner cube [-1, 1]). Marching cubes
        evaluates the SDF only near its zero level (:mod:`recon.geometry.narrow_band`)."""
        inner = 0.5 if self.space.contracted else 1.0
        return MESH_SLOPE * 2.0 * self.field.k * inner

    @torch.no_grad()
    def surface_colors(self, points: Tensor) -> tuple[Tensor, Tensor]:
        """(rgb [N, 3] in [0, 1], unit world normals [N, 3]) at world ``points`` [N, 3] (a mesh's vertices): the
        colour net seen head-on, along -normal."""
        out_rgb, out_n = [], []
        for s in range(0, points.shape[0], FD_CHUNK):
            x = self.normalised(points[s:s + FD_CHUNK].to(self.device))
            _, feats, grad = self.field.sdf_and_gradient(x.float())
            n = unit_normals(grad)
            out_rgb.append(self.field.color(feats, -n, n))
            out_n.append(n)
        return torch.cat(out_rgb).cpu(), torch.cat(out_n).cpu()

    @torch.no_grad()
    def surface_gradients(self, points: Tensor) -> Tensor:
        """[N, 3] SDF gradients (normalised frame: |grad| = 1 for a distance field) at world ``points`` [N, 3]."""
        return torch.cat([self.field.sdf_and_gradient(self.normalised(points[s:s + FD_CHUNK].to(self.device))
                                                      .float())[2] for s in range(0, points.shape[0], FD_CHUNK)])

    def _bake_cells(self, u: Tensor, cell: Tensor) -> tuple[Tensor, Tensor]:
        """(opacity [N], rgb [N, 3]) of baked cells (:meth:`NerfModel.to_splat_data`): NeuS's opacity of crossing
        the cell, the colour averaged over six directions."""
        x = self.field.from_unit(u.float())
        sdf, feats, grad = self.field.sdf_and_gradient(x)
        alpha = step_alpha(sdf, cell.to(sdf) * self.norm_per_world, self.field.sharpness())
        n = unit_normals(grad)
        dirs = torch.cat([torch.eye(3), -torch.eye(3)]).to(self.device)
        rgb = torch.stack([self.field.color(feats, dv.expand(len(u), 3), n) for dv in dirs]).mean(0)
        return alpha, rgb

    # ---------------------------------------------------------------------------- IO

    def state_dict(self) -> dict:
        """The nerf method's checkpoint plus the neus section, the active grid levels and the level offset."""
        return {**super().state_dict(), "neus_config": asdict(self.neus), "active_levels": self.field.active_levels,
                "level_offset": self.level_offset}

    @classmethod
    def _blank_from_state(cls, state: dict) -> "NeusModel":
        model = cls(loaded_nerf_config(state["config"]), FieldSpace.from_dict(state["space"]), state["extent"],
                    field_cfg=FieldConfig(**state.get("field_config", {})),
                    neus_cfg=NeusConfig(**{"gradient": "central", "sharp_step": 0.0,  # older: as trained
                                           **state["neus_config"]}))
        model.field.set_active_levels(int(state["active_levels"]))
        model.level_offset = int(state.get("level_offset", 0))  # checkpoints before sequences: 0
        return model
