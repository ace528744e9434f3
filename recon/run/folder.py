"""A training run folder as one object: its files, its config, its scene and cameras, its model.

``Run.open(dir)`` is the one way ``render``, ``eval``, ``export`` and the viewer open a run. Opening reads
config.yaml only; the dataset is loaded when :attr:`Run.scene` (or :attr:`Run.cameras`) is first asked for,
and the model when :meth:`Run.load_model` is called. The folder layout is described in
:mod:`recon.outputs.files` (whose constants name the files).

Runs written by older versions open too: a config.yaml lacking newer fields (they take their defaults), a
relative dataset path (tried from the working directory, then from the run folder), a run folder that was
moved (``out`` is the folder it is now), checkpoints holding ``losses`` instead of ``history``. A folder
holding only splats.ply (copied out of a run) opens as a run without config: its model can be shown, but
it names no dataset.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from recon.outputs import files as rf
from recon.core.errors import CheckpointError, RunFolderError, out_of_memory
from recon.outputs.history import RunHistory
from recon.data.data_arg import names_procedural_scene, saved_data_path
from recon.training.trainer import TrainConfig, background_color, load_training_scene


class NotARunError(RunFolderError, FileNotFoundError):
    """The folder given as a run is missing or holds none of a run's files."""


@dataclass
class Run:
    """An opened run folder. Build it with :meth:`open`.

    Attributes:
        dir: the run folder.
        config: its TrainConfig (defaults when the folder has no config.yaml), with ``data`` and
            ``data_factor`` replaced by what :meth:`open` was given, and ``out`` = ``dir``.
        has_config: whether the folder holds config.yaml.
        dataset_known: whether ``config.data`` names the run's dataset (False: no config.yaml, no --data).
    """

    dir: Path
    config: TrainConfig
    has_config: bool = True
    dataset_known: bool = True
    _scene: Any = field(default=None, repr=False)

    # ---------------------------------------------------------------------------- opening

    @classmethod
    def open(cls, path: str | Path, data: str | Path | None = None, data_factor: int | None = None) -> "Run":
        """Open run folder ``path``; ``data`` / ``data_factor`` override the dataset named in its config.

        NotARunError (one line naming the folder) when it does not exist or holds neither config.yaml nor
        splats.ply; ConfigValueError / ValueError naming config.yaml when that file is not a valid config.
        The dataset is not touched here (see :attr:`scene`)."""
        folder = Path(path)
        if not folder.is_dir():
            what = "is a file, not a folder" if folder.exists() else "does not exist"
            raise NotARunError(f"{folder}: {what}; give a training run folder (written by `splatforge train`)")
        config_file = folder / rf.CONFIG_FILE
        has_config = config_file.exists() or config_file.is_symlink()  # a folder or device: read_config_dict says
        if not has_config and not (folder / rf.SPLATS_FILE).is_file():
            raise NotARunError(f"{folder}: not a run folder (it holds neither {rf.CONFIG_FILE} nor "
                               f"{rf.SPLATS_FILE}); give a folder written by `splatforge train`")
        cfg = (rf.config_from_dict(TrainConfig, rf.read_config_dict(config_file), source=config_file)
               if has_config else TrainConfig())
        changes: dict = {"out": folder}
        if data is not None:
            changes["data"] = Path(data)
        elif has_config:
            changes["data"] = saved_data_path(cfg.data, folder)
        if data_factor is not None:
            changes["data_factor"] = int(data_factor)
        return cls(folder, dataclasses.replace(cfg, **changes), has_config, has_config or data is not None)

    # ---------------------------------------------------------------------------- files

    @property
    def config_path(self) -> Path:
        return self.dir / rf.CONFIG_FILE

    @property
    def splats_path(self) -> Path:
        """The final model (export record), written when training ends."""
        return self.dir / rf.SPLATS_FILE

    @property
    def metrics_path(self) -> Path:
        return self.dir / rf.METRICS_FILE

    @property
    def renders_dir(self) -> Path:
        return self.dir / rf.RENDERS_DIR

    @property
    def eval_dir(self) -> Path:
        """Where ``splatforge eval --run`` writes by default."""
        return self.dir / rf.EVAL_DIR

    @property
    def finished(self) -> bool:
        return self.splats_path.is_file()

    def require_splats(self, splats: str | Path | None = None) -> Path:
        """``splats`` (default: the run's splats.ply) when it is a file; FileNotFoundError naming it."""
        path = Path(splats) if splats is not None else self.splats_path
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such splat file" + ("" if splats is not None else
                                                                     " (has the run finished?)"))
        return path

    def metrics(self) -> dict | None:
        """metrics.json (None when the run has none)."""
        if not self.metrics_path.exists() and not self.metrics_path.is_symlink():  # a folder etc.: refused below
            return None
        return rf.read_metrics(self.metrics_path, f"rerun `splatforge eval --run {self.dir}`")

    def history(self) -> RunHistory | None:
        """history.json, else the newest checkpoint's record (``losses`` in checkpoints from before
        histories), else None."""
        saved = rf.read_history(self.dir)
        if saved is not None:
            return saved
        found = self.latest_checkpoint()
        if found is None:
            return None
        return RunHistory.from_checkpoint(found[1], str(rf.checkpoint_path(self.dir, found[0])))

    def latest_checkpoint(self) -> tuple[int, dict] | None:
        """(step, payload) of the newest readable checkpoint, or None."""
        return rf.load_latest_checkpoint(self.dir)

    # ---------------------------------------------------------------------------- dataset

    @property
    def scene(self):
        """The run's :class:`recon.data.scene.Scene` (loaded on first use). FileNotFoundError naming
        config.yaml and suggesting --data when the dataset is not there (or the run has no config)."""
        if self._scene is None:
            if not self.dataset_known:
                raise FileNotFoundError(f"{self.dir}: the run has no {rf.CONFIG_FILE}, so its dataset is "
                                        f"unknown; give the dataset folder with --data DIR")
            data = self.config.data
            if not names_procedural_scene(data) and not Path(data).exists():
                if not self.has_config:
                    raise FileNotFoundError(f"--data {data}: no such dataset folder")
                raise FileNotFoundError(f"{data}: the dataset named in {self.config_path} is not there; give its "
                                        f"folder with --data DIR")
            self._scene = load_training_scene(self.config)
        return self._scene

    @property
    def cameras(self) -> list:
        """The training cameras (:class:`rasterizer.Camera`) of :attr:`scene`."""
        return [f.camera for f in self.scene.frames_train]

    def background(self) -> torch.Tensor:
        """[3] the run's fixed background (the dataset's for auto and random)."""
        return background_color(self.config, self.scene)

    # ---------------------------------------------------------------------------- model

    @property
    def model_class(self):
        """The class of the run's method (``config.method`` in :data:`recon.models.base.MODELS`)."""
        from recon.models.base import model_class

        return model_class(self.config.method)

    def read_splats(self, splats: str | Path | None = None):
        """The export record of ``splats`` (default: the run's splats.ply)."""
        from recon.export import read_splats

        return read_splats(self.require_splats(splats))

    @property
    def splats4d_path(self) -> Path:
        """The final 4D model (ply4d) of a 4D method, written when training ends."""
        return self.dir / rf.SPLATS4D_FILE

    @property
    def is_4d(self) -> bool:
        """Whether the run's method is a 4D one (its splats.ply is one time's slice: ``SPLAT_FILE_IS_SLICE``)."""
        return bool(getattr(self.model_class, "SPLAT_FILE_IS_SLICE", False))

    def model_is_4d(self, splats: str | Path | None = None) -> bool:
        """Whether :meth:`load_model` with ``splats`` gives a 4D model: ``splats`` is a ply4d file, or it
        is None and the run's method is 4D."""
        from recon.export import is_ply4d

        if splats is not None:
            return is_ply4d(self.require_splats(splats))
        return self.is_4d

    def load_model(self, splats: str | Path | None = None, device: torch.device | str = "cpu",
                   extent: float = 1.0):
        """The run's method holding ``splats`` (default: the run's splats.ply), on ``device``.
        ``extent`` only scales learning rates (pass ``scene.extent`` to go on training it).

        4D models: a ply4d ``splats`` file is read as 4D Gaussians (ModelKindError when the run's config
        names a 3D method); without ``splats`` a 4D method's model is its splats4d.ply, else (a run that has
        not finished) its newest checkpoint. A 3D ``splats`` file for a 4D run: UsageError (a 3D file holds
        no 4D model)."""
        from recon.export import ModelKindError, is_ply4d
        from recon.export.ply4d import read_ply4d_finite
        from recon.models.base import model_class

        if splats is not None and is_ply4d(self.require_splats(splats)):
            if self.has_config and not self.is_4d:
                raise ModelKindError(splats, f"a 4D Gaussian (ply4d) file cannot stand for the {self.config.method} "
                                             f"run {self.dir} (3D Gaussians); evaluate it on its own with --splats "
                                             f"FILE --data DIR, or slice it with `splatforge export {splats} "
                                             f"--time T --out slice.ply`")
            cls = self.model_class if self.is_4d else model_class("4dgs")
            return cls.from_spacetime_data(read_ply4d_finite(splats), extent=extent).to(device)
        if splats is None and getattr(self.model_class, "MODEL_IN_CHECKPOINTS", False):
            return self.checkpoint_model(device)  # nerf: splats.ply is a baked approximation, not the model
        if splats is None and self.is_4d:
            if self.splats4d_path.is_file():
                return self.model_class.from_spacetime_data(read_ply4d_finite(self.splats4d_path),
                                                             extent=extent).to(device)
            return self.checkpoint_model(device)
        return self.model_of(self.read_splats(splats), device, extent)

    def checkpoint_model(self, device: torch.device | str = "cpu"):
        """The model of the newest readable checkpoint, on ``device``; FileNotFoundError when there is none."""
        found = self.latest_checkpoint()
        if found is None:
            raise FileNotFoundError(f"{self.dir}: no readable checkpoint holds this {self.config.method} run's model "
                                    f"(has the run started?)")
        try:
            return self.model_class.from_state_dict(found[1]["model"], device)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as err:
            # a re-saved or damaged model entry (another method, tensors of another shape, a damaged avatar
            # record), as Trainer.resume reads it; running out of memory stays what it is
            if out_of_memory(err) is not None or isinstance(err, torch.cuda.OutOfMemoryError):
                raise
            detail = " ".join(str(err).split())[:160]
            raise CheckpointError(f"{rf.checkpoint_path(self.dir, found[0])}: its model entry is not a "
                                  f"{self.config.method} model ({type(err).__name__}: {detail}); delete it to use "
                                  f"an older checkpoint") from None

    def model_of(self, data, device: torch.device | str = "cpu", extent: float = 1.0):
        """A :class:`recon.export.SplatData` record as a model of the run's method, on ``device``."""
        return self.model_class.from_splat_data(data, extent=extent).to(device)
