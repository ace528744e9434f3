"""Gaussians bound to the triangles of a skinned template mesh (method "meshgs"; docs/avatars.md).

Parameters (raw, pre-activation), all relative to the Gaussian's triangle ``face_ids[i]`` (a non-trainable
int64 buffer kept aligned with the parameters by :meth:`MeshGaussians.update_params`):

=====================  ===========  ==========================================================
name                   shape        meaning
=====================  ===========  ==========================================================
``bary_logits``        [N, 3]       barycentric coordinates = softmax (always inside the triangle)
``offsets``            [N]          normal offset = ``max_offset`` tanh(raw), in triangle sizes
``quats``              [N, 4]       rotation (w, x, y, z) relative to the triangle frame [t b n]
``log_scales``         [N, 3]       log standard deviations in triangle sizes (mean edge lengths)
``logit_opacities``    [N]          logit of the opacity
``sh0``, ``shN``       [N, K, 3]    SH colour, as 3DGS (directions in world space)
=====================  ===========  ==========================================================

Rendering at a frame's time ``t`` skins the template into that frame's captured pose
(:class:`recon.avatar.avatar_data.AvatarData`: a frame's time names its pose; a time between two poses
slerps them, :mod:`recon.avatar.pose_time`), builds the posed triangles'
frames and binds the Gaussians to them (:func:`recon.avatar.binding.bind`), then rasterizes the world
Gaussians; :meth:`MeshGaussians.render_pose` does the same for any pose (animations). ``t`` None is the
rest pose (what splats.ply holds). With ``--meshgs.pose-mlp-width N`` a small MLP
(:mod:`recon.avatar.pose_mlp`, trained with the Gaussians, regularised by :meth:`MeshGaussians.loss_terms`)
corrects the triangle-local parameters per pose (zero in the rest pose). The densification signal is 3DGS's (``meta["means2d"]`` of all N
Gaussians); the strategy is :class:`recon.strategy.adc_mesh.MeshADCStrategy` (splits stay on their triangle).
The model, with the avatar (template, skin, poses), lives in the checkpoints (``MODEL_IN_CHECKPOINTS``).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Callable, ClassVar, Sequence

import numpy as np
import torch
from torch import Tensor

from rasterizer import Camera, rasterize_gaussians, stack_cameras
from recon.avatar.avatar_data import AvatarData
from recon.avatar.binding import PosedTriangles, WorldGaussians, bind
from recon.avatar.config import MeshGSConfig
from recon.avatar.pose_mlp import (BARY_SHIFT, SCALE_SHIFT, PoseOffsetMLP, apply_correction, gaussian_features,
                                   pose_features)
from recon.avatar.skin_file import largest_influences
from recon.core.avatar_record import AvatarRecord
from recon.core.errors import ConfigValueError, UsageError
from recon.core.splat_data import SplatData
from recon.models.base import GaussianRows, SceneModel, check_state_method, register_model
from recon.models.gaussians import LearningRates, resize_optimizer_state, rgb_to_sh0


def _f32(t: Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32)


def _i64(t: Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.int64)


PARAM_NAMES = ("bary_logits", "offsets", "quats", "log_scales", "logit_opacities", "sh0", "shN")
NORMAL_SCALE_RATIO = 0.5  # initial normal-axis standard deviation / in-plane one


@register_model("meshgs")
class MeshGaussians(GaussianRows, SceneModel):
    """Gaussians bound to a skinned template's triangles, with their optimiser (see the module docstring).

    Attributes:
        params: name -> ``torch.nn.Parameter``; face_ids: [N] int64 triangle of each Gaussian.
        avatar: the template, skin and captured poses; options: the ``meshgs`` config section;
        sh_degree, extent, antialiased, lrs: as :class:`recon.models.gaussians.GaussianModel`.
    """

    ROWS: ClassVar[str] = "offsets"
    MODEL_IN_CHECKPOINTS: ClassVar[bool] = True  # splats.ply is the rest pose; the bound model is in checkpoints
    POSED_BY_TIME: ClassVar[bool] = True  # any time in [0, 1] is a pose (the viewer plays it: viewer/avatar.py)
    config_sections = ("meshgs",)

    def __init__(self, params: dict[str, Tensor], face_ids: Tensor, avatar: AvatarData, sh_degree: int, extent: float,
                 options: MeshGSConfig | None = None, antialiased: bool = False, lrs: LearningRates | None = None):
        missing = [n for n in PARAM_NAMES if n not in params]
        if missing:
            raise KeyError(f"MeshGaussians: missing parameter(s) {missing}")
        self.sh_degree, self.extent, self.antialiased = int(sh_degree), float(extent), bool(antialiased)
        self.options = options or MeshGSConfig()
        self.lrs = lrs or LearningRates()
        self.avatar = avatar
        self.params = {n: torch.nn.Parameter(params[n].detach().float().contiguous()) for n in PARAM_NAMES}
        self.face_ids = torch.as_tensor(face_ids, dtype=torch.int64).to(self.device)
        self.pose_mlp = None
        if self.options.pose_mlp_width > 0:
            self.pose_mlp = PoseOffsetMLP(avatar.skin.num_joints, self.options.pose_mlp_width,
                                          self.options.pose_mlp_frequencies).to(self.device)
        self._check_shapes()
        self.optimizer = self._make_optimizer()

    def _make_optimizer(self) -> torch.optim.Adam:
        groups = [{"params": [self.params[n]], "lr": self._base_lr(n), "name": n} for n in PARAM_NAMES]
        if self.pose_mlp is not None:
            groups.append({"params": list(self.pose_mlp.parameters()), "lr": self.options.pose_mlp_lr,
                           "name": "pose_mlp"})
        return torch.optim.Adam(groups, eps=self.lrs.eps, fused=True)

    def _load_optimizer_state(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)
        for group in self.optimizer.param_groups:
            group.update(fused=True, foreach=None)

    # ---------------------------------------------------------------------------- construction

    @classmethod
    def check_config(cls, cfg) -> None:
        """One pose per render: ``--batch`` must be 1; MCMC is not offered (the strategy table refuses it)."""
        if cfg.batch != 1:
            raise ConfigValueError(f"--batch {cfg.batch}: --method meshgs renders one view (one pose) per step; "
                                   f"use --batch 1")
        m = cfg.meshgs
        if m.init_per_triangle < 1 or not (0 < m.max_offset < 100) or not m.init_scale > 0:
            raise ConfigValueError("--meshgs.init-per-triangle must be >= 1, --meshgs.max-offset in (0, 100) and "
                                   "--meshgs.init-scale > 0")
        if m.pose_mlp_width < 0 or m.pose_mlp_frequencies < 0:
            raise ConfigValueError("--meshgs.pose-mlp-width and --meshgs.pose-mlp-frequencies must be >= 0 "
                                   "(width 0: no pose MLP)")

    @classmethod
    def initialize(cls, cfg, scene, generator: torch.Generator, log=print) -> "MeshGaussians":
        """``cfg.meshgs.init_per_triangle`` Gaussians on every triangle of the scene's template: barycentric
        positions uniform over the triangle, on the surface, in-plane scale ``init_scale`` triangle sizes,
        random colours, opacity ``init_opacity`` (default 0.1). UsageError for a scene without an avatar."""
        avatar = getattr(scene, "avatar", None)
        if avatar is None:
            raise UsageError(f"--method meshgs: {scene.root or scene.source_format} is not an avatar capture (no "
                             f"poses.json with a skinned template); see docs/avatars.md")
        m = cfg.meshgs
        faces = len(avatar.faces)
        n = faces * m.init_per_triangle
        face_ids = torch.arange(faces).repeat_interleave(m.init_per_triangle)
        u = torch.rand(n, 2, generator=generator)
        flip = u.sum(1) > 1  # uniform over the triangle: reflect the upper half of the unit square
        u[flip] = 1 - u[flip]
        bary = torch.stack([1 - u.sum(1), u[:, 0], u[:, 1]], 1).clamp(min=1e-4)
        opacity = cfg.init_opacity if cfg.init_opacity is not None else 0.1
        s = math.log(m.init_scale)
        K = (cfg.sh_degree + 1) ** 2
        params = {"bary_logits": torch.log(bary / bary.sum(1, keepdim=True)), "offsets": torch.zeros(n),
                  "quats": torch.tensor([1.0, 0, 0, 0]).repeat(n, 1),
                  "log_scales": torch.tensor([s, s, s + math.log(NORMAL_SCALE_RATIO)]).repeat(n, 1),
                  "logit_opacities": torch.full((n,), math.log(opacity / (1 - opacity))),
                  "sh0": rgb_to_sh0(torch.rand(n, 3, generator=generator))[:, None, :],
                  "shN": torch.zeros(n, K - 1, 3)}
        log(f"meshgs: {n} Gaussians on {faces} triangles ({m.init_per_triangle} each), {avatar.skin.num_joints} "
            f"joints, {int((~avatar.unseen).sum())} training poses, {int(avatar.unseen.sum())} unseen")
        return cls(params, face_ids, avatar, cfg.sh_degree, scene.extent, m, cfg.antialiased, cfg.lr)

    @classmethod
    def from_splat_data(cls, data, extent: float = 1.0) -> "MeshGaussians":
        raise UsageError("a splat file cannot hold a meshgs model (it has no triangles, skin or poses): a meshgs "
                         "run's model is in its checkpoints; leave --splats out to use it")

    # ---------------------------------------------------------------------------- views

    @property
    def bary(self) -> Tensor:
        """[N, 3] barycentric coordinates (softmax of the logits)."""
        return torch.softmax(self.params["bary_logits"], dim=-1)

    @property
    def offsets(self) -> Tensor:
        """[N] normal offsets in triangle sizes (``max_offset`` tanh(raw))."""
        return self.options.max_offset * torch.tanh(self.params["offsets"])

    @property
    def scales(self) -> Tensor:
        """[N, 3] world standard deviations in the rest pose (what ADC compares with the scene extent)."""
        tri = self.triangles(self.avatar.rest_vertices.to(self.device))
        return torch.exp(self.params["log_scales"] + tri.log_sizes[self.face_ids][:, None])

    @property
    def sh(self) -> Tensor:
        return torch.cat([self.params["sh0"], self.params["shN"]], dim=1)

    def to(self, device) -> "MeshGaussians":
        device = torch.device(device)
        if device == self.device:
            return self
        state = self.optimizer.state_dict()
        self.params = {n: torch.nn.Parameter(p.detach().to(device)) for n, p in self.params.items()}
        self.face_ids = self.face_ids.to(device)
        self.avatar = self.avatar.to(device)
        if self.pose_mlp is not None:
            self.pose_mlp = self.pose_mlp.to(device)
        self.optimizer = self._make_optimizer()
        self._load_optimizer_state(state)
        return self

    # ---------------------------------------------------------------------------- posing

    def triangles(self, vertices: Tensor) -> PosedTriangles:
        """The posed template's triangles for ``vertices`` [V, 3]."""
        return PosedTriangles.of(vertices, self.avatar.faces.to(vertices.device))

    def local_gaussians(self, rotations: Tensor | None = None) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor],
                                                                         Tensor | None]:
        """((bary [N, 3], offsets [N], quats [N, 4], log_scales [N, 3]) in triangle-local form, the pose MLP's
        raw output [N, 6] or None): the parameters' values, corrected for the pose of joint ``rotations``
        [J, 4] when the model has a pose MLP (:mod:`recon.avatar.pose_mlp`; None: the rest pose, no correction)."""
        p = self.params
        bary, raw_offsets, log_scales = self.bary, p["offsets"], p["log_scales"]
        out = None
        if self.pose_mlp is not None and rotations is not None:
            out = self.pose_mlp(pose_features(rotations.to(self.device, torch.float32)), self.rest_features())
            bary, raw_offsets, log_scales = apply_correction(out, bary, raw_offsets, log_scales)
        offsets = self.options.max_offset * torch.tanh(raw_offsets)
        return (bary, offsets, p["quats"], log_scales), out

    def rest_features(self) -> Tensor:
        """[N, E] the pose MLP's Gaussian features: foot points on the rest template (no gradient), in its box."""
        rest = self.avatar.rest_vertices.to(self.device)
        with torch.no_grad():
            corners = rest[self.avatar.faces.to(self.device)[self.face_ids]]
            feet = torch.einsum("nc,ncx->nx", self.bary, corners)
        return gaussian_features(feet, rest.min(0).values, rest.max(0).values, self.options.pose_mlp_frequencies)

    def world_gaussians(self, vertices: Tensor, rotations: Tensor | None = None) -> WorldGaussians:
        """The Gaussians bound to the template posed at ``vertices`` [V, 3] (differentiable in the parameters);
        ``rotations`` [J, 4]: the pose of ``vertices``, for the pose MLP (None: no correction)."""
        local, _ = self.local_gaussians(rotations)
        return bind(self.triangles(vertices), self.face_ids, *local)

    def posed_gaussians(self, vertices: Tensor, rotations: Tensor | None = None) -> WorldGaussians:
        """:meth:`world_gaussians`, through the fused Numba kernel
        (:func:`recon.avatar.posing_kernel.bind_numba`, the same result) when the model is on the CPU and no
        gradient is being recorded (playback, ``render --animation``, export); else the PyTorch binding."""
        if self.device.type != "cpu" or torch.is_grad_enabled():
            return self.world_gaussians(vertices, rotations)
        from recon.avatar.posing_kernel import bind_numba

        local, _ = self.local_gaussians(rotations)
        return bind_numba(self.triangles(vertices), self.face_ids, *local)

    def pose_at_time(self, t) -> tuple[Tensor, Tensor | None] | None:
        """(rotations [J, 4], root translation [3]) of the pose at normalised time ``t`` in [0, 1] (captured
        pose k at ``k / (P - 1)``, interpolated between: :meth:`AvatarData.pose_at`); None for ``t`` None (the
        rest pose)."""
        if t is None:
            return None
        try:
            return self.avatar.pose_at(t)
        except ValueError as err:
            raise UsageError(f"--method meshgs: {err}") from None

    def vertices_at_time(self, t) -> Tensor:
        """[V, 3] the template in the pose at normalised time ``t`` (:meth:`pose_at_time`; None: the rest pose)."""
        return self.vertices_of(self.pose_at_time(t))

    def vertices_of(self, pose: tuple[Tensor, Tensor | None] | None) -> Tensor:
        """[V, 3] the template in ``pose`` ((rotations [J, 4], root translation [3]); None: the rest pose)."""
        if pose is None:
            return self.avatar.rest_vertices.to(self.device)
        return self.avatar.posed_vertices(*pose).to(self.device)

    # ---------------------------------------------------------------------------- rendering

    def render(self, cameras: Sequence[Camera], sh_degree: int | None = None, background: Tensor | None = None,
               *, t=None, absgrad: bool = False, backend: str = "auto") -> tuple[Tensor, Tensor, dict]:
        """Render into cameras of one size in the pose of time ``t`` (:meth:`vertices_at_time`; one number,
        or one per camera, all equal; None: the rest pose). Returns :func:`rasterize_gaussians`'s
        (rgb [C, H, W, 3], alpha [C, H, W, 1], meta)."""
        if t is not None and not isinstance(t, (int, float)) and not (torch.is_tensor(t) and t.dim() == 0):
            times = {None if v is None else float(v) for v in t}
            if len(times) != 1:
                raise UsageError("--method meshgs renders one pose at a time: the cameras' times differ")
            t = times.pop()
        pose = self.pose_at_time(t)
        return self.render_vertices(cameras, self.vertices_of(pose), sh_degree, background, absgrad=absgrad,
                                    backend=backend, rotations=None if pose is None else pose[0])

    def render_pose(self, cameras: Sequence[Camera], rotations: Tensor, translation: Tensor | None = None,
                    sh_degree: int | None = None, background: Tensor | None = None, backend: str = "auto"):
        """Render in any pose: ``rotations`` [J, 4] wxyz joint rotations, ``translation`` [3] of the root."""
        vertices = self.avatar.posed_vertices(rotations, translation).to(self.device)
        return self.render_vertices(cameras, vertices, sh_degree, background, backend=backend, rotations=rotations)

    def render_vertices(self, cameras: Sequence[Camera], vertices: Tensor, sh_degree: int | None = None,
                        background: Tensor | None = None, *, absgrad: bool = False, backend: str = "auto",
                        rotations: Tensor | None = None):
        """Render with the template's vertices at ``vertices`` [V, 3], posed by joint ``rotations`` [J, 4]
        (for the pose MLP; None: uncorrected). ``meta["pose_mlp"]``: the MLP's raw output [N, 6] when it ran."""
        viewmats, Ks, W, H = stack_cameras(list(cameras))
        dev = self.device
        viewmats, Ks = viewmats.to(dev, torch.float32), Ks.to(dev, torch.float32)
        degree = self.sh_degree if sh_degree is None else min(int(sh_degree), self.sh_degree)
        bg = None
        if background is not None:
            bg = torch.as_tensor(background, dtype=torch.float32, device=dev)
            bg = bg.expand(viewmats.shape[0], 3) if bg.dim() == 1 else bg
        if self.device.type != "cpu" or torch.is_grad_enabled():
            local, out = self.local_gaussians(rotations)
            world = bind(self.triangles(vertices), self.face_ids, *local)
        else:
            world, out = self.posed_gaussians(vertices, rotations), None
        rgb, alpha, meta = rasterize_gaussians(world.means, world.quats, torch.exp(world.log_scales), self.opacities,
                                               (self.params["sh0"], self.params["shN"]), viewmats, Ks, W, H,
                                               sh_degree=degree, backgrounds=bg, render_mode="RGB",
                                               rasterize_mode="antialiased" if self.antialiased else "classic",
                                               backend=backend, absgrad=absgrad)
        if out is not None:  # the model's addition to the meta (read back as meta["pose_mlp"])
            meta.backend_extras["pose_mlp"] = out
        return rgb, alpha, meta

    def loss_terms(self, meta: dict, step: int, cfg) -> dict[str, Tensor]:
        """``{"pose_mlp": pose_mlp_reg * mean(raw output^2)}`` when the step's render ran the pose MLP, else {}."""
        out = meta.get("pose_mlp")
        if out is None or self.options.pose_mlp_reg == 0:
            return {}
        return {"pose_mlp": self.options.pose_mlp_reg * out.pow(2).mean()}

    def metric_groups(self, per_view: Sequence[dict]) -> dict:
        """Mean PSNR of the evaluated views in training poses and, apart, in unseen poses (by their times):
        ``{"train_poses": {"psnr", "num_views"}, "unseen_poses": {...}}`` (a group without views: psnr None)."""
        groups = {"train_poses": [], "unseen_poses": []}
        for v in per_view:
            if v.get("time") is None:
                continue
            k = self.avatar.pose_index(v["time"])
            groups["unseen_poses" if bool(self.avatar.unseen[k]) else "train_poses"].append(v["psnr"])
        return {name: {"psnr": float(np.mean(p)) if p else None, "num_views": len(p)} for name, p in groups.items()}

    # ---------------------------------------------------------------------------- optimisation

    def _base_lr(self, name: str) -> float:
        if name == "bary_logits":
            return self.options.bary_lr
        if name == "offsets":
            return self.options.offset_lr
        return getattr(self.lrs, name)

    def means_lr(self, step: int, total_steps: int) -> float:
        """The barycentric logits' rate, decayed as 3DGS's means rate: ``lr0 ratio^(step / total)``."""
        t = min(max(step / max(total_steps, 1), 0.0), 1.0)
        return self._base_lr("bary_logits") * self.lrs.means_final_ratio ** t

    def set_step(self, step: int, total_steps: int) -> None:
        for group in self.optimizer.param_groups:
            if group["name"] == "bary_logits":
                group["lr"] = self.means_lr(step, total_steps)

    def update_params(self, fn_param: Callable[[str, Tensor], Tensor],
                      fn_state: Callable[[str, str, Tensor], Tensor], names: Sequence[str] = PARAM_NAMES) -> None:
        """As :meth:`GaussianModel.update_params`; when every parameter is resized (clone, split, prune) the
        ``face_ids`` buffer goes through ``fn_param("face_ids", ...)`` too, so each Gaussian keeps its triangle."""
        if set(names) == set(PARAM_NAMES):
            self.face_ids = fn_param("face_ids", self.face_ids)
        for name in names:
            old = self.params[name]
            new = torch.nn.Parameter(fn_param(name, old.detach()).contiguous())
            resize_optimizer_state(self.optimizer, old, new, lambda key, v, _n=name: fn_state(_n, key, v))
            self.params[name] = new
        self._check_shapes()

    def _check_shapes(self) -> None:
        N = self.params["offsets"].shape[0]
        K = (self.sh_degree + 1) ** 2
        expect = {"bary_logits": (N, 3), "offsets": (N,), "quats": (N, 4), "log_scales": (N, 3),
                  "logit_opacities": (N,), "sh0": (N, 1, 3), "shN": (N, K - 1, 3)}
        for n, shape in expect.items():
            if tuple(self.params[n].shape) != shape:
                raise ValueError(f"MeshGaussians.{n}: shape {tuple(self.params[n].shape)}, expected {shape}")
        if tuple(self.face_ids.shape) != (N,):
            raise ValueError(f"MeshGaussians.face_ids: shape {tuple(self.face_ids.shape)}, expected ({N},)")

    # ---------------------------------------------------------------------------- IO

    def to_splat_data(self, t: float | None = None) -> SplatData:
        """The world Gaussians in the pose of time ``t`` (:meth:`pose_at_time`; None: the rest pose, what
        splats.ply holds), bound by :meth:`posed_gaussians` (the fused Numba kernel on the CPU), with the pose
        MLP's correction when the model has one (the viewer's playback)."""
        pose = self.pose_at_time(t)
        with torch.no_grad():
            w = self.posed_gaussians(self.vertices_of(pose), None if pose is None else pose[0])
        return SplatData.from_torch({"means": w.means, "quats": w.quats, "log_scales": w.log_scales,
                                     "logit_opacities": self.params["logit_opacities"], "sh": self.sh},
                                    antialiased=self.antialiased)

    def to_avatar_record(self, rotations: Tensor | None = None, translations: Tensor | None = None,
                         fps: float = 2.0) -> AvatarRecord:
        """The avatar for engines (:class:`AvatarRecord`; written by recon.export.avatar_glb): template, skin
        (4 influences per vertex), Gaussians in triangle-local form, and an animation of ``rotations``
        [P, J, 4] / ``translations`` [P, 3] at ``fps`` (default: the captured poses, training and unseen)."""
        av, p = self.avatar, self.params
        rotations = av.rotations if rotations is None else rotations
        translations = av.translations if translations is None else translations
        joints, weights = largest_influences(av.skin.weights, 4, pad=True)
        sk = av.skin.skeleton
        return AvatarRecord(_f32(av.rest_vertices), _i64(av.faces), joints, weights.astype(np.float32),
                            _i64(sk.parents), _f32(sk.rest_positions), list(sk.names), _f32(rotations),
                            _f32(translations), float(fps), _i64(self.face_ids), _f32(self.bary), _f32(self.offsets),
                            _f32(p["quats"]), _f32(p["log_scales"]), _f32(p["logit_opacities"]), _f32(self.sh),
                            self.pose_mlp_record())

    def pose_mlp_record(self) -> dict | None:
        """The pose MLP as :class:`AvatarRecord` holds it (its layers, constants and the raw offsets it corrects;
        recon/export/AVATAR_GLB.md), or None without one."""
        if self.pose_mlp is None:
            return None
        state = {k: _f32(v) for k, v in self.pose_mlp.state_dict().items()}
        layers = [(name, state[f"{name}.weight"], state.get(f"{name}.bias"))
                  for name in ("pose.0", "pose.2", "gauss.0", "gauss.2", "head")]
        return {"frequencies": self.pose_mlp.frequencies, "max_offset": float(self.options.max_offset),
                "bary_shift": BARY_SHIFT, "scale_shift": SCALE_SHIFT, "raw_offsets": _f32(self.params["offsets"]),
                "layers": layers}

    def state_dict(self) -> dict:
        return {"method": self.method, "params": {n: p.detach().cpu() for n, p in self.params.items()},
                "face_ids": self.face_ids.cpu(), "avatar": self.avatar.state(),
                "optimizer": self.optimizer.state_dict(), "sh_degree": self.sh_degree, "extent": self.extent,
                "antialiased": self.antialiased, "lrs": asdict(self.lrs), "options": asdict(self.options),
                "pose_mlp": None if self.pose_mlp is None else {k: v.detach().cpu() for k, v in
                                                                 self.pose_mlp.state_dict().items()}}

    @classmethod
    def from_state_dict(cls, state: dict, device="cpu") -> "MeshGaussians":
        check_state_method(cls, state)
        avatar = AvatarData.from_state(state["avatar"])
        from recon.avatar.state_checks import check_bindings

        check_bindings(state["face_ids"], state["params"], len(avatar.faces))
        model = cls(state["params"], state["face_ids"], avatar, state["sh_degree"],
                    state["extent"], MeshGSConfig(**state.get("options", {})), state["antialiased"],
                    LearningRates(**state.get("lrs", {})))
        if model.pose_mlp is not None:
            if not state.get("pose_mlp"):
                raise UsageError("checkpoint: the meshgs options name a pose MLP but the checkpoint holds no weights")
            model.pose_mlp.load_state_dict(state["pose_mlp"])
        model._load_optimizer_state(state["optimizer"])
        return model.to(device)
