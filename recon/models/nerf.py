"""Hash-grid NeRF (instant-ngp style): the "nerf" method.

The field (:mod:`recon.nerf.field`) maps unit-cube positions (:mod:`recon.nerf.space`: the scene box, or
the contracted space of unbounded captures) to density and view-dependent colour. Rays are marched
through an occupancy grid (:mod:`recon.nerf.marching`, :mod:`recon.nerf.occupancy`) and composited with
the volume-rendering quadrature (:mod:`recon.nerf.rendering`) over the same background as the Gaussian
methods (the trainer's ``background_color``: seen through 1 - accumulated opacity).

Training draws rays across all training images each step (``RAY_BATCHES``: the trainer calls
:meth:`NerfModel.ray_batch` instead of rendering one view); the ray count adapts so that a step marches
about ``nerf.target_samples`` samples. Loss: mean squared error (instant-ngp, nerfacto). The occupancy
grid is updated by :class:`recon.strategy.occupancy.OccupancyGridStrategy` (``--strategy occupancy``,
which the ``nerf`` preset and ``--method nerf`` on the command line select).

Scene space (:func:`scene_space`): ``--nerf.box`` when given; Blender / D-NeRF scenes carry no bounds,
so the NeRF-synthetic convention [-1.5, 1.5]^3 is assumed (and said in the log); the procedural scenes'
box is their points' bounding box (+10 %; procedural-4d: its points of all times); COLMAP / nerfstudio
captures are unbounded: contraction around the training cameras' centre with their radius
(``Scene.nerfpp_norm``).

Files: the model lives in the run's checkpoints (``state_dict``: field weights, occupancy grid, optimiser,
config, space). splats.ply holds a baked approximation for viewers and exporters (``to_splat_data``: one
isotropic Gaussian per occupied cell, opacity of the cell's density over its size, colour averaged over
six directions), so ``eval`` / ``render`` read the checkpoint (``MODEL_IN_CHECKPOINTS``) and a splat file
cannot become a NeRF (``from_splat_data`` refuses). ``len(model)`` is the number of occupied grid cells.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Callable, ClassVar, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from recon.core.devices import resolve_device
from recon.core.errors import ConfigValueError, UsageError
from recon.models.base import SceneModel, check_state_method, register_model
from recon.nerf.config import FieldConfig, NerfConfig
from recon.nerf.field import build_field
from recon.nerf.marching import clip_steps, march_rays, ray_entry
from recon.nerf.occupancy import OccupancyGrid
from recon.nerf.rendering import composite, median_depth, transmittance_weights
from recon.nerf.space import FieldSpace, to_unit
from recon.core.splat_data import SplatData

BLENDER_HALF = 1.5  # NeRF-synthetic objects lie in [-1.5, 1.5]^3 (instant-ngp's unit box after its 0.33 scale)
BOUNDED_FORMATS = ("blender", "dnerf")
EARLY_STOP = 1e-4  # samples behind this transmittance are not coloured (nerfacc's early stop)
LR_MILESTONES = (0.5, 0.75, 0.9)  # fractions of the run where the learning rate is x LR_GAMMA (nerfacc ngp)
LR_GAMMA = 0.33
ADAM_BETAS = (0.9, 0.99)
ADAM_EPS = 1e-15
MAX_BAKED = 1 << 18  # most Gaussians in the baked splats.ply
MIN_RAYS = 256
NO_GRAD_SAMPLES = 1 << 18  # samples per field evaluation without gradients (bounds eval memory, ~150 MB)
ONE_PASS_SAMPLES = 1 << 19  # most samples of a training batch evaluated once with gradients (~100 MB kept)
EVAL_SAMPLES = 1 << 22  # marched samples a whole-image render chunk aims at (~100 B each held per chunk)


def parse_box(text: str) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(lo, hi) of "cx,cy,cz,half"; ConfigValueError naming --nerf.box otherwise."""
    try:
        cx, cy, cz, half = (float(v) for v in text.split(","))
    except ValueError:
        raise ConfigValueError(f"--nerf.box {text}: give four numbers cx,cy,cz,half") from None
    if not (half > 0 and all(math.isfinite(v) for v in (cx, cy, cz, half))):
        raise ConfigValueError(f"--nerf.box {text}: half must be > 0 and all numbers finite")
    return (cx - half, cy - half, cz - half), (cx + half, cy + half, cz + half)


def scene_space(cfg: NerfConfig, scene, log: Callable[[str], None] = print) -> FieldSpace:
    """The field's space for ``scene`` (see the module docstring), with one line to ``log`` saying which."""
    fmt = getattr(scene, "source_format", "")
    kind = cfg.scene
    if kind == "auto":
        boxed = cfg.box is not None or fmt in BOUNDED_FORMATS or fmt in ("procedural", "procedural-4d")
        kind = "box" if boxed else "unbounded"
    if kind == "unbounded":
        centre, radius = scene.nerfpp_norm()
        log(f"nerf: unbounded scene ({fmt or 'dataset'}): space contracted around the cameras' centre "
            f"{[round(float(v), 3) for v in centre]} with radius {float(radius):.3f}")
        return FieldSpace.unbounded(centre, float(radius))
    if cfg.box is not None:
        lo, hi = parse_box(cfg.box)
        log(f"nerf: box {lo} .. {hi} (--nerf.box)")
        return FieldSpace.box(lo, hi)
    if fmt in BOUNDED_FORMATS or scene.points is None or len(scene.points) == 0:
        h = BLENDER_HALF
        log(f"nerf: the dataset has no bounds information; assuming the object lies in [-{h}, {h}]^3 (the "
            f"NeRF-synthetic convention); give --nerf.box cx,cy,cz,half to change it")
        return FieldSpace.box((-h, -h, -h), (h, h, h))
    pts = torch.as_tensor(scene.points, dtype=torch.float64)
    lo, hi = pts.amin(0), pts.amax(0)
    centre, half = 0.5 * (lo + hi), 0.5 * float((hi - lo).max()) * 1.1
    log(f"nerf: box around the scene's points, centre {[round(float(v), 3) for v in centre]}, half size {half:.3f}")
    return FieldSpace.box((centre - half).tolist(), (centre + half).tolist())


def rays_from_pixels(w2c: Tensor, K: Tensor, px: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(origins [R, 3], unit directions [R, 3], z_scale [R]) float64 through pixel positions ``px`` [R, 2]
    (continuous, pixel centres at +0.5) of cameras ``w2c`` [R, 4, 4] / ``K`` [R, 3, 3] (OpenCV axes)."""
    d_cam = torch.stack([(px[:, 0] - K[:, 0, 2]) / K[:, 0, 0], (px[:, 1] - K[:, 1, 2]) / K[:, 1, 1],
                         torch.ones_like(px[:, 0])], dim=1)
    d_cam = d_cam / d_cam.norm(dim=1, keepdim=True)
    R, t = w2c[:, :3, :3], w2c[:, :3, 3]
    dirs = torch.einsum("rji,rj->ri", R, d_cam)  # R^T d
    origins = -torch.einsum("rji,rj->ri", R, t)
    return origins, dirs, d_cam[:, 2]


def camera_pixel_rays(camera) -> tuple[Tensor, Tensor, Tensor]:
    """(origins [H W, 3], unit directions [H W, 3], z_scale [H W]) float64 on the CPU through every pixel
    centre of ``camera`` (row-major): :func:`rays_from_pixels`."""
    H, W = camera.height, camera.width
    ys, xs = torch.meshgrid(torch.arange(H, dtype=torch.float64), torch.arange(W, dtype=torch.float64),
                            indexing="ij")
    px = torch.stack([xs.reshape(-1), ys.reshape(-1)], 1) + 0.5
    n = px.shape[0]
    w2c = camera.world_to_cam.double().cpu()[None].expand(n, 4, 4)
    K = camera.K.double().cpu()[None].expand(n, 3, 3)
    return rays_from_pixels(w2c, K, px)


class RaySource:
    """Training images as flat arrays for drawing rays across all of them: RGBA uint8 [sum H W, 4], masks
    uint8 [sum H W] (255 where an image has none), per-image offsets, sizes and cameras (float64)."""

    def __init__(self, images, cameras: Sequence, device):
        self.key = (id(images), len(images))
        rgba, loss_masks = images.rgba, images.masks  # every image decoded once (the whole pixel table)
        self.rgba = torch.cat([im.reshape(-1, 4) for im in rgba]).to(device)
        masks = [m if m is not None else torch.full(im.shape[:2], 255, dtype=torch.uint8, device=im.device)
                 for m, im in zip(loss_masks, rgba)]
        self.masks = torch.cat([m.reshape(-1) for m in masks]).to(device)
        self.has_masks = any(m is not None for m in loss_masks)
        sizes = torch.tensor([[im.shape[1], im.shape[0]] for im in rgba], dtype=torch.int64)
        self.sizes = sizes.to(device)
        self.offsets = (torch.cumsum(sizes[:, 0] * sizes[:, 1], 0) - sizes[:, 0] * sizes[:, 1]).to(device)
        self.w2c = torch.stack([c.world_to_cam.double() for c in cameras]).to(device)
        self.K = torch.stack([c.K.double() for c in cameras]).to(device)

    def draw(self, n: int, generator: torch.Generator):
        """(origins [n, 3], dirs [n, 3], rgba float [n, 4], mask float [n, 1] or None) of n random pixels
        of random images (uniform over images, then over pixels)."""
        dev = self.rgba.device
        img = torch.randint(self.sizes.shape[0], (n,), generator=generator).to(dev)
        uv = torch.rand(n, 2, generator=generator, dtype=torch.float64).to(dev)
        wh = self.sizes[img]
        pix = (uv * wh).long().clamp(max=wh - 1)
        flat = self.offsets[img] + pix[:, 1] * wh[:, 0] + pix[:, 0]
        o, d, _ = rays_from_pixels(self.w2c[img], self.K[img], pix.double() + 0.5)
        mask = (self.masks[flat].float() / 255.0)[:, None] if self.has_masks else None
        return o, d, self.rgba[flat].float() / 255.0, mask


@register_model("nerf")
class NerfModel(SceneModel):
    """Hash-grid NeRF with its optimiser and occupancy grid (method "nerf"; see the module docstring).

    Attributes: ``cfg`` (:class:`NerfConfig`), ``space`` (:class:`FieldSpace`), ``field``
    (:class:`NerfField`), ``grid`` (:class:`OccupancyGrid`), ``params`` (the field's parameters by name),
    ``optimizer`` (Adam: the hash table without weight decay, the MLPs with ``cfg.weight_decay``),
    ``samples_per_ray`` (running estimate that sizes the training batches), ``extent``.
    """

    RAY_BATCHES: ClassVar[bool] = True  # trained on rays across images (Trainer.train_step)
    RAY_BATCH_SIZE_HINT = "size its batch with --nerf.target-samples / --nerf.max-rays"
    SPLAT_FILE_IS_BAKED: ClassVar[bool] = True  # splats.ply is a baked stand-in: the viewer renders the field
    MODEL_IN_CHECKPOINTS: ClassVar[bool] = True  # splats.ply is a baked approximation (recon.run.folder.Run.load_model)
    COUNT_NAME: ClassVar[str] = "occupied grid cells"  # what len(model) counts (the CLI's summary line)
    config_sections = ("nerf", "field")

    def __init__(self, cfg: NerfConfig, space: FieldSpace, extent: float = 1.0,
                 generator: torch.Generator | None = None, field_cfg: FieldConfig | None = None):
        self.cfg, self.space, self.extent = cfg, space, float(extent)
        self.field_cfg = field_cfg or FieldConfig()
        self.field = self._build_field(generator)
        self.grid = OccupancyGrid(cfg.occupancy_resolution)
        self.params = dict(self.field.named_parameters())
        self.samples_per_ray = float(cfg.steps_per_diagonal) / 2.0
        self.optimizer = self._make_optimizer()
        self._source: RaySource | None = None

    def _build_field(self, generator: torch.Generator | None):
        """The field of this method (:func:`build_field` of ``cfg`` and ``field_cfg``; neus: its SDF field)."""
        return build_field(self.cfg, self.field_cfg, generator)

    def _make_optimizer(self) -> torch.optim.Adam:
        """Adam: the hash table without weight decay, the MLPs with it. ``fused=True``: one pass over each
        group instead of about ten elementwise ones (issue 53: 337 -> 81 ms an update of a 24M-value table on
        2 CPU cores; in the nerf preset's step, 12M values, 62 -> 21 ms at 1 thread, scripts/roofline.py's
        "Adam" row); the same update rule, rounding differs in the last bits (tests/recon/nerf/test_nerf_adam.py)."""
        table = [p for n, p in self.params.items() if n == "table"]
        mlps = [p for n, p in self.params.items() if n != "table"]
        return torch.optim.Adam([{"params": table, "lr": self.cfg.lr, "weight_decay": 0.0, "name": "table"},
                                 {"params": mlps, "lr": self.cfg.lr, "weight_decay": self.cfg.weight_decay,
                                  "name": "mlp"}], betas=ADAM_BETAS, eps=ADAM_EPS, fused=True)

    def _load_optimizer_state(self, state: dict) -> None:
        """Load Adam's moments and step counts; the implementation flags stay this build's (a checkpoint
        saved before the fused update holds ``fused=None``, which would switch it off)."""
        self.optimizer.load_state_dict(state)
        for group in self.optimizer.param_groups:
            group.update(fused=True, foreach=None)

    # ---------------------------------------------------------------------------- construction

    @classmethod
    def check_config(cls, cfg) -> None:
        """--strategy must be occupancy; the nerf section's box must parse; the chosen encoding's base resolution
        must not exceed its finest; a triplane cannot take --nerf.encoding-mlp fused (--batch and --supersample,
        options of rendered views, are refused for every ``RAY_BATCHES`` method by
        recon.training.trainer.check_view_options)."""
        if cfg.strategy != "occupancy":
            m = cls.method
            raise ConfigValueError(f"--strategy {cfg.strategy}: --method {m} has no densification; it trains with "
                                   f"--strategy occupancy (the occupancy-grid updates; `splatforge train {m}` and "
                                   f"`splatforge train --method {m}` select it)")
        if cfg.nerf.box is not None:
            parse_box(cfg.nerf.box)
        f, n = cfg.field, cfg.nerf
        for enc, prefix, base, top in (("hash", "nerf.hash", n.hash_base_res, n.hash_max_res),
                                       ("dense", "field.dense", f.dense_base_res, f.dense_max_res),
                                       ("triplane", "field.triplane", f.triplane_base_res, f.triplane_max_res)):
            if f.encoding == enc and base > top:
                raise ConfigValueError(f"--{prefix}-base-res {base}: must be <= --{prefix}-max-res ({top}): the "
                                       f"coarsest level cannot be finer than the finest")
        check_encoding_mlp(cfg)

    @classmethod
    def initialize(cls, cfg, scene, generator: torch.Generator, log=print) -> "NerfModel":
        """A fresh field in the space of ``scene`` (:func:`scene_space`)."""
        space = scene_space(cfg.nerf, scene, log)
        if cfg.field != FieldConfig():
            log(f"nerf: field encoding {cfg.field.encoding}, decoder {cfg.field.decoder}")
        return cls(cfg.nerf, space, scene.extent, generator, cfg.field)

    @classmethod
    def from_splat_data(cls, data, extent: float = 1.0) -> "NerfModel":
        raise UsageError("a splat file holds Gaussians, not a nerf model (a nerf run's splats.ply is a baked "
                         "approximation of its field): `splatforge eval/render --run RUN` read the field from the "
                         "run's checkpoints; a Gaussian file cannot be resumed or evaluated as --method nerf")

    # ---------------------------------------------------------------------------- views

    def __len__(self) -> int:
        """Occupied cells of the occupancy grid."""
        return self.grid.occupied

    @property
    def device(self) -> torch.device:
        return self.field.table.device

    def to(self, device) -> "NerfModel":
        self.field.to(device)
        self.grid.to(device)
        for state in self.optimizer.state.values():  # "step" too: the fused update keeps it on the device
            for k, v in state.items():
                if torch.is_tensor(v):
                    state[k] = v.to(device)
        self._source = None
        return self

    # ---------------------------------------------------------------------------- sampling constants

    @property
    def dt_min(self) -> float:
        return self.space.diagonal / self.cfg.steps_per_diagonal

    @property
    def cone_angle(self) -> float:
        if self.cfg.cone_angle is not None:
            return float(self.cfg.cone_angle)
        return 1.0 / 256.0 if self.space.contracted else 0.0

    def near_far(self) -> tuple[float, float]:
        if self.space.contracted:
            radius = self.space.size[0]
            return 0.05 * radius, self.cfg.far * radius
        return 0.0, 1e10

    @property
    def max_steps(self) -> int:
        if not self.space.contracted:
            return self.cfg.steps_per_diagonal + 2
        near, far = self.near_far()
        growth = math.log(far / near) / math.log1p(self.cone_angle) if self.cone_angle > 0 else 0.0
        return int(self.space.diagonal * 2 / self.dt_min + growth) + 2

    # ---------------------------------------------------------------------------- rendering

    def march(self, origins: Tensor, dirs: Tensor, jitter: Tensor, t_min: Tensor | None = None,
              t_max: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Packed samples (ray [S], t0 [S], t1 [S]) of rays [R, 3] (float64) through the occupancy grid, from
        the model's near distance (or ``t_min`` [R] instead, given) to its far one or ``t_max`` [R], whichever
        is nearer (steps may end beyond t_max: :func:`clip_steps`)."""
        near, far = self.near_far()
        if t_min is not None:
            near = t_min
        if t_max is not None:
            far = torch.minimum(t_max.to(origins), origins.new_tensor(far))
        t_near, t_far = ray_entry(origins, dirs, self.space, near, far)
        backend = {"numba": "numba", "torch": "torch"}.get(self.cfg.backend, "auto")
        if backend == "auto" and origins.device.type != "cpu":
            backend = "torch"
        return march_rays(origins, dirs, t_near, t_far, jitter, self.grid.bits, self.space, self.dt_min,
                          1e10 if self.space.contracted else self.dt_min, self.cone_angle, self.max_steps,
                          backend=backend)

    def _march_rays(self, origins: Tensor, dirs: Tensor, jitter: Tensor | None, t_min: Tensor | None,
                    t_max: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """(origins [R, 3], dirs [R, 3] in float64 on the model's device, and the marched sections: ray [S],
        t0 [S], t1 [S]), the last step of each ray cut at ``t_max`` when given (see :meth:`render_rays`)."""
        dev = self.device
        o, d = origins.double().to(dev), dirs.double().to(dev)
        jitter = (torch.zeros(o.shape[0], dtype=torch.float64, device=dev) if jitter is None
                  else jitter.double().to(dev))
        bounds = [None if b is None else b.double().to(dev) for b in (t_min, t_max)]
        ray, t0, t1 = (a.to(dev) for a in self.march(o, d, jitter, *bounds))
        if bounds[1] is not None:
            t1 = clip_steps(ray, t0, t1, bounds[1])
        return o, d, ray, t0, t1

    def render_rays(self, origins: Tensor, dirs: Tensor, background: Tensor, jitter: Tensor | None = None,
                    t_min: Tensor | None = None, t_max: Tensor | None = None, median: bool = True) -> dict:
        """{"rgb" [R, 3], "opacity" [R], "depth" [R] (expected distance), "median_depth" [R] (distance where the
        cumulative weight reaches 0.5, else 0; left out when not ``median``: training reads only "rgb"),
        "samples" (marched)} of rays ``origins`` / unit ``dirs`` [R, 3]. Only the samples in front of
        transmittance :data:`EARLY_STOP` are coloured (:meth:`_shade`: nerfacc's early stop). ``t_min`` /
        ``t_max`` [R] (optional): march from t_min instead of the model's near distance, and stop at t_max
        (+inf: no bound): the last step is cut there, so nothing beyond t_max is weighted."""
        dev = self.device
        R = origins.shape[0]
        o, d, ray, t0, t1 = self._march_rays(origins, dirs, jitter, t_min, t_max)
        samples = int(ray.shape[0])
        if samples:
            sigma, rgb, ray, t0, t1 = self._shade(o, d, ray, t0, t1, R)
        else:
            sigma = torch.zeros(0, device=dev, requires_grad=torch.is_grad_enabled())
            rgb = torch.zeros(0, 3, device=dev)
        weights, _ = transmittance_weights(sigma, t0, t1, ray, R)
        return self._ray_outputs(weights, rgb, t0, t1, ray, R, background, samples, median)

    def _ray_outputs(self, weights: Tensor, rgb: Tensor, t0: Tensor, t1: Tensor, ray: Tensor, R: int,
                     background: Tensor, samples: int, median: bool) -> dict:
        """:meth:`render_rays`' dict from the coloured samples' ``weights`` [S] and ``rgb`` [S, 3] (``samples``:
        how many were marched; ``median``: whether "median_depth" is computed); NeuS's render_rays shares it."""
        bg = background.to(device=self.device, dtype=torch.float32)
        colour, acc, depth = composite(weights, rgb, t0, t1, ray, R, bg)
        if samples == 0 and torch.is_grad_enabled():  # keep the graph connected to the parameters
            colour = colour + 0.0 * self.field.table.sum()
        out = {"rgb": colour, "opacity": acc, "depth": depth, "samples": samples}
        if median:
            out["median_depth"] = median_depth(weights, t0, t1, ray, R)
        return out

    def _shade(self, o: Tensor, d: Tensor, ray: Tensor, t0: Tensor, t1: Tensor, R: int
               ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """(sigma [A], rgb [A, 3], ray, t0, t1 [A]) of the A of the marched samples (``ray``, ``t0``, ``t1`` [S]
        of rays ``o`` / ``d`` [R, 3]) in front of transmittance :data:`EARLY_STOP`. With gradients enabled the
        densities are first evaluated without them to find those samples, and only those are evaluated again
        with gradients and coloured (nerfacc's two passes), unless :meth:`_one_pass` applies."""
        if torch.is_grad_enabled() and self._one_pass(ray.shape[0]):
            return self._shade_one_pass(o, d, ray, t0, t1, R)
        grad = torch.is_grad_enabled()
        with torch.no_grad():
            sigma, geo = self._density_no_grad(o, d, ray, t0, t1, keep_geo=not grad)
            _, trans = transmittance_weights(sigma, t0, t1, ray, R)
            alive = trans > EARLY_STOP
        ray, t0, t1 = ray[alive], t0[alive], t1[alive]
        if grad:
            sigma, geo = self.field.density(self._unit(o, d, ray, t0, t1))
            return sigma, self.field.color(geo, d.float(), ray), ray, t0, t1
        return sigma[alive], self._color_no_grad(geo[alive], d[ray]), ray, t0, t1

    def _one_pass(self, samples: int) -> bool:
        """Whether a training batch of ``samples`` marched samples takes :meth:`_shade_one_pass`: when the field's
        density backward skips rows without cotangents (the fused CPU kernels) and the batch's kept features
        fit (at most :data:`ONE_PASS_SAMPLES`; a young unbounded field marches far more: two passes)."""
        probe = self.field.table.new_zeros(1, 3)
        return samples <= ONE_PASS_SAMPLES and self.field.density_skips_dead_rows(probe)

    def _shade_one_pass(self, o: Tensor, d: Tensor, ray: Tensor, t0: Tensor, t1: Tensor, R: int
                        ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """:meth:`_shade` with the density of all S samples evaluated once, with gradients: the samples behind
        EARLY_STOP are dropped by indexing, so their cotangents are exactly 0 and the fused backward skips them;
        the forward is not run a second time over the samples kept (issue 53). The values of the two passes to
        float32 rounding (the fused kernels' block products depend on the batch: features within ~1e-6, gradients
        within ~5e-7; ``tests/recon/nerf/test_nerf_one_pass.py``)."""
        sigma, geo = self.field.density(self._unit(o, d, ray, t0, t1))
        with torch.no_grad():
            _, trans = transmittance_weights(sigma.detach(), t0, t1, ray, R)
            alive = trans > EARLY_STOP
        ray, t0, t1 = ray[alive], t0[alive], t1[alive]
        return sigma[alive], self.field.color(geo[alive], d.float(), ray), ray, t0, t1

    def _chunk_rays(self) -> int:
        """Rays per chunk of a whole-image render: ``cfg.eval_rays``, fewer when the running estimate of
        marched samples per ray says a chunk would march more than :data:`EVAL_SAMPLES` samples (their
        positions, steps and densities are held for the whole chunk; at least MIN_RAYS)."""
        return int(min(self.cfg.eval_rays, max(MIN_RAYS, EVAL_SAMPLES / max(self.samples_per_ray, 1.0))))

    def _density_no_grad(self, o: Tensor, d: Tensor, ray: Tensor, t0: Tensor, t1: Tensor, keep_geo: bool
                         ) -> tuple[Tensor, Tensor | None]:
        """(sigma [S], geometry features [S, geo_dim] when ``keep_geo``, else None) of the samples (``ray``,
        ``t0``, ``t1`` [S]) without gradients, the field evaluated :data:`NO_GRAD_SAMPLES` samples at a time:
        an unbounded capture marches thousands of samples per ray before its occupancy grid has pruned
        space, and the encoding and MLP activations of all of them at once took the 24 GiB machine out of
        memory (colmap_bird, 16,384 rays x ~1,600 samples)."""
        dt = self.field.table.dtype
        sigma = torch.empty(ray.shape[0], device=ray.device, dtype=dt)
        geo = torch.empty(ray.shape[0], self.cfg.geo_dim, device=ray.device, dtype=dt) if keep_geo else None
        for s in range(0, ray.shape[0], NO_GRAD_SAMPLES):
            e = s + NO_GRAD_SAMPLES
            sigma[s:e], g = self.field.density(self._unit(o, d, ray[s:e], t0[s:e], t1[s:e]))
            if keep_geo:
                geo[s:e] = g
        return sigma, geo

    def _color_no_grad(self, geo: Tensor, dirs: Tensor) -> Tensor:
        """rgb [S, 3] of geometry features [S, geo_dim] seen along unit ``dirs`` [S, 3] without gradients,
        :data:`NO_GRAD_SAMPLES` at a time."""
        out = torch.empty(geo.shape[0], 3, device=geo.device, dtype=geo.dtype)
        for s in range(0, geo.shape[0], NO_GRAD_SAMPLES):
            e = s + NO_GRAD_SAMPLES
            out[s:e] = self.field.color(geo[s:e], dirs[s:e].float())
        return out

    def _unit(self, o: Tensor, d: Tensor, ray: Tensor, t0: Tensor, t1: Tensor) -> Tensor:
        """[S, 3] float32 unit-cube positions of the sample midpoints."""
        mid = 0.5 * (t0 + t1)
        return to_unit(o[ray] + mid[:, None] * d[ray], self.space).clamp(0.0, 1.0).float()

    @torch.no_grad()
    def _render_camera(self, camera, background: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(rgb [H, W, 3], opacity [H, W, 1], expected and median camera-z depth [H, W, 1]) of one camera, in
        ray chunks."""
        H, W = camera.height, camera.width
        o, d, zs = camera_pixel_rays(camera)
        out = self._rays_in_chunks(o, d, background, ("rgb", "opacity", "depth", "median_depth"))
        zs = zs.to(self.device, torch.float32)
        return (out["rgb"].reshape(H, W, 3), out["opacity"].reshape(H, W, 1), (out["depth"] * zs).reshape(H, W, 1),
                (out["median_depth"] * zs).reshape(H, W, 1))

    def _rays_in_chunks(self, o: Tensor, d: Tensor, background: Tensor, keys: tuple[str, ...],
                        t_min: Tensor | None = None, t_max: Tensor | None = None) -> dict[str, Tensor]:
        """The ``keys`` outputs of :meth:`render_rays` for rays [R, 3] (bounds [R] or None), marched
        :meth:`_chunk_rays` rays at a time and concatenated (R > 0)."""
        parts: dict[str, list[Tensor]] = {k: [] for k in keys}
        step = self._chunk_rays()
        for s in range(0, o.shape[0], step):
            part = slice(s, s + step)
            out = self.render_rays(o[part], d[part], background, t_min=None if t_min is None else t_min[part],
                                   t_max=None if t_max is None else t_max[part])
            for k in keys:
                parts[k].append(out[k])
        return {k: torch.cat(v) for k, v in parts.items()}

    def render(self, cameras: Sequence, sh_degree: int | None = None, background: Tensor | None = None, *,
               t: float | None = None, absgrad: bool = False, backend: str = "auto") -> tuple[Tensor, Tensor, dict]:
        """(rgb [C, H, W, 3], opacity [C, H, W, 1], meta) of whole images (no gradients; ``sh_degree``, ``t``,
        ``absgrad`` and ``backend`` do not apply). ``meta``: ``depth`` and ``median_depth`` [C, H, W, 1] (camera
        z of the expected / median distance, 0 where the opacity is below 0.5), ``width``, ``height``."""
        bg = background if background is not None else torch.zeros(3)
        outs = [self._render_camera(c, bg) for c in cameras]
        rgb = torch.stack([o[0] for o in outs])
        alpha = torch.stack([o[1] for o in outs])
        depth, median = (torch.stack([torch.where(o[1] >= 0.5, o[k], torch.zeros_like(o[k])) for o in outs])
                         for k in (2, 3))
        return rgb, alpha, {"depth": depth, "median_depth": median, "width": cameras[0].width,
                            "height": cameras[0].height}

    def extra_outputs(self, meta: dict) -> dict[str, Tensor]:
        return {"depth": meta["depth"]}

    # ---------------------------------------------------------------------------- hybrid (mesh insertion)

    def render_front(self, cameras: Sequence, depth_limit: Tensor, *, t: float | None = None,
                     backend: str = "auto") -> tuple[Tensor, Tensor, Tensor]:
        """See :meth:`SceneModel.render_front`. Each pixel's ray (as :meth:`render`, no jitter) is marched
        from the model's near distance to the mesh hit: the camera-z limit [C, H, W] becomes the distance
        ``t = z / (d . forward)`` along the unit ray (+inf: none) and the last step is cut there
        (:meth:`render_rays`), so no sample beyond the hit is weighted. Differentiable in the field's
        parameters when gradients are enabled (``t`` and ``backend`` do not apply). Returns (rgb [C, H, W,
        3] premultiplied, no background; transmittance [C, H, W, 1] = 1 - opacity; expected depth [C, H, W,
        1] camera z, 0 where nothing was accumulated)."""
        C, H, W = len(cameras), cameras[0].height, cameras[0].width
        if tuple(depth_limit.shape) != (C, H, W):
            raise ValueError(f"NerfModel.render_front: depth_limit has shape {list(depth_limit.shape)}, expected "
                             f"[{C}, {H}, {W}] (cameras, height, width)")
        limits = depth_limit.detach().to("cpu", torch.float64).reshape(C, H * W)
        if bool(torch.isnan(limits).any()):
            raise ValueError("NerfModel.render_front: depth_limit contains NaN; use +inf for pixels without a limit")
        rgb, trans, depth = [], [], []
        for c, camera in enumerate(cameras):
            if (camera.height, camera.width) != (H, W):
                raise ValueError("NerfModel.render_front: the cameras must have one size")
            o, d, zs = camera_pixel_rays(camera)
            out = self._render_chunks(o, d, None, limits[c] / zs)
            rgb.append(out[0].reshape(H, W, 3))
            trans.append(out[1].reshape(H, W, 1))
            depth.append((out[2] * zs.to(out[2])).reshape(H, W, 1))
        return torch.stack(rgb), torch.stack(trans), torch.stack(depth)

    def trace_rays(self, origins: Tensor, dirs: Tensor, t_min: Tensor, t_max: Tensor, *,
                   t: float | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """See :meth:`SceneModel.trace_rays`: rays ``origins`` / unit ``dirs`` [R, 3] marched from ``t_min`` to
        ``t_max`` [R] (within the field's space and the model's far distance; the last step cut at t_max).
        Differentiable in the field's parameters when gradients are enabled. Returns (rgb [R, 3]
        premultiplied, no background; transmittance [R, 1] = 1 - opacity; distance [R, 1] expected
        distance along the ray, 0 where nothing was accumulated)."""
        R = origins.shape[0]
        for name, v, shape in (("origins", origins, (R, 3)), ("dirs", dirs, (R, 3)), ("t_min", t_min, (R,)),
                               ("t_max", t_max, (R,))):
            if tuple(v.shape) != shape:
                raise ValueError(f"NerfModel.trace_rays: {name} has shape {list(v.shape)}, expected {list(shape)}")
        rgb, trans, dist = self._render_chunks(origins.detach().double().cpu(), dirs.detach().double().cpu(),
                                               t_min.detach().double().cpu(), t_max.detach().double().cpu())
        return rgb, trans[:, None], dist[:, None]

    def _render_chunks(self, o: Tensor, d: Tensor, t_min: Tensor | None, t_max: Tensor
                       ) -> tuple[Tensor, Tensor, Tensor]:
        """(rgb [R, 3] premultiplied, transmittance [R], expected distance [R]) of rays [R, 3] bounded by
        ``t_min`` (None: the model's near distance) and ``t_max`` [R], in chunks of :meth:`_chunk_rays` rays."""
        if o.shape[0] == 0:
            z = torch.zeros(0, device=self.device)
            return z.reshape(0, 3), z, z
        out = self._rays_in_chunks(o, d, torch.zeros(3), ("rgb", "opacity", "depth"), t_min, t_max)
        return out["rgb"], 1.0 - out["opacity"], out["depth"]

    def render_depth(self, cameras: Sequence, kind: str, background: Tensor | None = None):
        """Mesh extraction's seam (recon.geometry.mesh_extraction.render_depth): (rgb [C, H, W, 3], depth [C, H, W, 1],
        opacity [C, H, W, 1]), depth the median ("median") or expected ("expected") camera z, 0 where the
        opacity is below 0.5."""
        rgb, alpha, meta = self.render(cameras, background=background)
        return rgb, meta["median_depth" if kind == "median" else "depth"], alpha

    # ---------------------------------------------------------------------------- training

    def ray_batch(self, images, cameras: Sequence, background: Tensor, generator: torch.Generator
                  ) -> tuple[Tensor, Tensor, dict]:
        """(prediction [R, 3], target [R, 3], meta) of R rays drawn across the training ``images``
        (:class:`recon.data.frame_images.FrameImages`, indexed like ``cameras``); targets composited on
        ``background`` [3]; pixels outside a dataset loss mask take the target's value (no loss there).
        ``meta["render"]`` [R, 3] is the plain prediction (nothing filled in; for metrics) and
        ``meta["mask"]`` [R, 1] the rays' loss mask (None without masks).
        R = target_samples / samples_per_ray, clamped to [256, max_rays]; the estimate is then updated."""
        if self._source is None or self._source.key != (id(images), len(images)):
            self._source = RaySource(images, cameras, self.device)
        n = int(min(self.cfg.max_rays, max(MIN_RAYS, self.cfg.target_samples / max(self.samples_per_ray, 1e-3))))
        o, d, rgba, mask = self._source.draw(n, generator)
        jitter = torch.rand(n, generator=generator, dtype=torch.float64)
        bg = background.to(self.device, torch.float32)
        gt = rgba[:, :3] * rgba[:, 3:] + bg * (1.0 - rgba[:, 3:])
        out = self.render_rays(o, d, bg, jitter, median=False)
        pred = out["rgb"] if mask is None else out["rgb"] * mask + gt * (1.0 - mask)
        self.samples_per_ray = 0.9 * self.samples_per_ray + 0.1 * max(out["samples"] / n, 1.0)
        return pred, gt, {"rays": n, "samples": out["samples"], "render": out["rgb"], "mask": mask,
                          **out.get("train_meta", {})}

    def ray_loss(self, pred: Tensor, gt: Tensor) -> Tensor:
        """Mean squared error."""
        return F.mse_loss(pred, gt)

    @torch.no_grad()
    def update_occupancy(self, decay: float, threshold: float, fraction: float) -> None:
        """Re-estimate the occupancy grid (:meth:`OccupancyGrid.update`) with the field's density."""
        self.grid.update(lambda u: self.field.density(u.to(self.device))[0], self.dt_min, decay, threshold, fraction)

    # ---------------------------------------------------------------------------- optimisation

    def update_params(self, fn_param, fn_state, names: Sequence[str] = ()) -> None:
        raise NotImplementedError("NerfModel: the field's parameters have fixed shapes (no densification)")

    def set_step(self, step: int, total_steps: int) -> None:
        """Learning rate: linear warm-up from 1 % over ``lr_warmup_steps``, x 0.33 at 50, 75 and 90 % of
        the run (nerfacc's instant-ngp schedule)."""
        warm = self.cfg.lr_warmup_steps
        factor = 1.0 if warm <= 0 else min(1.0, 0.01 + 0.99 * step / warm)
        factor *= LR_GAMMA ** sum(step >= m * total_steps for m in LR_MILESTONES)
        for group in self.optimizer.param_groups:  # a group's "lr_scale" (neus: the variance) scales its rate
            group["lr"] = self.cfg.lr * factor * group.get("lr_scale", 1.0)

    # ---------------------------------------------------------------------------- IO

    def state_dict(self) -> dict:
        """Plain checkpoint dict: method, config, space, field weights, occupancy grid, optimiser, estimate."""
        return {"method": self.method, "config": asdict(self.cfg), "field_config": asdict(self.field_cfg),
                "space": self.space.to_dict(),
                "extent": self.extent, "field": {n: p.detach().cpu() for n, p in self.params.items()},
                "grid": {"resolution": self.grid.resolution, "values": self.grid.values.cpu(),
                         "bits": self.grid.bits.cpu()},
                "optimizer": self.optimizer.state_dict(), "samples_per_ray": self.samples_per_ray}

    @classmethod
    def from_state_dict(cls, state: dict, device: torch.device | str = "cpu") -> "NerfModel":
        """Rebuild a model saved by :meth:`state_dict`; ValueError when ``state`` holds another method's model."""
        check_state_method(cls, state)
        model = cls._blank_from_state(state)
        with torch.no_grad():
            for n, p in model.params.items():
                p.copy_(state["field"][n])
        g = state["grid"]
        model.grid = OccupancyGrid(int(g["resolution"]), g["values"], g["bits"])
        model._load_optimizer_state(state["optimizer"])
        model.samples_per_ray = float(state["samples_per_ray"])
        return model.to(device)

    @classmethod
    def _blank_from_state(cls, state: dict) -> "NerfModel":
        """A model of the checkpoint's configuration and space (weights not yet loaded)."""
        field_cfg = FieldConfig(**state.get("field_config", {}))  # checkpoints before --field: the default field
        return cls(loaded_nerf_config(state["config"]), FieldSpace.from_dict(state["space"]), state["extent"],
                   field_cfg=field_cfg)

    @torch.no_grad()
    def to_splat_data(self) -> SplatData:
        """A baked Gaussian approximation (see the module docstring): up to :data:`MAX_BAKED` of the occupied
        cells with the highest values, each an isotropic Gaussian of half the cell's size."""
        G = self.grid.resolution
        cells = self.grid.bits.reshape(-1).nonzero()[:, 0]
        if cells.numel() > MAX_BAKED:
            cells = cells[torch.topk(self.grid.values[cells], MAX_BAKED).indices]
        ijk = torch.stack([cells // (G * G), (cells // G) % G, cells % G], 1).float()
        u = (ijk + 0.5) / G
        x, cell = self._from_unit(u.double().to(self.device))
        opacity, rgb = self._bake_cells(u.to(self.device), cell)
        opacity = opacity.double().clamp(1e-6, 1 - 1e-6)
        sh0 = (rgb.double() - 0.5) / 0.28209479177387814
        n = len(u)
        return SplatData.from_torch({"means": x, "quats": torch.tensor([1.0, 0, 0, 0]).expand(n, 4),
                                     "log_scales": torch.log(0.5 * cell)[:, None].expand(n, 3),
                                     "logit_opacities": torch.logit(opacity), "sh": sh0[:, None, :]})

    def _bake_cells(self, u: Tensor, cell: Tensor) -> tuple[Tensor, Tensor]:
        """(opacity [N], rgb [N, 3]) of the baked Gaussian of each cell centred at unit-cube ``u`` [N, 3] of world
        size ``cell`` [N]: the opacity of the density over the cell, the colour averaged over six directions."""
        sigma, geo = self.field.density(u)
        dirs = torch.cat([torch.eye(3), -torch.eye(3)]).to(self.device)
        rgb = torch.stack([self.field.color(geo, dv.expand(len(u), 3)) for dv in dirs]).mean(0)
        return -torch.expm1(-sigma.double() * cell), rgb

    def _from_unit(self, u: Tensor) -> tuple[Tensor, Tensor]:
        """(world positions [N, 3], world size of a grid cell there [N]) of unit-cube points ``u`` [N, 3]."""
        lo = torch.tensor(self.space.lo, dtype=u.dtype, device=u.device)
        size = torch.tensor(self.space.size, dtype=u.dtype, device=u.device)
        G = self.grid.resolution
        if not self.space.contracted:
            return lo + u * size, torch.full((len(u),), float(size.min()) / G, dtype=u.dtype, device=u.device)
        c = 4.0 * u - 2.0
        m = c.abs().amax(1, keepdim=True).clamp(min=1e-12)
        outer = m > 1.0
        y = torch.where(outer, c / m / (2.0 - m).clamp(min=1e-6), c)
        # d|y|/d|c| = 1 / (2 - m)^2 outside the unit cube: cells stretch with it
        stretch = torch.where(outer, 1.0 / (2.0 - m).clamp(min=1e-3) ** 2, torch.ones_like(m))[:, 0]
        return lo + y * size, 4.0 * size[0] / G * stretch


def check_encoding_mlp(cfg) -> None:
    """``--nerf.encoding-mlp fused`` asks for the fused CPU kernel (recon/nerf/fused_encoding_mlp.py) always:
    refused before training where it cannot serve (another decoder, a CUDA device) instead of failing at the
    first step."""
    if cfg.nerf.encoding_mlp != "fused":
        return
    if cfg.field.encoding == "triplane":
        raise ConfigValueError("--nerf.encoding-mlp fused: the fused kernel reads hash / dense tables, not "
                               "--field.encoding triplane; use auto or unfused")
    if cfg.field.decoder != "mlp":
        raise ConfigValueError(f"--nerf.encoding-mlp fused: the fused kernel serves the MLP decoder (--field.decoder "
                               f"{cfg.field.decoder} has its own path); use auto")
    if resolve_device(cfg.device).type != "cpu":
        raise ConfigValueError("--nerf.encoding-mlp fused: a CPU (Numba) kernel; on a CUDA device use auto or "
                               "unfused")


def loaded_nerf_config(saved: dict) -> NerfConfig:
    """The NerfConfig of a checkpoint; a run trained with ``encoding_mlp`` "fused" loads as "auto" (the same
    kernel on the CPU; the unfused path where it cannot serve, e.g. a CUDA viewer)."""
    saved = dict(saved)
    if saved.get("encoding_mlp") == "fused":
        saved["encoding_mlp"] = "auto"
    return NerfConfig(**saved)
