"""The scene-model interface every trainable method implements, and the method registry.

A method is a class deriving from :class:`SceneModel`, registered under its name with
:func:`register_model` (``TrainConfig.method`` picks it; ``MODELS`` maps names to classes). The trainer,
evaluation, ``render``, ``export`` and the viewer reach a model only through this interface and through
:class:`recon.run.folder.Run`; see recon/DESIGN.md ("How to add a primitive").

What a model provides:

- **initialisation** from a scene: ``initialize(cfg, scene, generator, log)`` (a classmethod; ``cfg`` is the
  :class:`recon.training.trainer.TrainConfig`, ``log`` gets human-readable lines);
- **rendering** into cameras of one size, with an optional normalised time ``t`` in [0, 1] (static methods
  ignore it): ``render(cameras, sh_degree, background, *, t=None, absgrad=False, backend="auto")`` returns
  ``(rgb [C, H, W, 3], alpha [C, H, W, 1], meta)``;
- **the densification signal**: ``meta`` carries what strategies read, as
  :func:`rasterizer.rasterize_gaussians` returns it: ``means2d`` [C, N, 2] (its ``.grad`` / ``.absgrad``
  after backward is the screen-space signal), ``radii`` [C, N, 2], ``width``, ``height``;
- **parameters and optimiser**: ``params`` (name -> ``torch.nn.Parameter``, first dimension = primitive
  count), ``optimizer``, ``step()``, ``zero_grad()``, ``set_step(step, total)`` (learning-rate schedule),
  ``means_lr(step, total)``, ``update_params(fn_param, fn_state, names)`` (the one way strategies resize
  parameters together with their optimiser state), ``len(model)``, ``device``, ``to(device)``;
- **checkpoints**: ``state_dict()`` (plain data and tensors only: checkpoints load with
  ``weights_only=True``) and the classmethod ``from_state_dict(state, device)``;
- **optional hooks** (defaults do nothing, so a method overrides only what it has):
  ``config_sections`` (the :class:`recon.training.trainer.TrainConfig` sections only this method reads, e.g.
  ``("surfels",)``), ``check_config(cfg)`` (refuse options the method does not support, before the scene
  is loaded), ``loss_terms(meta, step, cfg)`` (named loss tensors added to the photometric loss),
  ``screen_gradient(meta, absgrad)`` (the densification signal [C, N, 2] after backward; default
  ``meta["means2d"].grad`` / ``.absgrad``) and ``extra_outputs(meta)`` (named images besides colour,
  drawn into renders/ by :mod:`recon.outputs.images`: ``"depth"`` [C, H, W, 1], ``"normals"`` [C, H, W, 3]);
- **the export record**: ``to_splat_data()`` (a :class:`SplatData`, what splats.ply, the exporters and the
  browser viewer consume) and the classmethod ``from_splat_data(data, extent)`` (a run's splats.ply back
  into the method, for evaluation and rendering).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar, Sequence

import torch
from torch import Tensor

from recon.core.adam_step import adam_step
from recon.core.errors import ConfigValueError, UsageError


class NotCompositableError(UsageError):
    """The run's method cannot be composited with inserted meshes (or cannot trace secondary rays)."""


class SceneModel(ABC):
    """A trainable scene representation (see the module docstring for the contract)."""

    method: ClassVar[str] = ""  # the registered name (set by register_model)
    params: dict[str, torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    extent: float

    # ---------------------------------------------------------------------------- construction

    @classmethod
    @abstractmethod
    def initialize(cls, cfg: Any, scene: Any, generator: torch.Generator,
                   log: Callable[[str], None] = print) -> "SceneModel":
        """The initial model for ``scene`` (a :class:`recon.data.scene.Scene`) under training config ``cfg``."""

    @classmethod
    @abstractmethod
    def from_state_dict(cls, state: dict, device: torch.device | str = "cpu") -> "SceneModel":
        """Rebuild a model (and its optimiser state) saved by :meth:`state_dict`."""

    @classmethod
    @abstractmethod
    def from_splat_data(cls, data: Any, extent: float = 1.0) -> "SceneModel":
        """The model held by an export record (a run's splats.ply), to evaluate or render it."""

    # ---------------------------------------------------------------------------- views

    @abstractmethod
    def __len__(self) -> int:
        """Number of primitives."""

    @property
    def device(self) -> torch.device:
        return next(iter(self.params.values())).device

    @abstractmethod
    def to(self, device: torch.device | str) -> "SceneModel":
        """Move parameters and optimiser state to ``device``; returns self."""

    # ---------------------------------------------------------------------------- rendering

    @abstractmethod
    def render(self, cameras: Sequence[Any], sh_degree: int | None = None, background: Tensor | None = None, *,
               t: float | None = None, absgrad: bool = False,
               backend: str = "auto") -> tuple[Tensor, Tensor, dict]:
        """(rgb [C, H, W, 3], alpha [C, H, W, 1], meta) for C cameras of one size at time ``t``."""

    # ---------------------------------------------------------------------------- hybrid (mesh insertion)

    def render_front(self, cameras: Sequence[Any], depth_limit: Tensor, *, t: float | None = None,
                     backend: str = "auto") -> tuple[Tensor, Tensor, Tensor]:
        """What lies in front of an inserted mesh, for :mod:`recon.hybrid` (differentiable in the scene's
        parameters).

        Args:
            cameras: C cameras of one size; depth_limit [C, H, W] camera-space z of the first mesh hit per
                pixel (+inf where none); t: normalised time (static methods ignore it).
        Returns:
            (rgb [C, H, W, 3] colour composited from the fragments in front of the limit, premultiplied, no
            background; transmittance [C, H, W, 1] the light left for what is behind; depth [C, H, W, 1] the
            expected camera z of the front fragments, 0 where they are transparent). The pixel is then
            ``rgb + transmittance * colour_behind``.
        Default: :class:`NotCompositableError`."""
        raise NotCompositableError(f"--method {self.method}: this method's scenes cannot be composited with "
                                   "inserted meshes (supported: 3dgs, 2dgs, 4dgs, nerf)")

    def trace_rays(self, origins: Tensor, dirs: Tensor, t_min: Tensor, t_max: Tensor, *,
                   t: float | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """The scene along arbitrary rays (reflected / refracted secondary rays of :mod:`recon.hybrid`).

        Args:
            origins [R, 3], dirs [R, 3] unit (world); t_min, t_max [R] distances along the ray bounding what
            is composited (t_max: the next mesh hit, +inf where none); t: normalised time.
        Returns:
            (rgb [R, 3] premultiplied, no background; transmittance [R, 1]; distance [R, 1] expected
            distance of what was composited, 0 where transparent).
        Default: :class:`NotCompositableError`."""
        raise NotCompositableError(f"--method {self.method}: this method cannot trace secondary rays "
                                   "(mirror / glass materials); use --material diffuse")

    # ---------------------------------------------------------------------------- optional hooks

    RAY_BATCHES: ClassVar[bool] = False
    """True: trained on rays drawn across the training images (the trainer calls ``ray_batch(images,
    cameras, background, generator) -> (pred [R, 3], target [R, 3], meta)`` and ``ray_loss(pred, target)``
    instead of rendering one view; nerf). Such a method has no rendered training views, so the trainer refuses
    ``--batch`` and ``--supersample`` other than 1 for it (recon.training.trainer.check_view_options)"""

    RAY_BATCH_SIZE_HINT: ClassVar[str] = "size its rays per step with the method's own options"
    """A ``RAY_BATCHES`` method's answer to ``--batch N``: the options that size its rays per step."""

    config_sections: ClassVar[tuple[str, ...]] = ()
    """TrainConfig sections read only by this method (other methods' runs ignore them on resume)."""

    COUNT_NAME: ClassVar[str] = "Gaussians"
    """What ``len(model)`` counts (the CLI's summary line, loss.png's count panel); nerf/neus: occupied grid cells."""

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Raise ConfigValueError for training options this method does not support (default: none)."""

    @classmethod
    def uses_segmentation(cls, cfg: Any) -> bool:
        """Whether training with ``cfg`` reads the views' foreground segmentations (the trainer then decodes them
        with the images and passes them to :meth:`loss_terms` as ``meta["segmentations"]``; default: no)."""
        return False

    def configure(self, cfg: Any) -> None:
        """Take the instance options of the training config ``cfg`` (called by the trainer once the model is
        built or restored from a checkpoint; default: none)."""

    def loss_terms(self, meta: dict, step: int, cfg: Any) -> dict[str, Tensor]:
        """Named scalar losses that the trainer adds to the photometric loss at 0-based ``step`` (default:
        none), from this step's render ``meta`` and the training config ``cfg``."""
        return {}

    def screen_gradient(self, meta: dict, absgrad: bool = False) -> Tensor | None:
        """[C, N, 2] screen-space densification signal after backward (pixels): ``meta["means2d"]``'s
        ``.absgrad`` or ``.grad`` (None before backward)."""
        means2d = meta["means2d"]
        return means2d.absgrad if absgrad else means2d.grad

    def metric_groups(self, per_view: Sequence[dict]) -> dict:
        """Named groups of evaluated views with their mean PSNR (``{"name": {"psnr", "num_views"}}``), added
        to the evaluation's metrics as ``groups`` (meshgs: views in training poses and in unseen poses);
        ``per_view`` is :func:`recon.training.evaluation.evaluate_model`'s list. Default: none."""
        return {}

    def extra_outputs(self, meta: dict) -> dict[str, Tensor]:
        """Named images besides colour from a render's ``meta``, drawn into renders/ (default: none); the
        names are the kinds :mod:`recon.outputs.images` draws (``"depth"``, ``"normals"``)."""
        return {}

    # ---------------------------------------------------------------------------- optimisation

    @abstractmethod
    def update_params(self, fn_param: Callable[[str, Tensor], Tensor],
                      fn_state: Callable[[str, str, Tensor], Tensor], names: Sequence[str] = ()) -> None:
        """Replace parameters ``names`` (default: all) by ``fn_param(name, old)`` and map their optimiser
        state with ``fn_state(name, key, value)``."""

    def set_step(self, step: int, total_steps: int) -> None:
        """Apply the learning-rate schedule for ``step`` (default: constant rates)."""

    def means_lr(self, step: int, total_steps: int) -> float | None:
        """The positions' learning rate at ``step`` (strategies scale noise by it); None when not scheduled."""
        return None

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> None:
        """One optimiser step (:func:`recon.core.adam_step.adam_step`: a plain fused Adam without torch.optim's
        per-group Python, bit-identical; any other optimiser's own ``step()``)."""
        adam_step(self.optimizer)

    # ---------------------------------------------------------------------------- IO

    @abstractmethod
    def state_dict(self) -> dict:
        """Plain checkpoint dict (tensors on the CPU, numbers, strings, lists, dicts)."""

    @abstractmethod
    def to_splat_data(self) -> Any:
        """The export record (:class:`SplatData`, numpy float32 on the CPU)."""


class GaussianRows:
    """Views shared by the models whose parameters hold one row per Gaussian (3D, surfels, 4D, mesh-bound):
    the count is the rows of the parameter named ``ROWS``; ``logit_opacities`` [N] holds the opacities."""

    ROWS: ClassVar[str] = "means"
    params: dict[str, torch.nn.Parameter]

    def __len__(self) -> int:
        return int(self.params[self.ROWS].shape[0])

    @property
    def opacities(self) -> Tensor:
        """[N] activated opacities."""
        return torch.sigmoid(self.params["logit_opacities"])


def check_state_method(cls: type[SceneModel], state: dict, default: str = "3dgs") -> None:
    """ValueError when checkpoint ``state`` (a :meth:`SceneModel.state_dict`) was saved by another method
    than ``cls``'s; a state without a ``method`` entry is taken as ``default`` (checkpoints from before the
    entry were all 3dgs)."""
    saved = state.get("method", default) if isinstance(state, dict) else default
    if saved != cls.method:
        raise ValueError(f"the checkpoint holds a {saved!r} model, not a {cls.method!r} one (--method {saved} "
                         f"trained it)")


MODELS: dict[str, type[SceneModel]] = {}
"""Registered methods: ``TrainConfig.method`` -> model class."""


def register_model(name: str) -> Callable[[type[SceneModel]], type[SceneModel]]:
    """Class decorator: register a :class:`SceneModel` subclass under ``name`` (its ``method``).
    Registering another class under a taken name is a ValueError (re-registering the same one is not)."""

    def register(cls: type[SceneModel]) -> type[SceneModel]:
        if not (isinstance(cls, type) and issubclass(cls, SceneModel)):
            raise TypeError(f"register_model({name!r}): {cls!r} does not derive from SceneModel")
        if MODELS.get(name, cls) is not cls:
            raise ValueError(f"register_model({name!r}): the name is taken by {MODELS[name].__qualname__}")
        cls.method = name
        MODELS[name] = cls
        return cls

    return register


def model_class(method: str) -> type[SceneModel]:
    """The class registered under ``method``; ConfigValueError naming --method and the known names."""
    import recon.models  # noqa: F401 - registers the built-in methods

    try:
        return MODELS[method]
    except KeyError:
        raise ConfigValueError(f"--method {method}: not a registered method (known: {', '.join(sorted(MODELS))})") \
            from None
