"""One training loop for 3D Gaussian splatting: config, setup, steps, checkpoints/resume, outputs.

Per step: a random train view, loss ``0.8 L1 + 0.2 (1 - SSIM)`` (+ the strategy's regulariser),
backward, Adam step, densification hooks, means learning-rate decay, SH degree raised every
``sh_degree_interval`` steps. Iteration counts of the 30k-step recipe (densification schedule, SH
interval) are multiplied by ``steps_scaler`` (default ``steps / 30000``) so short runs keep the
proportions. Outputs are described in :mod:`recon.outputs.files`. Running again with the same ``out``
resumes from the newest checkpoint (``steps`` may be raised to extend a finished run, not lowered below
it); the folder may have been moved meanwhile. One training at a time writes a folder (its lock file).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from recon.data import load_scene
from recon.data.scene import DataFormatError, Scene
from recon.data.data_arg import PROCEDURAL, PROCEDURAL_4D, names_procedural_scene, resolved_data, saved_data_path
from recon.core.devices import resolve_device
from recon.core.schedule import schedule_scaler
from recon.core.errors import CheckpointError, ConfigValueError, RunFolderError
from recon.training.evaluation import LPIPS_NOTE, evaluate_model
from recon.export import write_ply4d, write_splats
from recon.data.frame_cache import max_cache_bytes, resolve_frame_cache, video_frame_cache
from recon.data.frame_images import FrameImages
from recon.data.n3dv import is_n3dv
from recon.data.video_frames import claim_video_frames
from recon.data.holdout import hold_out
from recon.models.init_region import parse_init_box
from recon.losses.image import masked_render, photometric_loss, quick_psnrs
from recon.models.base import MODELS, SceneModel, model_class
from recon.models.gaussians import LearningRates
from recon.nerf.config import FIELD_RANGES as NERF_FIELD_RANGES
from recon.nerf.config import FieldConfig, NerfConfig, NeusConfig
from recon.outputs import files as rf
from recon.outputs.history import RunHistory
from recon.strategy import STRATEGIES, ADCConfig, ADCStrategy, MCMCConfig, MCMCStrategy, OccupancyConfig, strategies_for
from recon.training.supersample import render_supersampled
from recon.losses.surfels import SurfelConfig
from recon.losses.spacetime import SpaceTimeConfig
from recon.avatar.config import MeshGSConfig

# fields that may differ when resuming (everything else must match the saved config.yaml); ``out`` is the
# folder itself, which may have been moved or named by another path since
RESUMABLE_CHANGES = {"out", "steps", "eval_every", "save_every", "keep_checkpoints", "progress", "device",
                     "overwrite", "viewer", "viewer_port", "viewer_every", "viewer_keep_open", "logger",
                     "logger_every", "remove_floaters", "floater_threshold", "cache_bytes",
                     "frame_cache", "frame_cache_bytes"}
# entries every checkpoint must hold (see Trainer.checkpoint_payload); "a.b" is key b of mapping a; the
# loss record is "history" ("losses" in checkpoints written before histories; see load_checkpoint)
CHECKPOINT_KEYS = ("step", "model", "strategy_state", "rng.torch", "rng.view", "history|losses", "train_seconds")


class ConfigMismatchError(RunFolderError, ValueError):
    """``out`` holds a run made with a different configuration."""


@dataclass
class TrainConfig:
    """Training configuration (saved as ``out/config.yaml``): flat fields, then the sections ``lr``,
    ``adc``, ``mcmc`` and ``surfels`` (nested dataclasses: ``--lr.means 1.6e-4``, ``--adc.grow-grad2d 0.0003``; nested
    mappings in config.yaml, where a missing section or field keeps its default)."""

    data: Path = Path(PROCEDURAL)
    """dataset folder (COLMAP, nerfstudio, Blender/D-NeRF), or "procedural" / "procedural-4d" for the built-in
    static / dynamic demo scene"""
    out: Path = Path("output")
    """run directory: config.yaml, checkpoints/, splats.ply, metrics.json, history.json, loss.png, renders/"""
    method: str = "3dgs"
    """scene model: a name registered in recon.models.base.MODELS ("3dgs": 3D Gaussians, "2dgs": 2D
    Gaussian surfels)"""
    steps: int = 30_000
    data_factor: int = 1
    """downscale images by this integer factor"""
    frame_stride: int = 1
    """videos (Neural 3D Video): keep every n-th frame"""
    time_range: str | None = None
    """videos (Neural 3D Video): "START:END" in seconds of the clip to train on (default: all of it)"""
    test_cameras: str | None = None
    """multi-view video (Panoptic, N3DV): hold out these cameras, "A,B" (their folder names), as the test
    split (recon.data.holdout); eval scores them"""
    test_every: int = 0
    """multi-view video (Panoptic, N3DV): hold out every camera's frames at every N-th time step as test
    frames (0: none; recon.data.holdout)"""
    cache_bytes: int | None = None
    """bytes of decoded training images kept in memory (an LRU; frames are decoded on first use); default
    a quarter of the available memory, at most 1 GiB (recon.data.frame_images.default_cache_bytes)"""
    frame_cache: str = "auto"
    """on-disk cache of decoded, downscaled frames (uint8 .npy per frame, reused across runs; recon.data.frame_cache):
    a folder, "auto" ($SPLATFORGE_CACHE/frames, else ~/.cache/splatforge/frames) or "off" (nothing kept: videos
    are decoded into a temporary folder removed at exit)"""
    frame_cache_bytes: int | None = None
    """size cap of the on-disk frame cache: after the run's frames are cached, the least recently used entries of
    other runs are removed until it fits (0: no cap; default $SPLATFORGE_FRAME_CACHE_BYTES, else 32 GiB)"""
    strategy: Literal["adc", "mcmc", "occupancy"] = "adc"
    """densification: adaptive density control (3DGS) or MCMC relocation; occupancy: the occupancy-grid
    updates of --method nerf (its only strategy)"""
    sh_degree: int = 3
    sh_degree_interval: int = 1000
    """raise the active SH degree by one every this many steps (x steps_scaler)"""
    antialiased: bool = False
    background: Literal["auto", "white", "black", "random"] = "auto"
    """background behind the Gaussians; auto = the dataset's (white for Blender/procedural), except that 2dgs
    trains on random colours when the images have alpha (evaluation keeps the dataset's)"""
    eval_every: int = 0
    """evaluate on the test views every N steps (0: only at the end)"""
    save_every: int = 5000
    keep_checkpoints: int = 2
    seed: int = 0
    max_gaussians: int = 1_000_000
    """cap on the Gaussian count (MCMC cap_max; ADC stops growing there)"""
    steps_scaler: float | None = None
    """multiplier of the 30k-step schedule; default steps / 30000"""
    init_type: Literal["sfm", "random"] = "sfm"
    """initial Gaussians: the dataset's points (sfm; random when it has none) or random ones"""
    init_num_random: int = 100_000
    """Gaussians for scenes without points (random in the box the cameras look at; see recon.models.init_region)"""
    init_box: str | None = None
    """box for random init, "cx,cy,cz,half" (write --init-box=-1,0,0,2 for a negative first number);
    default: chosen from the cameras (recon.models.init_region)"""
    init_opacity: float | None = None
    """initial opacity; default 0.1 (adc) or 0.5 (mcmc, as gsplat)"""
    init_scale: float | None = None
    """initial scale factor on the 3-NN distance; default 1.0 (adc) or 0.1 (mcmc)"""
    ssim_lambda: float = 0.2
    supersample: int = 1
    """render each training view at N x its resolution and average N x N pixel blocks (a box filter: the
    pixel integrates its area, as a camera's sensor and antialiased renders do; about N^2 the rasterizer
    work). Evaluation renders the same way (recon.training.supersample)"""
    batch: int = 1
    """training views rendered per step (for dynamic scenes (camera, time) samples), their losses averaged;
    > 1 needs training images of one size"""
    view_order: Literal["random", "shuffled"] = "random"
    """how training views are drawn: "random" (uniform, with replacement) or "shuffled" (every view once per
    pass over the training set, in a new random order each pass: for a video rig, every (camera, time) as often)"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    progress: bool = True
    """show a rich progress bar"""
    overwrite: bool = False
    """start from scratch even if ``out`` holds a run"""
    viewer: bool = False
    """show the training live in the browser viewer (viser), with a pause/resume button"""
    viewer_port: int = 8080
    """viewer port (the next free one is taken if it is in use; 0: any free port)"""
    viewer_every: int = 200
    """send the current Gaussians to the viewer every N steps (the stats panel updates about once a second)"""
    viewer_keep_open: bool = True
    """after training, keep serving the final model until Ctrl-C"""
    logger: Literal["none", "tensorboard"] = "none"
    """tensorboard: write TensorBoard event files to OUT/tensorboard/ (scalars, test renders at evaluations)"""
    logger_every: int = 100
    """write the logger's training scalars every N steps"""
    remove_floaters: bool = False
    """after the final save and evaluation, drop the Gaussians whose blending weight stays below
    --floater-threshold in every training view (recon/run/floaters.py, as export --remove-floaters) and write
    the rest as splats.ply; the final checkpoint keeps the model as trained; acted on by ``splatforge train``
    (recon/commands/train_floaters.py), which adds "floaters" to metrics.json"""
    floater_threshold: float = 0.005
    """blending weight below which --remove-floaters counts a Gaussian as a floater (docs/export.md)"""
    lr: LearningRates = field(default_factory=LearningRates)
    """Adam learning rates (recon.core.learning_rates.LearningRates)"""
    adc: ADCConfig = field(default_factory=ADCConfig)
    """adaptive density control hyper-parameters (--strategy adc); iteration counts x steps_scaler"""
    mcmc: MCMCConfig = field(default_factory=MCMCConfig)
    """MCMC densification hyper-parameters (--strategy mcmc); iteration counts x steps_scaler"""
    surfels: SurfelConfig = field(default_factory=SurfelConfig)
    """2DGS options (--method 2dgs): surfel depth, distortion and normal-consistency losses (weights, start
    steps x steps_scaler); defaults and sources in recon/losses/surfels.py"""
    spacetime: SpaceTimeConfig = field(default_factory=SpaceTimeConfig)
    """4D options (--method 4dgs): 4D-Rotor's opacity-entropy and velocity-consistency regularisers (off by
    default); recon/losses/spacetime.py"""
    meshgs: MeshGSConfig = field(default_factory=MeshGSConfig)
    """Gaussians bound to a skinned template (--method meshgs): initial count, offset bound, learning rates;
    recon/avatar/config.py, docs/avatars.md"""
    occupancy: OccupancyConfig = field(default_factory=OccupancyConfig)
    """occupancy-grid updates (--method nerf, --strategy occupancy; recon/strategy/occupancy.py)"""
    nerf: NerfConfig = field(default_factory=NerfConfig)
    """hash-grid NeRF options (--method nerf): field, sampling, optimiser; sources in recon/nerf/config.py"""
    neus: NeusConfig = field(default_factory=NeusConfig)
    """NeuS options (--method neus): eikonal weight, sphere initialisation, sharpness, progressive levels;
    recon/nerf/config.py, docs/nerf.md"""
    field: FieldConfig = field(default_factory=FieldConfig)
    """the neural field's encoding (hash | dense) and decoder (mlp | rbf) for the neural methods (--method nerf);
    recon/nerf/config.py, docs/nerf.md"""


_FINITE_NONNEG = (lambda v: math.isfinite(v) and v >= 0, ">= 0")
_FINITE_POS = (lambda v: math.isfinite(v) and v > 0, "> 0")
_OPACITY = (lambda v: 0 <= v < 1, "in [0, 1)")
_PERIOD = (lambda v: v >= 1, ">= 1")
_START = (lambda v: v >= 0, ">= 0")

# dotted field name -> (test, what is allowed) for the numeric fields with a range (types:
# rf.check_field_value); section fields are "section.field"
FIELD_RANGES = {
    "steps": (lambda v: v >= 0, ">= 0"),
    "data_factor": (lambda v: v >= 1, ">= 1"),
    "frame_stride": (lambda v: v >= 1, ">= 1"),
    "test_every": (lambda v: v >= 0, ">= 0 (0: none)"),
    "cache_bytes": (lambda v: v is None or v >= 0, ">= 0"),
    "frame_cache_bytes": (lambda v: v is None or v >= 0, ">= 0 (0: no cap)"),
    "sh_degree": (lambda v: 0 <= v <= 3, "0..3"),
    "sh_degree_interval": (lambda v: v >= 1, ">= 1"),
    "eval_every": (lambda v: v >= 0, ">= 0 (0: only at the end)"),
    "save_every": (lambda v: v >= 0, ">= 0 (0: only at the end)"),
    "keep_checkpoints": (lambda v: v >= 1, ">= 1"),
    "max_gaussians": (lambda v: v >= 1, ">= 1"),
    "steps_scaler": (lambda v: v is None or (math.isfinite(v) and v > 0), "> 0"),
    "init_num_random": (lambda v: v >= 1, ">= 1"),
    "init_opacity": (lambda v: v is None or 0 < v < 1, "between 0 and 1"),
    "init_scale": (lambda v: v is None or (math.isfinite(v) and v > 0), "> 0"),
    "ssim_lambda": (lambda v: 0 <= v <= 1, "0..1"),
    "batch": (lambda v: v >= 1, ">= 1"),
    "supersample": (lambda v: 1 <= v <= 8, "1..8"),
    "viewer_port": (lambda v: 0 <= v <= 65535, "0..65535"),
    "viewer_every": (lambda v: v >= 1, ">= 1"),
    "logger_every": (lambda v: v >= 1, ">= 1"),
    "floater_threshold": (lambda v: 0 < v < 1, "a blending weight in (0, 1), e.g. 0.005"),
    **{f"lr.{f.name}": _FINITE_NONNEG for f in dataclasses.fields(LearningRates)},  # a learning rate: >= 0
    "lr.means_final_ratio": _FINITE_POS,
    "lr.eps": _FINITE_POS,
    "adc.prune_opa": _OPACITY,
    "adc.grow_grad2d": _FINITE_NONNEG,
    "adc.grow_scale3d": _FINITE_POS,
    "adc.prune_scale3d": _FINITE_POS,
    "adc.refine_start_iter": _START,
    "adc.refine_stop_iter": _START,
    "adc.reset_every": _PERIOD,
    "adc.refine_every": _PERIOD,
    "mcmc.noise_lr": _FINITE_NONNEG,
    "mcmc.refine_start_iter": _START,
    "mcmc.refine_stop_iter": _START,
    "mcmc.refine_every": _PERIOD,
    "mcmc.min_opacity": _OPACITY,
    "mcmc.growth": _FINITE_NONNEG,
    "mcmc.opacity_reg": _FINITE_NONNEG,
    "mcmc.scale_reg": _FINITE_NONNEG,
    "surfels.dist_lambda": _FINITE_NONNEG,
    "surfels.dist_start_iter": _START,
    "surfels.normal_lambda": _FINITE_NONNEG,
    "surfels.normal_start_iter": _START,
    "spacetime.entropy_lambda": _FINITE_NONNEG,
    "spacetime.velocity_lambda": _FINITE_NONNEG,
    "spacetime.velocity_neighbors": (lambda v: v >= 1, ">= 1"),
    "spacetime.velocity_time_scale": _FINITE_NONNEG,
    "spacetime.knn_every": _PERIOD,
    "spacetime.seg_weight": _FINITE_NONNEG,
    "spacetime.time_lr_scale": _FINITE_POS,
    "meshgs.init_per_triangle": _PERIOD,
    "meshgs.max_offset": _FINITE_POS,
    "meshgs.init_scale": _FINITE_POS,
    "meshgs.bary_lr": _FINITE_NONNEG,
    "meshgs.offset_lr": _FINITE_NONNEG,
    "meshgs.pose_mlp_width": (lambda v: 0 <= v <= 4096, "in 0..4096 (0: off)"),
    "meshgs.pose_mlp_frequencies": (lambda v: 0 <= v <= 16, "in 0..16"),
    "meshgs.pose_mlp_lr": _FINITE_NONNEG,
    "meshgs.pose_mlp_reg": _FINITE_NONNEG,
    **NERF_FIELD_RANGES,  # nerf.* and occupancy.*
}


def config_flag(name: str) -> str:
    """The CLI flag of dotted field ``name``: ``adc.grow_grad2d`` -> ``--adc.grow-grad2d``."""
    return "--" + name.replace("_", "-")


def validate_config(cfg: TrainConfig) -> None:
    """ConfigValueError (a ValueError) naming the flag when a field has the wrong type, a value outside
    its choices (``strategy: bogus``) or outside its range (``--sh-degree -1``, ``--adc.refine-every 0``);
    the same checks for a config file, the CLI and the Python API, sections included."""
    for name, tp, value in rf.config_fields(cfg):
        flag = config_flag(name)
        value = rf.check_field_value(flag, tp, value)
        test, allowed = FIELD_RANGES.get(name, (None, ""))
        if test is not None and not test(value):
            raise ConfigValueError(f"{flag} {value}: must be {allowed}")


def check_train_config(cfg: TrainConfig) -> None:
    """The checks that need no dataset (:func:`validate_config`, the method's and strategy's), made before the
    scene is loaded."""
    validate_config(cfg)
    check_view_options(model_class(cfg.method), cfg)
    model_class(cfg.method).check_config(cfg)  # an unknown --method or an option it lacks fails before
    strategy_class(cfg)  # the scene is loaded, as does a --strategy the method lacks
    parse_init_box(cfg.init_box)  # a malformed --init-box fails before the scene is loaded


def stored_config(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` as written to config.yaml: ``data`` and ``out`` as absolute paths (``procedural`` kept), so
    that eval / render / export find them from any working directory."""
    return dataclasses.replace(cfg, data=resolved_data(cfg.data), out=Path(cfg.out).resolve())


# ------------------------------------------------------------------------------------------ setup


def load_training_scene(cfg: TrainConfig) -> Scene:
    """The scene named by ``cfg.data`` ("procedural", "procedural-4d" or a dataset folder), with ``data_factor``."""
    if names_procedural_scene(cfg.data) and str(cfg.data) == PROCEDURAL_4D:
        from recon.data.procedural_4d import procedural_4d_scene

        return hold_out(procedural_4d_scene(data_factor=cfg.data_factor, seed=cfg.seed), cfg.test_cameras,
                        cfg.test_every)  # a one-line error for options the built-in scene has no use for
    if names_procedural_scene(cfg.data):
        from recon.data.procedural_scene import procedural_scene

        return hold_out(procedural_scene(data_factor=cfg.data_factor, seed=cfg.seed), cfg.test_cameras,
                        cfg.test_every)
    videos = video_frame_cache(cfg.frame_cache) if is_n3dv(Path(cfg.data)) else None  # only videos use one
    scene = load_scene(cfg.data, data_factor=cfg.data_factor, frame_stride=cfg.frame_stride,
                       time_range=cfg.time_range, test_cameras=cfg.test_cameras, test_time_every=cfg.test_every,
                       frame_cache=videos)
    if not scene.frames_train:
        raise DataFormatError(f"{cfg.data}: the dataset has no training images")
    return scene


def build_model(cfg: TrainConfig, scene: Scene, generator: torch.Generator, log=print) -> SceneModel:
    """The initial model of method ``cfg.method`` (its class's ``initialize``; for "3dgs" see
    :meth:`recon.models.gaussians.GaussianModel.initialize`: the scene's points, else random Gaussians in
    the box the cameras look at, with one line to ``log`` saying where and why)."""
    return model_class(cfg.method).initialize(cfg, scene, generator, log)


def strategy_class(cfg: TrainConfig) -> type:
    """The class of ``--strategy`` for ``--method`` (:func:`recon.strategy.strategies_for`: the method's own
    table, for methods whose parameters differ from 3DGS's, else :data:`STRATEGIES`). ConfigValueError
    when the method has no such strategy."""
    model_class(cfg.method)  # an unknown --method is named before its strategies
    table = strategies_for(cfg.method)
    if cfg.strategy not in table:
        raise ConfigValueError(f"--strategy {cfg.strategy}: not available with --method {cfg.method} "
                               f"(available: {', '.join(sorted(table))})")
    return table[cfg.strategy]


def build_strategy(cfg: TrainConfig) -> ADCStrategy | MCMCStrategy:
    """The densification strategy :func:`strategy_class` with the hyper-parameters of the config section
    of the same name (``cfg.adc``, ``cfg.mcmc``), capped at ``max_gaussians``, its schedule scaled to the
    run length."""
    section = getattr(cfg, cfg.strategy)
    return strategy_class(cfg).from_config(section.scaled(schedule_scaler(cfg)), cfg.max_gaussians)


def background_color(cfg: TrainConfig, scene: Scene, generator: torch.Generator | None = None) -> torch.Tensor:
    """[3] RGB of ``cfg.background``: see :func:`named_background`."""
    return named_background(cfg.background, scene, generator)


def named_background(name: str, scene: Scene, generator: torch.Generator | None = None) -> torch.Tensor:
    """[3] RGB: white/black, the scene's for auto, a random colour for random (scene's when no generator)."""
    if name == "white":
        return torch.ones(3)
    if name == "black":
        return torch.zeros(3)
    if name == "random" and generator is not None:
        return torch.rand(3, generator=generator)
    return torch.tensor(scene.background, dtype=torch.float32)


def training_background(cfg: TrainConfig, model, images) -> str:
    """The background training views are composited on: ``cfg.background``, except that "auto" becomes
    "random" for a method whose model sets ``RANDOM_TRAIN_BACKGROUND`` (2dgs) when the training images have
    alpha. Surfels trained on a fixed background learn it as a shell of opaque surfels around the object,
    which covers the object in views from outside that shell (lego_400, 2dgs, white: 10-12 dB in some test
    views, 28.56 dB overall; random: 32.02 dB). Evaluation keeps the dataset's background."""
    if cfg.background == "auto" and getattr(model, "RANDOM_TRAIN_BACKGROUND", False) and images.has_alpha():
        return "random"
    return cfg.background


def check_view_options(cls, cfg: TrainConfig) -> None:
    """ConfigValueError for ``--batch`` or ``--supersample`` other than 1, or ``--view-order shuffled``, with a method trained on rays drawn
    across the images (``cls.RAY_BATCHES``, e.g. nerf): both options shape rendered training views, which such
    a method does not have."""
    if not getattr(cls, "RAY_BATCHES", False):
        return
    method = getattr(cls, "method", cfg.method)
    if cfg.batch != 1:
        raise ConfigValueError(f"--batch {cfg.batch}: --method {method} draws its rays across all training images "
                               f"each step; {cls.RAY_BATCH_SIZE_HINT}")
    if cfg.supersample != 1:
        raise ConfigValueError(f"--supersample {cfg.supersample}: --method {method} trains on rays through pixel "
                               f"centres drawn across the images, not on rendered views; leave --supersample 1")
    if cfg.view_order != "random":
        raise ConfigValueError(f"--view-order {cfg.view_order}: --method {method} draws its rays across all training "
                               f"images each step, not whole views; leave --view-order random")


def check_batch(batch: int, frames) -> None:
    """ConfigValueError when ``--batch`` > 1 and the training images differ in size (views rendered together
    share one image size)."""
    if batch > 1:
        sizes = sorted({(f.camera.width, f.camera.height) for f in frames})
        if len(sizes) > 1:
            shown = ", ".join(f"{w}x{h}" for w, h in sizes[:4]) + (" ..." if len(sizes) > 4 else "")
            raise ConfigValueError(f"--batch {batch}: the training images have {len(sizes)} sizes ({shown}), and the "
                                   f"views of one step are rendered together at one size; use --batch 1")


# options added after runs were made whose default today differs from what those runs did: a command that leaves one
# at today's default resumes a run with the run's own value (its config.yaml's, or the value below where config.yaml
# predates the option), so the same command resumes a run any number of times; a command that gives another
# value is compared as usual (check_resumable). Giving today's default explicitly reads as leaving it.
LEGACY_VALUES = {"neus.sharp_step": 0.0,  # NeuS marched at the nerf step before --neus.sharp-step (7 Dec 2026)
                 "field.rbf_density_bias": 0.0,  # RBF densities started at exp(0) before it (7 Dec 2026)
                 "field.rbf_neurons": 256}  # RBF heads had 256 neurons by default until 7 Dec 2026


def resumed_config(saved: dict, cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with the run's own values of the :data:`LEGACY_VALUES` options it leaves at today's default
    (``saved``, a run's config.yaml; its legacy value where config.yaml lacks the key): what a run resumes with
    and writes back to its config.yaml."""
    flat = rf.flatten_config(saved)
    for key in left_at_default(cfg):
        section, name = key.split(".")
        value = flat.get(key, LEGACY_VALUES[key])
        cfg = dataclasses.replace(cfg, **{section: dataclasses.replace(getattr(cfg, section), **{name: value})})
    return cfg


def left_at_default(cfg: TrainConfig) -> list[str]:
    """The :data:`LEGACY_VALUES` keys ``cfg`` holds at today's default (a resume takes the run's own value)."""
    current = rf.flatten_config(rf.config_to_dict(cfg))
    defaults = rf.flatten_config(rf.config_to_dict(TrainConfig()))
    return [key for key in LEGACY_VALUES if current.get(key) == defaults.get(key)]


def check_resumable(saved: dict, cfg: TrainConfig, out: Path) -> None:
    """ConfigMismatchError listing the fields that differ from ``out/config.yaml`` (except resumable ones);
    section fields are named by dotted keys (``adc.grow_grad2d``)."""
    current = rf.flatten_config(rf.config_to_dict(stored_config(cfg)))
    saved = rf.flatten_config(saved)
    if saved.get("data") is not None:  # read as recon.run.folder.Run reads it (relative in older versions)
        saved = {**saved, "data": str(resolved_data(saved_data_path(saved["data"], out)))}
    # a field or section newer than the saved run had its default there
    defaults = rf.flatten_config(rf.config_to_dict(TrainConfig()))
    if saved.get("method", defaults["method"]) != current["method"]:
        raise ConfigMismatchError(
            f"{out / rf.CONFIG_FILE}: this run directory holds a --method {saved.get('method', defaults['method'])} "
            f"run; --method {current['method']} cannot resume it (the models differ); use another --out, or "
            f"--overwrite to start over (deletes its checkpoints)")
    # the sections of the strategies this run does not use (mcmc.* for an adc run) and of the other
    # methods (surfels.* for a 3dgs run) change nothing
    used = set(model_class(cfg.method).config_sections)
    other_methods = {s for name in MODELS for s in MODELS[name].config_sections} - used
    unused = tuple(f"{name}." for name in STRATEGIES if name != cfg.strategy) + \
        tuple(f"{name}." for name in sorted(other_methods))
    before = {**defaults, **LEGACY_VALUES, **saved}  # a key config.yaml lacks: what the run did then
    resumed_as_saved = set(left_at_default(cfg))
    diffs = [f"{k}: saved {before[k]!r}, now {current.get(k)!r}" for k in current
             if k not in RESUMABLE_CHANGES and not k.startswith(unused) and k not in resumed_as_saved
             and before[k] != current.get(k)]
    if diffs:
        raise ConfigMismatchError(
            f"{out / rf.CONFIG_FILE}: this run directory holds a run with a different configuration "
            f"({'; '.join(diffs)}); use another --out, or --overwrite to start over (deletes its checkpoints)")


# ------------------------------------------------------------------------------------------ trainer


def stacked_masks(masks: list, targets: list) -> Tensor | None:
    """Loss masks of a step's views as one tensor: [H, W, 1] for one view, else [B, H, W, 1]; a view without
    a mask counts as all ones; None when no view has one. ``targets`` [H, W, 3] per view give the shapes."""
    if all(m is None for m in masks):
        return None
    full = [m if m is not None else torch.ones_like(t[..., :1]) for m, t in zip(masks, targets)]
    return full[0] if len(full) == 1 else torch.stack(full)



def check_finite_loss(value: float, step: int) -> None:
    """FloatingPointError naming the step when the loss is NaN/Inf (the last checkpoint is kept)."""
    if not math.isfinite(value):
        raise FloatingPointError(f"step {step}: loss is {value} (NaN/Inf); last checkpoint is kept")


@dataclass
class StepResult:
    """What one training step reports. ``psnr``: full-image PSNR (dB) of the step's plain render against
    its target (never a render with loss-masked pixels filled in from the target: what ``eval`` measures
    on the same view); ``masked_psnr``: PSNR over the pixels the views' loss masks keep, None when the
    views have no loss mask."""

    loss: float
    psnr: float
    masked_psnr: float | None = None


def step_psnrs(render: Tensor, target: Tensor, mask: Tensor | None) -> tuple[float, float | None]:
    """(full-image PSNR, masked PSNR or None) of a step's plain ``render`` against ``target`` ([H, W, 3] or
    [B, H, W, 3], or rays [R, 3]); ``mask`` the loss mask shaped like them with 1 channel, or None."""
    return quick_psnrs(render, target, mask)  # one device sync for both


class TrainingHook:
    """Something the training loop calls (all methods optional to override).

    ``on_train_start(trainer)``: after the run directory is ready. ``on_step(trainer, result)``: after
    every step (``trainer.step`` already counts it); it may block (a paused viewer) and then adds the
    blocked seconds to ``trainer.idle_seconds`` so that they do not count as training time.
    ``on_evaluate(trainer, test)``: after each evaluation on the test views (``eval_every`` and the final
    one, which comes after ``on_train_end``); ``test`` is :func:`recon.training.evaluation.evaluate_model`'s dict.
    ``on_train_end(trainer)``: after the last step, also on interruption. The live viewer
    (:mod:`viewer.training`) is one; recon itself never imports it.
    """

    def on_train_start(self, trainer: "Trainer") -> None:
        pass

    def on_step(self, trainer: "Trainer", result: "StepResult") -> None:
        pass

    def on_evaluate(self, trainer: "Trainer", test: dict) -> None:
        pass

    def on_train_end(self, trainer: "Trainer") -> None:
        pass


@dataclass
class Trainer:
    """Owns everything a run needs; ``run()`` trains (or resumes) and writes the outputs.

    ``scene``, ``model``, ``device`` and ``out`` may be handed in (block training builds them itself);
    each one left None is made from ``cfg`` (the dataset of ``cfg.data``, ``cfg.method``'s initial model,
    ``cfg.device``, ``cfg.out``). ``writes_outputs=False`` makes a worker that trains but writes nothing:
    no lock, config.yaml, checkpoints, splats, renders, history or metrics (and no resume from ``out``).
    ``writes_splats=False`` leaves out splats.ply only and ``writes_plot=False`` loss.png only (a frame of a
    sequence: :mod:`recon.training.frame_sequence`).
    """

    cfg: TrainConfig
    log: callable = print
    hooks: list = field(default_factory=list)
    scene: Scene | None = None
    model: SceneModel | None = None
    device: torch.device | str | None = None
    out: Path | str | None = None
    writes_outputs: bool = True
    writes_splats: bool = True
    writes_plot: bool = True
    step: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        cfg = self.cfg
        check_train_config(cfg)
        self.device = resolve_device(cfg.device) if self.device is None else torch.device(self.device)
        if self.out is not None:
            self.cfg = cfg = dataclasses.replace(cfg, out=Path(self.out))
        self.out = Path(cfg.out)
        if self.writes_outputs and not cfg.overwrite and (self.out / rf.CONFIG_FILE).is_file():
            # the run's own values of options left at today's default, before the model is built from them (a
            # folder without a checkpoint starts over as its config.yaml says); prepare_out checks the rest
            self.cfg = cfg = resumed_config(rf.read_config_dict(self.out / rf.CONFIG_FILE), cfg)
        started = time.time()  # frame-cache entries used from now on are this run's (never pruned by it)
        self.disk_cache = resolve_frame_cache(cfg.frame_cache)
        # held while this run lives (before its scene is loaded): other runs' pruning keeps what it uses
        self.cache_hold = self.disk_cache.hold(started) if self.disk_cache is not None else None
        if self.scene is None:
            self.scene = load_training_scene(cfg)
            for note in self.scene.notes:  # what the loader decided (e.g. camera matrices read inverted)
                self.log(note)
        self.images = FrameImages(self.scene.frames_train, self.device, cache_bytes=cfg.cache_bytes,
                                  disk_cache=self.disk_cache,
                                  segmentations=model_class(cfg.method).uses_segmentation(cfg))
        # a first run decodes every image once, shown; every entry used is claimed now (a scene loaded before
        # this run started, a block worker's, included)
        self.images.fill_disk_cache(progress=cfg.progress)
        claim_video_frames(self.scene.frames_test)  # evaluated at the end
        self.prune_frame_cache(started)
        self.train_background = training_background(cfg, self.model or model_class(cfg.method), self.images)
        check_batch(cfg.batch, self.scene.frames_train)
        torch.manual_seed(cfg.seed)
        self.init_gen = torch.Generator().manual_seed(cfg.seed)
        self.view_gen = torch.Generator().manual_seed(cfg.seed + 1)
        self.view_draws = 0  # training views drawn so far (--view-order shuffled: the place in its passes)
        self._pass_orders: dict[int, torch.Tensor] = {}  # pass -> its view order (the current and next ones)
        if self.model is None:
            self.model = build_model(cfg, self.scene, self.init_gen, self.log)
        self.model = self.model.to(self.device)
        self.model.configure(cfg)
        self.strategy = build_strategy(cfg)
        self.strategy_state = self.strategy.initialize_state(self.model)
        self.history = RunHistory()  # per-step loss / Gaussian count / seconds, test PSNR per evaluation
        self.train_seconds = 0.0
        self.idle_seconds = 0.0  # time hooks spent blocking the loop (a paused viewer): not training time
        self.sh_interval = max(1, round(cfg.sh_degree_interval * schedule_scaler(cfg)))

    def prune_frame_cache(self, started: float) -> None:
        """Hold the on-disk frame cache under ``--frame-cache-bytes``: remove other runs' least recently used
        entries (:meth:`recon.data.frame_cache.FrameCache.prune`; this run's, used since ``started``, stay)."""
        if self.disk_cache is None:
            return
        cap = max_cache_bytes(self.cfg.frame_cache_bytes)
        removed, freed = self.disk_cache.prune(cap, keep_since=started)
        if removed:
            self.log(f"frame cache {self.disk_cache.folder}: removed {removed:,} least recently used entries "
                     f"({freed / 2**30:.2f} GiB) to stay under {cap / 2**30:.2f} GiB (--frame-cache-bytes)")

    # ---------------------------------------------------------------------------- run directory

    def prepare_out(self) -> None:
        """Create ``out`` and remove temporaries of interrupted writes; when ``out/config.yaml`` exists, it
        must describe this run (else ConfigMismatchError), and the newest checkpoint, if any, is resumed
        (see :meth:`resume`). ``--overwrite`` deletes the checkpoints instead. Then config.yaml is written."""
        self.out.mkdir(parents=True, exist_ok=True)
        for path in rf.remove_stale_temporaries(self.out):
            self.log(f"removed {path} (left by an interrupted write)")
        config_file = self.out / rf.CONFIG_FILE
        if self.cfg.overwrite:
            for _, p in rf.list_checkpoints(self.out):
                p.unlink()
        elif config_file.is_file():
            saved = rf.read_config_dict(config_file)
            check_resumable(saved, self.cfg, self.out)
            self.cfg = resumed_config(saved, self.cfg)
            self.model.configure(self.cfg)
            self.resume()
        rf.write_config(self.out, stored_config(self.cfg))

    def resume(self) -> None:
        """Load the newest checkpoint of ``out`` (none: start at step 0). RunFolderError when it is past
        ``cfg.steps``; CheckpointError naming the file when it is unsafe, incomplete or does not fit."""
        found = rf.load_latest_checkpoint(self.out, CHECKPOINT_KEYS, log=self.log)
        if found is None:
            return
        step, payload = found
        if step > self.cfg.steps:
            raise RunFolderError(
                f"--steps {self.cfg.steps}: {self.out} already holds this run at step {step}; give --steps {step} "
                f"or more to continue it, --overwrite to start over, or another --out")
        try:
            self.load_checkpoint(payload)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as err:
            raise CheckpointError(
                f"{rf.checkpoint_path(self.out, step)}: cannot restore the training from this checkpoint "
                f"({type(err).__name__}: {err}); delete it to resume from an earlier one, or use --overwrite "
                f"to start over") from None
        self.log(f"resuming {self.out} from step {self.step}")

    def checkpoint_payload(self) -> dict:
        return {
            "step": self.step,
            "model": self.model.state_dict(),
            "strategy_state": {k: v.detach().cpu() if torch.is_tensor(v) else v
                               for k, v in self.strategy_state.items()},
            "rng": {"torch": torch.get_rng_state(), "view": self.view_gen.get_state(), "view_draws": self.view_draws,
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
            "history": self.history.to_dict(),
            "train_seconds": self.train_seconds,
        }

    def load_checkpoint(self, payload: dict) -> None:
        self.step = int(payload["step"])
        self.model = type(self.model).from_state_dict(payload["model"], self.device)
        self.model.configure(self.cfg)
        self.strategy_state = {k: v.to(self.device) if torch.is_tensor(v) else v
                               for k, v in payload["strategy_state"].items()}
        torch.set_rng_state(payload["rng"]["torch"])
        self.view_gen.set_state(payload["rng"]["view"])
        self.view_draws = int(payload["rng"].get("view_draws", 0))  # checkpoints from before: 0
        if payload["rng"].get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(payload["rng"]["cuda"])
        self.history = RunHistory.from_checkpoint(payload)
        self.history = rf.finished_history(self.out, self.history)  # + the final evaluation of a finished run
        self.train_seconds = float(payload["train_seconds"])

    @property
    def losses(self) -> list[float]:
        """Training loss of each step so far (``history.loss``)."""
        return self.history.loss

    def save(self) -> Path | None:
        """Write a checkpoint of the current step (None, writing nothing, when not ``writes_outputs``)."""
        if not self.writes_outputs:
            return None
        return rf.save_checkpoint(self.out, self.step, self.checkpoint_payload(), self.cfg.keep_checkpoints)

    # ---------------------------------------------------------------------------- one step

    def active_sh_degree(self, step: int) -> int:
        return min(step // self.sh_interval, self.cfg.sh_degree)

    def train_step(self, step: int) -> StepResult:
        """One optimisation step (``step`` is 0-based): on ``cfg.batch`` random training views
        (:meth:`view_loss`), or on rays drawn across the training views for methods with ``RAY_BATCHES``
        (nerf: :meth:`ray_batch_loss`)."""
        if getattr(self.model, "RAY_BATCHES", False):
            pred, gt, meta, loss = self.ray_batch_loss(step)
            plain, mask = meta.get("render", pred), meta.get("mask")
        else:
            plain, gt, meta, loss, mask = self.view_loss(step)
        value = self.optimise(loss, meta, step)
        check_finite_loss(value, step)
        return StepResult(value, *step_psnrs(plain, gt, mask))

    def optimise(self, loss: torch.Tensor, meta, step: int) -> float:
        """The step's tail, shared by every trainer (``recon.distributed.momentum`` too): the method's own
        loss terms (2dgs: geometry) added to ``loss``, the strategy's pre-backward hook, backward, the
        optimiser step, the post-backward hook (densification). Returns the loss value (unchecked)."""
        for term in self.model.loss_terms(meta, step, self.cfg).values():
            loss = loss + term
        self.strategy.step_pre_backward(self.model, meta, self.strategy_state, step)
        loss.backward()
        self.model.step()
        self.model.zero_grad()
        self.strategy.step_post_backward(self.model, meta, self.strategy_state, step,
                                         lr=self.model.means_lr(step, self.cfg.steps))
        return float(loss.detach())

    def ray_batch_loss(self, step: int):
        """(prediction [R, 3], target [R, 3], meta, loss) of the model's ray batch across the training views
        (:meth:`recon.models.nerf.NerfModel.ray_batch`; the background as for views) and its ``ray_loss``."""
        bg = self.step_background()
        self.model.set_step(step, self.cfg.steps)
        cameras = [f.camera for f in self.scene.frames_train]
        pred, gt, meta = self.model.ray_batch(self.images, cameras, bg, self.view_gen)
        return pred, gt, meta, self.model.ray_loss(pred, gt) + self.strategy.regularization(self.model)

    def step_background(self) -> torch.Tensor:
        """[3] background of one training view (``train_background``: random ones drawn from ``view_gen``)."""
        return named_background(self.train_background, self.scene, self.view_gen).to(self.device)

    def _draw_picks(self, gen: torch.Generator, first: int) -> list[tuple[int, torch.Tensor]]:
        """[(training view index, background [3])] of one step's ``cfg.batch`` views, the draws number
        ``first``, ``first + 1``, ... of the run, from ``gen``: per view its index (:meth:`_view_index`), then
        its background (a random colour when ``train_background`` is random; batch 1: as ever). The one
        sampling rule of :meth:`render_views` and :meth:`next_views`."""
        picks = []
        for j in range(self.cfg.batch):
            i = self._view_index(gen, first + j)
            picks.append((i, named_background(self.train_background, self.scene, gen).to(self.device)))
        return picks

    def _view_index(self, gen: torch.Generator, draw: int) -> int:
        """The training view of the run's draw number ``draw``: uniform from ``gen`` (``--view-order random``),
        or place ``draw mod n`` of pass ``draw // n``'s order (``shuffled``: a permutation of the n views seeded
        by ``--seed`` and the pass, so a resumed run goes on with the same order)."""
        n = len(self.images)
        if self.cfg.view_order != "shuffled":
            return int(torch.randint(n, (1,), generator=gen))
        k, place = divmod(int(draw), n)
        if k not in self._pass_orders:
            self._pass_orders = {p: o for p, o in self._pass_orders.items() if p >= k - 1}
            self._pass_orders[k] = torch.randperm(n, generator=torch.Generator().manual_seed(
                (self.cfg.seed + 2) * 1_000_003 + k))
        return int(self._pass_orders[k][place])

    def next_views(self) -> list[int]:
        """Indices of the training views the next :meth:`render_views` draws: :meth:`_draw_picks` on a copy of
        ``view_gen`` (which it leaves as it is)."""
        g = torch.Generator()
        g.set_state(self.view_gen.get_state())
        return [i for i, _ in self._draw_picks(g, self.view_draws)]

    def render_views(self, step: int) -> tuple[list, list, torch.Tensor, object]:
        """(picks [(index, background)], targets [H, W, 3] per pick, render [B, H, W, 3], meta) of
        ``cfg.batch`` random training views (:meth:`_draw_picks` from ``view_gen``), each at its own time
        (dynamic scenes; static methods ignore it), rendered together with the step's SH degree."""
        picks = self._draw_picks(self.view_gen, self.view_draws)
        self.view_draws += len(picks)
        self.images.prefetch(self.next_views())  # decoded on a thread while this step renders
        gts = [self.images.rgb(i, bg) for i, bg in picks]
        self.model.set_step(step, self.cfg.steps)
        absgrad = getattr(self.strategy, "absgrad", False)
        frames = [self.scene.frames_train[i] for i, _ in picks]
        if len(picks) == 1:
            bg, t = picks[0][1], frames[0].time
        else:
            bg, t = torch.stack([b for _, b in picks]), [f.time for f in frames]
        render, _, meta = render_supersampled(self.model, [f.camera for f in frames], self.cfg.supersample,
                                              self.active_sh_degree(step), bg, t=t, absgrad=absgrad)
        if isinstance(meta, dict) and "seg" in self.images.channels:  # per-view targets of a loss term (4dgs)
            meta["segmentations"] = [self.images.segmentation(i) for i, _ in picks]
        return picks, gts, render, meta

    def view_loss(self, step: int):
        """(render, target, meta, loss, mask) of the views of :meth:`render_views`: the views' photometric
        losses (a loss mask's pixels outside it filled in from the target: no loss there) averaged, plus the
        strategy's regulariser. ``render`` is the plain render (nothing filled in), ``mask`` the views'
        loss masks [.., H, W, 1] (all ones for a view without; None when no view has one); render / target
        / mask are [H, W, C] for one view, else stacked [B, H, W, C]."""
        picks, gts, render, meta = self.render_views(step)
        masks = [self.images.mask(i) for i, _ in picks]  # dataset loss masks: loss only where 1
        preds = [masked_render(render[k], gts[k], m) for k, m in enumerate(masks)]
        loss = sum(photometric_loss(p, g, self.cfg.ssim_lambda) for p, g in zip(preds, gts)) / len(picks)
        loss = loss + self.strategy.regularization(self.model)
        mask = stacked_masks(masks, gts)
        if len(preds) == 1:
            return render[0], gts[0], meta, loss, mask
        return render, torch.stack(gts), meta, loss, mask

    # ---------------------------------------------------------------------------- loop

    def advance(self, step: int) -> StepResult:
        """One loop iteration: :meth:`train_step`, bookkeeping, then the hooks' ``on_step``."""
        t0 = time.perf_counter()
        result = self.train_step(step)
        self.history.record_step(result.loss, len(self.model), time.perf_counter() - t0, result.psnr,
                                 result.masked_psnr)
        self.step = step + 1
        for hook in self.hooks:
            hook.on_step(self, result)
        return result

    def run(self) -> dict:
        """Hold the run folder's lock (:class:`recon.outputs.files.RunLock`: RunLockedError while another
        training writes it) around :meth:`train_and_finish`; returns metrics.json. A worker that does not
        write outputs takes no lock and touches no folder."""
        from recon.outputs.paths import ensure_writable_folder

        if not self.writes_outputs:
            return self.train_and_finish()
        ensure_writable_folder(self.out, "--out")
        lock = rf.RunLock(self.out).acquire()
        try:
            if lock.unsupported:
                self.log(f"{lock.path}: this file system does not support locks; make sure no other training "
                         f"writes {self.out}")
            elif lock.stale:
                self.log(f"{lock.path}: taking over the lock left by pid {lock.stale.get('pid', '?')} on "
                         f"{lock.stale.get('host', '?')}, which is no longer running")
            return self.train_and_finish()
        finally:
            lock.release()

    def train_and_finish(self) -> dict:
        """Train from the current step to ``cfg.steps`` and write all outputs; returns metrics.json."""
        if self.writes_outputs:
            self.prepare_out()
        start_step = self.step
        for hook in self.hooks:
            hook.on_train_start(self)
        # Python's full collections walk every object (~380k after loading a capture: 160 ms each, about
        # every 200 steps); those made before training mostly live to its end: keep them out of sight
        # until then (unfreeze() is process-wide: a caller's own freeze ends here too)
        gc.collect()
        gc.freeze()
        try:
            with _progress(self.cfg.progress, self.cfg.steps, start_step) as bar:
                t0, idle0 = time.perf_counter(), self.idle_seconds
                for step in range(start_step, self.cfg.steps):
                    result = self.advance(step)
                    bar.update(self.step, result, len(self.model))
                    if self.cfg.eval_every > 0 and self.step % self.cfg.eval_every == 0:  # before a save: in it
                        self.log_test_psnr()
                    if self.cfg.save_every > 0 and self.step % self.cfg.save_every == 0:
                        self.train_seconds += time.perf_counter() - t0 - (self.idle_seconds - idle0)
                        t0, idle0 = time.perf_counter(), self.idle_seconds
                        self.save()
                self.train_seconds += time.perf_counter() - t0 - (self.idle_seconds - idle0)
        except KeyboardInterrupt:
            if self.writes_outputs:
                self.save()
                self.log(f"interrupted at step {self.step}; checkpoint saved, rerun the same command to resume")
            raise
        finally:
            gc.unfreeze()
            for hook in self.hooks:
                hook.on_train_end(self)
        checkpoints = rf.list_checkpoints(self.out) if self.writes_outputs else []
        if self.writes_outputs and (not checkpoints or checkpoints[-1][0] != self.step):
            self.save()
        return self.finish(trained=self.step - start_step)

    def log_test_psnr(self) -> None:
        """``--eval-every``: evaluate on the test views and log their PSNR; a scene without test views logs
        that there is none (nothing evaluated)."""
        if not self.scene.frames_test:
            self.log(f"step {self.step}: test PSNR n/a (no test views)")
            return
        self.log(f"step {self.step}: test PSNR {self.evaluate(None)['psnr']:.2f}")

    def evaluate(self, renders_dir: Path | None) -> dict:
        """Test-view metrics (see evaluate_model), recorded in ``history`` and passed to hooks' on_evaluate."""
        bg = background_color(self.cfg, self.scene)
        images = FrameImages(self.scene.frames_test, self.device, disk_cache=self.disk_cache)
        test = evaluate_model(self.model, self.scene.frames_test, images, bg, self.cfg.sh_degree, renders_dir,
                              supersample=self.cfg.supersample)
        self.history.record_eval(self.step, test["psnr"], test["ssim"])
        for hook in self.hooks:  # hooks are duck-typed (the viewer's has no on_evaluate)
            if hasattr(hook, "on_evaluate"):
                hook.on_evaluate(self, test)
        return test

    def finish(self, trained: int) -> dict:
        """Evaluate; write splats.ply (and splats4d.ply for a 4D method), renders/, history.json, loss.png and
        metrics.json (only the evaluation when not ``writes_outputs``). Returns the metrics."""
        self.images.close()  # the prefetch thread: no more training steps
        if self.writes_outputs and self.writes_splats:
            write_splats(self.out / rf.SPLATS_FILE, self.model.to_splat_data(), force=True)
            if hasattr(self.model, "to_spacetime_data"):  # a 4D method: its 4D model too
                data4 = self.model.to_spacetime_data()
                data4.duration = getattr(self.scene, "duration", None)  # the capture's seconds, when known
                write_ply4d(self.out / rf.SPLATS4D_FILE, data4, force=True)
        test = self.evaluate(self.out / rf.RENDERS_DIR if self.writes_outputs else None)
        if self.cache_hold is not None:  # the frame cache's last use: other runs may prune this run's frames
            self.cache_hold.release()
        if test["lpips"] is None:
            self.log(LPIPS_NOTE)
        metrics = self.metrics(test)
        if self.writes_outputs:
            self.write_run_outputs(metrics)
        return metrics

    def write_run_outputs(self, metrics: dict) -> None:
        """history.json, loss.png (with ``writes_plot``) and metrics.json."""
        rf.write_history(self.out, self.history)
        if self.writes_plot:
            from recon.outputs.plots import plot_run, save_figure  # matplotlib: imported when a run ends

            save_figure(plot_run(self.history, count_name=self.model.COUNT_NAME), self.out / rf.LOSS_PLOT_FILE)
        rf.write_json(self.out / rf.METRICS_FILE, metrics)

    def metrics(self, test: dict) -> dict:
        """metrics.json's content from an evaluation's ``test`` dict and the run's counters."""
        return {
            "test": {k: test[k] for k in ("psnr", "ssim", "lpips", "num_views", "per_time", "groups") if k in test},
            "steps": self.step,
            "num_gaussians": len(self.model),
            "train_seconds": round(self.train_seconds, 3),
            "seconds_per_step": round(self.train_seconds / self.step, 5) if self.step else None,
        }


# ------------------------------------------------------------------------------------------ progress

BAR_EVERY = 10  # steps between progress-bar refreshes


class _progress:
    """Rich progress bar: step, loss, PSNR, Gaussian count, steps/s, ETA (a no-op when disabled).

    Refreshed every :data:`BAR_EVERY` steps; its PSNR is the mean over the steps since the last refresh of
    each step's full-image PSNR (:class:`StepResult`), each capped at 99 dB, and "masked" the mean masked
    PSNR when the views have loss masks."""

    def __init__(self, enabled: bool, total: int, start: int):
        self.enabled, self.total, self.start = enabled, total, start
        self.t0 = time.perf_counter()
        self.psnrs: list[float] = []  # full-image PSNR of each step since the last refresh
        self.masked: list[float] = []  # masked PSNR of those steps that have one

    def __enter__(self) -> "_progress":
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("step {task.completed}/{task.total}"), BarColumn(),
                                TextColumn("loss {task.fields[loss]:.4f}  PSNR {task.fields[psnr]:.2f}"
                                           "{task.fields[masked]}  N {task.fields[n]:,}  "
                                           "{task.fields[rate]:.1f} steps/s"),
                                TimeRemainingColumn())
            self.bar.__enter__()
            self.task = self.bar.add_task("train", total=self.total, completed=self.start, loss=0.0, psnr=0.0,
                                          masked="", n=0, rate=0.0)
        return self

    def update(self, step: int, result: StepResult, n: int) -> None:
        if not self.enabled:
            return
        self.psnrs.append(min(result.psnr, 99.0))
        if result.masked_psnr is not None and not math.isnan(result.masked_psnr):
            self.masked.append(min(result.masked_psnr, 99.0))
        if step % BAR_EVERY == 0 or step == self.total:
            rate = (step - self.start) / max(time.perf_counter() - self.t0, 1e-9)
            masked = f"  masked PSNR {sum(self.masked) / len(self.masked):.2f}" if self.masked else ""
            self.bar.update(self.task, completed=step, loss=result.loss, psnr=sum(self.psnrs) / len(self.psnrs),
                            masked=masked, n=n, rate=rate)
            self.psnrs, self.masked = [], []

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)
