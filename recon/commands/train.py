"""`splatforge train [PRESET]`: fit 3D Gaussians to a dataset (resumes an interrupted run in the same --out).

Presets (as gsplat's trainer): ``splatforge train mcmc --data DIR`` starts from the named
:class:`recon.training.trainer.TrainConfig` in :data:`recon.training.presets.PRESETS`, then applies the flags.
Without a preset name (``splatforge train --data DIR``) the ``default`` preset is used (see
:func:`recon.cli.main`).

``--viewer`` serves the training live in the browser (:mod:`viewer.training`, imported only then);
``--logger tensorboard`` writes TensorBoard event files to OUT/tensorboard/ (:mod:`recon.training.tensorboard`).
``--remove-floaters`` cleans splats.ply once training has finished (:mod:`recon.commands.train_floaters`).
"""

from __future__ import annotations

from typing import Annotated

import tyro

# USER_ERRORS and fail are re-exported: the other commands import them here
from recon.core.errors import USER_ERRORS, ConfigValueError, UsageError, fail  # noqa: F401
from recon.training.presets import PRESETS
from recon.training.trainer import TrainConfig
from recon.training.train_run import train_model

PresetConfig = tyro.extras.subcommand_type_from_defaults(
    {k: v[0] for k, v in PRESETS.items()}, {k: v[1] for k, v in PRESETS.items()})


def config_from_file(path) -> TrainConfig:
    """The TrainConfig saved in a run's ``config.yaml`` (or any YAML file of its fields); ValueError /
    FileNotFoundError naming the file for a missing file, bad YAML or unknown fields."""
    from pathlib import Path

    from recon.outputs import files as rf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file")
    try:
        return rf.config_from_dict(TrainConfig, rf.read_config_dict(path))
    except ConfigValueError as err:
        raise ConfigValueError(f"--config {path}: {err}") from None


def split_config_flag(args: list[str]) -> tuple[str | None, list[str]]:
    """(FILE, the other arguments) for ``--config FILE`` / ``--config=FILE`` in ``args`` (None if absent)."""
    for i, a in enumerate(args):
        if a == "--config":
            if i + 1 >= len(args):
                raise UsageError("--config needs a file (a run's config.yaml)")
            return args[i + 1], args[:i] + args[i + 2:]
        if a.startswith("--config="):
            return a.split("=", 1)[1], args[:i] + args[i + 1:]
    return None, list(args)


def train_from_config_file(args: list[str]) -> None:
    """``splatforge train --config FILE [flags]``: FILE's values (a run's config.yaml) are the defaults,
    flags override them, e.g. ``--config runs/lego/config.yaml --steps 30000 --out runs/lego_30k``."""
    file, rest = split_config_flag(args)
    if rest and rest[0] in PRESETS:
        fail("train", UsageError(f"give a preset ({rest[0]}) or --config, not both"))
    try:
        base = config_from_file(file)
    except USER_ERRORS as err:
        fail("train", err)
    cfg = tyro.cli(TrainConfig, default=base, args=rest, prog="splatforge train --config FILE",
                   description=train_from_config_file.__doc__)
    train(cfg)


def make_viewer_hook(cfg: TrainConfig, log=print):
    """The live-viewer training hook for ``cfg`` (imports :mod:`viewer` lazily: only with --viewer)."""
    from viewer.training import TrainingViewer

    return TrainingViewer(every=cfg.viewer_every, port=cfg.viewer_port, log=log)


def make_logger_hooks(cfg: TrainConfig) -> list:
    """The hooks of ``cfg.logger``: none, or a TensorBoard writer on OUT/tensorboard/ (tensorboard is
    imported only then)."""
    if cfg.logger == "none":
        return []
    from pathlib import Path

    from recon.outputs import files as rf
    from recon.training.tensorboard import TensorBoardLogger

    return [TensorBoardLogger(Path(cfg.out) / rf.TENSORBOARD_DIR, every=cfg.logger_every)]


def show_final_splats(data, viewers: list) -> None:
    """Hand the live viewers the run's final splats ``data`` (a SplatData: after ``--remove-floaters`` it
    differs from the trained model; the one just written to splats.ply, not read back)."""
    for hook in viewers:
        hook.show_splats(data)


def train(cfg: Annotated[PresetConfig, tyro.conf.arg(name="")]) -> None:
    """Train 3D Gaussian splatting on a dataset folder (COLMAP, nerfstudio, Blender) or "procedural"; with
    --method 4dgs, 4D Gaussians on a dynamic one (D-NeRF) or "procedural-4d".

    Pick a preset (default, mcmc, fast), then override any field with flags, e.g.
    `splatforge train mcmc --data DIR --out OUT --steps 7000`; without a preset name, default is used.
    Or start from a saved run's settings: `splatforge train --config RUN/config.yaml --out NEW --steps N`.
    Writes OUT/config.yaml, OUT/checkpoints/, OUT/splats.ply, OUT/metrics.json, OUT/history.json,
    OUT/loss.png and OUT/renders/. Running the same command again resumes from the newest checkpoint. --viewer shows the
    training live in the browser (pause/resume there). --logger tensorboard writes OUT/tensorboard/.
    --remove-floaters drops the Gaussians no training view sees from OUT/splats.ply at the end (the final
    checkpoint keeps them).
    """
    from recon.commands.train_floaters import check_floater_method, clean_run

    viewers = []
    try:
        check_floater_method(cfg)
        loggers = make_logger_hooks(cfg)
        if cfg.viewer:
            viewers.append(make_viewer_hook(cfg))
        metrics = train_model(cfg, hooks=[*loggers, *viewers])
        if cfg.remove_floaters:
            metrics, cleaned = clean_run(cfg, metrics)
            show_final_splats(cleaned, viewers)
    except USER_ERRORS as err:
        for hook in viewers:
            hook.stop()
        fail("train", err)
    except BaseException:
        for hook in viewers:
            hook.stop()
        raise
    test = metrics["test"]
    psnr = "n/a" if test["psnr"] is None else f"{test['psnr']:.2f} dB"
    from recon.models.base import model_class

    counted = model_class(cfg.method).COUNT_NAME
    cleaned = f" ({metrics['floaters']['kept']:,} after floater removal)" if "floaters" in metrics else ""
    print(f"done: {metrics['steps']} steps, {metrics['num_gaussians']:,} {counted}{cleaned}, test PSNR {psnr} "
          f"over {test['num_views']} views; outputs in {cfg.out}")
    for hook in viewers:
        if cfg.viewer_keep_open:
            hook.serve_forever()
        else:
            hook.stop()
